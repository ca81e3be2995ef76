/*
 * exec_int.h: what exec.c (scheduling, caching, progress) shares with
 * exec_ops.c (what each node type does). Internal to the executor.
 */
#ifndef MFC_EXEC_INT_H
#define MFC_EXEC_INT_H

#include "exec/exec.h"

/* One node being run by one worker. */
struct exec_job {
    const struct plan *plan;      /* borrowed */
    const struct plan_node *node; /* borrowed: the node being run */
    const struct exec_opts *o;    /* borrowed */
    const struct exec_build *b;   /* borrowed: the inputs' entries are final (read-only) */
    struct store *s;              /* borrowed: this worker's own store handle */
};

/* The content digest that goes into the node's key (a local file's, through
 * the stat cache; a pinned URL's pin), or "" when the op has none. *cacheable
 * is 0 when a record must not be trusted without running the op (a URL
 * without a pin: the server decides, cheaply, with If-None-Match). */
int exec_op_content(const struct exec_job *j, char content[STORE_DIGEST_BUF], int *cacheable,
                    struct mf_err *err);

/* Runs the op: fills r->digest, r->size and r->result (the cache record);
 * *cached is set when the op found its work already done (HTTP 304). On
 * failure r is left without a result and nothing is stored. */
int exec_op_run(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err);

/* Node types with files of their own; the contract is exec_op_run's. */
int exec_op_convert(const struct exec_job *j, struct exec_node *r, int *cached,
                    struct mf_err *err); /* exec_convert.c: HF directory -> GGUF */
/* A model directory's convert key content: the digests of the files the
 * converter reads and its version. exec_convert.c. */
int exec_convert_content(const struct exec_job *j, char content[STORE_DIGEST_BUF],
                         struct mf_err *err);
int exec_op_merge(const struct exec_job *j, struct exec_node *r, int *cached,
                  struct mf_err *err); /* exec_merge.c: ADAPTER --merge */
int exec_op_quantize(const struct exec_job *j, struct exec_node *r, int *cached,
                     struct mf_err *err); /* exec_merge.c: --quantize */
int exec_op_sandbox(const struct exec_job *j, struct exec_node *r, int *cached,
                    struct mf_err *err); /* exec_run.c: RUN in bubblewrap */
/* exec_run.c: a RUN's key content (a digest of the build context's tree),
 * and a source naming /out/PATH (args "kind": "run-output"): that file of
 * the RUN input's record, as a blob. */
int exec_run_content(const struct exec_job *j, char content[STORE_DIGEST_BUF],
                     struct mf_err *err);
int exec_run_output(const struct exec_job *j, struct exec_node *r, int *cached,
                    struct mf_err *err);
/* 1 for such a source node. */
int exec_is_run_output(const struct plan_node *n);

/* Checks an ADAPTER's GGUF against the base model (the check node's input
 * 1, when the plan gives it one) before anything is baked. exec_lora.c. */
struct gguf_file;
int exec_check_adapter(const struct exec_job *j, const struct gguf_file *adapter,
                       struct mf_err *err);

/* Checks a DRAFT's GGUF: architecture, and against the model (the check
 * node's input 1): the same vocabulary, a smaller size; adds "parameters"
 * and "model_parameters" to result. exec_draft.c. */
int exec_check_draft(const struct exec_job *j, const struct gguf_file *draft, json_t *result,
                     struct mf_err *err);

/* The convert step of an ADAPTER from a PEFT directory (exec_convert.c
 * hands adapters here): PEFT safetensors -> GGUF LoRA. exec_lora.c. */
int exec_convert_peft(const struct exec_job *j, struct exec_node *r, int *cached,
                      struct mf_err *err);
/* That convert step's key content: a digest over the digests of the
 * directory's adapter_config.json and adapter_model.safetensors. exec_lora.c. */
int exec_peft_content(const struct exec_job *j, char content[STORE_DIGEST_BUF],
                      struct mf_err *err);
/* Adds an adapter's "rank", "alpha" and "pairs" to its check record. exec_lora.c. */
void exec_adapter_facts(const struct gguf_file *adapter, json_t *result);
/* An adapter's name in that label: the last path component of source
 * (trailing slashes skipped) without a final .gguf or .safetensors (any
 * case): "./x/my.adapter.v2.gguf" -> "my.adapter.v2". Points into source;
 * *len is its length. exec_lora.c. */
const char *exec_adapter_name(const char *source, size_t *len);
/* The image's "dev.mfc.adapters.merged" label: a JSON array of the adapters
 * the weights' merge step folded in ({name, source, scale, rank, alpha}).
 * Returns 0 (and out "") when nothing was merged or it does not fit cap. */
int exec_merged_label(const struct exec_job *j, char *out, size_t cap);

/* Helpers the op files share (exec_ops.c). */
/* The entry of the node's input i (final, read-only). */
const struct exec_node *exec_input(const struct exec_job *j, size_t i);
/* The file holding input 0's bytes: the blob, or the user's local file
 * (checked unchanged; *local is then its source record). *path is malloc'd. */
int exec_input_file(const struct exec_job *j, char **path, const json_t **local,
                    struct mf_err *err);
/* The same for input i (exec_merge.c reads the base and every adapter). */
int exec_input_file_at(const struct exec_job *j, size_t i, char **path, const json_t **local,
                       struct mf_err *err);
/* 0 when local (a source record from exec_input_file*, or NULL) still
 * describes path; MF_EINTEGRITY when the file changed while it was read. */
int exec_local_unchanged(const json_t *local, const char *path, struct mf_err *err);
/* A path in the store's tmp folder for this job's output file, "WHAT-PID-
 * NODE.gguf": unique to the node, so two nodes with the same key (one PEFT
 * directory named by two ADAPTER lines) never share a file while both run.
 * *path is malloc'd. */
int exec_tmp_path(const struct exec_job *j, const char *what, char **path, struct mf_err *err);
/* 1 when the node's cache record already names r->digest. */
int exec_record_matches(const struct exec_job *j, const struct exec_node *r);

#endif
