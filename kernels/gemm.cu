/*
 * gemm.cu: tensor-core matrix products for prefill and large decode
 * batches, through cuBLAS (cublasGemmEx: bf16 or fp16 inputs, fp32
 * accumulation; F32 weights in fp32 throughout).
 *
 * A GEMV warp decodes each weight once per 8 tokens and does the products
 * on CUDA cores; past a few dozen tokens that is compute-bound far below
 * what the tensor cores do. Here the activations are rounded to bf16 (fp16
 * for F16 weights, as the CPU rounds them) into scratch; F32, BF16 and
 * F16 weights go to cuBLAS as they lie in memory, every other type is first
 * dequantized to bf16 (mfk_dequant_half, bit-exact values then rounded),
 * GEMM_CHUNK_BYTES of rows at a time, so scratch stays small whatever the
 * matrix. Q4_K and Q6_K weights of steps up to mfk_ctx_qgemm's tokens go to
 * qgemm.cu instead, which dequantizes in registers.
 *
 * cuBLAS is loaded with dlopen on first use, not linked: it is ~570 MB, and
 * a runtime built with CUDA also runs where it is missing (the GEMV path
 * then serves every step; mfk_gemm_available says why). It is looked for
 * by its soname, then beside the libcudart this program uses.
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <cstdio>
#include <cstring>
#include <new>

#include <dlfcn.h>

#include <cuda_runtime.h>

#if __has_include(<cublas_api.h>)
#include <cublas_api.h> /* types only: the functions come from dlsym */
#else
/* A toolkit without cuBLAS's headers (nvcc alone, as on CI): the few types
 * and values used here, from cuBLAS's stable ABI (cublas_api.h). */
typedef struct cublasContext *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
#endif

#include "common/ggml_type.h"

void **mfk_ctx_blas(struct mfk_ctx *c);     /* mem.cu: where this file keeps its state */

#define GEMM_CHUNK_BYTES ((size_t)64 << 20) /* dequantized rows per cuBLAS call, at most */
#define SCRATCH_ALIGN 256
/* cuBLAS's own workspace, ours so that a step recorded into a CUDA graph
 * (graph.cu) makes cuBLAS allocate nothing; 32 MiB is what it asks on Hopper */
#define BLAS_WORKSPACE ((size_t)32 << 20)

typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*workspace_fn)(cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void *, const void *, cudaDataType, int,
                                  const void *, cudaDataType, int, const void *, void *,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

/* One per context: the library, its handle on the context's stream, or
 * why there is none (then every later call says so at once). */
struct mfk_blas {
    void *lib;
    cublasHandle_t h;
    destroy_fn destroy;
    gemm_fn gemm;
    void *workspace; /* device: BLAS_WORKSPACE bytes, or NULL (cuBLAS's default) */
    char why[256];
};

extern "C" void mfk_blas_free(void *p)
{
    struct mfk_blas *b = (struct mfk_blas *)p;
    if (!b)
        return;
    if (b->h && b->destroy)
        b->destroy(b->h);
    if (b->lib)
        dlclose(b->lib);
    if (b->workspace)
        cudaFree(b->workspace);
    delete b;
}

static void *open_cublas(void)
{
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    Dl_info di;
    for (const char *n : names) {
        void *h = dlopen(n, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    /* a toolkit outside ld.so.conf: beside the libcudart we were linked with */
    if (dladdr((void *)&cudaRuntimeGetVersion, &di) && di.dli_fname && strchr(di.dli_fname, '/')) {
        char path[4096];
        for (const char *n : names) {
            int len = (int)(strrchr(di.dli_fname, '/') - di.dli_fname);
            snprintf(path, sizeof path, "%.*s/%s", len, di.dli_fname, n);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h)
                return h;
        }
    }
    return nullptr;
}

static void blas_start(struct mfk_ctx *c, struct mfk_blas *b)
{
    b->lib = open_cublas();
    if (!b->lib) {
        snprintf(b->why, sizeof b->why, "cuBLAS (libcublas.so) was not found: %s", dlerror());
        return;
    }
    create_fn create = (create_fn)dlsym(b->lib, "cublasCreate_v2");
    stream_fn set_stream = (stream_fn)dlsym(b->lib, "cublasSetStream_v2");
    b->destroy = (destroy_fn)dlsym(b->lib, "cublasDestroy_v2");
    b->gemm = (gemm_fn)dlsym(b->lib, "cublasGemmEx");
    if (!create || !set_stream || !b->destroy || !b->gemm) {
        snprintf(b->why, sizeof b->why, "cuBLAS lacks cublasCreate_v2/cublasGemmEx");
        return;
    }
    cublasStatus_t s = create(&b->h);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_stream(b->h, mfk_stream(c));
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(b->why, sizeof b->why, "cuBLAS did not start (status %d)", (int)s);
        if (b->h)
            b->destroy(b->h);
        b->h = nullptr;
        return;
    }
    /* after set_stream, which resets the workspace; without the entry point
     * or the memory, cuBLAS keeps its default (stream-ordered allocations,
     * which graphs also accept) */
    workspace_fn set_ws = (workspace_fn)dlsym(b->lib, "cublasSetWorkspace_v2");
    if (set_ws && cudaMalloc(&b->workspace, BLAS_WORKSPACE) == cudaSuccess &&
        set_ws(b->h, b->workspace, BLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        cudaFree(b->workspace);
        b->workspace = nullptr;
    }
    cudaGetLastError(); /* a failed cudaMalloc above is not an error of ours */
}

static struct mfk_blas *blas_of(struct mfk_ctx *c)
{
    void **slot = mfk_ctx_blas(c);
    if (!*slot) {
        struct mfk_blas *b = new (std::nothrow) mfk_blas();
        if (!b)
            return nullptr;
        blas_start(c, b);
        *slot = b;
    }
    return (struct mfk_blas *)*slot;
}

extern "C" int mfk_gemm_available(struct mfk_ctx *c, struct mf_err *err)
{
    struct mfk_blas *b = blas_of(c);
    if (b && b->h)
        return 1;
    if (!b)
        mf_err_set(err, MF_ENOMEM, "out of memory for cuBLAS");
    else
        mf_err_set(err, MF_EUNSUPPORTED, "%s", b->why);
    return 0;
}

static size_t up(size_t n)
{
    return (n + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
}

/* Weights cuBLAS reads as they are (F32 meets float activations, in fp32) */
static int direct(int type)
{
    return type == GGML_TYPE_F32 || type == GGML_TYPE_BF16 || type == GGML_TYPE_F16;
}

/* Rows of a dequantized chunk: GEMM_CHUNK_BYTES of bf16, a multiple of 128. */
static int64_t chunk_rows(const struct mfk_weight *w)
{
    int64_t r = (int64_t)(GEMM_CHUNK_BYTES / ((size_t)w->ne0 * 2)) / 128 * 128;
    if (r < 128)
        r = 128;
    return r < w->ne1 ? r : w->ne1;
}

extern "C" size_t mfk_gemm_scratch(const struct mfk_weight *w, int32_t nt)
{
    size_t x = w->type == GGML_TYPE_F32 ? 0 : up((size_t)nt * (size_t)w->ne0 * 2);
    return direct(w->type) ? x : x + up((size_t)chunk_rows(w) * (size_t)w->ne0 * 2);
}

static int status(cublasStatus_t s, struct mf_err *err)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return mf_err_set(err, MF_EIO, "cuBLAS GEMM failed (status %d)", (int)s);
}

/* 0 when w can go through cuBLAS with nt tokens and this scratch. */
static int gemm_check(struct mfk_ctx *c, const struct mfk_weight *w, int32_t nt, void *scratch,
                      size_t scratch_bytes, struct mf_err *err)
{
    if (!mfk_gemm_available(c, err))
        return err->code;
    /* cuBLAS takes any width; the dequantizer wants whole blocks */
    if (direct(w->type) ? w->ne0 < 1 : !mfk_weight_ok(w->type, w->ne0))
        return mf_err_set(err, MF_EUNSUPPORTED, "CUDA gemm: weight type %s is not supported",
                          ggml_type_name((uint32_t)w->type));
    if (scratch_bytes < mfk_gemm_scratch(w, nt) || ((uintptr_t)scratch & (SCRATCH_ALIGN - 1)))
        return mf_err_set(err, MF_EINVAL, "CUDA gemm: %zu bytes of scratch, %zu needed",
                          scratch_bytes, mfk_gemm_scratch(w, nt));
    if (direct(w->type) &&
        w->row_bytes != (uint64_t)w->ne0 * (w->type == GGML_TYPE_F32 ? 4 : 2))
        return mf_err_set(err, MF_EINVAL, "CUDA gemm: weight rows are not packed");
    return 0;
}

/* What x is rounded to for w: 0 none (F32), 1 fp16 (F16), 2 bf16. */
static int rounding(const struct mfk_weight *w)
{
    return w->type == GGML_TYPE_F32 ? 0 : w->type == GGML_TYPE_F16 ? 1 : 2;
}

/* y (+)= alpha W x with x already in the form rounding(w) asks for (in the
 * scratch's first part unless F32), dequantized chunks after it. */
static int gemm_products(struct mfk_ctx *c, const struct mfk_weight *w, const float *x,
                         int64_t ldx, int32_t nt, float *y, int64_t ldy, float alpha, int add,
                         void *scratch, struct mf_err *err)
{
    struct mfk_blas *b = blas_of(c);
    const int kind = rounding(w);
    const cudaDataType dt = kind == 0 ? CUDA_R_32F : kind == 1 ? CUDA_R_16F : CUDA_R_16BF;
    uint8_t *xs = (uint8_t *)scratch, *ws = xs + up((size_t)nt * (size_t)w->ne0 * 2);
    const float beta = add ? 1.0f : 0.0f;
    const int dequant = !direct(w->type) && !w->bf16; /* rows to dequantize per call */
    const int64_t step = dequant ? chunk_rows(w) : w->ne1;
    const void *bx = kind == 0 ? (const void *)x : (const void *)xs;
    const int ldb = kind == 0 ? (int)ldx : (int)w->ne0;
    int rc = 0;
    if (dequant && mfk_qgemm_takes(c, w, nt)) /* the blocks dequantized in registers */
        return mfk_qgemm(c, w, xs, nt, y, ldy, alpha, add, err);
    for (int64_t r0 = 0; rc == 0 && r0 < w->ne1; r0 += step) {
        const int32_t rows = (int32_t)(w->ne1 - r0 < step ? w->ne1 - r0 : step);
        const void *a = w->bf16 && !direct(w->type)
                            ? w->bf16
                            : (const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes;
        if (dequant) {
            rc = mfk_dequant_half(c, w, r0, rows, ws, 1, err);
            a = ws;
        }
        /* column-major view: C (rows x nt, ldy) = A^T (rows x ne0) * B (ne0 x nt) */
        if (rc == 0)
            rc = status(b->gemm(b->h, CUBLAS_OP_T, CUBLAS_OP_N, rows, nt, (int)w->ne0, &alpha, a,
                                dt, (int)w->ne0, bx, dt, ldb, &beta, y + r0, CUDA_R_32F, (int)ldy,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        err);
    }
    return rc;
}

extern "C" int mfk_gemm_ex(struct mfk_ctx *c, const struct mfk_weight *w, const float *x,
                           int64_t ldx, int32_t nt, float *y, int64_t ldy, float alpha, int add,
                           void *scratch, size_t scratch_bytes, struct mf_err *err)
{
    if (nt <= 0)
        return 0;
    int rc = gemm_check(c, w, nt, scratch, scratch_bytes, err);
    if (!rc && rounding(w))
        rc = mfk_round_half(c, x, ldx, nt, w->ne0, scratch, rounding(w) == 2, err);
    return rc ? rc : gemm_products(c, w, x, ldx, nt, y, ldy, alpha, add, scratch, err);
}

/* How many of w[0 .. n) from the first on mfk_qgemm_n takes in one
 * launch at nt tokens (mfk_ctx_qgemm_sk on; one type and width, each going
 * to qgemm.cu, no bf16 copies), up to MFK_QGEMM_GROUP_MAX; 1 for a lone
 * product. */
static int qgemm_group(struct mfk_ctx *c, int n, const struct mfk_weight *const *w, int32_t nt)
{
    if (!mfk_ctx_qgemm_state(c)->sk || !mfk_qgemm_takes(c, w[0], nt))
        return 1;
    int m = 1;
    while (m < n && m < MFK_QGEMM_GROUP_MAX && mfk_qgemm_takes(c, w[m], nt) &&
           w[m]->type == w[0]->type && w[m]->ne0 == w[0]->ne0)
        m++;
    return m;
}

/* The products of w[0 .. n) with the input already rounded into the
 * scratch (F32 weights: x itself), consecutive ones qgemm.cu takes alike
 * in one launch (qgemm_group). */
static int gemm_products_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w,
                           const float *x, int64_t ldx, int32_t nt, float *const *y,
                           const int64_t *ldy, int add, void *scratch, struct mf_err *err)
{
    int rc = 0;
    for (int i = 0, m; !rc && i < n; i += m) {
        m = qgemm_group(c, n - i, w + i, nt);
        rc = m > 1 ? mfk_qgemm_n(c, m, w + i, scratch, nt, y + i, ldy + i, 1.0f, add, err)
                   : gemm_products(c, w[i], x, ldx, nt, y[i], ldy[i], 1.0f, add, scratch, err);
    }
    return rc;
}

extern "C" int mfk_gemm_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w,
                          const float *x, int64_t ldx, int32_t nt, float *const *y,
                          const int64_t *ldy, int add, void *scratch, size_t scratch_bytes,
                          struct mf_err *err)
{
    int rc = 0;
    if (nt <= 0)
        return 0;
    for (int i = 0; !rc && i < n; i++) {
        rc = gemm_check(c, w[i], nt, scratch, scratch_bytes, err);
        if (!rc && w[i]->ne0 != w[0]->ne0)
            rc = mf_err_set(err, MF_EINVAL, "CUDA gemm: weights of one input differ in width");
    }
    /* the scratch's rounded x serves every following weight of its kind */
    for (int i = 0, j; !rc && i < n; i = j) {
        for (j = i + 1; j < n && rounding(w[j]) == rounding(w[i]); j++)
            ;
        if (rounding(w[i]))
            rc = mfk_round_half(c, x, ldx, nt, w[i]->ne0, scratch, rounding(w[i]) == 2, err);
        if (!rc)
            rc = gemm_products_n(c, j - i, w + i, x, ldx, nt, y + i, ldy + i, add, scratch, err);
    }
    return rc;
}

extern "C" int mfk_gemm_rounded_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w,
                                  int32_t nt, float *const *y, const int64_t *ldy, int add,
                                  void *scratch, size_t scratch_bytes, struct mf_err *err)
{
    int rc = 0;
    if (nt <= 0)
        return 0;
    for (int i = 0; !rc && i < n; i++) {
        rc = gemm_check(c, w[i], nt, scratch, scratch_bytes, err);
        if (!rc && !rounding(w[i]))
            rc = mf_err_set(err, MF_EINVAL, "CUDA gemm: F32 weights take a float input");
        if (!rc && (w[i]->ne0 != w[0]->ne0 || rounding(w[i]) != rounding(w[0])))
            rc = mf_err_set(err, MF_EINVAL,
                            "CUDA gemm: weights of one rounded input differ in width or rounding");
    }
    return rc ? rc : gemm_products_n(c, n, w, NULL, 0, nt, y, ldy, add, scratch, err);
}

extern "C" int mfk_gemm_rounding(const struct mfk_weight *w)
{
    return rounding(w);
}

extern "C" int mfk_gemm_rounded(struct mfk_ctx *c, const struct mfk_weight *w, int32_t nt,
                                float *y, int64_t ldy, int add, void *scratch,
                                size_t scratch_bytes, struct mf_err *err)
{
    if (nt <= 0)
        return 0;
    int rc = gemm_check(c, w, nt, scratch, scratch_bytes, err);
    if (!rc && !rounding(w))
        rc = mf_err_set(err, MF_EINVAL, "CUDA gemm: F32 weights take a float input");
    return rc ? rc : gemm_products(c, w, NULL, 0, nt, y, ldy, 1.0f, add, scratch, err);
}

extern "C" int mfk_gemm(struct mfk_ctx *c, const struct mfk_weight *w, const float *x,
                        int64_t ldx, int32_t nt, float *y, int64_t ldy, int add, void *scratch,
                        size_t scratch_bytes, struct mf_err *err)
{
    return mfk_gemm_ex(c, w, x, ldx, nt, y, ldy, 1.0f, add, scratch, scratch_bytes, err);
}
