/*
 * test_serve_device.c: mfc-serve's MFC_DEVICE decision (runtime/serve/serve_device.c)
 * without a GPU: the visible GPU count is a parameter and the CUDA plan is
 * host-only, so every branch runs here. auto falls back to the CPU (with a
 * reason naming the tensor and type) when the plan refuses Q5_0/Q5_1
 * weights; a forced cuda fails instead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/model/model.h"
#include "runtime/serve/serve.h"

static uint8_t blob[1 << 20]; /* stands in for the GGUF mapping */

static void set_w(struct model_weight *w, enum ggml_type t, int64_t ne0, int64_t ne1, size_t at,
                  const char *name)
{
    uint64_t rb = 0;
    ggml_type_row_size(t, (uint64_t)ne0, &rb);
    *w = (struct model_weight){.data = blob + at, .type = t, .ne0 = ne0, .ne1 = ne1,
                               .row_bytes = rb, .name = name};
}

/* A 2-layer F16 model with 256-wide rows; blk.1.ffn_down in type down. */
static void fake_model(struct model *m, struct model_layer *L, enum ggml_type down)
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
    set_w(&m->tok_embd, GGML_TYPE_F16, 256, 100, 0, "token_embd.weight");
    set_w(&m->output, GGML_TYPE_F16, 256, 100, 65536, "output.weight");
    set_w(&m->out_norm, GGML_TYPE_F32, 256, 1, 131072, "output_norm.weight");
    for (int l = 0; l < 2; l++) {
        set_w(&L[l].attn_norm, GGML_TYPE_F32, 256, 1, 135168 + 1024 * (size_t)l, "attn_norm");
        set_w(&L[l].ffn_norm, GGML_TYPE_F32, 256, 1, 139264 + 1024 * (size_t)l, "ffn_norm");
        for (int w = 0; w < MODEL_W_PER_LAYER; w++)
            set_w(&L[l].w[w], GGML_TYPE_F16, w == MODEL_W_DOWN ? 512 : 256,
                  w == MODEL_W_GATE || w == MODEL_W_UP ? 512 : 256,
                  143360 + 4096 * (size_t)(l * MODEL_W_PER_LAYER + w), "blk.w");
    }
    set_w(&L[1].w[MODEL_W_DOWN], down, 512, 256, 200000, "blk.1.ffn_down.weight");
}

static void test_auto(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct mf_err err = {0};
    enum serve_device d;
    char why[512];
    (void)state;

    /* a model the CUDA kernels read: auto takes the GPU when one is visible */
    fake_model(&m, L, GGML_TYPE_Q8_0);
    assert_int_equal(serve_pick_device("auto", 1, &m, &d, why, sizeof why, &err), 0);
    assert_int_equal(d, SERVE_DEVICE_CUDA);
    assert_string_equal(why, "");
    /* no GPU: the CPU, and nothing to explain */
    assert_int_equal(serve_pick_device("auto", 0, &m, &d, why, sizeof why, &err), 0);
    assert_int_equal(d, SERVE_DEVICE_CPU);
    assert_string_equal(why, "");

    /* Q5_0 / Q5_1 weights on a GPU host: the CPU, saying which tensor and why */
    static const enum ggml_type refused[] = {GGML_TYPE_Q5_0, GGML_TYPE_Q5_1};
    for (size_t i = 0; i < 2; i++) {
        fake_model(&m, L, refused[i]);
        d = SERVE_DEVICE_CUDA;
        assert_int_equal(serve_pick_device("auto", 2, &m, &d, why, sizeof why, &err), 0);
        assert_int_equal(d, SERVE_DEVICE_CPU);
        assert_non_null(strstr(why, "blk.1.ffn_down.weight"));
        assert_non_null(strstr(why, i == 0 ? "Q5_0" : "Q5_1"));
        assert_non_null(strstr(why, "CPU backend"));
    }
    /* a short reason buffer is cut, not overrun */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    assert_int_equal(serve_pick_device("auto", 1, &m, &d, tiny, sizeof tiny, &err), 0);
    assert_int_equal(d, SERVE_DEVICE_CPU);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void test_forced(void **state)
{
    struct model m;
    struct model_layer L[2];
    struct mf_err err = {0};
    enum serve_device d;
    char why[512];
    (void)state;

    /* cpu: whatever the model and the GPUs */
    fake_model(&m, L, GGML_TYPE_Q5_0);
    assert_int_equal(serve_pick_device("cpu", 4, &m, &d, why, sizeof why, &err), 0);
    assert_int_equal(d, SERVE_DEVICE_CPU);
    assert_string_equal(why, "");
    /* cuda with a refused tensor still fails, naming it */
    assert_int_equal(serve_pick_device("cuda", 1, &m, &d, why, sizeof why, &err),
                     MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "blk.1.ffn_down.weight"));
    assert_non_null(strstr(err.msg, "Q5_0"));
    assert_non_null(strstr(err.msg, "MFC_DEVICE \"cuda\""));
    /* cuda without a GPU fails */
    fake_model(&m, L, GGML_TYPE_F16);
    assert_int_equal(serve_pick_device("cuda", 0, &m, &d, why, sizeof why, &err),
                     MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "no CUDA GPU is visible"));
    /* cuda with a GPU and a readable model */
    assert_int_equal(serve_pick_device("cuda", 1, &m, &d, why, sizeof why, &err), 0);
    assert_int_equal(d, SERVE_DEVICE_CUDA);
    /* anything else is a usage error */
    assert_int_equal(serve_pick_device("gpu", 1, &m, &d, why, sizeof why, &err), MF_EUSAGE);
    assert_non_null(strstr(err.msg, "\"gpu\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_forced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
