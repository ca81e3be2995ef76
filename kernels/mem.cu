/*
 * mem.cu: the kernels library's context (device, stream, pinned staging),
 * device and pinned memory, copies, the staged weight upload and timers.
 *
 * Every CUDA call goes through ck(), which turns a failure into MF_EIO (or
 * MF_ENOMEM for an allocation) naming the call; nothing here aborts.
 * The upload path: the source is ordinary host memory (an mmapped GGUF), so
 * it is copied in STAGE_BYTES pieces into two pinned buffers in turn; the
 * DMA of one piece overlaps the memcpy of the next (an event per buffer
 * says when it may be refilled).
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <cstring>
#include <new>

#include <cuda_runtime.h>

#define STAGE_BYTES ((size_t)64 << 20) /* one pinned staging buffer */

struct mfk_ctx {
    int device;
    cudaStream_t stream;
    void *stage[2];          /* pinned, STAGE_BYTES each; allocated on first upload */
    cudaEvent_t staged[2];   /* recorded after the DMA out of stage[i] */
    cudaEvent_t t0, t1;      /* timer */
    void *blas;              /* gemm.cu's cuBLAS state, made on first use */
    void *scratch;           /* device: mfk_scratch's buffer, grown on demand */
    size_t scratch_cap;
    uint64_t scratch_gen;    /* moves of scratch (mfk_scratch_gen) */
    int pdl;                 /* launches programmatically dependent (mfk_ctx_pdl) */
    int mmq_smem;            /* mmq.cu's tile kernel may take its shared memory */
    struct qg_state qgemm;   /* qgemm.cu's limit and kernels */
    int att_cluster;         /* split decode attention in one clustered launch */
    int major;               /* compute capability: PDL and clusters from 9 */
};

extern "C" void mfk_blas_free(void *p); /* gemm.cu */

void **mfk_ctx_blas(struct mfk_ctx *c)
{
    return &c->blas;
}

static int ck(cudaError_t e, const char *what, struct mf_err *err)
{
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError(); /* clear a sticky-free error so later calls see their own */
    return mf_err_set(err, e == cudaErrorMemoryAllocation ? MF_ENOMEM : MF_EIO, "CUDA %s: %s",
                      what, cudaGetErrorString(e));
}

extern "C" int mfk_ctx_new(int index, struct mfk_ctx **out, struct mf_err *err)
{
    *out = nullptr;
    struct mfk_ctx *c = new (std::nothrow) mfk_ctx();
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "out of memory for a CUDA context");
    c->device = index;
    int rc = ck(cudaSetDevice(index), "cudaSetDevice", err);
    if (!rc)
        rc = ck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate", err);
    for (int i = 0; !rc && i < 2; i++)
        rc = ck(cudaEventCreateWithFlags(&c->staged[i], cudaEventDisableTiming), "cudaEventCreate",
                err);
    if (!rc)
        rc = ck(cudaEventCreate(&c->t0), "cudaEventCreate", err);
    if (!rc)
        rc = ck(cudaEventCreate(&c->t1), "cudaEventCreate", err);
    if (!rc)
        rc = ck(cudaDeviceGetAttribute(&c->qgemm.sms, cudaDevAttrMultiProcessorCount, index),
                "cudaDeviceGetAttribute", err);
    c->qgemm.max_tokens = MFK_QGEMM_MAX_TOKENS;
    if (!rc)
        rc = ck(cudaDeviceGetAttribute(&c->major, cudaDevAttrComputeCapabilityMajor, index),
                "cudaDeviceGetAttribute", err);
    c->att_cluster = c->major >= 9; /* thread-block clusters are sm_90's */
    if (rc) {
        mfk_ctx_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

extern "C" void mfk_ctx_free(struct mfk_ctx *c)
{
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    mfk_blas_free(c->blas);
    if (c->scratch)
        cudaFree(c->scratch);
    mfk_free(c->qgemm.sk_part);
    mfk_free(c->qgemm.sk_count);
    for (int i = 0; i < 2; i++) {
        if (c->stage[i])
            cudaFreeHost(c->stage[i]);
        if (c->staged[i])
            cudaEventDestroy(c->staged[i]);
    }
    if (c->t0)
        cudaEventDestroy(c->t0);
    if (c->t1)
        cudaEventDestroy(c->t1);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaGetLastError();
    delete c;
}

extern "C" int mfk_mem_info(struct mfk_ctx *c, size_t *free_b, size_t *total_b, struct mf_err *err)
{
    int rc = ck(cudaSetDevice(c->device), "cudaSetDevice", err);
    return rc ? rc : ck(cudaMemGetInfo(free_b, total_b), "cudaMemGetInfo", err);
}

extern "C" int mfk_malloc(struct mfk_ctx *c, size_t n, void **p, struct mf_err *err)
{
    (void)c;
    *p = nullptr;
    cudaError_t e = cudaMalloc(p, n ? n : 1);
    if (e != cudaSuccess) {
        *p = nullptr;
        cudaGetLastError();
        return mf_err_set(err, e == cudaErrorMemoryAllocation ? MF_ENOMEM : MF_EIO,
                          "CUDA cannot allocate %zu bytes of device memory: %s", n,
                          cudaGetErrorString(e));
    }
    return 0;
}

extern "C" void mfk_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" int mfk_host_alloc(size_t n, void **p, struct mf_err *err)
{
    *p = nullptr;
    cudaError_t e = cudaMallocHost(p, n ? n : 1);
    if (e != cudaSuccess) {
        *p = nullptr;
        cudaGetLastError();
        return mf_err_set(err, MF_ENOMEM, "CUDA cannot allocate %zu bytes of pinned memory: %s",
                          n, cudaGetErrorString(e));
    }
    return 0;
}

extern "C" void mfk_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" int mfk_copy_h2d(struct mfk_ctx *c, void *dst, const void *src, size_t n,
                            struct mf_err *err)
{
    return ck(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream), "copy to device",
              err);
}

extern "C" int mfk_copy_d2h(struct mfk_ctx *c, void *dst, const void *src, size_t n,
                            struct mf_err *err)
{
    return ck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream), "copy to host",
              err);
}

extern "C" int mfk_copy_d2d(struct mfk_ctx *c, void *dst, const void *src, size_t n,
                            struct mf_err *err)
{
    return ck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream),
              "device-to-device copy", err);
}

extern "C" int mfk_memset(struct mfk_ctx *c, void *dst, int byte, size_t n, struct mf_err *err)
{
    return ck(cudaMemsetAsync(dst, byte, n, c->stream), "memset", err);
}

extern "C" int mfk_upload(struct mfk_ctx *c, void *dst, const void *src, size_t n,
                          struct mf_err *err)
{
    int rc = 0;
    for (int i = 0; !rc && i < 2; i++)
        if (!c->stage[i])
            rc = mfk_host_alloc(STAGE_BYTES, &c->stage[i], err);
    if (rc)
        return rc;
    size_t off = 0;
    for (int k = 0; off < n; k ^= 1) {
        size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        /* the DMA that last read this buffer must be done before refilling it */
        rc = ck(cudaEventSynchronize(c->staged[k]), "upload wait", err);
        if (rc)
            return rc;
        memcpy(c->stage[k], (const char *)src + off, len);
        rc = ck(cudaMemcpyAsync((char *)dst + off, c->stage[k], len, cudaMemcpyHostToDevice,
                                c->stream),
                "upload copy", err);
        if (!rc)
            rc = ck(cudaEventRecord(c->staged[k], c->stream), "upload event", err);
        if (rc)
            return rc;
        off += len;
    }
    return mfk_sync(c, err);
}

extern "C" int mfk_sync(struct mfk_ctx *c, struct mf_err *err)
{
    return ck(cudaStreamSynchronize(c->stream), "stream (a kernel failed)", err);
}

extern "C" int mfk_timer_start(struct mfk_ctx *c, struct mf_err *err)
{
    return ck(cudaEventRecord(c->t0, c->stream), "timer", err);
}

extern "C" int mfk_timer_ms(struct mfk_ctx *c, float *ms, struct mf_err *err)
{
    int rc = ck(cudaEventRecord(c->t1, c->stream), "timer", err);
    if (!rc)
        rc = ck(cudaEventSynchronize(c->t1), "timer (a kernel failed)", err);
    if (!rc)
        rc = ck(cudaEventElapsedTime(ms, c->t0, c->t1), "timer", err);
    return rc;
}

/* The stream of c, for the kernel launchers in this library. */
cudaStream_t mfk_stream(struct mfk_ctx *c)
{
    return c->stream;
}

struct mfk_q mfk_queue(struct mfk_ctx *c)
{
    return mfk_q{c->stream, c->pdl, c->qgemm.sms};
}

struct qg_state *mfk_ctx_qgemm_state(struct mfk_ctx *c)
{
    return &c->qgemm;
}

extern "C" int mfk_ctx_qgemm(struct mfk_ctx *c, int32_t max_tokens, struct mf_err *err)
{
    if (max_tokens < 0)
        return mf_err_set(err, MF_EINVAL, "CUDA qgemm: a token limit of %d", (int)max_tokens);
    c->qgemm.max_tokens = max_tokens;
    return 0;
}

extern "C" void mfk_ctx_qgemm_exact(struct mfk_ctx *c, int on)
{
    c->qgemm.exact = on != 0;
}

extern "C" int mfk_ctx_qgemm_sk(struct mfk_ctx *c, int on, struct mf_err *err)
{
    struct qg_state *s = &c->qgemm;
    if (on && !s->sk_part) { /* the counters zeroed in stream order, before any launch */
        const size_t part = (size_t)2 * 2 * (size_t)s->sms * QG_SK_TILE_FLOATS * sizeof(float);
        const size_t count = (size_t)MFK_QGEMM_SK_TILES * sizeof(unsigned);
        int rc = mfk_malloc(c, part, (void **)&s->sk_part, err);
        if (!rc)
            rc = mfk_malloc(c, count, (void **)&s->sk_count, err);
        if (!rc)
            rc = ck(cudaMemsetAsync(s->sk_count, 0, count, c->stream), "cudaMemsetAsync", err);
        if (rc) {
            mfk_free(s->sk_part), mfk_free(s->sk_count);
            s->sk_part = nullptr, s->sk_count = nullptr;
            return rc;
        }
    }
    s->sk = on < 0 ? 0 : on > 2 ? 2 : on;
    return 0;
}

int *mfk_ctx_mmq_smem(struct mfk_ctx *c)
{
    return &c->mmq_smem;
}

extern "C" int mfk_ctx_att_cluster(struct mfk_ctx *c, int on, struct mf_err *err)
{
    (void)err; /* the capability was read at mfk_ctx_new */
    c->att_cluster = on && c->major >= 9;
    return 0;
}

int mfk_ctx_att_cluster_on(const struct mfk_ctx *c)
{
    return c->att_cluster;
}

extern "C" int mfk_ctx_pdl(struct mfk_ctx *c, int on, struct mf_err *err)
{
    (void)err; /* the capability was read at mfk_ctx_new */
    c->pdl = on && c->major >= 9;
    return 0;
}

extern "C" int mfk_scratch_reserve(struct mfk_ctx *c, size_t n, struct mf_err *err)
{
    void *p;
    return mfk_scratch(c, n, &p, err);
}

extern "C" uint64_t mfk_scratch_gen(const struct mfk_ctx *c)
{
    return c->scratch_gen;
}

/* Grows the buffer by waiting for the stream first: queued kernels may still
 * read the old one. Kernels queued after this call may use [0, n); the next
 * call may hand the same memory to someone else, which the stream's order
 * makes safe. */
int mfk_scratch(struct mfk_ctx *c, size_t n, void **p, struct mf_err *err)
{
    if (n > c->scratch_cap) {
        int rc = mfk_sync(c, err);
        if (rc)
            return rc;
        if (c->scratch)
            cudaFree(c->scratch);
        c->scratch = nullptr;
        c->scratch_cap = 0;
        size_t want = n < ((size_t)1 << 20) ? (size_t)1 << 20 : n + n / 4;
        rc = mfk_malloc(c, want, &c->scratch, err);
        if (rc)
            return rc;
        c->scratch_cap = want;
        c->scratch_gen++;
    }
    *p = c->scratch;
    return 0;
}
