/*
 * limits.h: limits that the compiler checks at build time and the runtime
 * applies at serve time, defined once so that what `mfc build` accepts is
 * exactly what mfc-serve loads.
 */
#ifndef MFC_LIMITS_H
#define MFC_LIMITS_H

/* Largest LoRA rank mfc-serve loads: its step scratch is sized by rank, and
 * larger ranks are refused at build (merge such an adapter instead). */
#define MF_LORA_MAX_RANK 1024

/* Speculative decoding: the most proposals one step verifies per sequence
 * (PARAMETER draft_max; mfc-serve's verify rows are sized by it) and the
 * longest n-gram prompt lookup matches (PARAMETER lookup_ngram). */
#define MF_SPEC_DRAFT_MAX 32
#define MF_SPEC_NGRAM_MAX 16

#endif
