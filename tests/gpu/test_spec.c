/*
 * test_spec.c: speculative decoding through the engine on the CUDA backend,
 * on a GPU host (tests/gpu/run builds and runs it):
 *
 *   test_spec MODEL.gguf [DRAFT.gguf]     (exit 77 without a GPU)
 *
 * 16 seeded prompts, 64 greedy tokens each, first without speculation one
 * request at a time (the reference), then with it: the model as its own
 * draft (or DRAFT.gguf, the same vocabulary), prompt lookup, and the
 * benchmarks' oracle script (the reference's own tokens: everything must be
 * accepted), each at k = 3 one request at a time and at k = 4 with 8
 * requests at once; verify steps run as CUDA graphs where the backend
 * records decode steps (cuda_backend_stats counts the replays).
 *
 * What must hold: every run finishes with every block given back and the
 * oracle accepts every proposal. Tokens must equal the reference where a
 * verify step takes the kernels a decode step takes: quantized weights
 * (no F16/BF16/F32 projections, which take the tensor cores from 2 tokens)
 * and at most 4 tokens a step (below MFC_CUDA_GEMM_MIN and MFK_MMQ_MIN,
 * the GEMV path, whose rows do not depend on the step's token count), i.e.
 * the k = 3 runs at batch 1, with attention on the per-token kernel unsplit
 * (the reference too): a step's token count picks the FlashDecoding splits
 * and, from 4 decode tokens, the decode tiles, each summing in its own order
 * (MFC_CUDA_ATTENTION_SPLIT=0, MFC_CUDA_DECODE_TILES=0 for those runs; the
 * batch-8 runs keep both). Elsewhere the CUDA backend's rows depend on a
 * step's token count, as they already do between batch sizes without
 * speculation, and a near-tie can flip: those runs report the share of
 * requests whose tokens are identical and the first divergence. The last
 * line says PASS or FAIL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "runtime/cuda/cuda.h"
#include "runtime/engine/backend.h"
#include "runtime/engine/engine.h"
#include "runtime/model/model.h"

#define N_REQ 16
#define N_OUT 64
#define N_PROMPT 32

static int failures;

struct run {
    int32_t out[N_REQ][N_OUT];
    int32_t n_out[N_REQ];
    uint64_t proposed, accepted;
};

static struct backend *make_backend(const struct model *m, int32_t seqs, int32_t k)
{
    struct backend_config bc = {.max_tokens = 512, .max_seqs = seqs, .max_logits = seqs * (k + 1)};
    struct backend *b;
    struct mf_err err;
    int32_t n;
    bc.kv_bytes = (uint64_t)seqs * 16 * backend_kv_block_bytes(m, bc.kv_type);
    if (backend_create(&cuda_backend_ops, m, &bc, &b, &err) || backend_kv_alloc(b, &n, &err)) {
        printf("FAIL backend: %s\n", err.msg);
        exit(1);
    }
    return b;
}

static void prompt_of(int i, int32_t n_vocab, int32_t *p)
{
    for (int t = 0; t < N_PROMPT; t++) /* odd prompts repeat themselves: lookup finds them */
        p[t] = (int32_t)((uint32_t)(i % 2 ? i * 31 + t % 7 * 13 : i * 7919 + t * 104729) %
                         (uint32_t)n_vocab);
}

/* One run: batch requests at a time through an engine over the CUDA backend. */
static int run(const struct model *m, const struct model *dm, enum spec_source src, int32_t k,
               int32_t batch, const struct run *oracle, struct run *out)
{
    struct backend *be = make_backend(m, batch, k), *db = NULL;
    struct engine_config ec = {0};
    struct engine_model em = {.ctx = be,
                              .n_vocab = (int32_t)m->hp.n_vocab,
                              .step = backend_engine_step,
                              .logits_alloc = backend_engine_alloc,
                              .logits_free = backend_engine_free,
                              .max_tokens = 512};
    struct engine_model dem;
    struct engine *e;
    struct mf_err err;
    int32_t prompts[N_REQ][N_PROMPT];
    int rc = 0;

    ec.sched.max_num_seqs = batch;
    ec.sched.max_num_batched_tokens = 512;
    ec.sched.max_num_logits = batch * (k + 1);
    ec.sched.max_model_len = 256;
    ec.sched.max_waiting = N_REQ;
    ec.n_kv_blocks = batch * 16;
    spec_config_default(&ec.spec, src);
    ec.spec.draft_max = k;
    ec.spec.fixed_k = 1;
    ec.spec.no_guard = 1;
    ec.spec.max_batch = 0;
    ec.spec.p_min = 0;
    if (src == SPEC_DRAFT) {
        db = make_backend(dm, batch, 1);
        dem = (struct engine_model){.ctx = db,
                                    .n_vocab = (int32_t)dm->hp.n_vocab,
                                    .step = backend_engine_step,
                                    .logits_alloc = backend_engine_alloc,
                                    .logits_free = backend_engine_free,
                                    .max_tokens = 512};
        ec.draft = &dem;
        ec.spec.draft_kv_blocks = batch * 16;
    }
    memset(out, 0, sizeof *out);
    if (engine_open(&ec, &em, NULL, &e, &err)) {
        printf("FAIL engine_open: %s\n", err.msg);
        exit(1);
    }
    for (int i0 = 0; i0 < N_REQ && !rc; i0 += batch) {
        uint64_t ids[N_REQ];
        for (int i = i0; i < i0 + batch && i < N_REQ && !rc; i++) {
            struct engine_request rq = {.prompt = prompts[i],
                                        .n_prompt = N_PROMPT,
                                        .max_tokens = N_OUT,
                                        .ignore_eos = 1,
                                        .no_spec = src == SPEC_NONE};
            prompt_of(i, (int32_t)m->hp.n_vocab, prompts[i]);
            if (oracle) {
                rq.spec_script = oracle->out[i];
                rq.n_spec_script = N_OUT;
            }
            rc = engine_submit(e, &rq, &ids[i], &err);
        }
        for (int i = i0; i < i0 + batch && i < N_REQ && !rc; i++) {
            struct engine_summary sum;
            for (;;) {
                struct engine_event ev;
                if ((rc = engine_next(e, ids[i], 120000, &ev, &sum, &err)))
                    break;
                if (ev.token >= 0 && out->n_out[i] < N_OUT)
                    out->out[i][out->n_out[i]++] = ev.token;
                if (ev.finish != SCHED_FINISH_NONE)
                    break;
            }
            out->proposed += sum.n_proposed;
            out->accepted += sum.n_accepted;
            if (!rc && sum.finish == SCHED_FINISH_ERROR)
                rc = mf_err_set(&err, MF_EIO, "request %d: %s", i, sum.err.msg);
        }
    }
    struct engine_metrics mt;
    engine_metrics(e, &mt);
    if (!rc && mt.kv.blocks_used != 0)
        rc = mf_err_set(&err, MF_EINTEGRITY, "%d KV blocks still in use", mt.kv.blocks_used);
    if (!rc && engine_check(e, &err))
        rc = err.code;
    struct cuda_upload_stats st;
    cuda_backend_stats(be, &st);
    engine_close(e);
    backend_free(be);
    backend_free(db);
    if (rc)
        printf("FAIL run: %s\n", err.msg);
    else if (src != SPEC_NONE)
        printf("  graphs: %llu replays, %llu recorded\n", (unsigned long long)st.graph_replays,
               (unsigned long long)st.graph_records);
    return rc;
}

/* Requests whose tokens equal the reference's; prints the first divergence. */
/* Attention whose rows do not depend on the step's token count (read by
 * the CUDA backend at create): no splits, no decode tiles. */
static void fixed_attention(int on)
{
    if (on) {
        setenv("MFC_CUDA_ATTENTION_SPLIT", "0", 1);
        setenv("MFC_CUDA_DECODE_TILES", "0", 1);
    } else {
        unsetenv("MFC_CUDA_ATTENTION_SPLIT");
        unsetenv("MFC_CUDA_DECODE_TILES");
    }
}

static int compare(const char *what, const struct run *ref, const struct run *got, int must)
{
    int same = 0, told = 0;
    for (int i = 0; i < N_REQ; i++) {
        int d = 0;
        while (d < N_OUT && got->out[i][d] == ref->out[i][d])
            d++;
        same += d == N_OUT;
        if (d < N_OUT && !told++) /* the first divergent request */
            printf("  %s: request %d diverges at token %d (%d against %d)\n", what, i, d,
                   got->out[i][d], ref->out[i][d]);
    }
    printf("%s %-28s identical %2d/%d  accepted %llu/%llu\n",
           must && same != N_REQ ? "FAIL" : "ok  ", what, same, N_REQ,
           (unsigned long long)got->accepted, (unsigned long long)got->proposed);
    if (must && same != N_REQ)
        failures++;
    return same;
}

/* 1 when every projection is quantized (no tensor cores below 5 tokens). */
static int quantized(const struct model *m)
{
    for (int32_t l = 0; l < m->hp.n_layer; l++)
        for (int w = 0; w < MODEL_W_PER_LAYER; w++) {
            const struct model_weight *x = &m->layers[l].w[w];
            if (x->data &&
                (x->type == GGML_TYPE_F32 || x->type == GGML_TYPE_F16 || x->type == GGML_TYPE_BF16))
                return 0;
        }
    return 1;
}

int main(int argc, char **argv)
{
    static struct run ref, got;
    struct model *m, *dm = NULL;
    struct mf_err err;

    if (argc < 2) {
        fprintf(stderr, "usage: test_spec MODEL.gguf [DRAFT.gguf]\n");
        return 2;
    }
    if (cuda_device_count() < 1) {
        printf("SKIP no CUDA device\n");
        return 77;
    }
    if (model_open(argv[1], &m, &err) || model_open(argc > 2 ? argv[2] : argv[1], &dm, &err)) {
        printf("FAIL %s\n", err.msg);
        return 1;
    }
    int exact = quantized(m); /* the k = 3 runs take the decode path's kernels */
    printf("# %s, draft %s; tokens must match at k = 3, batch 1: %s\n", argv[1],
           argc > 2 ? argv[2] : "the model itself", exact ? "yes" : "no (F16/BF16/F32 weights)");
    fixed_attention(1);
    if (run(m, dm, SPEC_NONE, 1, 1, NULL, &ref))
        return 1;
    static const struct {
        enum spec_source src;
        int32_t k, batch;
        int oracle;
        const char *name;
    } cases[] = {
        {SPEC_LOOKUP, 3, 1, 1, "oracle k=3 batch 1"}, {SPEC_DRAFT, 3, 1, 0, "draft k=3 batch 1"},
        {SPEC_LOOKUP, 3, 1, 0, "lookup k=3 batch 1"}, {SPEC_LOOKUP, 4, 8, 1, "oracle k=4 batch 8"},
        {SPEC_DRAFT, 4, 8, 0, "draft k=4 batch 8"},   {SPEC_LOOKUP, 4, 8, 0, "lookup k=4 batch 8"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fixed_attention(cases[c].batch == 1);
        if (run(m, dm, cases[c].src, cases[c].k, cases[c].batch, cases[c].oracle ? &ref : NULL,
                &got)) {
            failures++;
            continue;
        }
        compare(cases[c].name, &ref, &got, exact && cases[c].batch == 1);
        if (cases[c].oracle && got.accepted + N_REQ * 4 < got.proposed) {
            /* the oracle is the reference: only a divergence rejects it */
            printf("  oracle rejected %llu of %llu\n",
                   (unsigned long long)(got.proposed - got.accepted),
                   (unsigned long long)got.proposed);
            if (exact && cases[c].batch == 1)
                failures++;
        }
    }
    model_close(m);
    model_close(dm);
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
