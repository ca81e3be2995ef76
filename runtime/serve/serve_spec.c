/*
 * serve_spec.c: speculative decoding in mfc-serve: the settings (the
 * Modelfile's PARAMETER speculative, draft_max, draft_min, draft_p_min,
 * lookup_ngram, lookup_ngram_min, in model.yaml params; MFC_SPEC_MAX_BATCH),
 * the DRAFT model (model.yaml draft:, --draft) loaded and checked against
 * the model, its backend and KV pool, /api/show's "speculative" and the
 * spec_decode_* series of /metrics.
 *
 * Owns, through struct serve, the draft model, its backend and engine
 * interface, and the show object. Which proposer: none when speculative is
 * false, the draft model when there is one, prompt lookup otherwise. The
 * draft's backend is made before the model's, on the same device, because
 * the model's CUDA KV pool takes a share of what memory is left.
 */
#include "runtime/serve/serve_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/limits.h"
#include "common/params.h"
#include "runtime/engine/backend.h"
#include "runtime/cuda/cuda.h"
#include "runtime/engine/engine.h"
#include "runtime/model/model.h"
#include "text/tokenizer.h"

#define DRAFT_KV_CAP_CUDA (4ull << 30) /* the draft's KV pool on a GPU, at most */

static const char *const source_names[] = {"off", "lookup", "draft"};

/* params.key, a number within common/params.c's limits, into *out
 * (unchanged when absent); field names it in messages. */
static int param_num(const json_t *params, const char *key, double *out, struct mf_err *err)
{
    json_t *v = json_object_get(params, key);
    char field[64];
    if (!v || json_is_null(v))
        return 0;
    snprintf(field, sizeof field, "params.%s", key);
    if (!json_is_number(v))
        return mf_err_set(err, MF_EINVAL, "'%s' must be a number", field);
    if (mf_params_check(field, key, json_number_value(v), err))
        return err->code;
    *out = json_number_value(v);
    return 0;
}

static int read_params(const json_t *p, struct spec_config *c, int *on, struct mf_err *err)
{
    json_t *v = json_object_get(p, "speculative");
    double dmax = c->draft_max, dmin = c->draft_min, pmin = c->p_min, nmax = c->ngram_max,
           nmin = c->ngram_min;
    int rc;

    *on = 1;
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return mf_err_set(err, MF_EINVAL, "'params.speculative' must be true or false");
        *on = json_is_true(v);
    }
    if ((rc = param_num(p, "draft_max", &dmax, err)) ||
        (rc = param_num(p, "draft_min", &dmin, err)) ||
        (rc = param_num(p, "draft_p_min", &pmin, err)) ||
        (rc = param_num(p, "lookup_ngram", &nmax, err)) ||
        (rc = param_num(p, "lookup_ngram_min", &nmin, err)))
        return rc;
    c->draft_max = (int32_t)dmax;
    c->draft_min = (int32_t)dmin;
    c->p_min = (float)pmin;
    c->ngram_max = (int32_t)nmax;
    c->ngram_min = (int32_t)nmin;
    struct spec_config t = *c;
    t.draft_kv_blocks = 1; /* known once the draft's backend is made */
    return spec_config_check(&t, err);
}

/* The draft GGUF: a whole file or a byte range of one (an image layer). */
static int open_draft(struct serve *s, struct mf_err *err)
{
    const struct serve_config *c = &s->cfg;
    struct gguf_file *gf;
    int rc;
    if (!c->draft_offset && !c->draft_size)
        return model_open(c->draft_path, &s->dm, err);
    rc = gguf_open_range(c->draft_path, c->draft_offset, c->draft_size, &gf, err);
    return rc ? rc : model_open_gguf(gf, &s->dm, err);
}

/* The draft shares the model's vocabulary: the ids it proposes are verified
 * as the model's own. */
static int check_draft(struct serve *s, struct mf_err *err)
{
    struct tok *dt = NULL;
    int rc = tok_load_gguf(s->dm->gf, &dt, err);
    if (!rc)
        rc = tok_same_vocab(s->tok, dt, err);
    tok_free(dt);
    if (!rc && s->dm->hp.n_vocab != s->m->hp.n_vocab)
        rc = mf_err_set(err, MF_EINVAL, "logits of %d tokens against the model's %d",
                        (int)s->dm->hp.n_vocab, (int)s->m->hp.n_vocab);
    return rc ? mf_err_prefix(err, "draft %s (its tokenizer against the model's)",
                              s->cfg.draft_path)
              : 0;
}

static json_t *draft_facts(const struct serve *s)
{
    uint64_t n = 0;
    struct gguf_str arch = {"", 0};
    for (uint64_t i = 0; i < gguf_n_tensors(s->dm->gf); i++)
        n += gguf_tensor_at(s->dm->gf, i)->n_elements;
    if (gguf_get_str(s->dm->gf, "general.architecture", &arch, NULL) != 0)
        arch.len = 0;
    return json_pack("{s:s, s:s%, s:I, s:i, s:i}", "path", s->cfg.draft_path, "architecture",
                     arch.p, (size_t)arch.len, "parameters", (json_int_t)n, "layers",
                     (int)s->dm->hp.n_layer, "embedding_length", (int)s->dm->hp.n_embd);
}

int serve_spec_setup(struct serve *s, struct engine_config *ec, struct backend_config *bc,
                     struct mf_err *err)
{
    struct spec_config *c = &ec->spec;
    int on = 1, rc;

    spec_config_default(c, s->cfg.draft_path ? SPEC_DRAFT : SPEC_LOOKUP);
    c->max_batch = s->cfg.spec_max_batch;
    rc = read_params(s->cfg.params, c, &on, err);
    if (rc)
        return mf_err_prefix(err, "%s", s->cfg.config_path ? s->cfg.config_path : "config");
    if (!on)
        c->source = SPEC_NONE;
    if (c->source == SPEC_DRAFT && ((rc = open_draft(s, err)) || (rc = check_draft(s, err))))
        return rc;
    s->spec_source = (int)c->source;
    if (c->source != SPEC_NONE) { /* verify rows: the decoding sequences' proposals */
        int64_t seqs = s->cfg.max_seqs, busy = c->max_batch ? c->max_batch : seqs;
        int64_t rows = seqs + (busy < seqs ? busy : seqs) * c->draft_max;
        if (rows > s->cfg.max_batch_tokens)
            rows = s->cfg.max_batch_tokens > seqs ? s->cfg.max_batch_tokens : seqs;
        bc->max_logits = (int32_t)rows;
        ec->sched.max_num_logits = (int32_t)rows;
    }
    s->spec_info = json_pack(
        "{s:s, s:i, s:i, s:f, s:i, s:i, s:i}", "source", source_names[c->source], "draft_max",
        c->draft_max, "draft_min", c->draft_min, "draft_p_min", (double)c->p_min, "lookup_ngram",
        c->ngram_max, "lookup_ngram_min", c->ngram_min, "max_batch", c->max_batch);
    if (s->spec_info && s->dm)
        json_object_set_new(s->spec_info, "draft", draft_facts(s));
    if (!s->spec_info)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    mf_log_info(&s->log, "speculative decoding: %s%s%s (draft_max %d, max_batch %d)",
                source_names[c->source], s->dm ? " " : "", s->dm ? s->cfg.draft_path : "",
                (int)c->draft_max, (int)c->max_batch);
    return 0;
}

/* Blocks for the draft: every sequence at full context, within a cap (a
 * share of the model's budget on the CPU, DRAFT_KV_CAP_CUDA on a GPU). */
static int32_t draft_blocks(const struct serve *s, uint64_t block_bytes, int cuda,
                            uint64_t cpu_budget)
{
    int64_t per = (s->n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS + 2;
    int64_t want = per * s->cfg.max_seqs;
    uint64_t cap = cuda ? DRAFT_KV_CAP_CUDA : cpu_budget / 8;
    int64_t fit = block_bytes ? (int64_t)(cap / block_bytes) : want;
    if (want > fit)
        want = fit;
    if (want < per)
        want = per; /* one sequence, at least */
    return want > KV_MAX_BLOCKS ? KV_MAX_BLOCKS : (int32_t)want;
}

int serve_spec_backend(struct serve *s, const struct backend_ops *ops, struct engine_config *ec,
                       struct mf_err *err)
{
    struct backend_config bc = {.n_threads = s->cfg.threads,
                                .max_tokens = s->cfg.max_batch_tokens,
                                .max_seqs = s->cfg.max_seqs};
    int32_t n = 0;
    int rc;

    if (!s->dm)
        return 0;
    bc.kv_bytes = (uint64_t)draft_blocks(s, backend_kv_block_bytes(s->dm, bc.kv_type),
                                         ops == &cuda_backend_ops, ec->budget.free_bytes) *
                  backend_kv_block_bytes(s->dm, bc.kv_type);
    rc = backend_create(ops, s->dm, &bc, &s->dbe, err);
    if (rc == MF_EUNSUPPORTED && ops != &cpu_backend_ops) { /* a draft the GPU plan refuses */
        mf_log_warn(&s->log, "draft %s: %s; it runs on the CPU", s->cfg.draft_path, err->msg);
        rc = backend_create(&cpu_backend_ops, s->dm, &bc, &s->dbe, err);
    }
    if (!rc)
        rc = backend_kv_alloc(s->dbe, &n, err);
    if (rc)
        return mf_err_prefix(err, "draft %s", s->cfg.draft_path);
    if (!(s->dem = calloc(1, sizeof *s->dem)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    *s->dem = (struct engine_model){.ctx = s->dbe,
                                    .n_vocab = (int32_t)s->dm->hp.n_vocab,
                                    .step = backend_engine_step,
                                    .logits_alloc = backend_engine_alloc,
                                    .logits_free = backend_engine_free,
                                    .max_tokens = s->cfg.max_batch_tokens};
    ec->draft = s->dem;
    ec->spec.draft_kv_blocks = n;
    mf_log_info(&s->log, "draft %s: %d layers on the %s backend, %d KV blocks", s->cfg.draft_path,
                (int)s->dm->hp.n_layer, s->dbe->ops->name, (int)n);
    return 0;
}

void serve_spec_close(struct serve *s)
{
    backend_free(s->dbe);
    s->dbe = NULL;
    free(s->dem);
    s->dem = NULL;
    model_close(s->dm);
    s->dm = NULL;
    json_decref(s->spec_info);
    s->spec_info = NULL;
}

static void counter(struct mf_buf *b, const char *name, const char *help, const char *model,
                    double v, const char *type)
{
    mf_buf_printf(b, NULL, "# HELP mfc:%s %s\n# TYPE mfc:%s %s\nmfc:%s{model_name=\"%s\"} %.17g\n",
                  name, help, name, type, name, model, v);
}

void serve_spec_metrics(const struct serve *s, const struct engine_metrics *m, struct mf_buf *b)
{
    const char *model = s->cfg.model_name;
    const struct spec_stats *st = &m->spec;

    if (m->spec_source == SPEC_NONE)
        return;
    counter(b, "spec_decode_num_drafts_total", "Verify steps of a sequence with proposals.", model,
            (double)st->rounds, "counter");
    counter(b, "spec_decode_num_draft_tokens_total", "Proposed tokens verified.", model,
            (double)st->proposed, "counter");
    counter(b, "spec_decode_num_accepted_tokens_total", "Proposed tokens accepted.", model,
            (double)st->accepted, "counter");
    counter(b, "spec_decode_acceptance_rate", "Accepted over proposed tokens, 0..1.", model,
            st->proposed ? (double)st->accepted / (double)st->proposed : 0, "gauge");
    counter(b, "spec_decode_draft_steps_total", "Draft model steps.", model,
            (double)st->draft_steps, "counter");
    counter(b, "spec_decode_off_rounds_total",
            "Rounds without proposals: the batch past max_batch, or slower measured.", model,
            (double)(st->busy_steps + st->guard_off_steps), "counter");
    mf_buf_printf(b, NULL,
                  "# HELP mfc:spec_decode_num_accepted_tokens_per_pos_total Accepted proposals "
                  "by position.\n# TYPE mfc:spec_decode_num_accepted_tokens_per_pos_total "
                  "counter\n");
    json_int_t k = json_integer_value(json_object_get(s->spec_info, "draft_max"));
    for (int i = 0; i < SPEC_MAX_DRAFT && i < k; i++)
        mf_buf_printf(b, NULL,
                      "mfc:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\","
                      "model_name=\"%s\"} %" PRIu64 "\n",
                      i, model, st->accepted_pos[i]);
}
