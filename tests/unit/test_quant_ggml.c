/*
 * test_quant_ggml.c: common/quant against the real ggml library.
 *
 * Loads libggml-base.so (llama.cpp's ggml as shipped by node-llama-cpp,
 * installed by tests/tools/node) with dlopen and checks, on seeded data of
 * several distributions (tests/unit/quant_testdata.c):
 *   - quant_quantize_row output is byte-identical to ggml_quantize_chunk
 *     without an importance matrix (that is, quantize_row_*_ref);
 *   - quant_dequantize_row, and each SIMD table this CPU runs, give the
 *     same float bits as ggml_get_type_traits(t)->to_float, on ggml's own
 *     quantized blocks and on random blocks;
 *   - the fp16/bf16 scalar conversions match ggml's on every half and on
 *     random float bit patterns;
 *   - quant_ftype_tensor_type picks the type llama.cpp's own rules pick
 *     (llama_quant_compute_types from libllama, fed mock models of several
 *     shapes: dense, tied, 70B-like, 8-expert MoE, Falcon, odd widths).
 * The library is found through MFC_GGML_LIB, else under
 * $MFC_SRCDIR/tests/tools/node/node_modules; libllama is taken from the
 * same folder. When a library is absent its tests skip and say why.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <glob.h>
#include <math.h>
#include <unistd.h>

#include "common/quant.h"
#include "tests/unit/quant_testdata.h"

/* ggml.h's struct ggml_type_traits as of the ggml in node-llama-cpp 3.21.1;
 * setup checks a few fields against known values before trusting it. */
struct ggml_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void *x, float *y, int64_t k);
    void (*from_float_ref)(const float *x, void *y, int64_t k);
};

struct ggml_lib {
    void *handle;
    char path[4096];
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                             int64_t n_per_row, const float *imatrix);
    const struct ggml_traits *(*traits)(int type);
    uint16_t (*fp32_to_fp16)(float f);
    float (*fp16_to_fp32)(uint16_t h);
    uint16_t (*fp32_to_bf16)(float f);
    float (*bf16_to_fp32)(uint16_t b);
};

static struct ggml_lib lib; /* filled by group_setup; handle NULL when absent */
static char lib_missing[4200];

/* llama.h's llama_model_quantize_params (same version as above). */
struct llama_qparams {
    int32_t nthread;
    int32_t ftype;
    int32_t output_tensor_type;
    int32_t token_embedding_type;
    bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
    const void *imatrix, *kv_overrides, *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
};

/* src/llama-ext.h's llama_quant_model_desc. */
struct llama_mock_desc {
    const char *architecture;
    uint32_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_expert, n_embd_head_k, n_embd_head_v;
};

struct ggml_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};

/* libllama's test hooks (C++ names, hence the mangled symbols) and the
 * ggml calls that build tensor descriptions for them. */
struct llama_lib {
    void *handle;
    struct llama_qparams (*default_params)(void);
    void *(*model_from_metadata)(const struct llama_mock_desc *desc);
    void (*model_free)(void *model);
    void *(*quant_init)(const void *model, const struct llama_qparams *params);
    void (*quant_free)(void *qs);
    bool (*allows)(const void *qs, const void *tensor);
    void (*compute_types)(void *qs, int ftype, void **tensors, int *types, size_t n);
    void *(*ggml_init)(struct ggml_init_params p);
    void (*ggml_free)(void *ctx);
    void *(*new_tensor)(void *ctx, int type, int n_dims, const int64_t *ne);
    void *(*set_name)(void *tensor, const char *name);
    size_t (*tensor_overhead)(void);
    void (*log_set)(void (*cb)(int level, const char *text, void *ud), void *ud);
};

static struct llama_lib llama; /* handle NULL when absent */
static char llama_missing[4300];

/* ---- finding and loading the library --------------------------------------- */

static int find_lib(char *out, size_t cap)
{
    const char *env = getenv("MFC_GGML_LIB");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return 0;
    }
    const char *src = getenv("MFC_SRCDIR");
    char pat[4096];
    snprintf(pat, sizeof pat,
             "%s/tests/tools/node/node_modules/@node-llama-cpp/*/bins/*/libggml-base.so",
             src ? src : ".");
    glob_t g;
    int rc = glob(pat, 0, NULL, &g);
    if (rc == 0 && g.gl_pathc > 0) {
        /* npm without --omit=optional also unpacks the other platforms'
         * builds (linux-arm64, linux-x64-cuda, ...): take this machine's */
#if defined(__x86_64__)
        const char *want = "/linux-x64/bins/linux-x64/libggml-base.so";
#elif defined(__aarch64__)
        const char *want = "/linux-arm64/bins/linux-arm64/libggml-base.so";
#else
        const char *want = NULL;
#endif
        size_t pick = 0;
        for (size_t i = 0; want && i < g.gl_pathc; i++) {
            size_t n = strlen(g.gl_pathv[i]), w = strlen(want);
            if (n >= w && strcmp(g.gl_pathv[i] + n - w, want) == 0) {
                pick = i;
                break;
            }
        }
        snprintf(out, cap, "%s", g.gl_pathv[pick]);
    } else {
        snprintf(out, cap, "%s", pat);
    }
    globfree(&g);
    return rc == 0 ? 0 : -1;
}

static int load_syms(void)
{
    *(void **)&lib.quantize_chunk = dlsym(lib.handle, "ggml_quantize_chunk");
    *(void **)&lib.traits = dlsym(lib.handle, "ggml_get_type_traits");
    *(void **)&lib.fp32_to_fp16 = dlsym(lib.handle, "ggml_fp32_to_fp16");
    *(void **)&lib.fp16_to_fp32 = dlsym(lib.handle, "ggml_fp16_to_fp32");
    *(void **)&lib.fp32_to_bf16 = dlsym(lib.handle, "ggml_fp32_to_bf16");
    *(void **)&lib.bf16_to_fp32 = dlsym(lib.handle, "ggml_bf16_to_fp32");
    return lib.quantize_chunk && lib.traits && lib.fp32_to_fp16 && lib.fp16_to_fp32 &&
                   lib.fp32_to_bf16 && lib.bf16_to_fp32
               ? 0
               : -1;
}

static void quiet_log(int level, const char *text, void *ud)
{
}

/* libllama next to libggml-base; a missing one only skips the mix test. */
static void load_llama(void)
{
    char dir[4096], pat[4200];
    snprintf(dir, sizeof dir, "%s", lib.path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    snprintf(pat, sizeof pat, "%s/libllama*.so", slash ? dir : ".");
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        snprintf(llama_missing, sizeof llama_missing, "no %s", pat);
        globfree(&g);
        return;
    }
    llama.handle = dlopen(g.gl_pathv[0], RTLD_NOW | RTLD_LOCAL);
    if (!llama.handle)
        snprintf(llama_missing, sizeof llama_missing, "dlopen %s: %s", g.gl_pathv[0], dlerror());
    globfree(&g);
    if (!llama.handle)
        return;
    void *h = llama.handle, *g0 = lib.handle;
    *(void **)&llama.default_params = dlsym(h, "llama_model_quantize_default_params");
    *(void **)&llama.model_from_metadata =
        dlsym(h, "_Z31llama_quant_model_from_metadataPK22llama_quant_model_desc");
    *(void **)&llama.model_free = dlsym(h, "llama_model_free");
    *(void **)&llama.quant_init =
        dlsym(h, "_Z16llama_quant_initPK11llama_modelPK27llama_model_quantize_params");
    *(void **)&llama.quant_free = dlsym(h, "_Z16llama_quant_freeP19quantize_state_impl");
    *(void **)&llama.allows = dlsym(
        h, "_Z38llama_quant_tensor_allows_quantizationPK19quantize_state_implPK11ggml_tensor");
    *(void **)&llama.compute_types =
        dlsym(h, "_Z25llama_quant_compute_typesP19quantize_state_impl11llama_ftypePP11ggml_"
                 "tensorP9ggml_typem");
    *(void **)&llama.ggml_init = dlsym(g0, "ggml_init");
    *(void **)&llama.ggml_free = dlsym(g0, "ggml_free");
    *(void **)&llama.new_tensor = dlsym(g0, "ggml_new_tensor");
    *(void **)&llama.set_name = dlsym(g0, "ggml_set_name");
    *(void **)&llama.tensor_overhead = dlsym(g0, "ggml_tensor_overhead");
    *(void **)&llama.log_set = dlsym(h, "llama_log_set");
    if (!llama.default_params || !llama.model_from_metadata || !llama.model_free ||
        !llama.quant_init || !llama.quant_free || !llama.allows || !llama.compute_types ||
        !llama.ggml_init || !llama.ggml_free || !llama.new_tensor || !llama.set_name ||
        !llama.tensor_overhead || !llama.log_set) {
        snprintf(llama_missing, sizeof llama_missing,
                 "this libllama has no llama_quant_compute_types test hooks");
        dlclose(llama.handle);
        llama.handle = NULL;
        return;
    }
    llama.log_set(quiet_log, NULL); /* its fallback warnings are expected here */
}

static int group_setup(void **state)
{
    if (find_lib(lib.path, sizeof lib.path) != 0) {
        snprintf(lib_missing, sizeof lib_missing,
                 "no libggml-base.so at %s (run npm i in tests/tools/node or set MFC_GGML_LIB)",
                 lib.path);
        return 0;
    }
    if (access(lib.path, F_OK) != 0) {
        snprintf(lib_missing, sizeof lib_missing, "%s does not exist", lib.path);
        return 0;
    }
    /* the file is there: failing to load it is a failure, not a skip */
    lib.handle = dlopen(lib.path, RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle) {
        fprintf(stderr, "dlopen %s failed: %s\n", lib.path, dlerror());
        return -1;
    }
    /* a library that loads but lacks the API is a real failure, not a skip */
    if (load_syms() != 0) {
        fprintf(stderr, "%s lacks ggml_quantize_chunk or its fp16/bf16 helpers\n", lib.path);
        return -1;
    }
    const struct ggml_traits *q4k = lib.traits(GGML_TYPE_Q4_K);
    if (!q4k || strcmp(q4k->type_name, "q4_K") != 0 || q4k->blck_size != 256 ||
        q4k->type_size != 144 || !q4k->to_float) {
        fprintf(stderr, "%s: struct ggml_type_traits has another layout\n", lib.path);
        return -1;
    }
    printf("# comparing with %s; ISAs here:", lib.path);
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        const struct quant_ops *ops = quant_ops_for_isa((enum quant_isa)isa);
        if (ops)
            printf(" %s", ops->name);
    }
    printf("\n");
    load_llama();
    return 0;
}

static int group_teardown(void **state)
{
    if (llama.handle)
        dlclose(llama.handle);
    if (lib.handle)
        dlclose(lib.handle);
    return 0;
}

#define NEED_LIB()                                                                                 \
    do {                                                                                           \
        if (!lib.handle) {                                                                         \
            printf("# skipped: %s\n", lib_missing);                                                \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- helpers -------------------------------------------------------------------- */

/* Row length for t: 16 super-blocks for the K-quants, 128 blocks else,
 * plus one odd-sized length to catch tails. */
static int64_t row_len(enum ggml_type t, int odd)
{
    int64_t blck = ggml_type_block_size(t);
    if (blck == 1)
        return odd ? 4097 : 4096;
    return blck * (odd ? 3 : (blck == QK_K ? 16 : 128));
}

/* Number of blocks where a and b differ. */
static int blocks_differ(const uint8_t *a, const uint8_t *b, size_t bytes, size_t blk)
{
    int n = 0;
    for (size_t off = 0; off < bytes; off += blk)
        n += memcmp(a + off, b + off, blk) != 0;
    return n;
}

/* ---- quantize -------------------------------------------------------------------- */

/* ours vs ggml on nrows x n of distribution d; returns differing blocks */
static int compare_quantize(enum ggml_type t, enum qt_dist d, int64_t nrows, int64_t n)
{
    const size_t rb = qt_row_bytes(t, n);
    float *x = malloc(sizeof(float) * (size_t)(nrows * n));
    uint8_t *ours = malloc(rb * (size_t)nrows), *theirs = malloc(rb * (size_t)nrows);
    assert_non_null(x);
    assert_non_null(ours);
    assert_non_null(theirs);
    qt_fill(x, nrows, n, d, 42);
    memset(theirs, 0xAA, rb * (size_t)nrows);
    size_t got = lib.quantize_chunk((int)t, x, theirs, 0, nrows, n, NULL);
    assert_int_equal(got, rb * (size_t)nrows);
    struct mf_err err;
    for (int64_t r = 0; r < nrows; r++)
        assert_int_equal(quant_quantize_row(t, x + r * n, ours + r * (int64_t)rb, n, &err), 0);
    int bad = blocks_differ(ours, theirs, rb * (size_t)nrows, ggml_type_size(t));
    free(x);
    free(ours);
    free(theirs);
    return bad;
}

static void test_quantize_matches_ggml(void **state)
{
    NEED_LIB();
    int total_bad = 0;
    for (const enum ggml_type *t = qt_quant_types; *t != GGML_TYPE_COUNT; t++) {
        if (*t == GGML_TYPE_F32)
            continue; /* ggml_quantize_chunk has no F32 case */
        int bad = 0, blocks = 0;
        for (int d = 0; d < QT_NDIST; d++) {
            for (int odd = 0; odd < 2; odd++) {
                int64_t n = row_len(*t, odd), nrows = 16;
                int b = compare_quantize(*t, (enum qt_dist)d, nrows, n);
                if (b)
                    printf("# %s/%s n=%lld: %d blocks differ from ggml\n", ggml_type_name(*t),
                           qt_dist_name((enum qt_dist)d), (long long)n, b);
                bad += b;
                blocks += (int)(nrows * n / ggml_type_block_size(*t));
            }
        }
        printf("# quantize %-5s: %d/%d blocks byte-identical to ggml\n", ggml_type_name(*t),
               blocks - bad, blocks);
        total_bad += bad;
    }
    assert_int_equal(total_bad, 0);
}

/* ---- dequantize -------------------------------------------------------------------- */

/* Number of floats whose bits differ. */
static int64_t floats_differ(const float *a, const float *b, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}

/* Every table this CPU runs against ggml on the blocks in q. */
static int64_t compare_dequantize(enum ggml_type t, const uint8_t *q, int64_t n)
{
    const struct ggml_traits *tr = lib.traits((int)t);
    assert_non_null(tr);
    assert_non_null(tr->to_float);
    float *theirs = malloc(sizeof(float) * (size_t)n), *ours = malloc(sizeof(float) * (size_t)n);
    assert_non_null(theirs);
    assert_non_null(ours);
    tr->to_float(q, theirs, n);
    int64_t bad = 0;
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        const struct quant_ops *ops = quant_ops_for_isa((enum quant_isa)isa);
        if (!ops)
            continue;
        memset(ours, 0x55, sizeof(float) * (size_t)n);
        ops->dequantize[t](q, ours, n);
        int64_t b = floats_differ(ours, theirs, n);
        if (b)
            printf("# dequantize %s (%s): %lld of %lld floats differ from ggml\n",
                   ggml_type_name(t), ops->name, (long long)b, (long long)n);
        bad += b;
    }
    free(theirs);
    free(ours);
    return bad;
}

static void test_dequantize_matches_ggml(void **state)
{
    NEED_LIB();
    int64_t total_bad = 0;
    for (const enum ggml_type *t = qt_dequant_types; *t != GGML_TYPE_COUNT; t++) {
        int64_t checked = 0, bad = 0;
        if (*t == GGML_TYPE_F32)
            continue; /* ggml has no to_float for F32; test_quant.c covers the copy */
        for (int odd = 0; odd < 2; odd++) {
            const int64_t n = row_len(*t, odd) * 4;
            const size_t rb = qt_row_bytes(*t, n);
            uint8_t *q = malloc(rb + 1);
            float *x = malloc(sizeof(float) * (size_t)n);
            assert_non_null(q);
            assert_non_null(x);
            for (int d = 0; d < QT_NDIST; d++) {
                qt_fill(x, 1, n, (enum qt_dist)d, 7);
                lib.quantize_chunk((int)*t, x, q + odd, 0, 1, n, NULL); /* odd: misaligned */
                bad += compare_dequantize(*t, q + odd, n);
                checked += n;
            }
            qt_random_blocks(*t, q + odd, rb, 99 + (uint64_t)odd);
            bad += compare_dequantize(*t, q + odd, n);
            checked += n;
            free(q);
            free(x);
        }
        printf("# dequantize %-5s: %lld floats x each ISA, %lld differ from ggml\n",
               ggml_type_name(*t), (long long)checked, (long long)bad);
        total_bad += bad;
    }
    assert_int_equal(total_bad, 0);
}

/* ---- scalars ----------------------------------------------------------------------- */

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static void test_half_scalars_match_ggml(void **state)
{
    NEED_LIB();
    int bad = 0;
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        bad += !same_bits(quant_f16_to_f32((uint16_t)h), lib.fp16_to_fp32((uint16_t)h));
        bad += !same_bits(quant_bf16_to_f32((uint16_t)h), lib.bf16_to_fp32((uint16_t)h));
    }
    struct qt_rng r = {5};
    for (int i = 0; i < 2000000; i++) {
        uint32_t w = (uint32_t)qt_next(&r);
        if (i % 4 == 1)
            w = (w & 0x80000000u) | (0x33000000u + (w & 0x0FFFFFFFu)); /* near fp16's range */
        if (i % 4 == 2)
            w = (w & 0xFFFF0000u) | 0x8000u; /* bf16 ties */
        if (i % 4 == 3)
            w = (w & 0xFFFFE000u) | 0x1000u; /* fp16 ties */
        float f;
        memcpy(&f, &w, sizeof f);
        bad += quant_f32_to_f16(f) != lib.fp32_to_fp16(f);
        bad += quant_f32_to_bf16(f) != lib.fp32_to_bf16(f);
    }
    assert_int_equal(bad, 0);
}

/* ---- file-type mixes ---------------------------------------------------------------- */

/* A model shape for the mix comparison. */
struct scenario {
    const char *label;
    struct llama_mock_desc desc; /* what libllama's mock model gets */
    uint32_t vocab;
    int tied;      /* no output.weight */
    int fused_qkv; /* attn_qkv instead of attn_q/k/v (Falcon) */
    int biases;    /* 1-D attn_q/k/v biases (Qwen2) */
};

static const struct scenario scenarios[] = {
    {"llama3-8b", {"llama", 4096, 14336, 32, 32, 8, 0, 128, 128}, 128256, 0, 0, 0},
    {"llama3.2-1b-tied", {"llama", 2048, 8192, 16, 32, 8, 0, 64, 64}, 128256, 1, 0, 0},
    {"qwen2-0.5b-odd-width", {"qwen2", 896, 4864, 24, 14, 2, 0, 64, 64}, 151936, 1, 0, 1},
    {"llama2-70b", {"llama", 8192, 28672, 80, 64, 8, 0, 128, 128}, 32000, 0, 0, 0},
    {"mixtral-8x7b", {"llama", 4096, 14336, 32, 32, 8, 8, 128, 128}, 32000, 0, 0, 0},
    {"falcon-7b", {"falcon", 4544, 18176, 32, 71, 1, 0, 64, 64}, 65024, 0, 1, 0},
    {"odd-ff-mha", {"llama", 2048, 8020, 8, 16, 16, 0, 128, 128}, 32000, 0, 0, 0},
    {"gemma-like-mqa", {"gemma", 2048, 16384, 18, 8, 1, 0, 256, 256}, 256000, 1, 0, 0},
    {"gpt-oss-20b", {"gpt-oss", 2880, 2880, 24, 64, 8, 32, 64, 64}, 201088, 0, 0, 1},
};

struct mock_tensor {
    char name[64];
    int n_dims;
    int64_t ne[4];
};

static void add_tensor(struct mock_tensor *v, int *n, const char *name, int n_dims, int64_t ne0,
                       int64_t ne1, int64_t ne2)
{
    struct mock_tensor *t = &v[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = 1;
}

/* The tensors of one transformer block, named as GGUF names them. */
static void add_block(const struct scenario *sc, int il, struct mock_tensor *v, int *n)
{
    const struct llama_mock_desc *d = &sc->desc;
    const int64_t e = d->n_embd, q = (int64_t)d->n_head * d->n_embd_head_k;
    const int64_t kv = (int64_t)d->n_head_kv * d->n_embd_head_k, ff = d->n_ff, x = d->n_expert;
    char nm[64];
#define ADD(suffix, nd, a, b, c)                                                                   \
    do {                                                                                           \
        snprintf(nm, sizeof nm, "blk.%d." suffix, il);                                             \
        add_tensor(v, n, nm, nd, a, b, c);                                                         \
    } while (0)
    ADD("attn_norm.weight", 1, e, 1, 1);
    if (sc->fused_qkv) {
        ADD("attn_qkv.weight", 2, e, q + 2 * kv, 1);
    } else {
        ADD("attn_q.weight", 2, e, q, 1);
        ADD("attn_k.weight", 2, e, kv, 1);
        ADD("attn_v.weight", 2, e, kv, 1);
    }
    if (sc->biases) {
        ADD("attn_q.bias", 1, q, 1, 1);
        ADD("attn_k.bias", 1, kv, 1, 1);
        ADD("attn_v.bias", 1, kv, 1, 1);
    }
    ADD("attn_output.weight", 2, q, e, 1);
    ADD("ffn_norm.weight", 1, e, 1, 1);
    if (x > 1) {
        ADD("ffn_gate_inp.weight", 2, e, x, 1);
        ADD("ffn_gate_exps.weight", 3, e, ff, x);
        ADD("ffn_up_exps.weight", 3, e, ff, x);
        ADD("ffn_down_exps.weight", 3, ff, e, x);
    } else {
        if (!sc->fused_qkv)
            ADD("ffn_gate.weight", 2, e, ff, 1);
        ADD("ffn_up.weight", 2, e, ff, 1);
        ADD("ffn_down.weight", 2, ff, e, 1);
    }
#undef ADD
}

static int block_of(const char *name)
{
    int l = -1;
    if (strncmp(name, "blk.", 4) == 0)
        l = (int)strtol(name + 4, NULL, 10);
    return l;
}

/* llama_model_loader's weight_name_comparer: by block, then by name. */
static int cmp_loader_order(const void *pa, const void *pb)
{
    const struct mock_tensor *a = pa, *b = pb;
    int la = block_of(a->name), lb = block_of(b->name);
    if (la != lb)
        return la < lb ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int build_model(const struct scenario *sc, struct mock_tensor *v)
{
    int n = 0;
    const struct llama_mock_desc *d = &sc->desc;
    add_tensor(v, &n, "token_embd.weight", 2, d->n_embd, sc->vocab, 1);
    add_tensor(v, &n, "output_norm.weight", 1, d->n_embd, 1, 1);
    add_tensor(v, &n, "rope_freqs.weight", 1, d->n_embd_head_k / 2, 1, 1);
    if (!sc->tied)
        add_tensor(v, &n, "output.weight", 2, d->n_embd, sc->vocab, 1);
    for (uint32_t il = 0; il < d->n_layer; il++)
        add_block(sc, (int)il, v, &n);
    qsort(v, (size_t)n, sizeof *v, cmp_loader_order);
    return n;
}

/* Our answer for every tensor of the model in ft; 0 on success. */
static int our_types(const struct scenario *sc, const struct mock_tensor *v, int n,
                     enum quant_ftype ft, int *out)
{
    const struct llama_mock_desc *d = &sc->desc;
    const struct quant_model_info mi = {
        .arch = d->architecture,
        .n_layer = (int32_t)d->n_layer,
        .n_expert = (int32_t)d->n_expert,
        .n_gqa = (int32_t)(d->n_head / d->n_head_kv),
        .has_output = !sc->tied,
        .is_70b =
            strcmp(d->architecture, "llama") == 0 && d->n_layer == 80 && d->n_head != d->n_head_kv,
    };
    struct mf_err err;
    for (int i = 0; i < n; i++) {
        struct quant_tensor_info ti = {
            .name = v[i].name, .type = GGML_TYPE_F16, .n_dims = v[i].n_dims};
        memcpy(ti.ne, v[i].ne, sizeof ti.ne);
        enum ggml_type t;
        if (quant_ftype_tensor_type(ft, &mi, &ti, &t, &err) != 0) {
            printf("# %s %s: %s\n", sc->label, v[i].name, err.msg);
            return -1;
        }
        out[i] = (int)t;
    }
    return 0;
}

/* llama.cpp's answer; tensors it does not quantize get -1. */
static void llama_types(const struct scenario *sc, const struct mock_tensor *v, int n,
                        enum quant_ftype ft, int *out)
{
    struct ggml_init_params gp = {(size_t)(n + 8) * llama.tensor_overhead(), NULL, true};
    void *ctx = llama.ggml_init(gp);
    void *model = llama.model_from_metadata(&sc->desc);
    struct llama_qparams qp = llama.default_params();
    void *qs = llama.quant_init(model, &qp);
    void **quantized = calloc((size_t)n, sizeof *quantized);
    int *qtypes = calloc((size_t)n, sizeof *qtypes), *index = calloc((size_t)n, sizeof *index);
    assert_true(ctx && model && qs && quantized && qtypes && index);
    size_t nq = 0;
    for (int i = 0; i < n; i++) {
        void *t = llama.new_tensor(ctx, GGML_TYPE_F16, v[i].n_dims, v[i].ne);
        llama.set_name(t, v[i].name);
        out[i] = -1;
        if (llama.allows(qs, t)) {
            index[nq] = i;
            quantized[nq++] = t;
        }
    }
    llama.compute_types(qs, (int)ft, quantized, qtypes, nq);
    for (size_t k = 0; k < nq; k++)
        out[index[k]] = qtypes[k];
    free(index);
    free(qtypes);
    free(quantized);
    llama.quant_free(qs);
    llama.model_free(model);
    llama.ggml_free(ctx);
}

/* Mismatches between ours and llama.cpp's for one model and file type. */
static int compare_mix(const struct scenario *sc, const struct mock_tensor *v, int n,
                       enum quant_ftype ft, int *ours, int *theirs)
{
    int bad = 0;
    if (our_types(sc, v, n, ft, ours) != 0)
        return n;
    llama_types(sc, v, n, ft, theirs);
    for (int i = 0; i < n; i++) {
        /* llama.cpp keeps an unquantized tensor as it is: F16 in this mock,
         * F32 for 1-D ones in a converted file (our answer) */
        int want = theirs[i] >= 0 ? theirs[i] : v[i].n_dims == 1 ? GGML_TYPE_F32 : GGML_TYPE_F16;
        if (theirs[i] < 0 && ours[i] == GGML_TYPE_F32)
            want = GGML_TYPE_F32; /* ffn_gate_inp etc.: the converter's F32 list */
        if (ours[i] != want) {
            if (bad < 5)
                printf("# %s %s %s: ours %s, llama.cpp %s\n", sc->label, quant_ftype_name(ft),
                       v[i].name, ggml_type_name((uint32_t)ours[i]),
                       ggml_type_name((uint32_t)want));
            bad++;
        }
    }
    return bad;
}

static void test_ftype_mix_matches_llama(void **state)
{
    NEED_LIB();
    if (!llama.handle) {
        printf("# skipped: %s\n", llama_missing);
        skip();
    }
    static const enum quant_ftype fts[] = {
        QUANT_FTYPE_ALL_F32,       QUANT_FTYPE_MOSTLY_F16,    QUANT_FTYPE_MOSTLY_BF16,
        QUANT_FTYPE_MOSTLY_Q4_0,   QUANT_FTYPE_MOSTLY_Q4_1,   QUANT_FTYPE_MOSTLY_Q5_0,
        QUANT_FTYPE_MOSTLY_Q5_1,   QUANT_FTYPE_MOSTLY_Q8_0,   QUANT_FTYPE_MOSTLY_Q2_K,
        QUANT_FTYPE_MOSTLY_Q2_K_S, QUANT_FTYPE_MOSTLY_Q3_K_S, QUANT_FTYPE_MOSTLY_Q3_K_M,
        QUANT_FTYPE_MOSTLY_Q3_K_L, QUANT_FTYPE_MOSTLY_Q4_K_S, QUANT_FTYPE_MOSTLY_Q4_K_M,
        QUANT_FTYPE_MOSTLY_Q5_K_S, QUANT_FTYPE_MOSTLY_Q5_K_M, QUANT_FTYPE_MOSTLY_Q6_K,
        QUANT_FTYPE_MOSTLY_MXFP4_MOE,
    };
    struct mock_tensor *v = calloc(2048, sizeof *v);
    int *ours = calloc(2048, sizeof *ours), *theirs = calloc(2048, sizeof *theirs);
    assert_true(v && ours && theirs);
    int total_bad = 0, total = 0;
    for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++) {
        const int n = build_model(&scenarios[s], v);
        int bad = 0;
        for (size_t f = 0; f < sizeof fts / sizeof fts[0]; f++)
            bad += compare_mix(&scenarios[s], v, n, fts[f], ours, theirs);
        printf("# mix %-22s %4d tensors x %zu file types: %d differ from llama.cpp\n",
               scenarios[s].label, n, sizeof fts / sizeof fts[0], bad);
        total_bad += bad;
        total += n * (int)(sizeof fts / sizeof fts[0]);
    }
    printf("# mix: %d of %d tensor types agree with llama.cpp\n", total - total_bad, total);
    free(v);
    free(ours);
    free(theirs);
    assert_int_equal(total_bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_scalars_match_ggml),
        cmocka_unit_test(test_quantize_matches_ggml),
        cmocka_unit_test(test_dequantize_matches_ggml),
        cmocka_unit_test(test_ftype_mix_matches_llama),
    };
    return cmocka_run_group_tests_name("quant_ggml", tests, group_setup, group_teardown);
}
