/*
 * serve_metrics.c: GET /metrics in the Prometheus text format (0.0.4),
 * from engine_metrics. Names follow vLLM's (reference/vllm.md §6) with an
 * "mfc:" prefix, each series labelled model_name; histograms are written
 * cumulative with a +Inf bucket, _sum and _count, as Prometheus expects.
 */
#include "runtime/serve/serve_int.h"

#include <inttypes.h>

static void gauge(struct mf_buf *b, const char *name, const char *help, const char *model,
                  double v, const char *type)
{
    mf_buf_printf(b, NULL, "# HELP mfc:%s %s\n# TYPE mfc:%s %s\nmfc:%s{model_name=\"%s\"} %.17g\n",
                  name, help, name, type, name, model, v);
}

static void hist(struct mf_buf *b, const char *name, const char *help, const char *model,
                 const struct engine_hist *h)
{
    uint64_t cum = 0;
    mf_buf_printf(b, NULL, "# HELP mfc:%s %s\n# TYPE mfc:%s histogram\n", name, help, name);
    for (int32_t i = 0; i < h->n_bounds && i < ENGINE_HIST_MAX; i++) {
        cum += h->counts[i];
        mf_buf_printf(b, NULL, "mfc:%s_bucket{le=\"%g\",model_name=\"%s\"} %" PRIu64 "\n", name,
                      h->bounds[i], model, cum);
    }
    cum += h->counts[h->n_bounds < ENGINE_HIST_MAX ? h->n_bounds : ENGINE_HIST_MAX];
    mf_buf_printf(b, NULL, "mfc:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %" PRIu64 "\n", name,
                  model, cum);
    mf_buf_printf(b, NULL, "mfc:%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
    mf_buf_printf(b, NULL, "mfc:%s_count{model_name=\"%s\"} %" PRIu64 "\n", name, model,
                  h->count);
}

int serve_metrics_text(struct serve *s, struct mf_buf *b, struct mf_err *err)
{
    struct engine_metrics m;
    const char *model = s->cfg.model_name;
    static const char *const reasons[5] = {NULL, "stop", "length", "abort", "error"};

    engine_metrics(s->e, &m);
    gauge(b, "num_requests_running", "Requests in the running batch.", model, m.n_running,
          "gauge");
    gauge(b, "num_requests_waiting", "Requests waiting to be scheduled.", model, m.n_waiting,
          "gauge");
    gauge(b, "kv_cache_usage_perc", "KV cache usage: 1 means 100 percent.", model, m.kv_usage,
          "gauge");
    gauge(b, "kv_cache_blocks_total", "KV cache blocks.", model, m.kv.blocks_total, "gauge");
    gauge(b, "kv_cache_blocks_used", "KV cache blocks held by requests.", model,
          m.kv.blocks_used, "gauge");
    gauge(b, "http_requests_in_flight", "Generation requests being answered.", model,
          atomic_load(&s->active), "gauge");
    gauge(b, "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", model,
          (double)m.kv.prefix_queries, "counter");
    gauge(b, "prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", model,
          (double)m.kv.prefix_hits, "counter");
    gauge(b, "prompt_tokens_total", "Prefill tokens processed.", model, (double)m.prompt_tokens,
          "counter");
    gauge(b, "generation_tokens_total", "Generation tokens processed.", model,
          (double)m.generation_tokens, "counter");
    gauge(b, "num_preemptions_total", "Preemptions by the scheduler.", model,
          (double)m.preemptions, "counter");
    gauge(b, "engine_steps_total", "Model steps run.", model, (double)m.steps, "counter");
    gauge(b, "engine_host_seconds_total",
          "Step thread seconds outside the model's calls: scheduling, bookkeeping, host draws.",
          model, m.host_s, "counter");
    gauge(b, "engine_model_seconds_total", "Seconds inside the model's step and draw calls.", model,
          m.model_s, "counter");
    mf_buf_printf(b, NULL,
                  "# HELP mfc:tokens_sampled_total Generated tokens by where they were drawn.\n"
                  "# TYPE mfc:tokens_sampled_total counter\n"
                  "mfc:tokens_sampled_total{where=\"device\",model_name=\"%s\"} %" PRIu64 "\n"
                  "mfc:tokens_sampled_total{where=\"host\",model_name=\"%s\"} %" PRIu64 "\n",
                  model, m.device_draws, model, m.host_draws);
    mf_buf_printf(b, NULL,
                  "# HELP mfc:request_success_total Finished requests by reason.\n"
                  "# TYPE mfc:request_success_total counter\n");
    for (int i = 1; i < 5; i++)
        mf_buf_printf(b, NULL,
                      "mfc:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %" PRIu64
                      "\n",
                      reasons[i], model, m.finished[i]);
    hist(b, "time_to_first_token_seconds", "Time to first token.", model, &m.ttft);
    hist(b, "inter_token_latency_seconds", "Time between output tokens.", model, &m.itl);
    hist(b, "e2e_request_latency_seconds", "Request latency, arrival to finish.", model, &m.e2e);
    hist(b, "request_queue_time_seconds", "Time waiting before first scheduled.", model,
         &m.queue);
    serve_spec_metrics(s, &m, b);
    if (b->len + 1 >= b->max)
        return mf_err_set(err, MF_ENOMEM, "metrics text over %zu bytes", b->max);
    return 0;
}
