/*
 * lora.h: GGUF LoRA adapters applied at run time, y = Wx + s * B(Ax).
 *
 * An adapter is opened against the base model it will be used with and is
 * validated completely there (types, keys, every pair's shapes against the
 * base), so the step never checks anything. Its A and B matrices stay in the
 * adapter's GGUF mapping (borrowed, never copied). Attach it to the model
 * with model_add_lora(); a batch_lora then names it by index.
 */
#ifndef MFC_LORA_H
#define MFC_LORA_H

#include <stdint.h>

#include "common/err.h"
#include "common/limits.h"
#include "runtime/model/model.h"

/* One adapted projection. */
struct lora_pair {
    struct model_weight a; /* [base ne0, rank]: rank rows of the base's input width */
    struct model_weight b; /* [rank, base ne1]: one row of rank values per output */
    int32_t rank;          /* a.ne1 == b.ne0 */
    float rel_scale;       /* this pair's alpha/rank over the adapter's (1 unless ranks
                              differ between pairs: llama.cpp scales each pair by its own) */
};

struct lora {
    struct gguf_file *gf;     /* owned: the adapter's mapping */
    float alpha;              /* adapter.lora.alpha; 0 when absent (scale = user scale) */
    int32_t rank;             /* rank of the first pair, used by lora_scale */
    int32_t n_pairs;          /* adapted projections */
    int32_t n_targets;        /* entries in pairs: model_n_targets(base) */
    struct lora_pair *pairs;  /* owned: indexed like model targets; a.data NULL = not adapted */
};

/* Maps the GGUF adapter at path and validates it against base. Returns 0
 * with *out owning it, or a negative MF_E* code with err naming the key or
 * the tensor (and both shapes for a mismatch) and *out NULL. */
int lora_open(const struct model *base, const char *path, struct lora **out, struct mf_err *err);

/* Same for the GGUF lying in size bytes of path from offset (size 0: to the
 * end), e.g. inside an image's adapter layer: only that range is mapped, in
 * place. MF_ERANGE when the range lies past the end of the file. */
int lora_open_range(const struct model *base, const char *path, uint64_t offset, uint64_t size,
                    struct lora **out, struct mf_err *err);

/* Same over an open GGUF, whose ownership passes to the adapter (closed on
 * failure). */
int lora_open_gguf(const struct model *base, struct gguf_file *gf, struct lora **out,
                   struct mf_err *err);

/* Frees the adapter and its mapping. Accepts NULL. */
void lora_close(struct lora *l);

/* The scale batch_lora.scales wants for a user scale: user * alpha / rank,
 * or user alone when alpha is 0 (llama.cpp's llama_adapter_lora_weight). */
float lora_scale(const struct lora *l, float user_scale);

/* The pair adapting target t (model target index), or NULL. */
const struct lora_pair *lora_pair_at(const struct lora *l, int32_t t);

#endif
