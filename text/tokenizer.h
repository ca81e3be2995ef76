/*
 * tokenizer.h: text <-> token ids for the models mfc-serve runs, built from
 * GGUF tokenizer metadata (tokenizer.ggml.*) and matching llama.cpp's
 * src/llama-vocab.cpp token for token.
 *
 * Two models: SentencePiece-style (tokenizer.ggml.model = "llama": scores,
 * byte fallback <0xXX>, U+2581 for spaces, add_space_prefix) and byte-level
 * BPE ("gpt2": ranked merges over the GPT-2 byte-to-unicode alphabet, after a
 * pre-tokenizer chosen by tokenizer.ggml.pre and run with PCRE2).
 *
 * A struct tok is built once (tok_new from a plain description, or
 * tok_load_gguf from an open GGUF) and is immutable afterwards: any number of
 * threads may encode and decode with it at once. Encoding allocates its own
 * scratch per call. Decoding gives raw bytes (which may end inside a UTF-8
 * sequence); struct tok_stream gives only complete, valid UTF-8.
 */
#ifndef MF_TOKENIZER_H
#define MF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

struct gguf_file;
struct tok; /* opaque; see tok_new */

#define TOK_MAX_VOCAB (1u << 22)       /* tokens; the largest real vocabularies have ~260k */
#define TOK_MAX_TOKEN_BYTES 65536u     /* bytes of one token's text */
#define TOK_MAX_MERGES (1u << 23)      /* BPE merges */

/* The two tokenizer models (tokenizer.ggml.model). */
enum tok_model {
    TOK_MODEL_SPM = 1, /* "llama" */
    TOK_MODEL_BPE = 2, /* "gpt2" */
};

/* Token types, as stored in tokenizer.ggml.token_type (llama.h llama_token_type). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,      /* <s>, <|eot_id|>: only parsed when asked, rendered when asked */
    TOK_TYPE_USER_DEFINED = 4, /* added tokens: always matched in text, always rendered */
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6, /* SPM <0xXX> byte fallback */
};

/* The special ids a vocabulary names (tokenizer.ggml.*_token_id). */
enum tok_special {
    TOK_ID_BOS,
    TOK_ID_EOS,
    TOK_ID_UNK,
    TOK_ID_SEP,
    TOK_ID_PAD,
    TOK_ID_EOT,
    TOK_ID_EOM,
    TOK_ID_COUNT,
};

/* A string that need not be NUL-terminated (GGUF strings are not). */
struct tok_str {
    const char *p; /* borrowed */
    size_t len;    /* bytes */
};

/*
 * Everything tok_new needs, as plain arrays (so a tokenizer can be built
 * from GGUF, JSON or a test table alike). Nothing is kept: tok_new copies
 * what it uses, so the arrays may be freed right after.
 */
struct tok_desc {
    const char *model;            /* "llama" or "gpt2" */
    const char *pre;              /* tokenizer.ggml.pre; NULL or "" means "default" */
    const char *name;             /* general.name or NULL (llama.cpp keys a phi-3 quirk on it) */
    const struct tok_str *tokens; /* borrowed: n_tokens token texts (byte-level form for BPE) */
    uint32_t n_tokens;            /* 1..TOK_MAX_VOCAB */
    const float *scores;          /* borrowed: n_scores scores, or NULL (all 0) */
    uint32_t n_scores;            /* must equal n_tokens when scores is given */
    const int32_t *types;         /* borrowed: n_types enum tok_type, or NULL (all NORMAL) */
    uint32_t n_types;             /* must equal n_tokens when types is given */
    const struct tok_str *merges; /* borrowed: BPE merges "left right", best first */
    uint32_t n_merges;            /* 0 for SPM */
    int32_t special[TOK_ID_COUNT]; /* ids or -1 for none; each must be < n_tokens */
    int add_bos;                  /* 1/0, or -1: the model's default (SPM yes, BPE per pre) */
    int add_eos;                  /* 1/0, or -1: no */
    int add_space_prefix;         /* 1/0, or -1: the model's default (SPM yes, BPE no) */
};

/* Sets every special id, add_bos, add_eos and add_space_prefix to -1 and
 * everything else to zero/NULL. Cannot fail. */
void tok_desc_init(struct tok_desc *d);

/* ---- build and free ---- */

/*
 * Builds a tokenizer from d. Rejects, with one sentence naming the first
 * problem: an unknown model or pre-tokenizer (MF_EUNSUPPORTED), array
 * lengths that disagree with n_tokens, a token type out of range, a byte
 * token whose text is not <0xHH>, a merge without a space, a merge naming a
 * token that is not in the vocabulary or producing one that is not
 * (MF_EFORMAT), a special id >= n_tokens, add_bos/add_eos set with no such
 * token (MF_ERANGE), sizes over the TOK_MAX_* limits (MF_ENOMEM).
 * Returns 0 with *out owning the tokenizer (tok_free it), or a negative
 * MF_E* code with *out set to NULL.
 */
int tok_new(const struct tok_desc *d, struct tok **out, struct mf_err *err);

/*
 * Builds a tokenizer from an open GGUF's tokenizer.ggml.* keys (tokens,
 * scores, token_type, merges, model, pre, *_token_id, add_bos_token,
 * add_eos_token, add_space_prefix) and general.name. The GGUF may be closed
 * afterwards. Errors name the file and key; a key of the wrong type is
 * MF_EFORMAT; otherwise as tok_new. *out is NULL on failure.
 */
int tok_load_gguf(const struct gguf_file *gf, struct tok **out, struct mf_err *err);

/* Frees everything. Accepts NULL. */
void tok_free(struct tok *t);

/* ---- facts about a tokenizer ---- */

enum tok_model tok_model(const struct tok *t);
const char *tok_pre(const struct tok *t); /* canonical pre-tokenizer name ("default" for SPM) */
uint32_t tok_n_vocab(const struct tok *t);
int32_t tok_special_id(const struct tok *t, enum tok_special which); /* -1 when none */
int tok_adds_bos(const struct tok *t); /* what TOK_ADD_SPECIAL does by default */
int tok_adds_eos(const struct tok *t);
/* 1 for tokens that end generation: EOS, EOT, EOM, and control tokens whose
 * text llama.cpp treats as end-of-generation (<|eot_id|>, <|im_end|>, ...).
 * 0 for anything else, including out-of-range ids. */
int tok_is_eog(const struct tok *t, int32_t id);
/* The type of id; TOK_TYPE_UNDEFINED for an out-of-range id. */
enum tok_type tok_token_type(const struct tok *t, int32_t id);
/* The stored text of id (byte-level form for BPE), borrowed from t and
 * NUL-terminated; NULL for an out-of-range id. */
const char *tok_token_text(const struct tok *t, int32_t id, size_t *len);
/* The id whose stored text is exactly s[0..len), or -1. */
int32_t tok_find(const struct tok *t, const char *s, size_t len);
/* 0 when a and b give every token id the same meaning: same model, same
 * number of tokens, each id the same text and type, the same special ids
 * and BOS/EOS flags (what a speculative-decoding draft must share with its
 * model). Otherwise MF_EINVAL with err naming the first difference, a's
 * value first ("token 17 is 'ab' against 'ac'"). Scores and merges are
 * not compared (tokenizer_compare.c says why). */
int tok_same_vocab(const struct tok *a, const struct tok *b, struct mf_err *err);

/* ---- encode ---- */

/* A growable list of token ids with a hard limit. */
struct tok_ids {
    int32_t *v; /* owned; NULL until the first push */
    size_t n;   /* ids used */
    size_t cap; /* ids allocated */
    size_t max; /* limit on n; pushing past it fails with MF_ENOMEM */
};

/* Sets up an empty list that may hold max ids. Cannot fail. */
void tok_ids_init(struct tok_ids *ids, size_t max);
/* Releases the memory; the list is left empty and reusable. Accepts NULL. */
void tok_ids_free(struct tok_ids *ids);
/* Appends one id; on failure ids is unchanged. */
int tok_ids_push(struct tok_ids *ids, int32_t id, struct mf_err *err);

enum tok_encode_flags {
    TOK_ADD_SPECIAL = 1u << 0,   /* add BOS/EOS as the metadata says (add_bos/add_eos) */
    TOK_PARSE_SPECIAL = 1u << 1, /* control and unknown tokens written in the text become
                                    tokens; user-defined tokens always do, as in llama.cpp
                                    and HF tokenizers */
    TOK_BOS = 1u << 2,           /* add BOS whatever the metadata says */
    TOK_NO_BOS = 1u << 3,        /* never add BOS (wins over the two above) */
    TOK_EOS = 1u << 4,           /* add EOS whatever the metadata says */
    TOK_NO_EOS = 1u << 5,        /* never add EOS */
};

/*
 * Appends the tokens of text[0..len) to out. Text is taken as UTF-8; for
 * BPE an invalid byte becomes U+FFFD before pre-tokenization, for SPM it
 * falls back to its <0xXX> byte token (SPM cuts characters by lead byte, so
 * a space right after a truncated sequence may come back as U+2581's
 * bytes); both as llama.cpp does. Invalid input never fails, it only may not
 * decode back to the same bytes; valid UTF-8 does (SPM: after
 * TOK_STRIP_SPACE, and unless the text holds U+2581 or an added token,
 * which SPM puts a space after). Fails only with MF_ENOMEM (out's limit,
 * memory, or a text over 256 MiB; out keeps the ids appended before) or
 * MF_EINVAL (TOK_BOS/TOK_EOS with no such token: out untouched; or PCRE2
 * failing to match, which no supported pre-tokenizer does).
 */
int tok_encode(const struct tok *t, const char *text, size_t len, unsigned flags,
               struct tok_ids *out, struct mf_err *err);

/* ---- decode ---- */

enum tok_decode_flags {
    TOK_RENDER_SPECIAL = 1u << 0, /* write control/unknown tokens as their text (else nothing) */
    TOK_STRIP_SPACE = 1u << 1,    /* drop one leading space from the first non-empty piece:
                                     the one SPM's add_space_prefix put there */
};

/*
 * The bytes id decodes to (SPM: U+2581 -> ' ', <0xXX> -> that byte; BPE:
 * byte-level alphabet -> bytes; control/unknown: their text with
 * TOK_RENDER_SPECIAL, else empty; user-defined: their text). *p is borrowed
 * from t. An id outside [0, n_vocab) is MF_ERANGE with outputs untouched.
 */
int tok_piece(const struct tok *t, int32_t id, unsigned flags, const char **p, size_t *len,
              struct mf_err *err);

/*
 * Appends the bytes of ids[0..n) to out (which may end up holding invalid
 * UTF-8 when the ids do: use struct tok_stream for text to show). An
 * out-of-range id is MF_ERANGE naming its position; out's limit MF_ENOMEM.
 * On failure out keeps what was appended before the failing id.
 */
int tok_decode(const struct tok *t, const int32_t *ids, size_t n, unsigned flags,
               struct mf_buf *out, struct mf_err *err);

/*
 * Streaming detokenizer: feed ids one at a time as they are sampled and get
 * only complete, valid UTF-8. A multi-byte character split across tokens
 * (byte fallback, byte-level BPE) is held until its last byte arrives; a
 * byte that cannot start or continue a valid sequence becomes U+FFFD (one
 * per maximal invalid subpart, as Unicode recommends).
 *
 * States: EMPTY   --tok_stream_push, piece ends on a boundary---> EMPTY
 *         EMPTY   --tok_stream_push, piece ends mid-sequence----> PENDING (1-3 bytes held)
 *         PENDING --tok_stream_push, sequence completes---------> EMPTY / PENDING
 *         PENDING --tok_stream_push, sequence broken------------> U+FFFD, then as above
 *         any     --tok_stream_flush----------------------------> EMPTY (held bytes -> U+FFFD)
 * Plain data: nothing to free. The tokenizer must outlive the stream.
 */
struct tok_stream {
    const struct tok *tok;    /* borrowed */
    unsigned flags;           /* enum tok_decode_flags */
    int started;              /* a non-empty piece was seen (TOK_STRIP_SPACE is spent) */
    unsigned char pend[4];    /* the held prefix of an incomplete sequence */
    size_t n_pend;            /* bytes held, 0..3 */
};

/* Starts a stream. Cannot fail. */
void tok_stream_init(struct tok_stream *s, const struct tok *t, unsigned flags);
/* Appends to out the complete UTF-8 that id finishes. An out-of-range id is
 * MF_ERANGE and changes nothing; out's limit is MF_ENOMEM (the stream is
 * then unchanged too, so the id may be pushed again into a drained out). */
int tok_stream_push(struct tok_stream *s, int32_t id, struct mf_buf *out, struct mf_err *err);
/* Ends the text: held bytes become U+FFFD. The stream is left EMPTY. */
int tok_stream_flush(struct tok_stream *s, struct mf_buf *out, struct mf_err *err);

#endif
