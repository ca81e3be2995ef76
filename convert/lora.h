/*
 * lora.h: LoRA adapters at build time: checking a GGUF LoRA against its base
 * model, and converting a PEFT directory to a GGUF LoRA.
 *
 * GGUF LoRA is llama.cpp's format (convert_lora_to_gguf.py): general.type =
 * "adapter", adapter.type = "lora", adapter.lora.alpha (f32), the base's
 * general.architecture, and per adapted base tensor W (ne = [in, out]) the
 * pair "<W>.lora_a" ne = [in, rank], "<W>.lora_b" ne = [rank, out]; the
 * token embedding's pair is stored the other way round (lora_a [rank,
 * n_vocab], lora_b [rank, n_embd]), as llama.cpp applies it with get_rows.
 * Scale at run time: user_scale * alpha / rank (user_scale alone when alpha
 * is absent or 0).
 *
 * lora_check.c: the validation (used by mfc build's check step and by
 * `mfc lora check`). lora_peft.c: PEFT adapter_config.json +
 * adapter_model.safetensors -> GGUF LoRA (used by mfc build for `ADAPTER
 * ./dir` and by mfc convert).
 */
#ifndef MFC_COMPILER_LORA_H
#define MFC_COMPILER_LORA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"
#include "common/gguf.h"

#define LORA_MAX_TENSORS 16384 /* adapter tensors; a 405B model's full LoRA has < 4000 */
#define LORA_CHECK_MAX_RANK 65536 /* larger ranks are refused (lora_merge's limit) */

/* ---- checking ---- */

/* One adapter tensor as the check sees it (from a GGUF, or planned by the
 * PEFT converter before anything is written). */
struct lora_tensor {
    char name[GGUF_MAX_NAME];   /* GGUF name: "blk.0.attn_q.weight.lora_a" */
    uint32_t type;              /* enum ggml_type */
    uint32_t n_dims;            /* 1..4 */
    uint64_t ne[GGUF_MAX_DIMS]; /* ggml order; unused dims 1 */
};

/* An adapter's identity and tensors. */
struct lora_view {
    const char *name;                  /* borrowed: file or directory, for messages */
    char arch[64];                     /* general.architecture; "" when absent */
    int has_alpha;                     /* 1: adapter.lora.alpha is present */
    float alpha;                       /* its value (0 when absent) */
    const struct lora_tensor *tensors; /* borrowed: n_tensors entries */
    size_t n_tensors;
};

#define LORA_TARGETS_MAX 256

/* What a successful check found. */
struct lora_summary {
    char arch[64];                   /* the adapter's (= the base's) architecture */
    int32_t rank_min, rank_max;      /* over all pairs (equal unless rank_pattern was used) */
    int has_alpha;                   /* adapter.lora.alpha present and nonzero */
    float alpha;                     /* its value */
    size_t n_pairs;                  /* lora_a/lora_b pairs */
    size_t n_ignored;                /* *_norm.weight tensors (llama.cpp ignores them) */
    int64_t n_layers;                /* distinct blk.N adapted */
    char targets[LORA_TARGETS_MAX];  /* kinds adapted, in first-seen order: "attn_q attn_v" */
    char warning[MF_ERR_MSG_MAX];    /* "" or one sentence (alpha absent, embedding pair) */
};

/* Fills v (tensors malloc'd into *tensors, which the caller frees) from an
 * open GGUF after checking general.type = adapter and adapter.type = lora.
 * Returns 0, or MF_EFORMAT / MF_EUNSUPPORTED / MF_ENOMEM naming the file. */
int lora_view_gguf(const struct gguf_file *adapter, struct lora_view *v,
                   struct lora_tensor **tensors, struct mf_err *err);

/*
 * Checks adapter v against the base model: architecture equal, every tensor
 * a .lora_a/.lora_b (or an ignored *_norm.weight), both halves present,
 * the adapted tensor in the base and 2-D, lora_a ne0 = base ne0, lora_b ne1
 * = base ne1, lora_a ne1 = lora_b ne0 = rank > 0 (the embedding pair:
 * lora_a ne1 = n_vocab, lora_b ne1 = n_embd), F32/F16/BF16 halves. Returns 0
 * and fills *sum (may be NULL), or MF_EFORMAT / MF_EUNSUPPORTED / MF_EINVAL
 * with err naming the adapter, the tensor and both shapes.
 */
int lora_check(const struct gguf_file *base, const struct lora_view *v, struct lora_summary *sum,
               struct mf_err *err);

/* Fills *sum from v alone, without a base and without checking shapes
 * (pairs by their lora_a, ranks, alpha, targets): what mfc inspect shows of
 * an adapter inside an image. Returns 0, or MF_ENOMEM. */
int lora_describe(const struct lora_view *v, struct lora_summary *sum);

/* lora_view_gguf + lora_check over two paths. */
int lora_check_files(const char *adapter_path, const char *base_path, struct lora_summary *sum,
                     struct mf_err *err);

/* ---- PEFT conversion ---- */

/* 1 when dir holds adapter_config.json (a PEFT adapter directory), else 0. */
int lora_peft_is_dir(const char *dir);

/* What a conversion did. */
struct lora_peft_info {
    int32_t rank;            /* adapter_config.json "r" */
    float alpha;             /* "lora_alpha" as written (rslora: already rescaled) */
    float peft_alpha;        /* "lora_alpha" as the config has it */
    int rslora;              /* "use_rslora": alpha written as lora_alpha * sqrt(r) */
    size_t n_pairs;          /* lora_a/lora_b pairs written */
    size_t n_norms;          /* *_norm.weight tensors passed through (mergekit) */
    size_t n_permuted;       /* q/k lora_b matrices row-permuted for RoPE */
    char base_model[256];    /* "base_model_name_or_path", or "" */
    struct lora_summary sum; /* the check of the result against the base */
};

/*
 * Converts the PEFT adapter in dir (adapter_config.json +
 * adapter_model.safetensors, tensors F32/F16/BF16/F64) into a GGUF LoRA at
 * out_gguf for the base model base_gguf (architecture and head counts come
 * from it), then checks it against that base. Names map as llama.cpp maps
 * them (q/k/v/o, gate/up/down projections, embed_tokens, lm_head); the rows
 * of q's and k's lora_b are permuted as the base conversion permuted q and k
 * (llama); halves keep their F32/F16/BF16 type (F64 becomes F32, 1-D norms
 * F32). Written atomically. Returns 0, or a negative MF_E* code with err
 * naming the file, tensor or module (an unsupported module is named); on
 * failure nothing is left at out_gguf (a file already there is kept).
 * info may be NULL.
 */
int lora_peft_convert_ex(const char *dir, const char *base_gguf, const char *out_gguf,
                         struct lora_peft_info *info, struct mf_err *err);
int lora_peft_convert(const char *dir, const char *base_gguf, const char *out_gguf,
                      struct mf_err *err);
/* The same against an open base (borrowed). */
int lora_peft_convert_gf(const char *dir, const struct gguf_file *base, const char *out_gguf,
                         struct lora_peft_info *info, struct mf_err *err);

/* Maps a PEFT tensor's module path (after "base_model.model.", before
 * ".lora_A.weight"), e.g. "model.layers.3.self_attn.q_proj", to its GGUF
 * base tensor name "blk.3.attn_q.weight" (cap bytes). Returns 0, or
 * MF_EUNSUPPORTED for a module llama.cpp does not map. */
int lora_peft_map_name(const char *module, char *out, size_t cap);

/* ---- images ---- */

/* The adapters of image ref in the store at store_root, for mfc inspect: a
 * new array of {name, path, scale, rank, alpha, pairs, targets,
 * architecture, merged: false} read from model.yaml and each adapter's GGUF
 * header, then {name, source, scale, rank, alpha, merged: true} from the
 * label "dev.mfc.adapters.merged" of inspect (oci_inspect's JSON). Returns 0
 * and *out, or a negative MF_E* code (MF_EFORMAT: not an mfc model image). */
int lora_image_adapters(const char *store_root, const char *ref, const json_t *inspect,
                        json_t **out, struct mf_err *err);

/* An image's weights, opened in place (a byte range of the layer blob,
 * mapped read-only), for `mfc lora check --base IMAGE`. */
struct lora_image_base {
    struct gguf_file *gf;   /* owned: the GGUF at the range (gguf_open_range) */
};
/* Opens ref's /models/model.gguf. Returns 0, or a negative MF_E* code
 * (MF_ENOTFOUND: no such image); b is safe to close either way. */
int lora_image_base_open(const char *store_root, const char *ref, struct lora_image_base *b,
                         struct mf_err *err);
void lora_image_base_close(struct lora_image_base *b);

#endif
