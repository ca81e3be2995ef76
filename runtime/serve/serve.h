/*
 * serve.h: mfc-serve, the HTTP server over the engine (runtime/engine/engine.h):
 * OpenAI and Ollama wire formats, /health, /metrics, /tokenize.
 *
 * Split by job:
 *   serve_config.c  settings: defaults, model.yaml (libyaml), MFC_* env, flags
 *   serve_req.c     request bodies (JSON) -> struct serve_req, with 400 messages
 *   serve_embed_req.c embeddings request bodies -> struct serve_embed_req
 *   serve_embed.c   embeddings: tokens -> mean-pooled hidden state, responses
 *   serve_device.c  MFC_DEVICE: the CPU or CUDA backend, and auto's CPU fallback
 *   serve_load.c    model, tokenizer, template, adapters, backend, engine
 *   serve_gen.c     one generation: prompt, submit, events -> text, disconnects
 *   serve_openai.c  OpenAI chunks, responses and errors
 *   serve_ollama.c  Ollama NDJSON, responses, tags/show/ps
 *   serve_metrics.c Prometheus text from engine_metrics
 *   serve_head.c    request heads checked before libmicrohttpd sees them; the door's errors
 *   serve_door.c    the listening socket: connection caps, read timeout, handing over
 *   serve.c         libmicrohttpd daemon, routing, auth, limits, access log, drain
 *   serve_main.c    main(): flags, signals, load, run
 * docs/api.md is the user-facing description.
 */
#ifndef MFC_SERVE_H
#define MFC_SERVE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"
#include "runtime/model/batch.h"
#include "runtime/engine/backend.h"
#include "runtime/engine/sampler.h"

#define SERVE_MAX_ADAPTERS 64
#define SERVE_MAX_STOPS 16      /* stop strings on one request */
#define SERVE_MAX_STOP_LEN 256  /* bytes of one stop string */
#define SERVE_MAX_N 8           /* OpenAI n: choices per request */
#define SERVE_MAX_MSGS 4096     /* chat messages per request */
#define SERVE_CONFIG_MAX (16u << 20) /* bytes of model.yaml */
/* Prompt tokens a step takes beside decodes (MFC_MAX_PREFILL_TOKENS;
 * runtime/engine/sched.c "Prefill beside decode") unless set: on the CPU,
 * where a prompt token costs about what a decode token does, 64 (8 streams
 * beside two clients sending 480-token prompts: time per output token 235-320
 * ms against 595-1,406 with no cap, first tokens of the prompts about as soon;
 * bench/README.md); on a GPU, where a step's weights are read once for all
 * its tokens, 256: half the default budget, what a 512/128 load of 64
 * clients needs a step (4 prompt tokens for each decode) so its prompts keep
 * up (to be measured with bench/serve-gpu). */
#define SERVE_PREFILL_TOKENS_CPU 64
#define SERVE_PREFILL_TOKENS_GPU 256

/* ---- settings (serve_config.c) ---- */

struct serve_adapter_cfg {
    char *name;  /* owned; NULL: unnamed (always applied, as Ollama's ADAPTER) */
    char *path;  /* owned */
    uint64_t offset; /* where the GGUF starts inside path (model.yaml offset:, PATH@OFF:SIZE) */
    uint64_t size;   /* its bytes; 0: to the end of the file (offset 0 too: the whole file) */
    float scale; /* user scale, 1 by default */
};

struct serve_config {
    char *host;          /* owned: listen address ("0.0.0.0") */
    int port;            /* 8080 */
    char *api_key;       /* owned or NULL: bearer token required when set */
    char *model_path;    /* owned: the GGUF */
    char *draft_path;    /* owned or NULL: the DRAFT model's GGUF (model.yaml draft:,
                            --draft, MFC_DRAFT) */
    uint64_t draft_offset; /* where it starts inside draft_path (offset:, PATH@OFF:SIZE) */
    uint64_t draft_size;   /* its bytes; 0: to the end of the file */
    int spec_max_batch;  /* no proposals when more sequences decode (MFC_SPEC_MAX_BATCH,
                            32; 0: no limit) */
    uint64_t model_offset; /* --model-offset: where the GGUF starts inside model_path */
    uint64_t model_size;   /* --model-size: its bytes; 0: to the end of the file */
    char *config_path;   /* owned or NULL: model.yaml read */
    char *config_name;   /* owned or NULL: its name in messages (--config-name) */
    char *model_name;    /* owned: the served name (MFC_MODEL_NAME, else the file's stem) */
    char *device;        /* owned: "cpu" (MFC_DEVICE) */
    char *kv_cache_gb;   /* owned or NULL: MFC_KV_CACHE_GB */
    int kv_type;         /* MFC_KV_CACHE_TYPE as an enum backend_kv_type: F16 (f16), Q8 (q8,
                            q8_0) or FP8 (fp8); the last two on CUDA only */
    int threads;         /* CPU threads; 0: one per core */
    int max_seqs;        /* sequences per step (MFC_MAX_SEQS, 64) */
    int max_batch_tokens; /* tokens per step (MFC_MAX_BATCH_TOKENS, 512) */
    int max_prefill_tokens; /* prompt tokens a step carries beside decodes
                               (MFC_MAX_PREFILL_TOKENS; 0: the whole budget;
                               -1: the backend's SERVE_PREFILL_TOKENS_*) */
    int max_requests;    /* generations at once before 429 (MFC_MAX_REQUESTS, 256) */
    int max_waiting;     /* engine queue before 429 (MFC_MAX_WAITING, 256) */
    int ctx;             /* context length; 0: num_ctx parameter or the model's */
    size_t max_body;     /* request body bytes before 413 (MFC_MAX_BODY, 4 MiB) */
    int drain_s;         /* SIGTERM: seconds to wait for in-flight requests (30) */
    int read_timeout;    /* seconds a request head may take to arrive, and a body past its
                            1 s per 64 KiB (MFC_READ_TIMEOUT, 10); beyond: 408 */
    int max_connections; /* connections open at once (MFC_MAX_CONNECTIONS, 4096); beyond: 503 */
    int max_conns_per_client; /* of one client address (MFC_MAX_CONNECTIONS_PER_CLIENT,
                                 512; 0: no cap); beyond: 503 */
    struct serve_adapter_cfg adapters[SERVE_MAX_ADAPTERS];
    int n_adapters;
    json_t *params;      /* owned: model.yaml params (Ollama types), {} when none */
    char *template_src;  /* owned or NULL: model.yaml template */
    char *system;        /* owned or NULL: model.yaml system */
    json_t *messages;    /* owned: model.yaml messages [{role, content}], [] when none */
    json_t *doc;         /* owned: the whole model.yaml as JSON, {} when none */
    enum mf_log_level log_level;
};

/* Sets defaults. Cannot fail. */
void serve_config_init(struct serve_config *c);
void serve_config_free(struct serve_config *c);
/* Reads a model.yaml (schema mfc.config/v1) into c: model.path (relative
 * paths resolve against the file's folder), adapters, params, template,
 * system, messages. Returns 0 or MF_ENOTFOUND/MF_EIO/MF_EFORMAT/MF_EUNSUPPORTED
 * naming the file (and line:col for YAML errors). */
int serve_config_load_yaml(struct serve_config *c, const char *path, struct mf_err *err);
/* Parses YAML text into JSON (plain scalars: int, float, bool, null resolved
 * as YAML 1.2 core; quoted ones stay strings). For tests and the loader. */
json_t *serve_yaml_to_json(const char *text, size_t len, const char *what, struct mf_err *err);
/* Applies MFC_* from getenv-like lookup env (NULL: getenv) then argv flags
 * (argv[0] skipped); flags win over env, env over model.yaml. The config file
 * (--config or MFC_CONFIG) is loaded first. MF_EUSAGE for a bad flag or
 * value, naming it. *help set when --help was given. */
int serve_config_parse(struct serve_config *c, int argc, char **argv,
                       const char *(*env)(const char *), int *help, struct mf_err *err);
extern const char serve_usage[];

/* ---- the compute device (serve_device.c) ---- */

struct model;

enum serve_device {
    SERVE_DEVICE_CPU,
    SERVE_DEVICE_CUDA,
};

/* Decides MFC_DEVICE device ("cpu", "cuda", "auto") for model m with gpus
 * CUDA devices visible: 0 and *out. "auto" takes CUDA only when a GPU is
 * visible and the CUDA plan accepts every tensor of m; when a GPU is visible
 * but the plan refuses one (Q5_0/Q5_1 weights, ...), *out is CPU and why
 * (cap bytes) says why, for the log; otherwise why is "". Fails with
 * MF_EUNSUPPORTED for "cuda" without a GPU or with a refused tensor (the
 * message names it), MF_EUSAGE for another device name. */
int serve_pick_device(const char *device, int gpus, const struct model *m,
                      enum serve_device *out, char *why, size_t cap, struct mf_err *err);

/* ---- options: Ollama's, as the model sets them and a request overrides ---- */

enum {
    SO_TEMPERATURE = 1u << 0,
    SO_TOP_K = 1u << 1,
    SO_TOP_P = 1u << 2,
    SO_MIN_P = 1u << 3,
    SO_TYPICAL_P = 1u << 4,
    SO_REPEAT_PENALTY = 1u << 5,
    SO_PRESENCE = 1u << 6,
    SO_FREQUENCY = 1u << 7,
    SO_REPEAT_LAST_N = 1u << 8,
    SO_SEED = 1u << 9,
    SO_NUM_PREDICT = 1u << 10,
    SO_NUM_CTX = 1u << 11,
    SO_SPECULATIVE = 1u << 12,
};

struct serve_opts {
    unsigned set; /* SO_* bits: which fields were given */
    float temperature, top_p, min_p, typical_p, repeat_penalty, presence, frequency;
    int32_t top_k, repeat_last_n, num_ctx;
    int speculative; /* 0: no speculative decoding for this request (SO_SPECULATIVE) */
    int64_t seed, num_predict;
    char *stops[SERVE_MAX_STOPS]; /* owned */
    int n_stops;
    int stops_set; /* 1: stop given (replaces the model's) */
};

/* Reads an Ollama options object (or model.yaml params) into o, over what o
 * holds. Unknown keys are ignored (Ollama warns). what names the object in
 * messages: "options.temperature must be a number". MF_EINVAL. */
int serve_opts_from_json(struct serve_opts *o, const json_t *obj, const char *what,
                         struct mf_err *err);
/* Frees the stop strings. */
void serve_opts_free(struct serve_opts *o);
/* Adds one stop string (copied). MF_ERANGE past the limits. */
int serve_opts_add_stop(struct serve_opts *o, const char *s, const char *what,
                        struct mf_err *err);

/* ---- requests (serve_req.c) ---- */

enum serve_api {
    SERVE_OAI_CHAT,       /* POST /v1/chat/completions */
    SERVE_OAI_COMPLETION, /* POST /v1/completions */
    SERVE_OLLAMA_GENERATE, /* POST /api/generate */
    SERVE_OLLAMA_CHAT,    /* POST /api/chat */
};

struct serve_msg {
    char *role;         /* owned */
    char *content;      /* owned */
    json_t *tool_calls; /* owned or NULL: [{id, name, arguments (an object)}] */
    char *tool_call_id; /* owned or NULL: a tool result's call (OpenAI) */
    char *tool_name;    /* owned or NULL: a tool result's function */
};

/* tool_choice (serve_tools.c) */
enum { SERVE_TOOLS_AUTO, SERVE_TOOLS_NONE, SERVE_TOOLS_REQUIRED, SERVE_TOOLS_NAMED };

struct serve_req {
    enum serve_api api;
    char *model;           /* owned or NULL */
    char *prompt;          /* owned or NULL: completions / generate */
    char *suffix;          /* owned or NULL */
    char *system;          /* owned or NULL: generate override */
    char *template_src;    /* owned or NULL: generate/chat override */
    int raw;               /* generate: no template */
    struct serve_msg *msgs; /* owned: chat messages */
    size_t n_msgs;
    int32_t *tokens;       /* owned: completions prompt given as token ids, or generate context */
    size_t n_tokens;
    int stream;            /* 1: SSE / NDJSON */
    int include_usage;     /* stream_options.include_usage */
    int n;                 /* choices, 1..SERVE_MAX_N */
    int logprobs;          /* 1: report logprobs */
    int top_logprobs;      /* alternatives, 0..20 */
    int ignore_eos;
    int64_t max_tokens;    /* -1: not given */
    struct serve_opts opts; /* sampling overrides and stop strings */
    char *grammar;         /* owned or NULL: GBNF the answer must match (format,
                              response_format, grammar), checked at parse time */
    json_t *tools;         /* owned or NULL: [{name, description, parameters}] */
    int tool_choice;       /* SERVE_TOOLS_* */
    char *tool_name;       /* owned: the function tool_choice names */
    int parallel_tools;    /* parallel_tool_calls: several calls in one answer */
};

/* serve_tools.c: the structured-output and tool fields of a request body
 * (after the messages are parsed) into rq; MF_EINVAL naming the field. */
int serve_req_structured(struct serve_req *rq, const json_t *body, struct mf_err *err);

/* Parses a request body that must be one JSON object into *out (owned by
 * the caller). MF_EINVAL with the sentence a 400 carries otherwise. */
int serve_json_object(const char *body, size_t len, json_t **out, struct mf_err *err);

/* Parses a request body for api. Returns 0 and fills rq (free with
 * serve_req_free), or MF_EINVAL with err naming the field ("'messages[2].role'
 * must be a string"); rq is then safe to free. */
int serve_req_parse(enum serve_api api, const char *body, size_t len, struct serve_req *rq,
                    struct mf_err *err);
void serve_req_free(struct serve_req *rq);

/* ---- embeddings requests (serve_embed_req.c) ---- */

#define SERVE_EMBED_MAX_INPUTS 2048    /* inputs in one request (OpenAI's limit) */
#define SERVE_EMBED_MAX_TOKENS (1u << 20) /* ids in one token-array input */

enum serve_embed_api {
    SERVE_EMBED_OAI,    /* POST /v1/embeddings */
    SERVE_EMBED_OLLAMA, /* POST /api/embed */
    SERVE_EMBED_LEGACY, /* POST /api/embeddings */
};

/* One input: a text (tokenized by the server) or token ids (used as given). */
struct serve_embed_in {
    char *text;       /* owned or NULL; non-empty, may hold NUL bytes */
    size_t text_len;  /* its bytes */
    int32_t *tokens;  /* owned or NULL: ids >= 0 (vocabulary checked later) */
    size_t n_tokens;  /* 1..SERVE_EMBED_MAX_TOKENS when tokens is set */
};

struct serve_embed_req {
    enum serve_embed_api api;
    char *model;              /* owned or NULL */
    struct serve_embed_in *in; /* owned: n_in entries, all texts or all token lists */
    size_t n_in;              /* 1..SERVE_EMBED_MAX_INPUTS after a successful parse */
    int base64;               /* OpenAI encoding_format "base64" */
    int truncate;             /* Ollama: 1 (default) cuts over-long inputs to the context */
    int64_t dimensions;       /* OpenAI dimensions; -1: not given */
};

/* Parses an embeddings request body for api (rules in serve_embed_req.c).
 * Returns 0 and fills rq (free with serve_embed_req_free), or MF_EINVAL with
 * err naming the field ("'input[1]' must be a string"); rq is then safe to
 * free. MF_ENOMEM when memory runs out. */
int serve_embed_parse(enum serve_embed_api api, const char *body, size_t len,
                      struct serve_embed_req *rq, struct mf_err *err);
void serve_embed_req_free(struct serve_embed_req *rq);

/* ---- the running server ---- */

struct serve_adapter {
    char *name;       /* borrowed from the config; NULL for unnamed */
    int32_t id;       /* model adapter index */
    float scale;      /* effective scale (lora_scale) */
};

struct serve {
    struct serve_config cfg;   /* owned */
    struct mf_log log;         /* to stderr */
    struct model *m;           /* owned */
    struct tok *tok;           /* owned */
    struct tmpl *tmpl;         /* owned: the chat template */
    char *tmpl_src;            /* owned: its text */
    char *family;              /* owned or NULL: detected template family name */
    struct serve_opts defaults; /* model.yaml params + the family's stop strings */
    struct backend *be;        /* owned */
    struct engine *e;          /* owned */
    struct model *dm;          /* owned or NULL: the draft model (serve_spec.c) */
    struct backend *dbe;       /* owned or NULL: its backend */
    struct engine_model *dem;  /* owned or NULL: its engine interface */
    int spec_source;           /* enum spec_source the engine runs */
    json_t *spec_info;         /* owned or NULL: /api/show's "speculative" */
    int32_t eos[32];
    int32_t n_eos;
    int32_t n_ctx;             /* context length the engine enforces */
    int32_t n_blocks;          /* KV blocks */
    struct serve_adapter adapters[SERVE_MAX_ADAPTERS];
    int n_adapters;
    json_t *model_info;        /* owned: GGUF scalar metadata for /api/show */
    char quant[16];            /* the projections' type name ("Q4_K", "F32") */
    char arch[32];             /* general.architecture: /api/show's details.family */
    uint64_t n_params;         /* parameters, counted from the tensors */
    uint64_t model_bytes;      /* size of the GGUF */
    char digest[72];           /* "sha256:..." of the model path and size (a stable id) */
    int64_t load_ns;           /* time spent loading */
    int64_t started;           /* unix seconds when ready */
    atomic_int ready;          /* 1 once the model is loaded */
    atomic_int draining;       /* 1 after SIGTERM */
    atomic_int active;         /* generations in flight */
    atomic_uint_fast64_t seq;  /* request ids */
    struct MHD_Daemon *mhd;    /* owned */
    struct serve_door *door;   /* owned: the listening socket and slow clients (serve_door.h) */
    struct serve_embedder *emb; /* owned: the embeddings computer (serve_embed.c) */
    struct gram_vocab *gvocab;  /* owned: the vocabulary trie for grammars */
    struct serve_gcache *gcache; /* owned: compiled grammars shared by requests */
};

/* serve_load.c: loads everything in s->cfg; 0 or MF_E* naming the file. */
int serve_load(struct serve *s, struct mf_err *err);
/* Frees what serve_load made. */
void serve_unload(struct serve *s);
/* The adapter set a request's model name selects: 0 and *lora, or
 * MF_ENOTFOUND ("model 'x' not found"). NULL/"" selects the base. */
int serve_pick_model(const struct serve *s, const char *name, struct batch_lora *lora,
                     struct mf_err *err);

/* serve.c: starts the daemon on cfg.host:cfg.port. */
int serve_start(struct serve *s, struct mf_err *err);
/* Stops accepting, waits up to cfg.drain_s for in-flight generations, stops. */
void serve_stop(struct serve *s);

/* serve_metrics.c: Prometheus text exposition of the engine's metrics. */
int serve_metrics_text(struct serve *s, struct mf_buf *out, struct mf_err *err);

/* serve_spec.c: speculative decoding's part of loading and serving. */
struct engine_config;
struct backend_config;
struct backend_ops;
struct engine_metrics;
/* The speculation settings (model.yaml params speculative, draft_*,
 * lookup_*; MFC_SPEC_MAX_BATCH) into ec->spec, and the DRAFT model opened
 * and checked against s->m and s->tok (same vocabulary and special tokens,
 * the first difference named); widens bc's and ec's logits rows for verify
 * steps. Call before the model's backend is made. 0 or MF_E* naming the
 * setting or the file. */
int serve_spec_setup(struct serve *s, struct engine_config *ec, struct backend_config *bc,
                     struct mf_err *err);
/* The draft's backend (on ops) and its KV pool, sized from the target's
 * context and sequences, into ec->draft. */
int serve_spec_backend(struct serve *s, const struct backend_ops *ops, struct engine_config *ec,
                       struct mf_err *err);
void serve_spec_close(struct serve *s);
/* spec_decode_* series for /metrics. */
void serve_spec_metrics(const struct serve *s, const struct engine_metrics *m, struct mf_buf *b);

/* Monotonic nanoseconds. */
int64_t serve_now_ns(void);

#endif
