/*
 * inspect.h: a summary of a GGUF file (what `mfc inspect` shows), as JSON.
 *
 * The summary is built from the header alone (KVs and tensor infos): tensor
 * data is never read, so inspecting a 5 GB model touches a few MB of it.
 */
#ifndef MFC_INSPECT_H
#define MFC_INSPECT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"
#include "common/gguf.h"

/*
 * The summary object. Fields whose key is absent from the file are null:
 *   file, size, gguf_version, alignment, data_offset, kv_count, tensor_count,
 *   type ("model" unless general.type says otherwise), architecture, name,
 *   file_type {id, name}, quantization_version, parameters (sum of tensor
 *   elements), parameters_human ("8.03B"), tensor_types {"Q4_K": n, ...},
 *   context_length, block_count, embedding_length, feed_forward_length,
 *   head_count, head_count_kv, head_dim, vocab_size, norm_eps,
 *   rope {dimension_count, freq_base, scaling_type, scaling_factor,
 *         original_context_length, freqs_tensor, attn_factor, long_factors},
 *   family {name, supported, known_as (common/arch.h's models), traits
 *           [neox_rope|normal_rope, gelu_gate|silu_gate|swiglu_oai_gate, qk_norm,
 *           post_norms, embedding_scale, fused_qkv, fused_gate_up, qkv_bias,
 *           tied_output, attn_sinks, o_bias, expert_biases, topk_softmax_gating],
 *           experts {count, used, feed_forward_length} or null,
 *           sliding_window {window, period, freq_base} or null, attn_softcap,
 *           final_softcap} (the family's defaults where a key is absent),
 *   tokenizer {model, pre, tokens, merges, scores, bos_token_id,
 *              eos_token_id, eot_token_id, unknown_token_id,
 *              padding_token_id, add_bos_token, add_eos_token},
 *   chat_template {present, length},
 *   adapter (only for adapters) {type, alpha, rank, targets [base tensor
 *            names], pairs, unpaired [names]},
 *   tensors (with_tensors only) [{name, type, shape, elements, bytes,
 *            offset, file_offset}].
 * Returns a new reference (json_decref it), or NULL with err filled
 * (MF_ENOMEM: jansson could not allocate).
 */
json_t *mf_inspect_gguf(const struct gguf_file *gf, int with_tensors, struct mf_err *err);

/* "8.03B", "125.8M", "20.5K", "512": a parameter count for people. */
void mf_inspect_count(uint64_t n, char *buf, size_t cap);

/* "4.58 GiB", "723.90 KiB", "512 B" (mf_num_fmt_bytes, 2 decimals). */
void mf_inspect_bytes(uint64_t n, char *buf, size_t cap);

#endif
