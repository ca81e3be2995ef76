/*
 * test_cuda_host.c: the CUDA backend's host-side logic, which needs no GPU
 * (runtime/cuda/cuda_plan.h): weight placement, the KV budget from
 * MFC_GPU_MEMORY_UTILIZATION, one step's bookkeeping, the routed layers'
 * buffers and work-list bounds (cuda_moe.h, kernels.h); and that without a
 * GPU (or without CUDA in the build) the backend refuses to start with
 * MF_EUNSUPPORTED instead of failing later; the FP8 KV arena's planning.
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/engine/backend.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_moe.h"
#include "runtime/cuda/cuda_plan.h"

#define GiB (1ull << 30)

static uint8_t blob[1 << 20]; /* stands in for the GGUF mapping */

static void set_w(struct model_weight *w, enum ggml_type t, int64_t ne0, int64_t ne1, size_t at,
                  const char *name)
{
    uint64_t rb = 0;
    ggml_type_row_size(t, (uint64_t)ne0, &rb);
    *w = (struct model_weight){.data = blob + at, .type = t, .ne0 = ne0, .ne1 = ne1,
                               .row_bytes = rb, .name = name};
}

/* A 2-layer model with 256-wide rows; weights of type t; tied or not. */
static void fake_model(struct model *m, struct model_layer *L, enum ggml_type t, int tied)
{
    memset(m, 0, sizeof *m);
    m->hp = (struct model_hparams){.n_embd = 256, .n_ff = 512, .n_layer = 2, .n_head = 4,
                                   .n_head_kv = 2, .head_dim = 64, .n_rot = 8, .n_vocab = 100,
                                   .rope_base = 10000.0f, .rope_freq_scale = 1.0f,
                                   .rms_eps = 1e-5f, .arch = arch_find("llama", 5),
                                   .rope_mscale = 1.0f, .q_scale = 1.0f, .kq_scale = 0.125f,
                                   .embd_scale = 1.0f};
    m->rope_bases[0] = 10000.0f;
    m->rope_scales[0] = 1.0f;
    m->n_rope_kinds = 1;
    memset(L, 0, 2 * sizeof *L);
    m->layers = L;
    set_w(&m->tok_embd, t, 256, 100, 0, "token_embd.weight");
    m->tied = tied;
    if (tied)
        m->output = m->tok_embd;
    else
        set_w(&m->output, t, 256, 100, 4096, "output.weight");
    set_w(&m->out_norm, GGML_TYPE_F32, 256, 1, 8192, "output_norm.weight");
    for (int l = 0; l < 2; l++) {
        set_w(&L[l].attn_norm, GGML_TYPE_F32, 256, 1, 16384 + 1024 * (size_t)l, "attn_norm");
        set_w(&L[l].ffn_norm, GGML_TYPE_F32, 256, 1, 20480 + 1024 * (size_t)l, "ffn_norm");
        for (int w = 0; w < MODEL_W_PER_LAYER; w++)
            set_w(&L[l].w[w], t, w == MODEL_W_DOWN ? 512 : 256, w == MODEL_W_GATE || w == MODEL_W_UP ? 512 : 256,
                  32768 + 4096 * (size_t)(l * MODEL_W_PER_LAYER + w), "blk.w");
    }
}

static void test_types(void **state)
{
    (void)state;
    assert_true(cuda_plan_type_ok(GGML_TYPE_F16, 64));
    assert_true(cuda_plan_type_ok(GGML_TYPE_BF16, 32));
    assert_true(cuda_plan_type_ok(GGML_TYPE_Q8_0, 96));
    assert_true(cuda_plan_type_ok(GGML_TYPE_Q4_K, 512));
    assert_true(cuda_plan_type_ok(GGML_TYPE_Q6_K, 256));
    assert_false(cuda_plan_type_ok(GGML_TYPE_Q4_K, 288)); /* not whole super-blocks */
    assert_false(cuda_plan_type_ok(GGML_TYPE_F16, 20));   /* kernels read 8 at a time, 32 a warp */
    assert_false(cuda_plan_type_ok(GGML_TYPE_Q2_K, 256));
    assert_false(cuda_plan_type_ok(GGML_TYPE_Q5_0, 256));
}

static void test_weights(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct cuda_wplan p;
    struct mf_err err = {0};
    (void)state;

    for (int tied = 0; tied < 2; tied++) {
        fake_model(&m, L, GGML_TYPE_Q4_K, tied);
        assert_int_equal(cuda_plan_weights(&m, &p, &err), 0);
        /* token_embd, output unless tied, output_norm, 2 x (2 norms + 7) */
        assert_int_equal(p.n, 3 - tied + 2 * 9);
        uint64_t end = 0;
        for (int i = 0; i < p.n; i++) {
            assert_int_equal(p.slots[i].off % CUDA_PLAN_ALIGN, 0);
            assert_true(p.slots[i].off >= end); /* in order, no overlap */
            assert_int_equal(p.slots[i].bytes, p.slots[i].w->row_bytes * (uint64_t)p.slots[i].w->ne1);
            end = p.slots[i].off + p.slots[i].bytes;
        }
        assert_true(p.total >= end && p.total - end < CUDA_PLAN_ALIGN);
        /* every tensor a step reads is found; a tied output is token_embd's copy */
        const struct cuda_wslot *o = cuda_wplan_find(&p, &m.output);
        assert_non_null(o);
        assert_true(tied ? o == cuda_wplan_find(&p, &m.tok_embd) : o != cuda_wplan_find(&p, &m.tok_embd));
        for (int l = 0; l < 2; l++)
            for (int w = 0; w < MODEL_W_PER_LAYER; w++)
                assert_ptr_equal(cuda_wplan_find(&p, &L[l].w[w])->w, &L[l].w[w]);
        cuda_wplan_free(&p);
        assert_null(p.slots);
    }
    /* a type the kernels cannot read is refused up front, naming the tensor */
    fake_model(&m, L, GGML_TYPE_F16, 0);
    set_w(&L[1].w[MODEL_W_UP], GGML_TYPE_Q2_K, 256, 512, 0, "blk.1.ffn_up.weight");
    assert_int_equal(cuda_plan_weights(&m, &p, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "blk.1.ffn_up.weight"));
    assert_non_null(strstr(err.msg, "Q2_K"));
    assert_null(p.slots);
    /* so are Q5_0 and Q5_1 (the CPU backend runs them; the CUDA kernels do not yet) */
    assert_false(cuda_plan_type_ok(GGML_TYPE_Q5_1, 640));
    fake_model(&m, L, GGML_TYPE_F16, 0);
    set_w(&L[0].w[MODEL_W_DOWN], GGML_TYPE_Q5_0, 640, 256, 0, "blk.0.ffn_down.weight");
    assert_int_equal(cuda_plan_weights(&m, &p, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "blk.0.ffn_down.weight"));
    assert_non_null(strstr(err.msg, "Q5_0"));
    assert_null(p.slots);
    /* MXFP4 (gpt-oss's experts) is no CUDA weight type, and gpt-oss is
     * refused by its switches whatever its weights, so that
     * MFC_DEVICE=auto serves it on the CPU with the reason */
    assert_false(cuda_plan_type_ok(GGML_TYPE_MXFP4, 2880));
    fake_model(&m, L, GGML_TYPE_F16, 0);
    m.hp.arch = arch_find("gpt-oss", 7);
    assert_non_null(m.hp.arch);
    assert_int_equal(cuda_plan_weights(&m, &p, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "gpt-oss"));
    assert_non_null(strstr(err.msg, "attention sinks"));
    assert_null(p.slots);
}

static void test_budget(void **state)
{
    struct mf_err err = {0};
    uint64_t b = 0;
    (void)state;

    /* default 0.9: 90 GiB allowed, 20 GiB in use -> 70 GiB */
    assert_int_equal(cuda_plan_kv_budget(100 * GiB, 80 * GiB, NULL, 0, &b, &err), 0);
    assert_true(b > 70 * GiB - 1024 && b <= 70 * GiB);
    assert_int_equal(cuda_plan_kv_budget(100 * GiB, 80 * GiB, "", 0, &b, &err), 0);
    assert_true(b > 70 * GiB - 1024 && b <= 70 * GiB);
    /* 0.5 with 20 GiB in use -> 30 GiB */
    assert_int_equal(cuda_plan_kv_budget(100 * GiB, 80 * GiB, "0.5", 0, &b, &err), 0);
    assert_true(b > 30 * GiB - 1024 && b <= 30 * GiB);
    /* 1.0 never hands out more than is free */
    assert_int_equal(cuda_plan_kv_budget(100 * GiB, 10 * GiB, "1", 0, &b, &err), 0);
    assert_true(b <= 10 * GiB);
    /* an explicit byte budget wins */
    assert_int_equal(cuda_plan_kv_budget(100 * GiB, 80 * GiB, "0.1", 12345, &b, &err), 0);
    assert_int_equal(b, 12345);
    /* nothing left */
    b = 7;
    assert_int_equal(cuda_plan_kv_budget(100 * GiB, 40 * GiB, "0.5", 0, &b, &err), MF_ENOMEM);
    assert_non_null(strstr(err.msg, "MFC_GPU_MEMORY_UTILIZATION"));
    assert_int_equal(b, 7);
    /* bad settings */
    static const char *bad[] = {"abc", "0", "-0.5", "1.5", "0.9x", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(cuda_plan_kv_budget(100 * GiB, 80 * GiB, bad[i], 0, &b, &err), MF_EINVAL);
        assert_non_null(strstr(err.msg, bad[i]));
    }
}

/* MFC_CUDA_GEMM_MIN: default, 0 (off), a value; anything else refused by name. */
static void test_gemm_min(void **state)
{
    struct mf_err err = {0};
    int32_t n = -1;
    (void)state;
    assert_int_equal(cuda_plan_gemm_min(NULL, &n, &err), 0);
    assert_int_equal(n, CUDA_DEFAULT_GEMM_MIN);
    assert_int_equal(cuda_plan_gemm_min("", &n, &err), 0);
    assert_int_equal(n, CUDA_DEFAULT_GEMM_MIN);
    assert_int_equal(cuda_plan_gemm_min("0", &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cuda_plan_gemm_min("32", &n, &err), 0);
    assert_int_equal(n, 32);
    static const char *bad[] = {"abc", "-1", "5x", "1e3", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = 7;
        assert_int_equal(cuda_plan_gemm_min(bad[i], &n, &err), MF_EINVAL);
        assert_non_null(strstr(err.msg, bad[i]));
        assert_int_equal(n, 7);
    }
    /* where each weight type leaves the GEMV for cuBLAS */
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_BF16, 5, 1), 2);
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_F16, 1, 1), 1);
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_F32, 0, 1), 0);
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_Q4_K, 5, 1), CUDA_PLAN_MMQ_MAX + 1);
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_Q4_K, 5, 0), 5);
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_Q4_K, 100, 1), 100);
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_Q4_K, 0, 1), 0);
    assert_int_equal(cuda_plan_gemm_from(GGML_TYPE_Q6_K, 5, 1), 5);

    /* whether RMSNorm / SwiGLU write the products' 8-bit input */
    const enum ggml_type qkv[3] = {GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    const enum ggml_type q6[1] = {GGML_TYPE_Q6_K}, f16[2] = {GGML_TYPE_F16, GGML_TYPE_BF16};
    assert_true(cuda_plan_q8_input(3, qkv, 4096, 1, 512, 5, 1));   /* decode */
    assert_true(cuda_plan_q8_input(3, qkv, 4096, CUDA_PLAN_MMQ_MAX, 512, 5, 1)); /* mmq.cu */
    assert_false(cuda_plan_q8_input(3, qkv, 4096, CUDA_PLAN_MMQ_MAX + 1, 512, 5, 1)); /* cuBLAS */
    assert_false(cuda_plan_q8_input(3, qkv, 4096, 8, 512, 5, 0));  /* no mmq: all cuBLAS */
    assert_true(cuda_plan_q8_input(3, qkv, 4096, 4, 512, 5, 0));   /* below the GEMM */
    assert_true(cuda_plan_q8_input(1, q6, 14336, 4, 512, 5, 1));
    assert_false(cuda_plan_q8_input(1, q6, 14336, 5, 512, 5, 1));
    assert_true(cuda_plan_q8_input(1, q6, 14336, CUDA_PLAN_MMQ_MAX, 512, 0, 1)); /* GEMM never */
    /* the 8-bit buffer holds CUDA_PLAN_MMQ_MAX rows: past it the GEMV quantizes for itself */
    assert_false(cuda_plan_q8_input(1, q6, 14336, CUDA_PLAN_MMQ_MAX + 1, 512, 0, 1));
    assert_false(cuda_plan_q8_input(2, f16, 4096, 1, 512, 5, 1)); /* no K-quant */
    assert_false(cuda_plan_q8_input(3, qkv, 4096 + 32, 1, 512, 5, 1)); /* width */
    assert_false(cuda_plan_q8_input(3, qkv, 4096, 4, 2, 5, 1));        /* past the buffer */
    assert_false(cuda_plan_q8_input(3, qkv, 4096, 0, 512, 5, 1));

    /* whether SwiGLU rounds the down product's input for the GEMM itself */
    assert_true(cuda_plan_swiglu_rounded(GGML_TYPE_BF16, 2048, 5, 1, 0));  /* prefill */
    assert_true(cuda_plan_swiglu_rounded(GGML_TYPE_BF16, 2, 5, 1, 0));     /* BF16 batch */
    assert_false(cuda_plan_swiglu_rounded(GGML_TYPE_BF16, 1, 5, 1, 0));    /* decode: GEMV */
    assert_false(cuda_plan_swiglu_rounded(GGML_TYPE_BF16, 2048, 5, 1, 1)); /* an adapter */
    assert_false(cuda_plan_swiglu_rounded(GGML_TYPE_F32, 2048, 5, 1, 0));  /* float input */
    assert_true(cuda_plan_swiglu_rounded(GGML_TYPE_Q6_K, 5, 5, 1, 0));
    assert_false(cuda_plan_swiglu_rounded(GGML_TYPE_Q6_K, 4, 5, 1, 0));
    assert_false(cuda_plan_swiglu_rounded(GGML_TYPE_Q4_K, CUDA_PLAN_MMQ_MAX, 5, 1, 0)); /* mmq.cu */
    assert_true(cuda_plan_swiglu_rounded(GGML_TYPE_Q4_K, CUDA_PLAN_MMQ_MAX + 1, 5, 1, 0));
    assert_false(cuda_plan_swiglu_rounded(GGML_TYPE_Q4_K, 2048, 0, 1, 0)); /* no GEMM */

    assert_true(cuda_plan_norm_rounded(3, qkv, 64, 5, 1));                 /* qgemm.cu, bf16 */
    assert_false(cuda_plan_norm_rounded(3, qkv, CUDA_PLAN_MMQ_MAX, 5, 1)); /* Q4_K on mmq.cu */
    assert_false(cuda_plan_norm_rounded(3, qkv, 1, 5, 1));                 /* decode: GEMV */
    assert_false(cuda_plan_norm_rounded(3, qkv, 2048, 0, 1));              /* no GEMM */
    const enum ggml_type mixed[2] = {GGML_TYPE_BF16, GGML_TYPE_F16};
    assert_false(cuda_plan_norm_rounded(2, mixed, 2048, 5, 1)); /* bf16 and fp16 inputs */
    assert_true(cuda_plan_norm_rounded(1, mixed + 1, 2048, 5, 1));
    const enum ggml_type f32[2] = {GGML_TYPE_BF16, GGML_TYPE_F32};
    assert_false(cuda_plan_norm_rounded(2, f32, 2048, 5, 1)); /* a float input */
    assert_false(cuda_plan_norm_rounded(0, f32, 2048, 5, 1));
}

static void test_step(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct cuda_step_plan p;
    (void)state;
    fake_model(&m, L, GGML_TYPE_F16, 1);

    /* a 5-token prompt, a decode at position 17, a 3-token chunk at 32
     * that wants no logits (decode tiles off here: the per-token path;
     * test_decode_tiles* take them) */
    int32_t t0[5] = {1, 2, 3, 4, 5}, t1[1] = {9}, t2[3] = {7, 8, 6};
    int32_t b0[1] = {4}, b1[2] = {0, 6}, b2[3] = {1, 2, 3};
    struct batch_seq s[3] = {
        {.tokens = t0, .n_tokens = 5, .n_past = 0, .block_table = b0, .n_blocks = 1, .want_logits = 1},
        {.tokens = t1, .n_tokens = 1, .n_past = 17, .block_table = b1, .n_blocks = 2, .want_logits = 1},
        {.tokens = t2, .n_tokens = 3, .n_past = 32, .block_table = b2, .n_blocks = 3, .want_logits = 0},
    };
    struct batch bt = {.n_seqs = 3, .seqs = s};
    cuda_plan_step_size(&m, &bt, 1000, 0, &p);
    assert_int_equal(p.T, 9);
    assert_int_equal(p.n_out, 2);
    assert_int_equal(p.n_tables, 1 + 2 + 3);
    assert_int_equal(p.max_ctx, 35);
    assert_int_equal(p.n_tiles, 1); /* the prompt; the decode and the 3-token chunk one by one */
    assert_int_equal(p.n_single, 4);
    assert_int_equal(p.single_ctx, 35);
    size_t offs[] = {p.tok_id, p.tok_pos, p.tok_blk, p.tok_toff, p.out_rows, p.rope,
                     p.tiles, p.single, p.tables};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        assert_int_equal(offs[i] % CUDA_PLAN_ALIGN, 0);
        if (i)
            assert_true(offs[i] > offs[i - 1]);
    }
    assert_true(p.bytes >= p.tables + 6 * sizeof(int32_t));
    assert_int_equal(p.pad_blk, -1);
    assert_int_equal(p.att_cap, p.single_ctx);

    uint8_t *buf = malloc(p.bytes);
    assert_non_null(buf);
    memset(buf, 0xAB, p.bytes);
    cuda_plan_step_fill(&m, &bt, &p, buf);
    const int32_t *id = (const int32_t *)(buf + p.tok_id), *pos = (const int32_t *)(buf + p.tok_pos);
    const int32_t *blk = (const int32_t *)(buf + p.tok_blk), *toff = (const int32_t *)(buf + p.tok_toff);
    const int32_t *out = (const int32_t *)(buf + p.out_rows), *tab = (const int32_t *)(buf + p.tables);
    const float *rope = (const float *)(buf + p.rope);
    static const int32_t want_id[9] = {1, 2, 3, 4, 5, 9, 7, 8, 6};
    static const int32_t want_pos[9] = {0, 1, 2, 3, 4, 17, 32, 33, 34};
    static const int32_t want_blk[9] = {4, 4, 4, 4, 4, 6, 3, 3, 3};
    static const int32_t want_toff[9] = {0, 0, 0, 0, 0, 1, 3, 3, 3};
    static const int32_t want_tab[6] = {4, 0, 6, 1, 2, 3};
    assert_memory_equal(id, want_id, sizeof want_id);
    assert_memory_equal(pos, want_pos, sizeof want_pos);
    assert_memory_equal(blk, want_blk, sizeof want_blk);
    assert_memory_equal(toff, want_toff, sizeof want_toff);
    assert_memory_equal(tab, want_tab, sizeof want_tab);
    assert_int_equal(out[0], 4); /* last token of each sequence that wants logits */
    assert_int_equal(out[1], 5);
    for (int t = 0; t < 9; t++)
        for (int i = 0; i < 4; i++) {
            double th = want_pos[t] * pow(10000.0, -2.0 * i / 8);
            assert_true(fabs(rope[t * 8 + 2 * i] - cos(th)) < 1e-4);
            assert_true(fabs(rope[t * 8 + 2 * i + 1] - sin(th)) < 1e-4);
        }
    const int32_t *tiles = (const int32_t *)(buf + p.tiles), *single = (const int32_t *)(buf + p.single);
    assert_int_equal(tiles[0], 0);
    assert_int_equal(tiles[1], 5);
    static const int32_t want_single[4] = {5, 6, 7, 8};
    assert_memory_equal(single, want_single, sizeof want_single);
    free(buf);

    /* a per-token kernel that holds 20 positions: the chunk at 32 goes in a
     * tile; a 40-token prompt takes tiles of 16, 16 and 8 */
    int32_t t3[40] = {0}, b3[3] = {7, 8, 9};
    struct batch_seq s2[4] = {s[0], s[1], s[2],
                              {.tokens = t3, .n_tokens = 40, .n_past = 0, .block_table = b3,
                               .n_blocks = 3, .want_logits = 1}};
    bt = (struct batch){.n_seqs = 4, .seqs = s2};
    cuda_plan_step_size(&m, &bt, 20, 0, &p);
    assert_int_equal(p.n_tiles, 5);
    assert_int_equal(p.n_single, 1);
    assert_int_equal(p.single_ctx, 18);
    buf = malloc(p.bytes);
    assert_non_null(buf);
    cuda_plan_step_fill(&m, &bt, &p, buf);
    tiles = (const int32_t *)(buf + p.tiles), single = (const int32_t *)(buf + p.single);
    static const int32_t want_tiles[10] = {0, 5, 6, 3, 9, 16, 25, 16, 41, 8};
    assert_memory_equal(tiles, want_tiles, sizeof want_tiles);
    assert_int_equal(single[0], 5);
    free(buf);
}

/* Here (CI, the build machines) no GPU is visible, or CUDA is not linked:
 * the backend says so at create, and nothing is left allocated. */
static void test_no_device(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct backend_config cfg = {.kv_type = BACKEND_KV_F16};
    struct backend *be = (struct backend *)(void *)blob;
    struct mf_err err = {0};
    (void)state;

    if (cuda_device_count() > 0)
        skip(); /* a GPU host: tests/gpu/test_cuda covers the backend there */
    fake_model(&m, L, GGML_TYPE_F16, 1);
    assert_int_equal(backend_create(&cuda_backend_ops, &m, &cfg, &be, &err), MF_EUNSUPPORTED);
    assert_null(be);
    assert_true(strlen(err.msg) > 0);
    assert_string_equal(cuda_backend_ops.name, "cuda");
}

/* The 8-bit arena's block: a byte per element and a float scale per slot,
 * head and K or V (kernels.h); the CPU backend refuses it. */
static void test_kv8_bytes(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct backend_config cfg = {.kv_type = BACKEND_KV_Q8};
    struct backend *be = (struct backend *)(void *)blob;
    struct mf_err err = {0};
    (void)state;

    fake_model(&m, L, GGML_TYPE_F16, 1);
    /* 2 layers x K,V x 2 KV heads x 16 slots x (64 bytes + 4 for the scale) */
    assert_int_equal(backend_kv_block_bytes(&m, BACKEND_KV_Q8), 2 * 2 * 2 * 16 * (64 + 4));
    assert_int_equal(backend_kv_block_bytes(&m, BACKEND_KV_F16), 2 * 2 * 2 * 16 * 64 * 2);
    assert_int_equal(backend_kv_n_blocks(&m, BACKEND_KV_Q8, 3 * 8704 + 1), 3);
    assert_int_equal(backend_create(&cpu_backend_ops, &m, &cfg, &be, &err), MF_EUNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(err.msg, "CUDA only"));
}

/* MFC_KV_CACHE_TYPE=fp8: the 8-bit arena's layout with e4m3 bytes. Its
 * block is the int8 arena's (Llama-3-8B: 51.6% of F16's), the layer shapes
 * carry the flag the kernels read, the CUDA backend takes it and the CPU
 * backend refuses it. */
static void test_kv_fp8(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct mfk_kv_shape ks;
    struct backend_config cfg = {.kv_type = BACKEND_KV_FP8};
    struct backend *be = (struct backend *)(void *)blob;
    struct mf_err err = {0};
    (void)state;

    fake_model(&m, L, GGML_TYPE_F16, 1);
    assert_int_equal(backend_kv_block_bytes(&m, BACKEND_KV_FP8), 2 * 2 * 2 * 16 * (64 + 4));
    assert_int_equal(backend_kv_block_bytes(&m, BACKEND_KV_FP8),
                     backend_kv_block_bytes(&m, BACKEND_KV_Q8));
    for (int k = 0; k < 4; k++) {
        static const enum backend_kv_type kinds[] = {BACKEND_KV_F16, BACKEND_KV_Q8, BACKEND_KV_FP8,
                                                     BACKEND_KV_F32};
        assert_int_equal(cuda_plan_kv_ok(kinds[k]), k < 3);
        assert_int_equal(cuda_plan_layer_shape(&m, 1, kinds[k], &ks), 0);
        assert_int_equal(ks.q8, k == 1 || k == 2);
        assert_int_equal(ks.fp8, k == 2);
        assert_int_equal(ks.n_head_kv, 2);
        assert_int_equal(ks.head_dim, 64);
    }
    assert_false(cuda_plan_kv_ok((enum backend_kv_type)7));
    /* Llama-3-8B: 32 layers x K,V x 8 KV heads x 16 slots x (128 + 4) bytes */
    m.hp.n_layer = 32, m.hp.n_head_kv = 8, m.hp.n_head = 32, m.hp.head_dim = 128;
    assert_int_equal(backend_kv_block_bytes(&m, BACKEND_KV_FP8), 1081344);
    assert_int_equal(backend_kv_block_bytes(&m, BACKEND_KV_F16), 2097152);
    assert_int_equal(backend_kv_n_blocks(&m, BACKEND_KV_FP8, 10 * GiB), 9929);
    assert_int_equal(backend_kv_n_blocks(&m, BACKEND_KV_F16, 10 * GiB), 5120);
    fake_model(&m, L, GGML_TYPE_F16, 1);
    assert_int_equal(backend_create(&cpu_backend_ops, &m, &cfg, &be, &err), MF_EUNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(err.msg, "FP8 K/V are CUDA only"));
#ifdef MFC_HAVE_CUDA_RUNTIME
    /* the kind is checked before the device: F32 is refused naming the three */
    cfg.kv_type = BACKEND_KV_F32;
    be = (struct backend *)(void *)blob;
    assert_int_equal(backend_create(&cuda_backend_ops, &m, &cfg, &be, &err), MF_EUNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(err.msg, "F16, 8-bit integers or FP8 (e4m3)"));
#endif
}

/* The FlashDecoding split: none once T x KV heads fill the multiprocessors
 * or for short contexts; else about two blocks per multiprocessor, never
 * fewer than CUDA_PLAN_SPLIT_BLOCKS KV blocks a split. */
static void test_att_splits(void **state)
{
    struct mf_err err = {0};
    int on = -1;
    (void)state;
    /* batch 1 of Llama 3 (8 KV heads) on 132 SMs, 513-token context: 33
     * blocks of 16, so at most 8 splits of 4 */
    assert_int_equal(cuda_plan_att_splits(1, 8, 132, 513), 8);
    /* a long context: ceil(264 / 8) = 33 splits */
    assert_int_equal(cuda_plan_att_splits(1, 8, 132, 8192), 33);
    assert_int_equal(cuda_plan_att_splits(4, 8, 132, 8192), 9);
    /* 17 x 8 = 136 blocks fill 132 SMs: no split */
    assert_int_equal(cuda_plan_att_splits(17, 8, 132, 8192), 1);
    assert_int_equal(cuda_plan_att_splits(16, 8, 132, 8192), 3);
    /* fewer than 2 x 4 KV blocks: no split */
    assert_int_equal(cuda_plan_att_splits(1, 8, 132, 112), 1);
    assert_int_equal(cuda_plan_att_splits(1, 8, 132, 113), 2);
    /* nothing to split, or no device figure */
    assert_int_equal(cuda_plan_att_splits(0, 8, 132, 4096), 1);
    assert_int_equal(cuda_plan_att_splits(1, 8, 0, 4096), 1);
    for (int32_t ctx = 1; ctx < 20000; ctx += 97) {
        int32_t sp = cuda_plan_att_splits(1, 1, 132, ctx), nblk = (ctx + 15) / 16;
        assert_true(sp >= 1 && sp <= 264);
        assert_true(sp == 1 || nblk / sp >= CUDA_PLAN_SPLIT_BLOCKS);
    }
    assert_int_equal(cuda_plan_switch("MFC_CUDA_ATTENTION_SPLIT", NULL, 1, &on, &err), 0);
    assert_int_equal(on, 1);
    assert_int_equal(cuda_plan_switch("MFC_CUDA_ATTENTION_SPLIT", "0", 1, &on, &err), 0);
    assert_int_equal(on, 0);
    assert_int_equal(cuda_plan_switch("MFC_CUDA_GRAPHS", "1", 1, &on, &err), 0);
    assert_int_equal(on, 1);
    assert_int_equal(cuda_plan_switch("MFC_CUDA_GRAPHS", "yes", 1, &on, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "MFC_CUDA_GRAPHS"));
    assert_non_null(strstr(err.msg, "yes"));
    /* a switch off by default: unset and "" keep it off, "1" turns it on */
    assert_int_equal(cuda_plan_switch("MFC_CUDA_BF16_WEIGHTS", NULL, 0, &on, &err), 0);
    assert_int_equal(on, 0);
    assert_int_equal(cuda_plan_switch("MFC_CUDA_BF16_WEIGHTS", "", 0, &on, &err), 0);
    assert_int_equal(on, 0);
    assert_int_equal(cuda_plan_switch("MFC_CUDA_BF16_WEIGHTS", "1", 0, &on, &err), 0);
    assert_int_equal(on, 1);
    assert_int_equal(cuda_plan_switch("MFC_CUDA_BF16_WEIGHTS", "on", 0, &on, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "off by default"));
}

/* LoRA rows grouped by adapter: every sequence naming an adapter lands in
 * its group in step order, with its own scale (summed when it names the
 * adapter twice); groups in adapter order; a one-sequence group's rows
 * consecutive. */
static void test_lora_groups(void **state)
{
    struct batch_lora l0 = {.n = 1, .ids = {2}, .scales = {0.5f}};
    struct batch_lora l1 = {.n = 2, .ids = {0, 2}, .scales = {1.0f, 0.25f}};
    struct batch_lora l2 = {.n = 2, .ids = {2, 2}, .scales = {0.5f, 0.75f}};
    struct cuda_lora_rows seqs[3] = {{0, 3, &l0}, {5, 1, &l1}, {9, 2, &l2}};
    struct cuda_lora_group g[3];
    int32_t rows[16];
    float sc[16];
    (void)state;
    assert_int_equal(cuda_plan_lora_groups(seqs, 3, 3, g, rows, sc), 2);
    /* adapter 0: sequence 1's row 5 */
    assert_int_equal(g[0].lora, 0);
    assert_int_equal(g[0].first, 0);
    assert_int_equal(g[0].n, 1);
    assert_int_equal(g[0].seqs, 1);
    assert_int_equal(rows[0], 5);
    assert_true(sc[0] == 1.0f);
    /* adapter 2: rows 0-2 (0.5), 5 (0.25), 9-10 (0.5 + 0.75) */
    assert_int_equal(g[1].lora, 2);
    assert_int_equal(g[1].first, 1);
    assert_int_equal(g[1].n, 6);
    assert_int_equal(g[1].seqs, 3);
    static const int32_t want[6] = {0, 1, 2, 5, 9, 10};
    static const float wsc[6] = {0.5f, 0.5f, 0.5f, 0.25f, 1.25f, 1.25f};
    assert_memory_equal(rows + 1, want, sizeof want);
    assert_memory_equal(sc + 1, wsc, sizeof wsc);
    /* adapters past n_loras are not grouped; no sequences, no groups */
    assert_int_equal(cuda_plan_lora_groups(seqs, 3, 2, g, rows, sc), 1);
    assert_int_equal(cuda_plan_lora_groups(seqs, 0, 3, g, rows, sc), 0);
}

/* Decode steps as CUDA graphs: token counts padded to 1, 2, 4, 8k; two
 * decode batches of one padded size share every offset but the tables'
 * size, and the padding is token 0 at position 0 of the padding block. */
static void test_graph_pad(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct cuda_step_plan p, q;
    (void)state;
    fake_model(&m, L, GGML_TYPE_F16, 1);

    static const int32_t want[][2] = {{1, 1}, {2, 2}, {3, 4}, {4, 4},    {5, 8},
                                      {8, 8}, {9, 16}, {64, 64}, {250, 256}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_int_equal(cuda_plan_graph_tokens(want[i][0], 1000), want[i][1]);
    assert_int_equal(cuda_plan_graph_tokens(0, 1000), 0);
    assert_int_equal(cuda_plan_graph_tokens(257, 1000), 0); /* past CUDA_PLAN_GRAPH_MAX */
    assert_int_equal(cuda_plan_graph_tokens(61, 63), 0);    /* 64 passes the caller's cap */
    assert_int_equal(cuda_plan_graph_tokens(61, 64), 64);

    /* three decodes (contexts 18, 300 and 40), the middle one wanting no
     * logits; then two decodes with other contexts and tables (per-token
     * attention: decode tiles off) */
    int32_t t[3] = {9, 8, 7}, b0[2] = {5, 6}, b1[19], b2[3] = {1, 2, 3};
    for (int i = 0; i < 19; i++)
        b1[i] = 10 + i;
    struct batch_seq s[3] = {
        {.tokens = t, .n_tokens = 1, .n_past = 17, .block_table = b0, .n_blocks = 2, .want_logits = 1},
        {.tokens = t + 1, .n_tokens = 1, .n_past = 299, .block_table = b1, .n_blocks = 19,
         .want_logits = 0},
        {.tokens = t + 2, .n_tokens = 1, .n_past = 39, .block_table = b2, .n_blocks = 3,
         .want_logits = 1},
    };
    struct batch bt = {.n_seqs = 3, .seqs = s};
    cuda_plan_step_size(&m, &bt, 1000, 0, &p);
    assert_int_equal(p.n_tiles, 0);
    cuda_plan_step_pad(&m, &p, cuda_plan_graph_tokens(p.T, 1000), 99);
    assert_int_equal(p.T, 4);
    assert_int_equal(p.n_real, 3);
    assert_int_equal(p.n_out, 4);
    assert_int_equal(p.out_real, 2);
    assert_int_equal(p.n_single, 4);
    assert_int_equal(p.n_tables, 2 + 19 + 3 + 1);
    assert_int_equal(p.single_ctx, 300);
    assert_int_equal(p.att_cap, 512); /* rounded up to CUDA_PLAN_GRAPH_CTX */

    struct batch_seq s2[3] = {s[0], s[2], s[2]};
    s2[0].n_past = 3;
    s2[1].n_past = 45;
    bt = (struct batch){.n_seqs = 2, .seqs = s2};
    cuda_plan_step_size(&m, &bt, 1000, 0, &q);
    cuda_plan_step_pad(&m, &q, cuda_plan_graph_tokens(q.T, 1000), 99);
    assert_int_equal(q.T, 2);
    assert_int_equal(q.att_cap, 256);
    bt.n_seqs = 3; /* 3 tokens again, shorter contexts: the same offsets */
    cuda_plan_step_size(&m, &bt, 1000, 0, &q);
    cuda_plan_step_pad(&m, &q, cuda_plan_graph_tokens(q.T, 1000), 99);
    assert_int_equal(q.T, 4);
    assert_int_equal(q.att_cap, 256);
    size_t po[] = {p.tok_id, p.tok_pos, p.tok_blk, p.tok_toff, p.out_rows, p.rope, p.single, p.tables};
    size_t qo[] = {q.tok_id, q.tok_pos, q.tok_blk, q.tok_toff, q.out_rows, q.rope, q.single, q.tables};
    assert_memory_equal(po, qo, sizeof po);
    assert_int_equal(q.n_tables, 1 + 3 + 3 + 1);
    assert_true(q.bytes <= p.bytes);
    /* the cap is the kernel's when rounding passes it */
    bt = (struct batch){.n_seqs = 3, .seqs = s};
    cuda_plan_step_size(&m, &bt, 310, 0, &q);
    cuda_plan_step_pad(&m, &q, 4, 99);
    assert_int_equal(q.att_cap, 310);

    uint8_t *buf = malloc(p.bytes);
    assert_non_null(buf);
    memset(buf, 0xAB, p.bytes);
    bt = (struct batch){.n_seqs = 3, .seqs = s};
    cuda_plan_step_fill(&m, &bt, &p, buf);
    const int32_t *id = (const int32_t *)(buf + p.tok_id), *pos = (const int32_t *)(buf + p.tok_pos);
    const int32_t *blk = (const int32_t *)(buf + p.tok_blk), *toff = (const int32_t *)(buf + p.tok_toff);
    const int32_t *out = (const int32_t *)(buf + p.out_rows), *tab = (const int32_t *)(buf + p.tables);
    const int32_t *single = (const int32_t *)(buf + p.single);
    const float *rope = (const float *)(buf + p.rope);
    static const int32_t want_id[4] = {9, 8, 7, 0}, want_pos[4] = {17, 299, 39, 0};
    static const int32_t want_blk[4] = {6, 28, 3, 99}, want_toff[4] = {0, 2, 21, 24};
    static const int32_t want_out[4] = {0, 2, 3, 3}, want_single[4] = {0, 1, 2, 3};
    assert_memory_equal(id, want_id, sizeof want_id);
    assert_memory_equal(pos, want_pos, sizeof want_pos);
    assert_memory_equal(blk, want_blk, sizeof want_blk);
    assert_memory_equal(toff, want_toff, sizeof want_toff);
    assert_memory_equal(out, want_out, sizeof want_out);
    assert_memory_equal(single, want_single, sizeof want_single);
    assert_int_equal(tab[24], 99);
    assert_int_equal(tab[23], 3);
    for (int i = 0; i < 4; i++) { /* position 0: cos 1, sin 0 */
        assert_true(rope[3 * 8 + 2 * i] == 1.0f);
        assert_true(rope[3 * 8 + 2 * i + 1] == 0.0f);
    }
    free(buf);
}

/* The split combine writes the output projection's 8-bit input only when
 * every token is split, and up to CUDA_PLAN_COMBINE_Q8_MAX tokens. */
/* A verify step (speculative decoding): a decode token and its 4 proposals
 * want 5 logits rows, attended one token at a time as decodes are (not in
 * a tile, whatever the count), so the step pads and records like a decode
 * step; its rows follow the sequence's tokens in order. */
static void test_verify_step(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct cuda_step_plan p;
    (void)state;
    fake_model(&m, L, GGML_TYPE_F16, 1);

    int32_t t0[5] = {3, 4, 5, 6, 7}, t1[1] = {9}, b0[2] = {2, 5}, b1[1] = {8};
    struct batch_seq s[2] = {
        {.tokens = t0, .n_tokens = 5, .n_past = 14, .block_table = b0, .n_blocks = 2,
         .want_logits = 5},
        {.tokens = t1, .n_tokens = 1, .n_past = 3, .block_table = b1, .n_blocks = 1,
         .want_logits = 1},
    };
    struct batch bt = {.n_seqs = 2, .seqs = s};
    cuda_plan_step_size(&m, &bt, 1000, 0, &p);
    assert_int_equal(p.T, 6);
    assert_int_equal(p.n_out, 6);
    assert_int_equal(p.n_tiles, 0);
    assert_int_equal(p.n_single, 6);
    assert_int_equal(p.single_ctx, 19);
    cuda_plan_step_pad(&m, &p, cuda_plan_graph_tokens(p.T, 64), 99);
    assert_int_equal(p.T, 8);
    assert_int_equal(p.n_out, 8);
    assert_int_equal(p.out_real, 6);
    uint8_t *buf = malloc(p.bytes);
    assert_non_null(buf);
    cuda_plan_step_fill(&m, &bt, &p, buf);
    const int32_t *out = (const int32_t *)(buf + p.out_rows);
    const int32_t *pos = (const int32_t *)(buf + p.tok_pos);
    static const int32_t want_out[8] = {0, 1, 2, 3, 4, 5, 7, 7};
    static const int32_t want_pos[6] = {14, 15, 16, 17, 18, 3};
    assert_memory_equal(out, want_out, sizeof want_out);
    assert_memory_equal(pos, want_pos, sizeof want_pos);
    free(buf);
    /* a prompt chunk of 5 tokens wanting its last row is still tiled; a
     * verify of more than CUDA_PLAN_VERIFY_MAX tokens is too */
    s[0].want_logits = 1;
    cuda_plan_step_size(&m, &bt, 1000, 0, &p);
    assert_int_equal(p.n_tiles, 1);
    assert_int_equal(p.n_out, 2);
    int32_t t2[CUDA_PLAN_VERIFY_MAX + 1] = {0}, b2[3] = {1, 2, 3};
    struct batch_seq big = {.tokens = t2, .n_tokens = CUDA_PLAN_VERIFY_MAX + 1, .n_past = 0,
                            .block_table = b2, .n_blocks = 3,
                            .want_logits = CUDA_PLAN_VERIFY_MAX + 1};
    bt = (struct batch){.n_seqs = 1, .seqs = &big};
    cuda_plan_step_size(&m, &bt, 1000, 0, &p);
    assert_int_equal(p.n_tiles, 2);
    assert_int_equal(p.n_out, CUDA_PLAN_VERIFY_MAX + 1);
}

static void test_combine_q8(void **state)
{
    (void)state;
    assert_true(cuda_plan_combine_q8(1, 0, 16));
    assert_true(cuda_plan_combine_q8(CUDA_PLAN_COMBINE_Q8_MAX, 0, 2));
    assert_false(cuda_plan_combine_q8(CUDA_PLAN_COMBINE_Q8_MAX + 1, 0, 2));
    assert_false(cuda_plan_combine_q8(1, 0, 1)); /* unsplit: the kernel writes no copy */
    assert_false(cuda_plan_combine_q8(4, 1, 8)); /* a tile's tokens bypass the combine */
    assert_false(cuda_plan_combine_q8(0, 0, 8));
}

/* Past CUDA_PLAN_DECODE_TILES one-at-a-time tokens, each takes a 1-token
 * tile (not at the limit, not with the switch off, not a prompt's tokens);
 * a padded step pads with tiles too, and the offsets follow the counts.
 * Heads of 80 dimensions (k_tiles'), so the small-batch rule stays out. */
static void test_decode_tiles(void **state)
{
    enum { N = CUDA_PLAN_DECODE_TILES + 1 };
    struct model m;
    struct model_layer L[2];
    struct cuda_step_plan p;
    int32_t tok[N + 5] = {0}, tab[N][2];
    struct batch_seq s[N + 1];
    const struct batch_seq prompt = {.tokens = tok,
                                     .n_tokens = 5,
                                     .n_past = 0,
                                     .block_table = tab[0],
                                     .n_blocks = 1,
                                     .want_logits = 1};
    (void)state;
    fake_model(&m, L, GGML_TYPE_F16, 1);
    m.hp.head_dim = 80;
    for (int i = 0; i < N; i++) {
        tab[i][0] = 2 * i, tab[i][1] = 2 * i + 1;
        s[i] = (struct batch_seq){.tokens = tok + i,
                                  .n_tokens = 1,
                                  .n_past = 16 + i % 16, /* two blocks */
                                  .block_table = tab[i],
                                  .n_blocks = 2,
                                  .want_logits = 1};
    }
    s[N] = prompt;
    struct batch bt = {.n_seqs = N, .seqs = s};
    cuda_plan_step_size(&m, &bt, 1000, 1, &p);
    assert_int_equal(p.dtiles, 1);
    assert_int_equal(p.n_tiles, N);
    assert_int_equal(p.n_long, 0);
    assert_int_equal(cuda_plan_tiles_decode(&p), 2); /* k_flash_dec alone */
    assert_int_equal(p.n_single, 0);
    assert_int_equal(p.single_ctx, 0);
    uint8_t *buf = malloc(p.bytes);
    assert_non_null(buf);
    cuda_plan_step_fill(&m, &bt, &p, buf);
    const int32_t *tiles = (const int32_t *)(buf + p.tiles);
    for (int i = 0; i < N; i++) {
        assert_int_equal(tiles[2 * i], i);
        assert_int_equal(tiles[2 * i + 1], 1);
    }
    free(buf);

    cuda_plan_step_size(&m, &bt, 1000, 0, &p); /* MFC_CUDA_DECODE_TILES=0 */
    assert_int_equal(p.dtiles, 0);
    assert_int_equal(p.n_tiles, 0);
    assert_int_equal(p.n_single, N);
    assert_int_equal(cuda_plan_tiles_decode(&p), 0);
    bt.n_seqs = N - 1; /* at the limit: one at a time */
    cuda_plan_step_size(&m, &bt, 1000, 1, &p);
    assert_int_equal(p.dtiles, 0);
    assert_int_equal(p.n_single, N - 1);

    /* with a prompt: its tile of 5, and a tile each for the others */
    s[N - 1] = prompt;
    bt.n_seqs = N;
    cuda_plan_step_size(&m, &bt, 1000, 1, &p);
    assert_int_equal(p.dtiles, 0); /* N - 1 one-at-a-time tokens */
    s[N - 1].n_tokens = 1, s[N - 1].n_past = 3;
    s[N] = prompt;
    bt.n_seqs = N + 1;
    cuda_plan_step_size(&m, &bt, 1000, 1, &p);
    assert_int_equal(p.dtiles, 1);
    assert_int_equal(p.n_tiles, N + 1);
    assert_int_equal(p.n_long, 1);
    assert_int_equal(cuda_plan_tiles_decode(&p), 1); /* both kernels */
    buf = malloc(p.bytes);
    assert_non_null(buf);
    cuda_plan_step_fill(&m, &bt, &p, buf);
    tiles = (const int32_t *)(buf + p.tiles);
    assert_int_equal(tiles[2 * N], N);
    assert_int_equal(tiles[2 * N + 1], 5);
    free(buf);

    /* padded: N tokens to the next recorded count, the padding in tiles */
    bt.n_seqs = N;
    cuda_plan_step_size(&m, &bt, 1000, 1, &p);
    const int32_t T = cuda_plan_graph_tokens(N, 1000);
    assert_true(T > N);
    cuda_plan_step_pad(&m, &p, T, 99);
    assert_int_equal(p.n_tiles, T);
    assert_int_equal(p.n_single, 0);
    buf = malloc(p.bytes);
    assert_non_null(buf);
    cuda_plan_step_fill(&m, &bt, &p, buf);
    tiles = (const int32_t *)(buf + p.tiles);
    const int32_t *pos = (const int32_t *)(buf + p.tok_pos),
                  *blk = (const int32_t *)(buf + p.tok_blk);
    for (int t = N; t < T; t++) {
        assert_int_equal(tiles[2 * t], t);
        assert_int_equal(tiles[2 * t + 1], 1);
        assert_int_equal(pos[t], 0);
        assert_int_equal(blk[t], 99);
    }
    assert_true(p.tiles < p.single && p.single <= p.tables);
    free(buf);
}

/* From CUDA_PLAN_DECODE_TILES_MIN one-at-a-time tokens, each takes a tile
 * while the contexts are at most CUDA_PLAN_DECODE_TILES_CTX, for heads
 * k_flash_dec takes; 8 of its warps a block while the grid fits on the
 * multiprocessors. */
static void test_decode_tiles_small(void **state)
{
    enum { N = CUDA_PLAN_DECODE_TILES_MIN, NB = CUDA_PLAN_DECODE_TILES_CTX / 16 + 1 };
    struct model m;
    struct model_layer L[2];
    struct cuda_step_plan p;
    static int32_t tab[N][NB];
    int32_t tok[N] = {0};
    struct batch_seq s[N];
    (void)state;
    fake_model(&m, L, GGML_TYPE_F16, 1);
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < NB; k++)
            tab[i][k] = i * NB + k;
        s[i] = (struct batch_seq){.tokens = tok + i,
                                  .n_tokens = 1,
                                  .n_past = CUDA_PLAN_DECODE_TILES_CTX - 1, /* at the limit */
                                  .block_table = tab[i],
                                  .n_blocks = NB,
                                  .want_logits = 1};
    }
    struct batch bt = {.n_seqs = N, .seqs = s};
    cuda_plan_step_size(&m, &bt, 100000, 1, &p);
    assert_int_equal(p.dtiles, 1);
    assert_int_equal(p.n_tiles, N);
    assert_int_equal(cuda_plan_tiles_decode(&p), 2);
    cuda_plan_step_size(&m, &bt, 100000, 0, &p); /* the switch off */
    assert_int_equal(p.dtiles, 0);
    bt.n_seqs = N - 1; /* too few: the split per-token kernel */
    cuda_plan_step_size(&m, &bt, 100000, 1, &p);
    assert_int_equal(p.dtiles, 0);
    assert_int_equal(p.n_single, N - 1);
    bt.n_seqs = N;
    s[1].n_past = CUDA_PLAN_DECODE_TILES_CTX; /* one context past the limit */
    cuda_plan_step_size(&m, &bt, 100000, 1, &p);
    assert_int_equal(p.dtiles, 0);
    assert_int_equal(p.n_single, N);
    s[1].n_past = 3;
    m.hp.head_dim = 80; /* k_tiles' heads */
    cuda_plan_step_size(&m, &bt, 100000, 1, &p);
    assert_int_equal(p.dtiles, 0);
    m.hp.head_dim = 128;
    cuda_plan_step_size(&m, &bt, 100000, 1, &p);
    assert_int_equal(p.dtiles, 1);

    /* Llama-3-8B's heads (32 over 8 KV heads of 128), 12 / warps blocks a
     * multiprocessor: 512-token contexts (32 KV blocks), by waves x share */
#define DW(tiles, ctx, sms) cuda_plan_dec_warps(tiles, 32, 8, 128, ctx, sms)
    assert_int_equal(DW(1, 512, 132), 8);
    assert_int_equal(DW(16, 512, 132), 8);  /* 128 blocks: one wave of 8 warps (share 4) */
    assert_int_equal(DW(17, 512, 132), 6);  /* 136: one of 264 (share 6) */
    assert_int_equal(DW(33, 512, 132), 6);  /* 264 */
    assert_int_equal(DW(34, 512, 132), 4);  /* 272: one of 396 (share 8) */
    assert_int_equal(DW(64, 512, 132), 3);  /* 512: one of 528 (share 11) */
    assert_int_equal(DW(67, 512, 132), 4);  /* 536: two of 528, one of 792 */
    assert_int_equal(DW(100, 512, 132), 3); /* 800: three of 396, two of 528 */
    /* a share of 32 blocks x 4 rows fills the stash (128 x 16 floats);
     * past it a share costs twice */
    assert_int_equal(DW(64, 1536, 132), 3); /* 96 blocks: 32 a warp of 3 */
    assert_int_equal(DW(64, 1537, 132), 6); /* 97: 3 overflow; two waves of 17 */
    assert_int_equal(DW(64, 2000, 132), 6);
    assert_int_equal(DW(64, 8192, 132), 3); /* no count keeps it: 171 against 6's 2 x 86 */
    assert_int_equal(DW(40, 24, 132), 3);   /* one wave and one block a warp: a tie, the fewest */
    /* 16 query heads a KV head (a pass's rows): 3 warps' share of 11 overflows */
    assert_int_equal(cuda_plan_dec_warps(64, 128, 8, 128, 512, 132), 6);
    assert_int_equal(cuda_plan_dec_warps(64, 128, 8, 128, 128, 132), 3);
    assert_int_equal(cuda_plan_dec_warps(132, 8, 1, 128, 512, 132), 8);
    assert_int_equal(cuda_plan_dec_warps(133, 8, 1, 128, 512, 132), 6);
    assert_int_equal(DW(16, 512, 0), 4);            /* 0 multiprocessors taken as 1 */
    assert_int_equal(DW(1 << 30, 1 << 30, 132), 4); /* no overflow */
    assert_int_equal(cuda_plan_dec_warps(4, 8, 0, 128, 0, 132), 3); /* no KV heads, no context */
#undef DW
}

/* Plans packed for mfk_sample: fields and offsets, and every plan the
 * kernel cannot take refused with the draw named. */
static void test_draws(void **state)
{
    struct sampler_adjust a0[2] = {{3, 2, 0.5f}, {9, 0, -INFINITY}}, a1[1] = {{0, 1, 0.0f}};
    struct sampler_draw d[3] = {
        {.u = 0.25, .temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .repeat_penalty = 1.1f,
         .n_adjust = 2, .adjust = a0},
        {.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f},
        {.u = 0.5, .temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f, .frequency_penalty = 0.3f,
         .n_adjust = 1, .adjust = a1},
    };
    struct mfk_draw hd[3];
    struct mfk_adjust ha[3 * MFK_SAMPLE_ADJUST];
    struct mf_err err = {0};
    size_t na = 99;
    (void)state;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), 0);
    assert_int_equal(na, 3);
    assert_true(hd[0].u == 0.25 && hd[0].temperature == 0.8f && hd[0].top_k == 40);
    assert_true(hd[0].top_p == 0.9f && hd[0].repeat_penalty == 1.1f);
    assert_int_equal(hd[0].adj_off, 0);
    assert_int_equal(hd[0].n_adj, 2);
    assert_int_equal(hd[1].n_adj, 0);
    assert_int_equal(hd[2].adj_off, 2);
    assert_true(hd[2].min_p == 0.05f && hd[2].frequency_penalty == 0.3f);
    assert_int_equal(ha[1].token, 9);
    assert_true(isinf(ha[1].bias) && ha[1].bias < 0);
    assert_int_equal(ha[2].token, 0);
    assert_int_equal(ha[2].count, 1);
    /* a token past the vocabulary, twice, or out of order: refused */
    a0[1].token = 10;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "device draw 0: adjust token 10"));
    a0[1].token = 3;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), MF_EINVAL);
    a0[1].token = 2;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), MF_EINVAL);
    a0[1].token = 9;
    a1[0].token = -1;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "device draw 2"));
    a1[0].token = 0;
    /* past the kernel's limits */
    d[1].top_k = MFK_SAMPLE_TOP_K + 1;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "device draw 1"));
    d[1].top_k = MFK_SAMPLE_TOP_K;
    d[2].n_adjust = MFK_SAMPLE_ADJUST + 1;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), MF_EINVAL);
    d[2].n_adjust = -1;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), MF_EINVAL);
    d[2].n_adjust = 1;
    assert_int_equal(cuda_plan_draws(d, 3, 10, hd, ha, &na, &err), 0);
    /* the limits agree with the sampler's contract */
    assert_int_equal(MFK_SAMPLE_TOP_K, SAMPLER_DRAW_MAX_TOP_K);
    assert_int_equal(MFK_SAMPLE_ADJUST, SAMPLER_DRAW_MAX_ADJUST);
    /* no grammar: no mask; grammar masks packed one after another (40 tokens:
       2 words a row), each row pointing at its own */
    assert_true(hd[0].mask_off < 0 && hd[1].mask_off < 0 && hd[2].mask_off < 0);
    uint32_t m0[2] = {0x5u, 0x80u}, m2[2] = {0xffffffffu, 0x1u}, hm[6];
    size_t nm = 99;
    assert_int_equal(cuda_plan_masks(d, 3, 40, hd, hm, &nm), 0);
    assert_int_equal(nm, 0);
    d[0].allow = m0;
    d[2].allow = m2;
    assert_int_equal(cuda_plan_draws(d, 3, 40, hd, ha, &na, &err), 0);
    assert_int_equal(cuda_plan_masks(d, 3, 40, hd, hm, &nm), 1);
    assert_int_equal(cuda_plan_mask_words(40), 2);
    assert_int_equal(nm, 4);
    assert_int_equal(hd[0].mask_off, 0);
    assert_true(hd[1].mask_off < 0);
    assert_int_equal(hd[2].mask_off, 2);
    assert_true(hm[0] == 0x5u && hm[1] == 0x80u && hm[2] == 0xffffffffu && hm[3] == 0x1u);
}

/* MFC_CUDA_QGEMM_MAX as MFC_CUDA_GEMM_MIN is read; qgemm.cu's K split:
 * clusters of 2, 4 or 8 while the tiles leave multiprocessors idle, each
 * block keeping 2 stages. Llama-3-8B on 132 SMs at 64 tokens (one token
 * tile): Q4_K q/o (32 row tiles, 16 stages) 4, k/v (8 tiles) 8, gate/up
 * (112) none, down (32 tiles, 56 stages) 4; Q6_K (64 rows a tile, pairs
 * of super-blocks) v (16, 8 stages) 4, down (64, 28) 2, output (2004) none. */
static void test_qgemm_plan(void **state)
{
    struct mf_err err = {0};
    int32_t n = -1;
    (void)state;
    assert_int_equal(cuda_plan_qgemm_max(NULL, &n, &err), 0);
    assert_int_equal(n, MFK_QGEMM_MAX_TOKENS);
    assert_int_equal(cuda_plan_qgemm_max("0", &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cuda_plan_qgemm_max("64", &n, &err), 0);
    assert_int_equal(n, 64);
    static const char *bad[] = {"-3", "abc", "64x", "1e2", " 8", "1000001", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = 9;
        assert_int_equal(cuda_plan_qgemm_max(bad[i], &n, &err), MF_EINVAL);
        assert_non_null(strstr(err.msg, "MFC_CUDA_QGEMM_MAX"));
        assert_non_null(strstr(err.msg, bad[i]));
        assert_int_equal(n, 9); /* untouched */
    }

    assert_int_equal(mfk_qgemm_splits(32, 1, 16, 132, 8), 4);
    assert_int_equal(mfk_qgemm_splits(8, 1, 16, 132, 8), 8);
    assert_int_equal(mfk_qgemm_splits(8, 1, 8, 132, 8), 4); /* 2 stages a block at least */
    assert_int_equal(mfk_qgemm_splits(112, 1, 16, 132, 8), 1);
    assert_int_equal(mfk_qgemm_splits(32, 1, 56, 132, 8), 4);
    assert_int_equal(mfk_qgemm_splits(16, 1, 8, 132, 8), 4);
    assert_int_equal(mfk_qgemm_splits(64, 1, 28, 132, 8), 2);
    assert_int_equal(mfk_qgemm_splits(2004, 1, 8, 132, 8), 1);
    assert_int_equal(mfk_qgemm_splits(32, 2, 16, 132, 8), 2); /* two token tiles */
    assert_int_equal(mfk_qgemm_splits(1, 1, 1000, 132, 8), 8); /* the cluster limit */
    assert_int_equal(mfk_qgemm_splits(1, 1, 1000, 132, 4), 4); /* the device's */
    assert_int_equal(mfk_qgemm_splits(1, 1, 1000, 132, 1), 1);
    assert_int_equal(mfk_qgemm_splits(3, 1, 3, 132, 8), 1); /* too few stages to share */
}

/* Stream-K's plan (mfk_qgemm_sk_blocks) for Llama-3-8B at 64 tokens on an
 * H200 (132 SMs; Q4_K two blocks a multiprocessor, 264 places, Q6_K one):
 * gate/up alone (112 tiles, 16 stages: 224 clustered blocks, 85% of a
 * wave) on every place; q/o (256 blocks), the Q4_K down (256) and the
 * Q6_K down (128) and output (2004 tiles, 95%) stay clustered; k/v alone
 * (64 clustered blocks) too, since stream-K would cut their work the same
 * way; products sharing a launch always stream-K, while their tiles fit
 * the counters. */
static void test_qgemm_sk_plan(void **state)
{
    (void)state;
    assert_int_equal(mfk_qgemm_sk_blocks(112, 16, 264, 8, 0), 264); /* gate, up */
    assert_int_equal(mfk_qgemm_sk_blocks(32, 16, 264, 8, 0), 0);    /* q, o */
    assert_int_equal(mfk_qgemm_sk_blocks(8, 16, 264, 8, 0), 0);     /* k, v */
    assert_int_equal(mfk_qgemm_sk_blocks(32, 56, 264, 8, 0), 0);    /* Q4_K down */
    assert_int_equal(mfk_qgemm_sk_blocks(64, 28, 132, 8, 0), 0);    /* Q6_K down */
    assert_int_equal(mfk_qgemm_sk_blocks(16, 8, 132, 8, 0), 0);     /* Q6_K v */
    assert_int_equal(mfk_qgemm_sk_blocks(2004, 8, 132, 8, 0), 0);   /* Q6_K output */
    assert_int_equal(mfk_qgemm_sk_blocks(48, 16, 264, 8, 1), 264);  /* q + k + v */
    assert_int_equal(mfk_qgemm_sk_blocks(40, 16, 264, 8, 1), 264);  /* q + k (v Q6_K) */
    assert_int_equal(mfk_qgemm_sk_blocks(224, 16, 264, 8, 1), 264); /* gate + up */
    /* 2 iterations a block at least, 8 blocks a tile at most, 1 block */
    assert_int_equal(mfk_qgemm_sk_blocks(3, 2, 264, 8, 1), 3);
    assert_int_equal(mfk_qgemm_sk_blocks(2, 100, 264, 8, 1), 16);
    assert_int_equal(mfk_qgemm_sk_blocks(1, 1, 264, 8, 1), 1);
    /* without clusters a lone product's grid is its tiles */
    assert_int_equal(mfk_qgemm_sk_blocks(32, 16, 264, 1, 0), 256);
    /* past the counters, no places, nothing to do */
    assert_int_equal(mfk_qgemm_sk_blocks(MFK_QGEMM_SK_TILES + 1, 16, 264, 8, 1), 0);
    assert_int_equal(mfk_qgemm_sk_blocks(MFK_QGEMM_SK_TILES, 16, 264, 8, 1), 264);
    assert_int_equal(mfk_qgemm_sk_blocks(10, 16, 0, 8, 1), 0);
    assert_int_equal(mfk_qgemm_sk_blocks(0, 16, 264, 8, 1), 0);
    assert_int_equal(mfk_qgemm_sk_blocks(10, 0, 264, 8, 1), 0);
    assert_int_equal(mfk_qgemm_sk_blocks(4096, 1 << 20, 264, 8, 1), 0); /* 2^32 iterations */
}

/* The bookkeeping k_qgemm_sk runs on, walked here as its blocks walk it:
 * every iteration of every tile done once, a tile's runs in block order
 * from its first stage to its last, a run of a whole tile exactly where
 * one block holds the tile, every cut tile's blocks those mfk_sk_owner
 * names with distinct slots below 2 x blocks (the store's shortcut: 2 b
 * past the first block), and each block cutting at most two tiles, the
 * first as slot 2 b and the last as 2 b + 1. */
static void check_sk_walk(int64_t tiles, int ns, int blocks)
{
    const int64_t iters = tiles * ns;
    int *done = calloc((size_t)iters, sizeof *done);
    int64_t *next = calloc((size_t)tiles, sizeof *next); /* a tile's next stage */
    int *prev = malloc((size_t)tiles * sizeof *prev);    /* its last block so far */
    int *runs = calloc((size_t)tiles, sizeof *runs);
    char *slot = calloc((size_t)(2 * blocks), 1);
    assert_non_null(done), assert_non_null(next), assert_non_null(prev);
    assert_non_null(runs), assert_non_null(slot);
    for (int64_t t = 0; t < tiles; t++)
        prev[t] = -1;
    for (int b = 0; b < blocks; b++) {
        const int64_t i0 = mfk_sk_start(iters, blocks, b), i1 = mfk_sk_start(iters, blocks, b + 1);
        if (blocks <= iters)
            assert_true(i1 > i0);
        int cut = 0;
        for (int64_t i = i0; i < i1;) {
            const int64_t tile = i / ns, first = tile * ns;
            const int s0 = (int)(i - first), n = (int)(i1 - i < ns - s0 ? i1 - i : ns - s0);
            assert_int_equal(s0, next[tile]); /* in order, from stage 0 */
            assert_true(b > prev[tile]);
            for (int k = 0; k < n; k++)
                done[i + k]++;
            const int b0 = mfk_sk_owner(iters, blocks, first);
            const int b1 = mfk_sk_owner(iters, blocks, first + ns - 1);
            assert_true(b0 <= b && b <= b1);
            assert_int_equal(mfk_sk_owner(iters, blocks, i), b);
            assert_int_equal(n == ns, b0 == b1); /* whole tiles are one block's */
            if (n < ns) {
                const int sl = mfk_sk_slot(iters, blocks, b, first);
                assert_true(sl >= 0 && sl < 2 * blocks);
                assert_int_equal(slot[sl], 0);
                slot[sl] = 1;
                if (b > b0)
                    assert_int_equal(sl, 2 * b);
                assert_int_equal(sl, i == i0 ? 2 * b : 2 * b + 1);
                cut++;
            }
            next[tile] += n, prev[tile] = b, runs[tile]++;
            i += n;
        }
        assert_true(cut <= 2);
    }
    for (int64_t i = 0; i < iters; i++)
        assert_int_equal(done[i], 1);
    for (int64_t t = 0; t < tiles; t++) {
        assert_int_equal(next[t], ns);
        assert_int_equal(runs[t], mfk_sk_owner(iters, blocks, t * ns + ns - 1) -
                                      mfk_sk_owner(iters, blocks, t * ns) + 1);
    }
    free(done), free(next), free(prev), free(runs), free(slot);
}

static void test_qgemm_sk_walk(void **state)
{
    (void)state;
    /* Llama-3-8B's launches at 64 tokens, then odd shapes, then what the
     * plan gives for random ones */
    check_sk_walk(112, 16, 264);
    check_sk_walk(224, 16, 264);
    check_sk_walk(48, 16, 264);
    check_sk_walk(40, 16, 264);
    check_sk_walk(1, 1, 1);
    check_sk_walk(1, 16, 8);
    check_sk_walk(3, 2, 3);
    check_sk_walk(7, 5, 13);
    check_sk_walk(4096, 56, 264);
    srand(11);
    for (int k = 0; k < 300; k++) {
        const int64_t tiles = 1 + rand() % 600;
        const int ns = 1 + rand() % 60, places = 1 + rand() % 300;
        const int blocks = mfk_qgemm_sk_blocks(tiles, ns, places, 8, 1);
        assert_true(blocks >= 1 && blocks <= places);
        assert_true(blocks <= tiles * MFK_QGEMM_SK_SEGS);
        check_sk_walk(tiles, ns, blocks);
    }
}

/* fake_model's 2 layers routed: 8 experts of 512 rows (gate, up: Q4_K
 * [256, 512, 8]; down: down_type [512, 256, 8]), top 2, an F32 router
 * [256, 8]; the dense FFN tensors absent, as model.c binds them. */
static void fake_moe(struct model *m, struct model_layer *L, enum ggml_type down_type)
{
    fake_model(m, L, GGML_TYPE_Q4_K, 0);
    m->hp.n_expert = 8;
    m->hp.n_expert_used = 2;
    m->hp.n_ff_exp = 512;
    for (int l = 0; l < 2; l++) {
        const size_t at = 600000 + 8192 * (size_t)l;
        for (int w = MODEL_W_GATE; w <= MODEL_W_DOWN; w++)
            memset(&L[l].w[w], 0, sizeof L[l].w[w]);
        set_w(&L[l].gate_inp, GGML_TYPE_F32, 256, 8, at, "blk.ffn_gate_inp.weight");
        set_w(&L[l].exps[MODEL_EXP_GATE], GGML_TYPE_Q4_K, 256, 512, at + 1024, "blk.gate_exps");
        set_w(&L[l].exps[MODEL_EXP_UP], GGML_TYPE_Q4_K, 256, 512, at + 2048, "blk.up_exps");
        set_w(&L[l].exps[MODEL_EXP_DOWN], down_type, 512, 256, at + 3072, "blk.down_exps");
        for (int x = 0; x < MODEL_EXP_COUNT; x++)
            L[l].exps[x].ne2 = 8;
    }
}

/* A routed model's tensors: the router and each 3-D expert tensor whole
 * (row_bytes x rows x experts), the absent dense FFN not at all; types the
 * grouped kernels cannot read are refused naming the tensor, and so are
 * GELU-gated experts and more experts than the router kernel holds. */
static void test_moe_weights(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct cuda_wplan p;
    struct mf_err err = {0};
    (void)state;

    fake_moe(&m, L, GGML_TYPE_Q6_K);
    assert_int_equal(cuda_plan_weights(&m, &p, &err), 0);
    /* token_embd, output, output_norm, 2 x (2 norms + 4 attention + router + 3 experts) */
    assert_int_equal(p.n, 3 + 2 * 10);
    for (int l = 0; l < 2; l++) {
        for (int w = MODEL_W_GATE; w <= MODEL_W_DOWN; w++)
            assert_null(cuda_wplan_find(&p, &L[l].w[w]));
        const struct cuda_wslot *r = cuda_wplan_find(&p, &L[l].gate_inp);
        assert_non_null(r);
        assert_int_equal(r->bytes, 256 * 4 * 8);
        for (int x = 0; x < MODEL_EXP_COUNT; x++) {
            const struct cuda_wslot *s = cuda_wplan_find(&p, &L[l].exps[x]);
            assert_non_null(s);
            assert_ptr_equal(s->w, &L[l].exps[x]);
            assert_int_equal(s->off % CUDA_PLAN_ALIGN, 0);
            assert_int_equal(s->bytes, L[l].exps[x].row_bytes * (uint64_t)L[l].exps[x].ne1 * 8);
        }
    }
    uint64_t end = 0;
    for (int i = 0; i < p.n; i++) {
        assert_true(p.slots[i].off >= end);
        end = p.slots[i].off + p.slots[i].bytes;
    }
    assert_true(p.total >= end);
    cuda_wplan_free(&p);

    fake_moe(&m, L, GGML_TYPE_Q6_K);
    set_w(&L[1].exps[MODEL_EXP_DOWN], GGML_TYPE_Q5_0, 512, 256, 640000,
          "blk.1.ffn_down_exps.weight");
    assert_int_equal(cuda_plan_weights(&m, &p, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "blk.1.ffn_down_exps.weight"));
    assert_null(p.slots);

    fake_moe(&m, L, GGML_TYPE_Q6_K);
    m.hp.n_expert = 600;
    assert_int_equal(cuda_moe_check(&m, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "600"));
    m.hp.n_expert = 8;
    assert_int_equal(cuda_moe_check(&m, &err), 0);
    m.hp.arch = arch_find("gemma2", 6); /* a GELU family */
    assert_non_null(m.hp.arch);
    assert_int_equal(cuda_moe_check(&m, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "GELU"));
    m.hp.n_expert = 0; /* no experts: nothing to refuse here */
    assert_int_equal(cuda_moe_check(&m, &err), 0);
}

/* Items of a routing (sel: T x k experts): ceil(rows / tile) per expert. */
static int64_t items_of(const int32_t *sel, int32_t T, int32_t ne, int32_t k, int32_t tile)
{
    int32_t cnt[MFK_MOE_MAX_EXPERTS] = {0};
    int64_t n = 0;
    for (int32_t p = 0; p < T * k; p++)
        cnt[sel[p]]++;
    for (int32_t e = 0; e < ne; e++)
        n += (cnt[e] + tile - 1) / tile;
    return n;
}

/* Token t's k experts, distinct, at random. */
static void random_choice(int32_t *sel, int32_t t, int32_t ne, int32_t k)
{
    for (int32_t j = 0; j < k; j++) {
        int32_t e, dup;
        do {
            e = rand() % ne, dup = 0;
            for (int32_t i = 0; i < j; i++)
                dup |= sel[t * k + i] == e;
        } while (dup);
        sel[t * k + j] = e;
    }
}

/* The work list's size bound (mfk_moe_items_max) holds for every routing:
 * random ones, experts dealt round-robin (counts 1 past a multiple of the
 * tile where they can be), all tokens on the same k experts; it is exact
 * at one token (k items: no grouped block waits on an empty item). The
 * tiles grow 1, 2, 4, 8; the grouping's chunks fit its counters. */
static void test_moe_items(void **state)
{
    static const int32_t shapes[][2] = {{8, 2}, {4, 4}, {128, 8}, {60, 7}, {512, 8}, {3, 1}};
    int32_t *sel = malloc(300 * 8 * sizeof *sel);
    (void)state;

    assert_non_null(sel);
    assert_int_equal(mfk_moe_tile(1), 1);
    assert_int_equal(mfk_moe_tile(2), 2);
    assert_int_equal(mfk_moe_tile(3), 4);
    assert_int_equal(mfk_moe_tile(4), 4);
    assert_int_equal(mfk_moe_tile(5), MFK_MOE_TILE);
    assert_int_equal(mfk_moe_tile(2048), MFK_MOE_TILE);
    srand(7);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int32_t ne = shapes[si][0], k = shapes[si][1];
        assert_int_equal(mfk_moe_items_max(1, ne, k), k);
        for (int32_t T = 1; T <= 300; T += T < 40 ? 1 : 37) {
            const int32_t tile = mfk_moe_tile(T);
            const int64_t bound = mfk_moe_items_max(T, ne, k);
            assert_true(bound <= (int64_t)T * k);
            for (int32_t t = 0; t < T; t++) /* round-robin */
                for (int32_t j = 0; j < k; j++)
                    sel[t * k + j] = (t * k + j) % ne;
            assert_true(items_of(sel, T, ne, k, tile) <= bound);
            for (int32_t t = 0; t < T; t++) /* every token on experts 0..k-1 */
                for (int32_t j = 0; j < k; j++)
                    sel[t * k + j] = j;
            assert_true(items_of(sel, T, ne, k, tile) <= bound);
            for (int rep = 0; rep < 20; rep++) {
                for (int32_t t = 0; t < T; t++)
                    random_choice(sel, t, ne, k);
                assert_true(items_of(sel, T, ne, k, tile) <= bound);
            }
        }
    }
    static const int32_t Ts[] = {1, 2, 31, 256, 257, 2048, 100000};
    static const int32_t nes[] = {1, 8, 60, 128, 512};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
        for (size_t j = 0; j < sizeof nes / sizeof nes[0]; j++) {
            int32_t per = 0;
            const int32_t nc = mfk_moe_chunks(Ts[i], nes[j], &per);
            assert_true(nc >= 1 && nc <= 256 && (int64_t)nc * nes[j] <= MFK_MOE_HIST);
            assert_true((int64_t)nc * per >= Ts[i] && (int64_t)(nc - 1) * per < Ts[i]);
        }
    free(sel);
}

/* The routed layers' buffers for max_tokens tokens: every region aligned,
 * in order, none overlapping, each as large as its rows x width (P =
 * max_tokens x k gathered rows); the work list holds the bound at every
 * step size up to max_tokens; the 8-bit copies only where a Q4_K/Q6_K
 * expert reads them (Q4_K gate/up: the input's; Q6_K down: the
 * activation's; F16 down: none). */
static void test_moe_plan(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct cuda_moe_plan p;
    (void)state;

    for (int f16 = 0; f16 < 2; f16++) {
        fake_moe(&m, L, f16 ? GGML_TYPE_F16 : GGML_TYPE_Q6_K);
        cuda_moe_plan(&m, 40, &p);
        const size_t P = 40 * 2, T = 40, ne = 8, E = 256, F = 512;
        assert_int_equal(p.max_tokens, 40);
        assert_int_equal(p.pairs, (int64_t)P);
        assert_int_equal(p.xq8, 1);
        assert_int_equal(p.hq8, !f16);
        int hit = 0;
        for (int32_t t = 1; t <= 40; t++) {
            assert_true(mfk_moe_items_max(t, 8, 2) <= p.items);
            hit |= mfk_moe_items_max(t, 8, 2) == p.items;
        }
        assert_true(hit);
        /* (offset, bytes it must hold) in layout order; absent copies skipped */
        const size_t regions[][2] = {
            {p.sel, P * 4},
            {p.w, P * 4},
            {p.grow, P * 4},
            {p.prow, P * 4},
            {p.items_off, (size_t)p.items * 16},
            {p.counters, 8},
            {p.logits, T * ne * 4},
            {p.xq8_q, T * E},
            {p.xq8_d, T * E / 32 * 4},
            {p.xq8_s, T * E / 32 * 4},
            {p.hg, P * F * 4},
            {p.hu, P * F * 4},
            {p.hq8_q, f16 ? 0 : P * F},
            {p.hq8_d, f16 ? 0 : P * F / 32 * 4},
            {p.hq8_s, f16 ? 0 : P * F / 32 * 4},
            {p.og, P * E * 4},
        };
        size_t end = p.eoff + (ne + 1) * 4;
        assert_true(p.eoff >= p.w + P * 4);
        for (size_t i = 0; i < sizeof regions / sizeof regions[0]; i++) {
            if (regions[i][1] == 0) {
                assert_int_equal(regions[i][0], 0); /* not planned */
                continue;
            }
            assert_int_equal(regions[i][0] % CUDA_PLAN_ALIGN, 0);
            if (i >= 2) /* sel and w come before eoff */
                assert_true(regions[i][0] >= end);
            end = regions[i][0] + regions[i][1];
        }
        assert_true(p.total >= end && p.total % CUDA_PLAN_ALIGN == 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_weights),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_gemm_min),
        cmocka_unit_test(test_qgemm_plan),
        cmocka_unit_test(test_qgemm_sk_plan),
        cmocka_unit_test(test_qgemm_sk_walk),
        cmocka_unit_test(test_step),
        cmocka_unit_test(test_no_device),
        cmocka_unit_test(test_kv8_bytes),
        cmocka_unit_test(test_kv_fp8),
        cmocka_unit_test(test_att_splits),
        cmocka_unit_test(test_graph_pad),
        cmocka_unit_test(test_verify_step),
        cmocka_unit_test(test_decode_tiles),
        cmocka_unit_test(test_decode_tiles_small),
        cmocka_unit_test(test_combine_q8),
        cmocka_unit_test(test_lora_groups),
        cmocka_unit_test(test_draws),
        cmocka_unit_test(test_moe_weights),
        cmocka_unit_test(test_moe_items),
        cmocka_unit_test(test_moe_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
