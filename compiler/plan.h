/*
 * plan.h: the build planner: a parsed Modelfile becomes a DAG of typed steps.
 *
 * Nodes are created inputs first, so node ids are a topological order (every
 * input id is smaller than the node's id); the executor (exec/exec.h)
 * relies on it. A plan touches the file system only to stat sources
 * (fetch_resolve); nothing is read or fetched until exec_run.
 *
 * Shape of a plan for FROM ./b.gguf, ADAPTER ./a.gguf, SYSTEM "x":
 *
 *   #1 source FROM ./b.gguf ──> #2 check ──> #3 layer weights ───────────┐
 *   #4 source ADAPTER ./a.gguf -> #5 check (+#2: LoRA-vs-base hook) -> #6 layer ─┤
 *   #7 config (PARAMETER/TEMPLATE/SYSTEM/...) ──> #8 layer config ───────> #9 image
 *
 * A safetensors directory adds a convert step after its source, ADAPTER
 * --merge a merge step (base check + adapter check -> weights), and each RUN a
 * run step that every later local FROM/ADAPTER/DRAFT source depends on (the
 * RUN may write that file); a RUN reads the RUN before it and the sources
 * above it (planned early, once), `FROM|ADAPTER|DRAFT /out/PATH` after a RUN
 * is a source node reading the RUN's output (args kind "run-output"), and
 * each RUN's /out is an image layer (the RUN node is an input of the image
 * node; docs/run.md). All merged adapters go into one merge step
 * (base + their checks -> weights, requantized once, to --quantize's type
 * when given); --quantize without merged adapters adds a quantize step.
 *
 * Cache keys (plan_node_key) follow BuildKit (reference/oci.md §3): the op,
 * its arguments (canonical JSON), the keys and output digests of its inputs,
 * and for a source its content digest, hashed together. The config node does
 * not depend on any source, so changing SYSTEM re-runs only the config path.
 */
#ifndef MFC_PLAN_H
#define MFC_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "common/err.h"
#include "fetch/fetch.h"
#include "compiler/modelfile.h"
#include "store/store.h"

enum plan_op {
    PLAN_SOURCE,   /* bring a FROM/ADAPTER/DRAFT source into the store */
    PLAN_CONVERT,  /* safetensors directory -> GGUF (converter issue) */
    PLAN_CHECK,    /* validate a GGUF blob */
    PLAN_MERGE,    /* fold an ADAPTER --merge into the base (LoRA issue) */
    PLAN_QUANTIZE, /* requantize the weights (quantize issue) */
    PLAN_RUN,      /* a RUN step (sandbox issue) */
    PLAN_CONFIG,   /* the model config document (/etc/mfc/model.yaml) */
    PLAN_LAYER,    /* one image layer's input and descriptor */
    PLAN_IMAGE,    /* the final image (for now a build record + artifact manifest) */
    PLAN_OP_COUNT
};

enum plan_role {
    PLAN_ROLE_NONE,
    PLAN_ROLE_BASE,    /* FROM and what derives from it */
    PLAN_ROLE_ADAPTER, /* ADAPTER */
    PLAN_ROLE_DRAFT,   /* DRAFT */
    PLAN_ROLE_CONFIG,  /* the config document */
};

/* Media types of what the layer nodes record until the image writer turns
 * their inputs into tar layers. */
#define PLAN_MT_GGUF "application/vnd.mfc.model.gguf"
#define PLAN_MT_ADAPTER "application/vnd.mfc.adapter.gguf"
#define PLAN_MT_CONFIG "application/vnd.mfc.config.v1+yaml"
#define PLAN_MT_RECORD "application/vnd.mfc.build-record.v1+json"
#define PLAN_ARTIFACT_TYPE "application/vnd.mfc.build.v1"
/* Paths inside the image (layer entries; the config document names them
 * with a leading "/"). Adapters go to adapters/<name|index>.gguf, chosen by
 * plan_config_doc. */
#define PLAN_CONFIG_PATH "etc/mfc/model.yaml"
#define PLAN_MODEL_PATH "models/model.gguf"
#define PLAN_DRAFT_PATH "models/draft.gguf"

struct plan_node {
    size_t id;               /* index in plan->nodes; printed as #id+1 */
    enum plan_op op;         /* what the step does */
    enum plan_role role;     /* which part of the model it makes */
    int line;                /* Modelfile line that produced it; 0 for the image */
    char *name;              /* owned: what progress shows: "FROM ./base.gguf", "etc/mfc/model.yaml" */
    char *instr;             /* owned: the instruction errors name: "FROM ./base.gguf" */
    json_t *args;            /* owned: the op's arguments (object); hashed into the key */
    size_t *inputs;          /* owned: ids of the nodes whose outputs it reads */
    size_t n_inputs;         /* entries in inputs */
    struct fetch_source src; /* PLAN_SOURCE: where from (owned); zeroed otherwise */
};

struct plan {
    struct plan_node *nodes;                 /* owned, in topological order */
    size_t n_nodes;                          /* entries in nodes */
    char *modelfile;                         /* owned: display name, e.g. "Modelfile" */
    char modelfile_digest[STORE_DIGEST_BUF]; /* sha256 of the Modelfile text */
    json_t *config;                          /* owned: the config document */
    json_t *labels;                          /* owned: LABEL key -> value (object) */
    size_t image;                            /* id of the image node (the last) */
};

struct plan_opts {
    const char *modelfile;        /* borrowed: display name; NULL: "Modelfile" */
    const struct fetch_opts *fo;  /* borrowed: base_dir is the build context */
    const char *quantize;         /* borrowed: --quantize file type name ("Q8_0"), or NULL */
};

/* Planning */

/* Builds the plan of a Modelfile that parsed without errors. A source that
 * cannot be resolved (fetch_resolve) or is of a kind mfc cannot build from
 * yet fails with the Modelfile line named ("Modelfile:3: FROM x: ...").
 * On failure *out is NULL. */
int plan_build(const struct mf_modelfile *mf, const struct plan_opts *o, struct plan **out,
               struct mf_err *err);
/* Frees p and all it owns. Accepts NULL and half-built plans. */
void plan_free(struct plan *p);

/* "source", "check", ... Never NULL. */
const char *plan_op_name(enum plan_op op);
/* "base", "adapter", ... ("" for none). Never NULL. */
const char *plan_role_name(enum plan_role role);

/* Cache keys */

/* The cache key of node n: sha256 over a salt, mfc's version (PACKAGE_VERSION)
 * when plan_op_versioned(n->op), the op name, the canonical JSON of n->args,
 * then for each input its key and output digest (in input order), then
 * content (a source's content digest, or NULL). Writes "sha256:<hex>".
 * Fails only when memory runs out; key is untouched then. */
int plan_node_key(const struct plan_node *n, const char *const *input_keys,
                  const char *const *input_digests, const char *content,
                  char key[STORE_DIGEST_BUF], struct mf_err *err);
/* plan_node_key with mfc_version in place of PACKAGE_VERSION (tests). */
int plan_node_key_at(const struct plan_node *n, const char *const *input_keys,
                     const char *const *input_digests, const char *content,
                     const char *mfc_version, char key[STORE_DIGEST_BUF], struct mf_err *err);
/* 1 when op's output is made by mfc's own code (convert, check, merge,
 * quantize, config, layer, image), whose key therefore holds mfc's version so
 * a newer mfc never reuses an older one's step; 0 for source (fetched bytes,
 * keyed by their digest) and run (the user's command's output). */
int plan_op_versioned(enum plan_op op);

/* Output */

enum plan_format { PLAN_FMT_TEXT, PLAN_FMT_JSON, PLAN_FMT_DOT };

/* "text", "json" or "dot"; MF_EUSAGE leaves *f untouched. */
int plan_parse_format(const char *s, enum plan_format *f, struct mf_err *err);
/* Writes the DAG to out. MF_EIO when the stream fails. */
int plan_print(const struct plan *p, enum plan_format f, FILE *out, struct mf_err *err);

/* The config document */

/* Renders the config document as YAML into a malloc'd, NUL-terminated buffer
 * (caller frees). Keys keep their insertion order; strings are quoted, reals
 * written as float32 shortest decimals, so equal configs give equal bytes.
 * On failure *out is untouched. */
int plan_config_yaml(const json_t *config, char **out, size_t *len, struct mf_err *err);
/* Builds the config document from the Modelfile (used by plan_build):
 * params, template, system, messages, adapters (name/scale/path), license,
 * labels, env, ... Returns a new reference, or NULL when memory ran out. */
json_t *plan_config_doc(const struct mf_modelfile *mf);

#endif
