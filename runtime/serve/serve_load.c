/*
 * serve_load.c: what mfc-serve loads before it answers: the GGUF model, its
 * tokenizer, the chat template (model.yaml's TEMPLATE, else the family the
 * GGUF's tokenizer.chat_template matches, else {{ .Prompt }}), LoRA
 * adapters, the compute backend with its KV arena, and the engine.
 *
 * The backend is chosen in one place (serve_pick_device, serve_device.c):
 * MFC_DEVICE=auto (the default) takes the CUDA backend when a GPU is visible
 * and its plan accepts every tensor, the CPU one otherwise (saying why on
 * stderr when a GPU was there); cpu and cuda force a choice. The choice is
 * logged at start.
 */
#include "runtime/serve/serve_int.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/ggml_type.h"
#include "common/gguf.h"
#include "common/inspect.h"
#include "common/sha256.h"
#include "runtime/engine/backend.h"
#include "runtime/cuda/cuda.h"
#include "runtime/engine/engine.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"
#include "text/template.h"
#include "text/tokenizer.h"

#define DEFAULT_CTX 4096 /* Ollama's num_ctx default */

int64_t serve_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The backend serve_pick_device (serve_device.c) decides for s->cfg.device;
 * auto's fallback to the CPU is said on stderr with the reason. NULL with
 * err when the choice fails (cuda forced without a GPU or for a model its
 * plan refuses). */
static const struct backend_ops *pick_backend(struct serve *s, struct mf_err *err)
{
    int gpus = strcmp(s->cfg.device, "cpu") ? cuda_device_count() : 0;
    enum serve_device d;
    char why[512];

    if (serve_pick_device(s->cfg.device, gpus, s->m, &d, why, sizeof why, err))
        return NULL;
    if (why[0])
        mf_log_warn(&s->log, "MFC_DEVICE=%s: %s", s->cfg.device, why);
    return d == SERVE_DEVICE_CUDA ? &cuda_backend_ops : &cpu_backend_ops;
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    if (!f)
        return 1ull << 30;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return kb ? (uint64_t)kb * 1024 : 1ull << 30;
}

/* GGUF scalars (and array lengths as null, as Ollama shows them) for /api/show. */
static json_t *model_info(const struct gguf_file *gf)
{
    json_t *o = json_object();
    for (uint64_t i = 0; o && i < gguf_n_kv(gf); i++) {
        const struct gguf_kv *kv = gguf_kv_at(gf, i);
        json_t *v = NULL;
        struct gguf_str s;
        double d;
        int64_t x;
        int b;
        switch (kv->type) {
        case GGUF_TYPE_STRING:
            if (gguf_get_str(gf, kv->key, &s, NULL) == 0 && s.len < 4096 &&
                strncmp(kv->key, "tokenizer.chat_template", 23) != 0)
                v = json_stringn(s.p, s.len);
            break;
        case GGUF_TYPE_FLOAT32:
        case GGUF_TYPE_FLOAT64:
            if (gguf_kv_f64(gf, kv, &d, NULL) == 0)
                v = json_real(d);
            break;
        case GGUF_TYPE_BOOL:
            if (gguf_get_bool(gf, kv->key, &b, NULL) == 0)
                v = json_boolean(b);
            break;
        case GGUF_TYPE_ARRAY:
            v = json_null();
            break;
        default:
            if (gguf_kv_i64(gf, kv, &x, NULL) == 0)
                v = json_integer(x);
        }
        if (v)
            json_object_set_new(o, kv->key, v);
    }
    return o;
}

/* The family facts mfc-serve runs with (common/inspect.c's summary: the
 * family's defaults where the file has no key) as model_info's "mfc.*"
 * entries, flat like the GGUF keys beside them. */
static void family_info(const struct gguf_file *gf, json_t *info)
{
    struct mf_err ignored;
    json_t *sum = info ? mf_inspect_gguf(gf, 0, &ignored) : NULL;
    const json_t *f = json_object_get(sum, "family"), *r = json_object_get(sum, "rope");
    const json_t *e = json_object_get(f, "experts"), *w = json_object_get(f, "sliding_window");
    static const struct {
        const char *key;
        int from; /* 0 family, 1 experts, 2 window, 3 rope, 4 summary */
        const char *field;
    } m[] = {
        {"mfc.family", 0, "name"},
        {"mfc.family.known_as", 0, "known_as"},
        {"mfc.family.traits", 0, "traits"},
        {"mfc.experts.count", 1, "count"},
        {"mfc.experts.used", 1, "used"},
        {"mfc.experts.feed_forward_length", 1, "feed_forward_length"},
        {"mfc.sliding_window", 2, "window"},
        {"mfc.sliding_window.period", 2, "period"},
        {"mfc.sliding_window.freq_base", 2, "freq_base"},
        {"mfc.attn_softcap", 0, "attn_softcap"},
        {"mfc.final_softcap", 0, "final_softcap"},
        {"mfc.head_dim", 4, "head_dim"},
        {"mfc.rope.scaling_type", 3, "scaling_type"},
        {"mfc.rope.scaling_factor", 3, "scaling_factor"},
        {"mfc.rope.original_context_length", 3, "original_context_length"},
        {"mfc.rope.long_factors", 3, "long_factors"},
    };
    for (size_t i = 0; sum && i < sizeof m / sizeof m[0]; i++) {
        const json_t *src = m[i].from == 0   ? f
                            : m[i].from == 1 ? e
                            : m[i].from == 2 ? w
                            : m[i].from == 3 ? r
                                             : sum;
        json_t *v = json_object_get(src, m[i].field);
        if (v && !json_is_null(v))
            json_object_set(info, m[i].key, v);
    }
    json_decref(sum);
}

static int load_template(struct serve *s, struct mf_err *err)
{
    struct gguf_str jinja;
    const struct tmpl_family *fam = NULL;
    const char *src = s->cfg.template_src;

    if (gguf_get_str(s->m->gf, "tokenizer.chat_template", &jinja, NULL) == 0) {
        struct mf_err ferr;
        if (tmpl_family_detect(jinja.p, jinja.len, &fam, &ferr) == 0)
            s->family = strdup(fam->name);
        else
            mf_log_warn(&s->log, "%s: unrecognised chat template; using {{ .Prompt }}",
                        s->cfg.model_path);
    }
    if (!src)
        src = fam ? fam->tmpl : "{{ .Prompt }}";
    mf_log_info(&s->log, "chat template: %s", s->cfg.template_src ? "TEMPLATE from model.yaml"
                                              : fam ? fam->name
                                                    : "none ({{ .Prompt }})");
    if (!(s->tmpl_src = strdup(src)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = tmpl_compile(&s->tmpl, src, strlen(src), NULL, TMPL_F_OLLAMA, err);
    if (rc)
        return mf_err_prefix(err, "TEMPLATE");
    /* the family's stop strings unless the Modelfile set its own */
    if (fam && !s->defaults.stops_set)
        for (const char *const *st = fam->stops; st && *st; st++)
            if ((rc = serve_opts_add_stop(&s->defaults, *st, "template stops", err)))
                return rc;
    return 0;
}

static int load_adapters(struct serve *s, struct mf_err *err)
{
    for (int i = 0; i < s->cfg.n_adapters; i++) {
        const struct serve_adapter_cfg *ac = &s->cfg.adapters[i];
        struct lora *l;
        int32_t id;
        int rc = ac->offset || ac->size
                     ? lora_open_range(s->m, ac->path, ac->offset, ac->size, &l, err)
                     : lora_open(s->m, ac->path, &l, err);
        if (rc)
            return mf_err_prefix(err, "adapter %s", ac->name ? ac->name : ac->path);
        float scale = lora_scale(l, ac->scale);
        if ((rc = model_add_lora(s->m, l, &id, err)))
            return rc;
        s->adapters[s->n_adapters++] =
            (struct serve_adapter){.name = ac->name, .id = id, .scale = scale};
        if (ac->offset || ac->size)
            mf_log_info(&s->log,
                        "adapter %s: %s bytes %" PRIu64 "+%" PRIu64 ", mapped in place (scale %g)",
                        ac->name ? ac->name : "(unnamed)", ac->path, ac->offset,
                        gguf_file_size(l->gf), (double)ac->scale);
        else
            mf_log_info(&s->log, "adapter %s: %s (scale %g)", ac->name ? ac->name : "(unnamed)",
                        ac->path, (double)ac->scale);
    }
    return 0;
}

static void describe(struct serve *s)
{
    const struct gguf_file *gf = s->m->gf;
    uint8_t h[32];
    char buf[600];
    uint32_t counts[64] = {0};
    uint32_t best = 0;

    s->model_bytes = gguf_file_size(gf);
    snprintf(buf, sizeof buf, "%s:%" PRIu64, s->cfg.model_path, s->model_bytes);
    char hex[MF_SHA256_HEX_LEN + 1];
    if (mf_sha256_mem(buf, strlen(buf), h, NULL))
        memset(h, 0, sizeof h);
    mf_sha256_hex(h, hex);
    snprintf(s->digest, sizeof s->digest, "sha256:%s", hex);
    for (uint64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, i);
        s->n_params += t->n_elements;
        if (t->n_dims >= 2 && t->type < 64)
            counts[t->type]++;
    }
    for (uint32_t t = 0; t < 64; t++)
        if (counts[t] > counts[best])
            best = t;
    snprintf(s->quant, sizeof s->quant, "%s", ggml_type_name(best));
    s->model_info = model_info(gf);
    struct gguf_str a;
    if (gguf_get_str(gf, "general.architecture", &a, NULL) == 0)
        snprintf(s->arch, sizeof s->arch, "%.*s", (int)(a.len < 31 ? a.len : 31), a.p);
    family_info(gf, s->model_info);
}

static int open_engine(struct serve *s, struct mf_err *err)
{
    const struct backend_ops *ops = pick_backend(s, err);
    struct backend_config bc = {.n_threads = s->cfg.threads,
                                .max_tokens = s->cfg.max_batch_tokens,
                                .max_seqs = s->cfg.max_seqs};
    struct engine_config ec = {0};
    struct engine_model em = {0};
    struct kv_budget kb = {0};
    int32_t want, n_blocks = 0;
    int rc;

    if (!ops)
        return err->code;
    kb.cache_gb = s->cfg.kv_cache_gb;
    kb.free_bytes = mem_available();
    kb.fraction = 0.25;
    ec.budget.free_bytes = kb.free_bytes;
    /* speculation first: its draft's backend goes on the device before the
     * model's takes its share of what is left (serve_spec.c) */
    if ((rc = serve_spec_setup(s, &ec, &bc, err)) || (rc = serve_spec_backend(s, ops, &ec, err)))
        return rc;
    if (s->cfg.kv_type != BACKEND_KV_F16 && ops == &cuda_backend_ops)
        bc.kv_type = s->cfg.kv_type;
    else if (s->cfg.kv_type != BACKEND_KV_F16)
        mf_log_warn(&s->log, "MFC_KV_CACHE_TYPE=%s needs the CUDA backend: K/V stay F16 on the %s",
                    s->cfg.kv_type == BACKEND_KV_FP8 ? "fp8" : "q8", ops->name);
    kb.bytes_per_block = backend_kv_block_bytes(s->m, bc.kv_type);
    if ((rc = kv_budget_blocks(&kb, &n_blocks, err)))
        return rc;
    mf_log_info(&s->log, "compute backend: %s (MFC_DEVICE=%s), KV cache %s", ops->name,
                s->cfg.device,
                bc.kv_type == BACKEND_KV_FP8  ? "FP8 (e4m3)"
                : bc.kv_type == BACKEND_KV_Q8 ? "8-bit"
                                              : "F16");
    /* no more than every sequence at full context needs */
    want = (int32_t)(((int64_t)s->n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS) *
           s->cfg.max_seqs;
    if (!s->cfg.kv_cache_gb && n_blocks > want)
        n_blocks = want;
    bc.kv_bytes = (uint64_t)n_blocks * kb.bytes_per_block;
    if (ops == &cuda_backend_ops && !s->cfg.kv_cache_gb)
        bc.kv_bytes = 0; /* device memory: MFC_GPU_MEMORY_UTILIZATION (docs/cuda.md) */
    if ((rc = backend_create(ops, s->m, &bc, &s->be, err)) ||
        (rc = backend_kv_alloc(s->be, &s->n_blocks, err)))
        return rc;
    if (ops == &cuda_backend_ops) {
        struct cuda_upload_stats st;
        cuda_backend_stats(s->be, &st);
        if (st.sampling)
            em.sample = backend_engine_sample;
        mf_log_info(&s->log, "CUDA: tokens drawn %s (MFC_CUDA_SAMPLING)",
                    st.sampling ? "on the device (the host for typical_p, logprobs, top_k over "
                                  "1024 or over 1024 bias and penalty entries)"
                                : "on the host");
        if (st.gemm_min)
            mf_log_info(&s->log, "CUDA: tensor-core GEMM (cuBLAS) for steps of %d tokens or more "
                        "(2 for F16/BF16/F32 weights; MFC_CUDA_GEMM_MIN)", st.gemm_min);
        else
            mf_log_info(&s->log, "CUDA: GEMV kernels only (cuBLAS not found, or "
                        "MFC_CUDA_GEMM_MIN=0): prefill and large batches run slower");
        if (st.bf16_bytes)
            mf_log_info(&s->log,
                        "CUDA: %.2f GB of bf16 copies of the quantized matrices for the "
                        "tensor cores (MFC_CUDA_BF16_WEIGHTS=1)",
                        st.bf16_bytes / 1e9);
    }
    /* a sliding model's sequence holds only its window's blocks */
    ec.sched.window = model_window_all(s->m);
    if (!ec.sched.window && (int64_t)s->n_blocks * KV_BLOCK_TOKENS < s->n_ctx)
        s->n_ctx = s->n_blocks * KV_BLOCK_TOKENS;
    ec.sched.max_num_seqs = s->cfg.max_seqs;
    ec.sched.max_num_batched_tokens = s->cfg.max_batch_tokens;
    ec.sched.max_prefill_tokens = s->cfg.max_prefill_tokens;
    if (ec.sched.max_prefill_tokens < 0)
        ec.sched.max_prefill_tokens =
            ops == &cuda_backend_ops ? SERVE_PREFILL_TOKENS_GPU : SERVE_PREFILL_TOKENS_CPU;
    mf_log_info(&s->log,
                "steps of up to %d tokens, %d sequences; prompts take up to %d of them beside "
                "decodes (MFC_MAX_PREFILL_TOKENS%s)",
                ec.sched.max_num_batched_tokens, ec.sched.max_num_seqs,
                ec.sched.max_prefill_tokens ? ec.sched.max_prefill_tokens
                                            : ec.sched.max_num_batched_tokens,
                s->cfg.max_prefill_tokens < 0 ? ", the backend's default" : "");
    ec.sched.max_model_len = s->n_ctx;
    ec.sched.max_waiting = s->cfg.max_waiting;
    ec.n_kv_blocks = s->n_blocks;
    ec.stall_ms = 120000;
    s->n_eos = engine_eos_from_tok(s->tok, s->eos, 32);
    if (s->n_eos > 32)
        s->n_eos = 32;
    em.ctx = s->be;
    em.n_vocab = s->m->hp.n_vocab;
    em.eos = s->eos;
    em.n_eos = s->n_eos;
    em.n_loras = s->m->n_loras;
    em.step = backend_engine_step;
    em.logits_alloc = backend_engine_alloc;
    em.logits_free = backend_engine_free;
    em.max_tokens = s->cfg.max_batch_tokens;
    return engine_open(&ec, &em, &engine_sampler_std, &s->e, err);
}

/* The model from a byte range of a bigger file (an image's weight layer, an
 * uncompressed tar): the range is mapped read-only in place, no copy
 * (gguf_open_range, which checks the range fits the file). */
static int open_range(struct serve *s, struct mf_err *err)
{
    struct gguf_file *gf;
    int rc = gguf_open_range(s->cfg.model_path, s->cfg.model_offset, s->cfg.model_size, &gf, err);
    if (rc)
        return mf_err_prefix(err, "--model-offset %" PRIu64 " --model-size %" PRIu64,
                             s->cfg.model_offset, s->cfg.model_size);
    return model_open_gguf(gf, &s->m, err);
}

int serve_load(struct serve *s, struct mf_err *err)
{
    int64_t t0 = serve_now_ns();
    int rc;

    if ((rc = serve_opts_from_json(&s->defaults, s->cfg.params, "params", err)))
        return mf_err_prefix(err, "%s",
                             s->cfg.config_name   ? s->cfg.config_name
                             : s->cfg.config_path ? s->cfg.config_path
                                                  : "config");
    rc = s->cfg.model_offset || s->cfg.model_size ? open_range(s, err)
                                                  : model_open(s->cfg.model_path, &s->m, err);
    if (rc || (rc = tok_load_gguf(s->m->gf, &s->tok, err)))
        return rc;
    if ((int64_t)tok_n_vocab(s->tok) > s->m->hp.n_vocab)
        return mf_err_set(err, MF_EFORMAT, "%s: the tokenizer has %u tokens, the model %d",
                          s->cfg.model_path, tok_n_vocab(s->tok), (int)s->m->hp.n_vocab);
    if ((rc = load_template(s, err)) || (rc = load_adapters(s, err)))
        return rc;
    s->n_ctx = s->cfg.ctx;
    if (!s->n_ctx && (s->defaults.set & SO_NUM_CTX) && s->defaults.num_ctx > 0)
        s->n_ctx = s->defaults.num_ctx;
    if (!s->n_ctx)
        s->n_ctx = DEFAULT_CTX;
    if (s->m->hp.n_ctx_train > 0 && s->n_ctx > s->m->hp.n_ctx_train) {
        /* said only when asked for (--ctx, MFC_CTX, PARAMETER num_ctx), not for the default */
        if (s->cfg.ctx || ((s->defaults.set & SO_NUM_CTX) && s->defaults.num_ctx > 0))
            mf_log_warn(&s->log, "%s %d is larger than the model's context length %d; using %d",
                        s->cfg.ctx ? "--ctx" : "num_ctx", (int)s->n_ctx,
                        (int)s->m->hp.n_ctx_train, (int)s->m->hp.n_ctx_train);
        s->n_ctx = s->m->hp.n_ctx_train;
    }
    if (s->n_ctx < 16)
        s->n_ctx = 16;
    model_set_ctx(s->m, s->n_ctx); /* LongRoPE's factors follow the context served */
    describe(s);
    if ((rc = open_engine(s, err)) || (rc = serve_embed_open(s, err)) ||
        (rc = serve_gcache_open(s, err)))
        return rc;
    s->load_ns = serve_now_ns() - t0;
    mf_log_info(&s->log, "loaded %s: %d layers, vocab %d, context %d, %d KV blocks, %d adapters",
                s->cfg.model_path, (int)s->m->hp.n_layer, (int)s->m->hp.n_vocab, (int)s->n_ctx,
                (int)s->n_blocks, s->n_adapters);
    return 0;
}

void serve_unload(struct serve *s)
{
    engine_close(s->e);
    s->e = NULL;
    serve_embed_close(s);
    serve_gcache_close(s);
    backend_free(s->be);
    s->be = NULL;
    serve_spec_close(s);
    tmpl_free(s->tmpl);
    s->tmpl = NULL;
    free(s->tmpl_src);
    s->tmpl_src = NULL;
    free(s->family);
    s->family = NULL;
    tok_free(s->tok);
    s->tok = NULL;
    model_close(s->m);
    s->m = NULL;
    json_decref(s->model_info);
    s->model_info = NULL;
    serve_opts_free(&s->defaults);
}

/* name equals want, or want followed by ":latest". */
static int name_is(const char *name, const char *want)
{
    size_t n = strlen(want);
    return !strncmp(name, want, n) && (!name[n] || !strcmp(name + n, ":latest"));
}

int serve_pick_model(const struct serve *s, const char *name, struct batch_lora *lora,
                     struct mf_err *err)
{
    int named = -1;
    memset(lora, 0, sizeof *lora);
    if (name && name[0] && !name_is(name, s->cfg.model_name)) {
        for (int i = 0; i < s->n_adapters; i++)
            if (s->adapters[i].name && name_is(name, s->adapters[i].name))
                named = i;
        if (named < 0)
            return mf_err_set(err, MF_ENOTFOUND, "The model '%.200s' does not exist", name);
    }
    for (int i = 0; i < s->n_adapters && lora->n < BATCH_MAX_LORAS; i++)
        if (!s->adapters[i].name || i == named) {
            lora->ids[lora->n] = s->adapters[i].id;
            lora->scales[lora->n++] = s->adapters[i].scale;
        }
    return 0;
}
