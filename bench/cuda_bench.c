/*
 * cuda_bench.c: decode throughput of the CUDA backend against the HBM
 * roofline measured in the same run (tests/gpu/run calls it on a GPU host).
 *
 *   cuda_bench SHAPE TYPE [BATCH...]
 *   cuda_bench MODEL.gguf - [BATCH...]   (a model file instead of a shape)
 *   cuda_bench gemv -|TYPE (GEMV alone, Llama-3-8B shapes, at 1-8 tokens)
 *   cuda_bench qgemm -|TYPE   (Q4_K/Q6_K products of 8-128 tokens on each path,
 *                             stream-K too; Q4_K's q+k+v and gate+up in one launch)
 *   cuda_bench mem SHAPE TYPE [SEQS [CTX]]   (peak device memory, below)
 *   cuda_bench offline SHAPE TYPE [REQUESTS [SEQS]]   (512 and 256: below)
 *   cuda_bench plan SHAPE [BATCH...]   (the host's planning of a decode step, no
 *                                       device: plan_bench)
 *     SHAPE: 1b | llama3-8b | qwen2.5-7b | gemma2-9b | phi3-mini | qwen3-30b-a3b
 *            (mkmodel's presets: Llama 3.2 1B, Llama 3 8B, the families' models
 *            of those sizes, and Qwen3-30B-A3B: 48 layers of 128 experts of 768
 *            rows, top 8, random F32 routers)
 *     TYPE:  f16 | bf16 | q8_0 | q4_k_m (llama.cpp's per-tensor mix) | q4_k
 *     BATCH: sequences decoding together (default 1 8 32)
 *
 * The model is synthesized in memory (random bytes with sane block scales,
 * mkmodel's shapes and llama.cpp's type mix), so an 8B model costs seconds,
 * not a 16 GB file; throughput does not depend on the values, but for the
 * routers' (random, so tokens spread over the experts as a trained router
 * spreads them). A MODEL.gguf (mkmodel --preset qwen3-30b-a3b --type q4_k_m,
 * say) is measured as it is, the file llama.cpp's llama-bench and
 * llama-batched-bench can read too. Steps:
 *   1. device-to-device copy bandwidth (4 GiB, bytes read + written), the
 *      roofline's denominator;
 *   2. upload (backend create): GB/s from the host mapping to the device;
 *   3. one 512-token prefill, then one of PREFILL tokens into blocks of its
 *      own (tensor-core GEMM past MFC_CUDA_GEMM_MIN tokens): tokens/s, and
 *      the matrix flop/s (2 x weights x tokens) against gemm_peak's;
 *   4. for each batch B: B sequences, each with a 512-token context of its
 *      own (CUDA_BENCH_CTX; prefilled 2048 tokens a step, untimed), decode
 *      32 steps;
 *      tokens/s over the wall clock of those steps (host planning, copies
 *      and logits included), and the roofline: bytes a step must read
 *      (every weight except the embedding table, B embedding rows, B
 *      contexts of K/V; of a routed layer's experts only those B tokens
 *      choose, n (1 - (1 - k/n)^B) of n under uniform routing) over the
 *      measured bandwidth.
 *      CUDA_BENCH_CONTEXTS=shared gives the B sequences the blocks of one
 *      context instead (a cached prefix): batched
 *      attention then reads K/V from L2 and beats the roofline's count.
 * Prints a table row per batch.
 *
 * mem: peak device memory while SEQS sequences (16) of CTX tokens (2048)
 * are live at once, as mfc-serve sizes the backend (512 tokens a step, 64
 * sequences) and with a KV arena of exactly their blocks: each prompt of
 * CTX - 16 tokens in 512-token chunks, then 16 decode steps of all of
 * them. Peak of total - free after each step (the CUDA context and cuBLAS
 * included) and nvidia-smi's figure for this process.
 *
 * offline: REQUESTS requests (prompts of 128-1024 tokens, outputs of
 * 128-512, greedy, no early stop) through the backend with continuous
 * batching, at most SEQS at once (the offline throughput run); see offline_bench.
 * tests/gpu/hf_offline.py runs the same requests through transformers.
 *
 * CUDA_BENCH_CTX=N gives step 4's contexts N tokens (16 to 2048, rounded
 * down to a multiple of 16) instead of 512; past 2016 the 32 steps take
 * them beyond CUDA_PLAN_DECODE_TILES_CTX, onto the per-token kernel.
 *
 * CUDA_BENCH_KV=q8 (fp8) runs either with the 8-bit KV arena, int8
 * (BACKEND_KV_Q8) or e4m3 (BACKEND_KV_FP8).
 * Logits land in backend_host_alloc's memory, as mfc-serve's engine has
 * them (CUDA_BENCH_PAGEABLE=1: malloc's).
 *
 * For a profiler (tests/gpu/profile):
 * CUDA_BENCH_STEPS=N times N decode steps, not 32; CUDA_BENCH_LONG=0 skips
 * step 3's long prefill.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/arch.h"
#include "common/num.h"
#include "common/quant.h"
#include "kernels/kernels.h"
#include "runtime/engine/backend.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_plan.h"
#include "runtime/model/model.h"
#include "bench/bench_synth.h"

#define CTX 512
#define STEPS_MAX                                                                                  \
    32 /* decode steps timed per batch; CUDA_BENCH_STEPS=N (1..32) fewer, for profilers */
#define MAX_B 128
#define PREFILL 2048 /* tokens of the long prefill measured against the GEMM peak */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const struct mf_err *err)
{
    fprintf(stderr, "cuda_bench: %s: %s\n", what, err->msg);
    exit(1);
}

static uint64_t wbytes(const struct model_weight *w)
{
    return w->data ? w->row_bytes * (uint64_t)w->ne1 * (uint64_t)(w->ne2 > 1 ? w->ne2 : 1) : 0;
}

/* Experts of a routed layer a decode step of B tokens reads, expected
 * under uniform routing: a token takes k of n, so an expert is left out
 * by all B with probability (1 - k/n)^B. */
static double experts_read(const struct model *m, int B)
{
    const double n = m->hp.n_expert, k = m->hp.n_expert_used;
    return n > 0 ? n * (1.0 - pow(1.0 - k / n, B)) : 0;
}

/* Bytes of weights a decode step of B tokens must read: every tensor but
 * the embedding table (B rows of it instead; a tied output reads it
 * whole), of a routed layer's experts only as many as experts_read
 * expects. */
static double weight_bytes(const struct model *m, int B)
{
    double b = (double)wbytes(&m->output) + (double)wbytes(&m->out_norm) +
               (double)B * (double)m->tok_embd.row_bytes;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *v[] = {&L->attn_norm, &L->ffn_norm,       &L->gate_inp,
                                          &L->bias[0],   &L->bias[1],        &L->bias[2],
                                          &L->q_norm,    &L->k_norm,         &L->attn_post_norm,
                                          &L->ffn_post_norm};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
            b += (double)wbytes(v[i]);
        for (int w = 0; w < MODEL_W_PER_LAYER; w++)
            b += (double)wbytes(&L->w[w]);
        for (int x = 0; L->gate_inp.data && x < MODEL_EXP_COUNT; x++)
            b += (double)wbytes(&L->exps[x]) / (double)m->hp.n_expert * experts_read(m, B);
    }
    return b;
}

static double copy_bandwidth(void)
{
    struct mfk_ctx *c;
    struct mf_err err = {0};
    size_t n = (size_t)4 << 30;
    void *a, *b;
    float ms;
    if (mfk_ctx_new(0, &c, &err) || mfk_malloc(c, n, &a, &err) || mfk_malloc(c, n, &b, &err))
        die("copy bandwidth", &err);
    mfk_memset(c, a, 0x5A, n, &err);
    for (int i = 0; i < 3; i++)
        mfk_copy_d2d(c, b, a, n, &err);
    if (mfk_timer_start(c, &err))
        die("timer", &err);
    for (int i = 0; i < 10; i++)
        mfk_copy_d2d(c, i & 1 ? a : b, i & 1 ? b : a, n, &err);
    if (mfk_timer_ms(c, &ms, &err))
        die("timer", &err);
    mfk_free(a);
    mfk_free(b);
    mfk_ctx_free(c);
    return 2.0 * (double)n * 10 / (ms * 1e-3);
}

/* Elements of the layers' matrices a prefill token multiplies once each
 * (the output matrix only for the logits row, left out): a routed layer's
 * router and k of its n experts. */
static double n_params(const struct model *m)
{
    double n = 0;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        for (int w = 0; w < MODEL_W_PER_LAYER; w++)
            n += L->w[w].data ? (double)L->w[w].ne0 * (double)L->w[w].ne1 : 0;
        if (!L->gate_inp.data)
            continue;
        n += (double)L->gate_inp.ne0 * (double)L->gate_inp.ne1;
        for (int x = 0; x < MODEL_EXP_COUNT; x++)
            n += (double)L->exps[x].ne0 * (double)L->exps[x].ne1 * m->hp.n_expert_used;
    }
    return n;
}

/* The tensor cores' bf16 rate as mfk_gemm reaches it (cuBLAS, fp32
 * accumulation): an 8192 x 8192 BF16 weight times 2048 tokens, the best of
 * 5 after a warm-up; flop/s, the prefill figure's denominator. 0 when
 * cuBLAS is missing. */
static double gemm_peak(void)
{
    struct mfk_ctx *c;
    struct mf_err err = {0};
    const int64_t n = 8192;
    const int32_t nt = 2048;
    void *w, *x, *y, *scratch;
    float ms, best = 1e30f;
    if (mfk_ctx_new(0, &c, &err))
        die("gemm peak", &err);
    if (!mfk_gemm_available(c, &err)) {
        printf("tensor-core GEMM: unavailable (%s)\n", err.msg);
        mfk_ctx_free(c);
        return 0;
    }
    struct mfk_weight mw = {
        .type = GGML_TYPE_BF16, .ne0 = n, .ne1 = n, .row_bytes = (uint64_t)n * 2};
    size_t sb = mfk_gemm_scratch(&mw, nt);
    if (mfk_malloc(c, (size_t)(n * n * 2), &w, &err) ||
        mfk_malloc(c, (size_t)nt * n * 4, &x, &err) ||
        mfk_malloc(c, (size_t)nt * n * 4, &y, &err) || mfk_malloc(c, sb, &scratch, &err))
        die("gemm peak", &err);
    mfk_memset(c, w, 0x3C, (size_t)(n * n * 2), &err); /* bf16 0x3C3C: ~0.0115 */
    mfk_memset(c, x, 0, (size_t)nt * n * 4, &err);
    mw.data = w;
    for (int i = 0; i < 6; i++) {
        if (mfk_timer_start(c, &err) || mfk_gemm(c, &mw, x, n, nt, y, n, 0, scratch, sb, &err) ||
            mfk_timer_ms(c, &ms, &err))
            die("gemm peak", &err);
        if (i > 0 && ms < best)
            best = ms;
    }
    mfk_free(w), mfk_free(x), mfk_free(y), mfk_free(scratch);
    mfk_ctx_free(c);
    return 2.0 * (double)n * (double)n * nt / (best * 1e-3);
}

/* GEMV alone on a 14336 x 4096 weight (Llama 3 8B's ffn_gate) of type t:
 * weight GB/s at nt tokens, the median of 20 launches, rotating over 4
 * copies so the 60 MB L2 never holds the weight. */
/* The types and shapes the product tables (gemv, qgemm) cover:
 * Llama-3-8B's q, k/v, gate/up and down products. */
static const int64_t bench_dims[][2] = {{4096, 4096}, {4096, 1024}, {4096, 14336}, {14336, 4096}};
static const enum ggml_type gemv_types[] = {GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                            GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                                            GGML_TYPE_Q6_K};
static const enum ggml_type qgemm_types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};

/* 1 when a table's TYPE argument ("-": all) names t. */
static int type_wanted(const char *only, enum ggml_type t)
{
    return !only || strcmp(only, "-") == 0 || strcasecmp(only, ggml_type_name(t)) == 0;
}

/* 1 when TYPE is "-" or one of the n types: anything else is refused
 * before the device is touched. */
static int type_listed(const char *only, const enum ggml_type *ts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(only, ggml_type_name(ts[i])) == 0)
            return 1;
    return strcmp(only, "-") == 0;
}

/* A context with programmatic launches and device x, y of `bytes` each, x
 * filled with 0x3C bytes (finite floats). */
static struct mfk_ctx *table_ctx(const char *what, size_t bytes, float **x, float **y)
{
    struct mfk_ctx *c;
    struct mf_err err = {0};
    if (mfk_ctx_new(0, &c, &err) || mfk_ctx_pdl(c, 1, &err) ||
        mfk_malloc(c, bytes, (void **)x, &err) || mfk_malloc(c, bytes, (void **)y, &err) ||
        mfk_memset(c, *x, 0x3C, bytes, &err))
        die(what, &err);
    return c;
}

/* Four device copies of one synthesized weight (product_ms rotates over
 * them so that L2 never holds it); its bytes. */
static size_t copies_new(struct mfk_ctx *c, const char *what, enum ggml_type t, int64_t ne0,
                         int64_t ne1, void *w[4], uint64_t *rb)
{
    struct mf_err err = {0};
    void *h = bench_synth_data(t, ne0, ne1, rb);
    const size_t bytes = (size_t)*rb * (size_t)ne1;
    for (int i = 0; i < 4; i++)
        if (mfk_malloc(c, bytes, &w[i], &err) || mfk_upload(c, w[i], h, bytes, &err))
            die(what, &err);
    free(h);
    return bytes;
}

static void copies_free(void *w[4])
{
    for (int i = 0; i < 4; i++)
        mfk_free(w[i]);
}

/* Device milliseconds a call of one product takes, back to back as a
 * step's products run (a single launch between two events measures the
 * launch more than the kernel): the mean of 32 calls after 4 of warm-up,
 * rotating over the 4 weight copies so that L2 never holds the weight.
 * path 0 mfk_gemm with qgemm.cu, 1 mfk_gemm dequantizing for cuBLAS, 2
 * mfk_gemv (Q4_K: mmq.cu from 5 tokens), 3 qgemm.cu's stream-K grid
 * (mfk_ctx_qgemm_sk 2). */
static float product_ms(struct mfk_ctx *c, struct mfk_weight *mw, void *const *w, int path,
                        const float *x, int nt, float *y, void *scratch, size_t sb)
{
    struct mf_err err = {0};
    float ms;
    if (mfk_ctx_qgemm(c, path == 0 || path == 3 ? MFK_QGEMM_MAX_TOKENS : 0, &err) ||
        mfk_ctx_qgemm_sk(c, path == 3 ? 2 : 0, &err))
        die("qgemm bench", &err);
    for (int i = 0; i < 36; i++) {
        if (i == 4 && mfk_timer_start(c, &err))
            die("qgemm bench", &err);
        mw->data = w[i & 3];
        int rc = path == 2 ? mfk_gemv(c, mw, x, mw->ne0, nt, y, mw->ne1, 0, &err)
                           : mfk_gemm(c, mw, x, mw->ne0, nt, y, mw->ne1, 0, scratch, sb, &err);
        if (rc)
            die("qgemm bench", &err);
    }
    if (mfk_timer_ms(c, &ms, &err))
        die("qgemm bench", &err);
    return ms / 32;
}

/* Llama-3-8B's Q4_K products of one input, q + k + v (4096, 1024 and 1024
 * rows) and gate + up (14336 each), 4096 wide, through mfk_gemm_n at 16,
 * 32 and 64 tokens: a launch a product on the clustered grid
 * (mfk_ctx_qgemm_sk 0) against one stream-K launch (1); microseconds for
 * the group (its input's rounding included, as in a step), the mean of 32
 * calls after 4, rotating over 4 copies of each weight. */
static void group_bench(struct mfk_ctx *c, double bw, const float *x, float *y)
{
    static const int64_t groups[2][3] = {{4096, 1024, 1024}, {14336, 14336, 0}};
    static const char *names[2] = {"q+k+v", "gate+up"};
    static const int nts[] = {16, 32, 64};
    struct mf_err err = {0};
    printf("\n| group | tokens | launches | us | weight GB/s | of copy |\n"
           "|---|---:|---|---:|---:|---:|\n");
    if (mfk_ctx_qgemm(c, MFK_QGEMM_MAX_TOKENS, &err))
        die("qgemm group bench", &err);
    for (int gi = 0; gi < 2; gi++) {
        const int n = groups[gi][2] ? 3 : 2;
        void *w[3][4];
        struct mfk_weight mw[3];
        const struct mfk_weight *wp[3];
        float *ys[3];
        int64_t ld[3], off = 0;
        size_t bytes = 0, sb = 0;
        for (int k = 0; k < n; k++) {
            uint64_t rb;
            bytes +=
                copies_new(c, "qgemm group bench", GGML_TYPE_Q4_K, 4096, groups[gi][k], w[k], &rb);
            mw[k] = (struct mfk_weight){
                .type = GGML_TYPE_Q4_K, .ne0 = 4096, .ne1 = groups[gi][k], .row_bytes = rb};
            wp[k] = &mw[k], ys[k] = y + off, ld[k] = groups[gi][k];
            off += 64 * groups[gi][k];
            if (mfk_gemm_scratch(&mw[k], 64) > sb)
                sb = mfk_gemm_scratch(&mw[k], 64);
        }
        void *scratch;
        if (mfk_malloc(c, sb, &scratch, &err))
            die("qgemm group bench", &err);
        for (size_t ni = 0; ni < sizeof nts / sizeof nts[0]; ni++)
            for (int sk = 0; sk < 2; sk++) {
                float ms;
                if (mfk_ctx_qgemm_sk(c, sk, &err))
                    die("qgemm group bench", &err);
                for (int i = 0; i < 36; i++) {
                    if (i == 4 && mfk_timer_start(c, &err))
                        die("qgemm group bench", &err);
                    for (int k = 0; k < n; k++)
                        mw[k].data = w[k][i & 3];
                    if (mfk_gemm_n(c, n, wp, x, 4096, nts[ni], ys, ld, 0, scratch, sb, &err))
                        die("qgemm group bench", &err);
                }
                if (mfk_timer_ms(c, &ms, &err))
                    die("qgemm group bench", &err);
                ms /= 32;
                const double gbs = (double)bytes / (ms * 1e-3) / 1e9;
                printf("| %s | %d | %s | %.1f | %.0f | %.0f%% |\n", names[gi], nts[ni],
                       sk ? "one (stream-K)" : "a product (clustered)", ms * 1e3, gbs,
                       100 * gbs * 1e9 / bw);
            }
        for (int k = 0; k < n; k++)
            copies_free(w[k]);
        mfk_free(scratch);
    }
    if (mfk_ctx_qgemm_sk(c, 0, &err))
        die("qgemm group bench", &err);
}

/* cuda_bench qgemm -: Llama-3-8B's product shapes in Q4_K and Q6_K at a
 * decode step's token counts, each path's microseconds and the weight
 * bytes' rate against the copy bandwidth (the floor a step of them has). */
static void qgemm_bench(double bw, const char *only_type)
{
    static const int nts[] = {8, 16, 32, 64, 128};
    static const char *paths[] = {"qgemm", "dequant+cuBLAS", "gemv/mmq", "qgemm stream-K"};
    struct mf_err err = {0};
    float *x, *y;
    struct mfk_ctx *c = table_ctx("qgemm bench", (size_t)128 * 14336 * 4, &x, &y);
    if (!mfk_gemm_available(c, &err))
        die("qgemm bench", &err);
    printf("| type | rows x cols | tokens | path | us | weight GB/s | of copy |\n"
           "|---|---|---:|---|---:|---:|---:|\n");
    /* CUDA_BENCH_QGEMM=TYPE,ROWS,COLS,TOKENS: that product alone, qgemm.cu's
     * path only (for a profiler) */
    const char *one = getenv("CUDA_BENCH_QGEMM");
    char ot[8] = "";
    long long orow = 0, ocol = 0;
    int otok = 0;
    if (one && sscanf(one, "%7[^,],%lld,%lld,%d", ot, &orow, &ocol, &otok) != 4) {
        fprintf(stderr, "cuda_bench: CUDA_BENCH_QGEMM=%s: expected TYPE,ROWS,COLS,TOKENS\n", one);
        exit(2);
    }
    const enum ggml_type *ts = qgemm_types;
    for (size_t ti = 0; ti < sizeof qgemm_types / sizeof qgemm_types[0]; ti++)
        for (size_t di = 0; di < sizeof bench_dims / sizeof bench_dims[0]; di++) {
            const int64_t ne0 = bench_dims[di][0], ne1 = bench_dims[di][1];
            if (one && (strcasecmp(ot, ggml_type_name(ts[ti])) || orow != ne1 || ocol != ne0))
                continue;
            if (!type_wanted(only_type, ts[ti]))
                continue;
            uint64_t rb;
            void *w[4];
            const size_t bytes = copies_new(c, "qgemm bench", ts[ti], ne0, ne1, w, &rb);
            struct mfk_weight mw = {.type = (int)ts[ti], .ne0 = ne0, .ne1 = ne1, .row_bytes = rb};
            size_t sb = mfk_gemm_scratch(&mw, 128);
            void *scratch;
            if (mfk_malloc(c, sb, &scratch, &err))
                die("qgemm bench", &err);
            for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++)
                for (int p = 0; p < 4; p++) {
                    if (p == 2 && ts[ti] == GGML_TYPE_Q6_K && nts[k] > 8)
                        continue; /* the Q6_K GEMV is not a contender past 8 */
                    if (p == 3 && nts[k] > MFK_QGEMM_MAX_TOKENS)
                        continue;
                    if (one && (p % 3 || nts[k] != otok))
                        continue;
                    const float ms =
                        product_ms(c, &mw, w, p, x, nts[k], y, scratch, sb);
                    const double gbs = (double)bytes / (ms * 1e-3) / 1e9;
                    printf("| %s | %lld x %lld | %d | %s | %.1f | %.0f | %.0f%% |\n",
                           ggml_type_name(ts[ti]), (long long)ne1, (long long)ne0, nts[k],
                           paths[p], ms * 1e3, gbs, 100 * gbs * 1e9 / bw);
                }
            copies_free(w);
            mfk_free(scratch);
        }
    if (!one && type_wanted(only_type, GGML_TYPE_Q4_K))
        group_bench(c, bw, x, y);
    mfk_free(x), mfk_free(y);
    mfk_ctx_free(c);
}

/* cuda_bench gemv -: the GEMV (mfk_gemv) on Llama-3-8B's product shapes in
 * each type at 1, 2, 4 and 8 tokens, back to back as a decode step runs
 * them (product_ms): microseconds and the weight bytes' rate against the
 * copy bandwidth, the batch-1 roofline's own ratio. */
static void gemv_bench(double bw, const char *only_type)
{
    static const int nts[] = {1, 2, 4, 8};
    float *x, *y;
    struct mfk_ctx *c = table_ctx("gemv bench", (size_t)8 * 14336 * 4, &x, &y);
    printf("| type | rows x cols | tokens | us | weight GB/s | of copy |\n"
           "|---|---|---:|---:|---:|---:|\n");
    const enum ggml_type *ts = gemv_types;
    for (size_t ti = 0; ti < sizeof gemv_types / sizeof gemv_types[0]; ti++)
        for (size_t di = 0; di < sizeof bench_dims / sizeof bench_dims[0]; di++) {
            if (!type_wanted(only_type, ts[ti]))
                continue;
            const int64_t ne0 = bench_dims[di][0], ne1 = bench_dims[di][1];
            uint64_t rb;
            void *w[4];
            const size_t bytes = copies_new(c, "gemv bench", ts[ti], ne0, ne1, w, &rb);
            struct mfk_weight mw = {.type = (int)ts[ti], .ne0 = ne0, .ne1 = ne1, .row_bytes = rb};
            for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
                const float ms = product_ms(c, &mw, w, 2, x, nts[k], y, NULL, 0);
                const double gbs = (double)bytes / (ms * 1e-3) / 1e9;
                printf("| %s | %lld x %lld | %d | %.1f | %.0f | %.0f%% |\n", ggml_type_name(ts[ti]),
                       (long long)ne1, (long long)ne0, nts[k], ms * 1e3, gbs, 100 * gbs * 1e9 / bw);
            }
            copies_free(w);
        }
    mfk_free(x), mfk_free(y);
    mfk_ctx_free(c);
}

/* CUDA_BENCH_KV=q8 / fp8: the 8-bit KV arena, int8 or e4m3, instead of F16. */
static enum backend_kv_type kv_type(void)
{
    const char *v = getenv("CUDA_BENCH_KV");
    if (v && strcmp(v, "fp8") == 0)
        return BACKEND_KV_FP8;
    return v && strcmp(v, "q8") == 0 ? BACKEND_KV_Q8 : BACKEND_KV_F16;
}

static void mem_peak(struct mfk_ctx *c, size_t *peak)
{
    struct mf_err err = {0};
    size_t free_b, total_b;
    if (mfk_mem_info(c, &free_b, &total_b, &err))
        die("mem info", &err);
    if (total_b - free_b > *peak)
        *peak = total_b - free_b;
}

/* An integer argument or variable in [lo, hi], else def. */
static int int_arg(const char *v, int lo, int hi, int def)
{
    int64_t n;
    return v && mf_num_parse_i64(v, &n) == 0 && n >= lo && n <= hi ? (int)n : def;
}

static int mem_bench(const struct bench_shape *s, const char *type, int n_seqs, int ctx)
{
    struct mf_err err = {0};
    struct mfk_ctx *c;
    size_t base = 0, peak = 0;
    const int chunk = 512, n_dec = 16, prompt = ctx - n_dec, nbs = (ctx + 15) / 16;
    if (n_seqs < 1 || n_seqs > MAX_B || ctx < 32 || ctx > 1 << 20)
        return 2;
    if (mfk_ctx_new(0, &c, &err))
        die("mem", &err);
    mem_peak(c, &base);
    struct model *m = bench_synth(s, type);
    struct backend_config cfg = {.kv_type = kv_type(), .max_tokens = chunk, .max_seqs = 64};
    cfg.kv_bytes = (uint64_t)n_seqs * nbs * backend_kv_block_bytes(m, cfg.kv_type);
    struct backend *be;
    int32_t n_blocks;
    if (backend_create(&cuda_backend_ops, m, &cfg, &be, &err) ||
        backend_kv_alloc(be, &n_blocks, &err))
        die("mem create", &err);
    struct cuda_upload_stats st;
    cuda_backend_stats(be, &st);
    int32_t *toks = malloc((size_t)ctx * sizeof *toks), *table = malloc((size_t)n_seqs * nbs * 4);
    float *logits = backend_host_alloc(be, (size_t)n_seqs * s->n_vocab * sizeof(float));
    struct batch_seq *bs = calloc((size_t)n_seqs, sizeof *bs);
    for (int i = 0; i < ctx; i++)
        toks[i] = (int32_t)((i * 7919) % s->n_vocab);
    for (int i = 0; i < n_seqs * nbs; i++)
        table[i] = i;
    double t0 = now_s();
    for (int q = 0; q < n_seqs; q++)
        for (int p = 0; p < prompt; p += chunk) {
            int n = prompt - p < chunk ? prompt - p : chunk;
            bs[0] = (struct batch_seq){.tokens = toks + p,
                                       .n_tokens = n,
                                       .n_past = p,
                                       .block_table = table + q * nbs,
                                       .n_blocks = nbs,
                                       .want_logits = p + n == prompt};
            struct batch bt = {.n_seqs = 1, .seqs = bs, .logits = logits};
            if (backend_step(be, &bt, &err))
                die("mem prefill", &err);
            mem_peak(c, &peak);
        }
    double t_pre = now_s() - t0;
    t0 = now_s();
    for (int k = 0; k < n_dec; k++) {
        for (int q = 0; q < n_seqs; q++)
            bs[q] = (struct batch_seq){.tokens = toks + prompt + k,
                                       .n_tokens = 1,
                                       .n_past = prompt + k,
                                       .block_table = table + q * nbs,
                                       .n_blocks = nbs,
                                       .want_logits = 1};
        struct batch bt = {.n_seqs = n_seqs, .seqs = bs, .logits = logits};
        if (backend_step(be, &bt, &err))
            die("mem decode", &err);
        mem_peak(c, &peak);
    }
    double t_dec = now_s() - t0;
    printf("shape %s type %s: %d sequences x %d tokens (%d-token prompts in %d-token chunks: "
           "%.0f tokens/s; then %d decode steps: %.1f tokens/s)\n",
           s->name, type, n_seqs, ctx, prompt, chunk, n_seqs * prompt / t_pre, n_dec,
           n_seqs * n_dec / t_dec);
    printf(
        "weights %.2f GB, KV arena (%s) %.2f GB; device memory in use before the model %.2f GB\n",
        st.bytes / 1e9,
        cfg.kv_type == BACKEND_KV_FP8  ? "FP8"
        : cfg.kv_type == BACKEND_KV_Q8 ? "8-bit"
                                       : "F16",
        st.kv_bytes / 1e9, base / 1e9);
    printf(
        "peak device memory (total - free, CUDA context and cuBLAS included): %.2f GB = %.2f GiB\n",
        peak / 1e9, peak / 1073741824.0);
    fflush(stdout);
    char cmd[160];
    snprintf(cmd, sizeof cmd,
             "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader "
             "| grep '^%d,' | sed 's/^/nvidia-smi: /'",
             (int)getpid());
    if (system(cmd) != 0)
        printf("nvidia-smi: no figure for this process\n");
    backend_host_free(be, logits);
    backend_free(be);
    mfk_ctx_free(c);
    free(toks), free(table), free(bs);
    return 0;
}

/* The offline run's request i: prompt and output lengths, spread over
 * [128, 1024] and [128, 512] by two strides (tests/gpu/hf_offline.py makes
 * the same list for transformers). */
static void offline_req(int i, int *n_prompt, int *n_out)
{
    *n_prompt = 128 + (int)(((int64_t)i * 7919 + 13) % 897);
    *n_out = 128 + (int)(((int64_t)i * 104729 + 7) % 385);
}

#define OFF_SEQS_MAX 512
#define OFF_BUDGET 2048 /* tokens a step, as mfc-serve's default max_num_batched_tokens */

/* offline: n_req requests through the backend with continuous batching: up
 * to n_seqs run at once (each with KV blocks for its whole length, so none
 * is preempted); every step decodes one token of each running sequence past
 * its prompt and fills the rest of OFF_BUDGET with prompt chunks of the
 * others, the way vLLM's scheduler does; greedy tokens come from the device
 * argmax, the logits rows are copied to pinned memory as the engine's are.
 * Prints prompt and output tokens per second over the wall clock. */
static int offline_bench(const struct bench_shape *s, const char *type, int n_req, int n_seqs)
{
    struct mf_err err = {0};
    const int max_len = 1024 + 512, nbs = (max_len + 15) / 16;
    if (n_req < 1 || n_seqs < 1 || n_seqs > OFF_SEQS_MAX) {
        fprintf(stderr, "cuda_bench offline: REQUESTS must be 1 or more, SEQS 1 to %d\n",
                OFF_SEQS_MAX);
        return 2;
    }
    struct model *m = bench_synth(s, type);
    struct backend_config cfg = {.kv_type = kv_type(), .max_tokens = OFF_BUDGET, .max_seqs = n_seqs};
    cfg.kv_bytes = (uint64_t)n_seqs * nbs * backend_kv_block_bytes(m, cfg.kv_type);
    struct backend *be;
    int32_t n_blocks;
    if (backend_create(&cuda_backend_ops, m, &cfg, &be, &err) ||
        backend_kv_alloc(be, &n_blocks, &err))
        die("offline create", &err);
    if (n_blocks < n_seqs * nbs) {
        fprintf(stderr, "cuda_bench offline: %d KV blocks, %d needed\n", n_blocks, n_seqs * nbs);
        return 1;
    }
    struct slot {
        int req, n_prompt, n_out, n_past, n_gen;
        int32_t toks[1024 + 512];
    } *sl = calloc((size_t)n_seqs, sizeof *sl);
    int32_t *table = malloc((size_t)n_seqs * nbs * sizeof *table), *ids = malloc(n_seqs * 4);
    int *order = malloc((size_t)n_seqs * sizeof *order), *run = malloc(n_seqs * sizeof *run);
    struct batch_seq *bs = calloc((size_t)n_seqs, sizeof *bs);
    float *logits = backend_host_alloc(be, (size_t)n_seqs * s->n_vocab * sizeof(float));
    if (!sl || !table || !ids || !order || !run || !bs || !logits) {
        fprintf(stderr, "cuda_bench offline: out of memory for %d sequences\n", n_seqs);
        return 1;
    }
    for (int i = 0; i < n_seqs * nbs; i++)
        table[i] = i;
    for (int i = 0; i < n_seqs; i++)
        sl[i].req = -1;
    int64_t p_tok = 0, o_tok = 0, steps = 0;
    int next = 0, done = 0;
    double t0 = now_s();
    while (done < n_req) {
        int nb = 0, nr = 0, budget = OFF_BUDGET;
        for (int i = 0; i < n_seqs && next < n_req; i++)
            if (sl[i].req < 0) {
                struct slot *q = &sl[i];
                q->req = next++;
                offline_req(q->req, &q->n_prompt, &q->n_out);
                q->n_past = q->n_gen = 0;
                for (int j = 0; j < q->n_prompt; j++)
                    q->toks[j] = (int32_t)(((int64_t)q->req * 31 + (int64_t)j * 7919) % s->n_vocab);
            }
        for (int pass = 0; pass < 2; pass++) /* decoding sequences first, then prompts */
            for (int i = 0; i < n_seqs; i++) {
                struct slot *q = &sl[i];
                if (q->req < 0 || (pass == 0) != (q->n_past >= q->n_prompt) || budget == 0)
                    continue;
                int n = pass == 0 ? 1 : q->n_prompt - q->n_past;
                n = n < budget ? n : budget;
                budget -= n;
                bs[nb] = (struct batch_seq){.tokens = q->toks + q->n_past,
                                            .n_tokens = n,
                                            .n_past = q->n_past,
                                            .block_table = table + i * nbs,
                                            .n_blocks = nbs,
                                            .want_logits = q->n_past + n >= q->n_prompt};
                order[nb++] = i;
            }
        struct batch bt = {.n_seqs = nb, .seqs = bs, .logits = logits};
        if (backend_step(be, &bt, &err))
            die("offline step", &err);
        for (int k = 0; k < nb; k++)
            if (bs[k].want_logits)
                run[nr++] = order[k];
        if (nr && cuda_backend_argmax(be, nr, ids, &err))
            die("offline argmax", &err);
        for (int k = 0; k < nb; k++) {
            struct slot *q = &sl[order[k]];
            if (q->n_past < q->n_prompt)
                p_tok += bs[k].n_tokens;
            q->n_past += bs[k].n_tokens;
        }
        for (int k = 0; k < nr; k++) {
            struct slot *q = &sl[run[k]];
            q->toks[q->n_past] = ids[k]; /* fed at the next step */
            o_tok++;
            if (++q->n_gen == q->n_out) {
                q->req = -1;
                done++;
            }
        }
        steps++;
    }
    double dt = now_s() - t0;
    printf("offline %s %s: %d requests (prompts 128-1024, outputs 128-512 tokens), up to %d at "
           "once, %" PRId64 " steps in %.2f s\n",
           s->name, type, n_req, n_seqs, steps, dt);
    printf("prompt tokens %" PRId64 ", output tokens %" PRId64 ": %.0f output tokens/s, %.0f "
           "tokens/s in all, %.2f requests/s\n",
           p_tok, o_tok, o_tok / dt, (p_tok + o_tok) / dt, n_req / dt);
    backend_host_free(be, logits);
    backend_free(be);
    free(sl), free(table), free(ids), free(order), free(run), free(bs);
    return 0;
}

/* cuda_bench plan SHAPE [BATCH...]: the host's side of a decode step alone,
 * no device needed: B sequences of CUDA_BENCH_CTX tokens each decoding one,
 * as cuda_step plans them (backend_check_batch, cuda_plan_step_size with
 * decode tiles on, the graph padding, the attention splits of 132
 * multiprocessors, cuda_plan_step_fill into a buffer), 2000 times after 100
 * warm-ups: microseconds a step. What the GPU waits for before a step's first
 * launch, beside the engine's own time (mfc:engine_host_seconds_total). */
static int plan_bench(const struct bench_shape *s, const int *batches, int nb)
{
    struct model *m = bench_synth_shape(s);
    const int ctx = int_arg(getenv("CUDA_BENCH_CTX"), 16, PREFILL, CTX) / 16 * 16;
    const int32_t nbs = ctx / 16 + 2, n_blocks = MAX_B * nbs + 1;
    const struct model_hparams *hp = &m->hp;
    int32_t *table = malloc((size_t)MAX_B * nbs * sizeof *table);
    int32_t *toks = malloc((size_t)(ctx + 1) * sizeof *toks);
    struct batch_seq bs[MAX_B];
    struct mf_err err = {0};
    size_t cap = 0;
    void *buf = NULL;

    for (int i = 0; i < MAX_B * nbs; i++)
        table[i] = i;
    for (int i = 0; i <= ctx; i++)
        toks[i] = (int32_t)((i * 7919) % s->n_vocab);
    printf("host planning of a decode step, %s, %d-token contexts (cuda_bench plan)\n", s->name,
           ctx);
    printf("| shape | batch | us/step | arrays bytes |\n|---|---:|---:|---:|\n");
    for (int i = 0; i < nb; i++) {
        const int B = batches[i], reps = 2000;
        struct cuda_step_plan p;
        double t0 = 0;
        for (int b = 0; b < B; b++)
            bs[b] = (struct batch_seq){.tokens = toks + ctx,
                                       .n_tokens = 1,
                                       .n_past = ctx,
                                       .block_table = table + b * nbs,
                                       .n_blocks = nbs,
                                       .want_logits = 1};
        struct batch bt = {.n_seqs = B, .seqs = bs};
        const struct backend_config bc = {.max_tokens = PREFILL, .max_seqs = MAX_B};
        for (int r = -100; r < reps; r++) {
            if (r == 0)
                t0 = now_s();
            if (backend_check_batch(m, n_blocks, &bc, 1, &bt, &err))
                die("plan: batch", &err);
            cuda_plan_step_size(m, &bt, 10000, 1, &p);
            int32_t tg = cuda_plan_graph_tokens(p.T, MAX_B);
            if (tg && p.n_long == 0)
                cuda_plan_step_pad(m, &p, tg, n_blocks);
            p.dwarps = !p.dtiles ? 0
                                 : cuda_plan_dec_warps(p.n_tiles, hp->n_head, hp->n_head_kv,
                                                       hp->head_dim, p.dtile_ctx, 132);
            (void)cuda_plan_att_splits(p.n_single, hp->n_head_kv, 132, p.single_ctx);
            if (p.bytes > cap) {
                free(buf);
                cap = p.bytes;
                buf = malloc(cap);
                if (!buf)
                    die("plan: out of memory", &err);
            }
            cuda_plan_step_fill(m, &bt, &p, buf);
        }
        double us = (now_s() - t0) / reps * 1e6;
        printf("| %s | %d | %.1f | %zu |\n", s->name, B, us, p.bytes);
    }
    free(buf), free(table), free(toks);
    return 0;
}

int main(int argc, char **argv)
{
    struct mf_err err = {0};
    const struct bench_shape *s = NULL;
    int batches[8] = {1, 8, 32}, nb = 3;
    if (argc < 3) {
        fprintf(stderr, "usage: cuda_bench SHAPE TYPE [BATCH...]\n");
        return 2;
    }
    for (size_t i = 0; i < bench_n_shapes; i++)
        if (strcmp(argv[1], bench_shapes[i].name) == 0)
            s = &bench_shapes[i];
    if (strcmp(argv[1], "mem") == 0) {
        for (size_t i = 0; argc > 3 && i < bench_n_shapes; i++)
            if (strcmp(argv[2], bench_shapes[i].name) == 0)
                return cuda_device_count() < 1
                           ? 77
                           : mem_bench(&bench_shapes[i], argv[3],
                                       argc > 4 ? int_arg(argv[4], 1, MAX_B, 0) : 16,
                                       argc > 5 ? int_arg(argv[5], 32, 1 << 20, 0) : 2048);
        fprintf(stderr, "usage: cuda_bench mem SHAPE TYPE [SEQS [CTX]]\n");
        return 2;
    }
    if (strcmp(argv[1], "plan") == 0) {
        int pb[8] = {1, 8, 32, 64, 128}, np = 5;
        if (argc > 3) {
            np = 0;
            for (int i = 3; i < argc && np < 8; i++)
                pb[np++] = int_arg(argv[i], 1, MAX_B, 1);
        }
        for (size_t i = 0; argc > 2 && i < bench_n_shapes; i++)
            if (strcmp(argv[2], bench_shapes[i].name) == 0)
                return plan_bench(&bench_shapes[i], pb, np);
        fprintf(stderr, "usage: cuda_bench plan SHAPE [BATCH...]\n");
        return 2;
    }
    if (strcmp(argv[1], "offline") == 0) {
        for (size_t i = 0; argc > 3 && i < bench_n_shapes; i++)
            if (strcmp(argv[2], bench_shapes[i].name) == 0)
                return cuda_device_count() < 1
                           ? 77
                           : offline_bench(&bench_shapes[i], argv[3],
                                           argc > 4 ? int_arg(argv[4], 1, 1 << 20, 0) : 512,
                                           argc > 5 ? int_arg(argv[5], 1, OFF_SEQS_MAX, 0) : 256);
        fprintf(stderr, "usage: cuda_bench offline SHAPE TYPE [REQUESTS [SEQS]]\n");
        return 2;
    }
    const size_t a1 = strlen(argv[1]);
    const int file = a1 > 5 && strcmp(argv[1] + a1 - 5, ".gguf") == 0; /* a model file */
    if (!s && !file && strcmp(argv[1], "gemv") != 0 && strcmp(argv[1], "qgemm") != 0) {
        fprintf(stderr, "cuda_bench: unknown shape %s\n", argv[1]);
        return 2;
    }
    if (argc > 3) {
        nb = 0;
        for (int i = 3; i < argc && nb < 8; i++) {
            batches[nb] = (int)strtol(argv[i], NULL, 10);
            if (batches[nb] < 1 || batches[nb] > MAX_B)
                return 2;
            nb++;
        }
    }
    const int listing = strcmp(argv[1], "gemv") == 0 ? 1 : strcmp(argv[1], "qgemm") == 0 ? 2 : 0;
    if (listing &&
        !(listing == 1
              ? type_listed(argv[2], gemv_types, sizeof gemv_types / sizeof gemv_types[0])
              : type_listed(argv[2], qgemm_types, sizeof qgemm_types / sizeof qgemm_types[0]))) {
        fprintf(stderr, "cuda_bench %s: %s is not a type of its table (- for all)\n", argv[1],
                argv[2]);
        return 2;
    }
    if (cuda_device_count() < 1) {
        fprintf(stderr, "cuda_bench: no CUDA device\n");
        return 77;
    }
    double bw = copy_bandwidth();
    double peak = !s && !file ? 0 : gemm_peak();
    if (strcmp(argv[1], "qgemm") == 0) {
        printf("device copy bandwidth: %.0f GB/s (read + write)\n", bw / 1e9);
        qgemm_bench(bw, argv[2]);
        return 0;
    }
    if (strcmp(argv[1], "gemv") == 0) { /* cuda_bench gemv -|TYPE: the GEMV table alone */
        printf("device copy bandwidth: %.0f GB/s (read + write)\n", bw / 1e9);
        gemv_bench(bw, argv[2]);
        return 0;
    }
    double t0 = now_s();
    struct model *m = NULL;
    if (file && model_open(argv[1], &m, &err))
        die(argv[1], &err);
    if (!file)
        m = bench_synth(s, argv[2]);
    double t_synth = now_s() - t0;
    const char *sname = file ? argv[1] : s->name, *tname = file ? "file" : argv[2];
    const int32_t n_vocab = m->hp.n_vocab;

    int32_t max_b = 1;
    for (int i = 0; i < nb; i++)
        max_b = batches[i] > max_b ? batches[i] : max_b;
    const char *ev = getenv("CUDA_BENCH_STEPS");
    const int STEPS = int_arg(ev, 1, STEPS_MAX, STEPS_MAX);
    const int ctx = int_arg(getenv("CUDA_BENCH_CTX"), 16, PREFILL, CTX) / 16 * 16;
    const int do_long = !(getenv("CUDA_BENCH_LONG") && strcmp(getenv("CUDA_BENCH_LONG"), "0") == 0);
    int32_t per_seq = (ctx + STEPS_MAX) / 16 + 1 - ctx / 16; /* private tail blocks */
    const char *cv = getenv("CUDA_BENCH_CONTEXTS");
    if (cv && strcmp(cv, "shared") != 0 && strcmp(cv, "distinct") != 0) {
        fprintf(stderr, "cuda_bench: CUDA_BENCH_CONTEXTS must be shared or distinct, not %s\n", cv);
        return 2;
    }
    const int shared = cv && strcmp(cv, "shared") == 0;
    const int32_t n_ctx = shared ? 1 : max_b; /* prompt contexts in the arena */
    int32_t n_blocks_need = n_ctx * (ctx / 16) + max_b * per_seq + PREFILL / 16;
    struct backend_config cfg = {.kv_type = kv_type(), .max_tokens = PREFILL, .max_seqs = MAX_B};
    cfg.kv_bytes = (uint64_t)n_blocks_need * backend_kv_block_bytes(m, cfg.kv_type);
    struct backend *be;
    int32_t n_blocks;
    if (backend_create(&cuda_backend_ops, m, &cfg, &be, &err))
        die("create", &err);
    if (backend_kv_alloc(be, &n_blocks, &err))
        die("kv_alloc", &err);
    struct cuda_upload_stats st;
    cuda_backend_stats(be, &st);

    /* sequence b: its context's blocks (context 0's when shared), then its
     * private tail; the long prefill's blocks come after all of them */
    int32_t *toks = malloc((ctx + STEPS_MAX) * sizeof *toks);
    for (int i = 0; i < ctx + STEPS_MAX; i++)
        toks[i] = (int32_t)((i * 7919) % n_vocab);
    const int32_t tw = ctx / 16 + 8; /* a sequence's table entries */
    int32_t *table = malloc((size_t)MAX_B * tw * sizeof *table);
    for (int b = 0; b < max_b; b++) {
        for (int k = 0; k < ctx / 16; k++)
            table[b * tw + k] = (shared ? 0 : b) * (ctx / 16) + k;
        for (int k = 0; k < per_seq; k++)
            table[b * tw + ctx / 16 + k] = n_ctx * (ctx / 16) + b * per_seq + k;
    }
    /* the engine's logits buffer comes from backend_host_alloc (pinned);
     * CUDA_BENCH_PAGEABLE=1 times malloc's instead, for the difference */
    const int pageable = getenv("CUDA_BENCH_PAGEABLE") != NULL;
    const size_t lbytes = (size_t)MAX_B * (size_t)n_vocab * sizeof(float);
    float *logits = pageable ? malloc(lbytes) : backend_host_alloc(be, lbytes);
    struct batch_seq bs[MAX_B];
    bs[0] = (struct batch_seq){.tokens = toks,
                               .n_tokens = ctx,
                               .n_past = 0,
                               .block_table = table,
                               .n_blocks = ctx / 16,
                               .want_logits = 1};
    struct batch bt = {.n_seqs = 1, .seqs = bs, .logits = logits};
    if (backend_step(be, &bt, &err)) /* warm-up (module load) */
        die("prefill", &err);
    t0 = now_s();
    if (backend_step(be, &bt, &err))
        die("prefill", &err);
    double t_prefill = now_s() - t0;
    /* the long prefill, twice (the first picks cuBLAS's kernels); blocks past the others' */
    int32_t *ptoks = malloc(PREFILL * sizeof *ptoks), ptable[PREFILL / 16];
    for (int i = 0; i < PREFILL; i++)
        ptoks[i] = (int32_t)((i * 104729) % n_vocab);
    for (int k = 0; k < PREFILL / 16; k++)
        ptable[k] = n_ctx * (ctx / 16) + max_b * per_seq + k;
    double t_long = 0;
    for (int rep = 0; do_long && rep < 2; rep++) {
        struct batch_seq ps = {.tokens = ptoks,
                               .n_tokens = PREFILL,
                               .n_past = 0,
                               .block_table = ptable,
                               .n_blocks = PREFILL / 16,
                               .want_logits = 1};
        struct batch pb = {.n_seqs = 1, .seqs = &ps, .logits = logits};
        t0 = now_s();
        if (backend_step(be, &pb, &err))
            die("long prefill", &err);
        t_long = now_s() - t0;
    }
    /* the other sequences' contexts, PREFILL / ctx of them a step, untimed */
    for (int b0 = 1; b0 < n_ctx; b0 += PREFILL / ctx) {
        int n = n_ctx - b0 < PREFILL / ctx ? n_ctx - b0 : PREFILL / ctx;
        for (int j = 0; j < n; j++)
            bs[j] = (struct batch_seq){.tokens = toks,
                                       .n_tokens = ctx,
                                       .n_past = 0,
                                       .block_table = table + (b0 + j) * tw,
                                       .n_blocks = ctx / 16,
                                       .want_logits = 1};
        bt.n_seqs = n;
        if (backend_step(be, &bt, &err))
            die("context prefill", &err);
    }

    printf("shape %s type %s: %.2f GB of weights (%s in %.1f s)\n", sname, tname, st.bytes / 1e9,
           file ? "mapped" : "synthesized", t_synth);
    if (m->hp.n_expert)
        printf("routed layers: %d experts of %d rows, %d a token; the roofline counts the "
               "experts a step reads under uniform routing, n (1 - (1 - k/n)^B)\n",
               m->hp.n_expert, m->hp.n_ff_exp, m->hp.n_expert_used);
    printf("device copy bandwidth: %.0f GB/s (read + write)\n", bw / 1e9);
    printf("upload: %.2f GB in %.2f s = %.1f GB/s\n", st.bytes / 1e9, st.seconds,
           st.bytes / 1e9 / st.seconds);
    if (st.bf16_bytes)
        printf("bf16 copies of the quantized matrices (MFC_CUDA_BF16_WEIGHTS=1): %.2f GB in "
               "%.2f s\n",
               st.bf16_bytes / 1e9, st.bf16_seconds);
    printf("tensor-core GEMM from %d tokens per step (MFC_CUDA_GEMM_MIN; 0: GEMV only); "
           "Q4_K from %d (MFC_CUDA_MMQ, mmq.cu below)\n",
           st.gemm_min, st.gemm_from_q4k);
    printf("prefill %d tokens: %.3f s = %.0f tokens/s\n", ctx, t_prefill, ctx / t_prefill);
    if (do_long) {
        double flops = 2.0 * (double)n_params(m) * PREFILL / t_long;
        printf("prefill %d tokens: %.3f s = %.0f tokens/s; matrices %.0f TFLOP/s = %.0f%% of the "
               "measured bf16 GEMM peak (%.0f TFLOP/s)\n",
               PREFILL, t_long, PREFILL / t_long, flops / 1e12, peak > 0 ? 100 * flops / peak : 0,
               peak / 1e12);
    }
    printf("decode: %s %d-token context (CUDA_BENCH_CONTEXTS, CUDA_BENCH_CTX)\n",
           shared ? "the batch shares one" : "each sequence has a", ctx);
    printf(
        "| shape | type | batch | ctx | tokens/s | ms/step | roofline ms/step | of roofline |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    uint64_t kv_tok = backend_kv_block_bytes(m, cfg.kv_type) / 16; /* K/V bytes per token */
    struct cuda_upload_stats hs[8][2];
    for (int i = 0; i < nb; i++) {
        int B = batches[i];
        double dt = 0;
        for (int rep = -1; rep < STEPS; rep++) { /* rep -1: warm-up step, not timed */
            int step = rep < 0 ? 0 : rep;
            for (int b = 0; b < B; b++)
                bs[b] = (struct batch_seq){.tokens = toks + ctx + step,
                                           .n_tokens = 1,
                                           .n_past = ctx + step,
                                           .block_table = table + b * tw,
                                           .n_blocks = ctx / 16 + per_seq,
                                           .want_logits = 1};
            bt.n_seqs = B;
            if (rep == 0)
                cuda_backend_stats(be, &hs[i][0]);
            t0 = now_s();
            if (backend_step(be, &bt, &err))
                die("decode", &err);
            if (rep >= 0)
                dt += now_s() - t0;
        }
        cuda_backend_stats(be, &hs[i][1]);
        double ms = dt / STEPS * 1e3;
        double bytes = weight_bytes(m, B) +
                       (double)B * (ctx + STEPS / 2) * (double)kv_tok;
        double roof = bytes / bw * 1e3; /* bytes over the copy's traffic rate */
        printf("| %s | %s | %d | %d | %.1f | %.3f | %.3f | %.0f%% |\n", sname, tname, B, ctx,
               B / (ms * 1e-3), ms, roof, 100 * roof / ms);
    }
    /* the host's share of those steps (cuda_upload_stats): planning before
     * the first copy, queuing the launches (or the graph), the closing sync
     * with the logits copy; gaps are this loop's own, not an engine's */
    printf(
        "\n| batch | host plan us/step | launch us/step | sync wait ms/step | graphs replayed |\n"
        "|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < nb; i++) {
        const struct cuda_upload_stats *a = &hs[i][0], *z = &hs[i][1];
        const double n = (double)(z->steps - a->steps);
        printf("| %d | %.1f | %.1f | %.3f | %" PRIu64 " |\n", batches[i],
               (z->host_plan_s - a->host_plan_s) / n * 1e6,
               (z->host_issue_s - a->host_issue_s) / n * 1e6, (z->wait_s - a->wait_s) / n * 1e3,
               z->graph_replays - a->graph_replays);
    }
    if (pageable)
        free(logits);
    else
        backend_host_free(be, logits);
    free(table);
    backend_free(be);
    return 0;
}
