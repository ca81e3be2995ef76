/*
 * tokenizer_bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2"): the
 * pre-tokenizer regexes named by tokenizer.ggml.pre, the GPT-2 byte-to-
 * unicode alphabet, and ranked merges, as llama.cpp's llm_tokenizer_bpe does.
 *
 * Pre-tokenizing: a pre-tokenizer is a list of regexes applied in turn;
 * each splits every piece left by the previous one into its matches and the
 * gaps between them (llama.cpp unicode_regex_split). The regexes are
 * llama.cpp's own strings, compiled by PCRE2 (UTF + UCP, JIT) after one
 * rewrite: \s and \S become the Unicode White_Space set spelled out, which is
 * what llama.cpp's tables and custom splitters use (PCRE2's \s also takes
 * U+180E). With real Unicode properties PCRE2 splits exactly as llama.cpp's
 * hand-written llama3/gpt2 splitters and its "collapsed" std::regex path.
 *
 * Merging: each piece becomes one symbol per byte (the byte's token), then
 * the pair with the lowest merge rank (leftmost on ties) merges, from a heap
 * checked for staleness on pop: O(n log n) per piece. Merges are keyed by
 * the ids of their two parts, so a pair costs one hash probe.
 *
 * Owns the merge table and the compiled regexes of struct tok (freed by
 * tok_bpe_fini) and the match data in the caller's scratch.
 */
#include "text/tokenizer_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/utf8.h"

/* ---------------------------------------------------------------------------
 * pre-tokenizers (llama.cpp llm_tokenizer_bpe::llm_tokenizer_bpe)
 * ------------------------------------------------------------------------- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3_HEAD                                                                         \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK "[一-龥ࠀ-一가-퟿]+"

static const char *const re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const re_gpt2[] = {RE_GPT2, NULL};
static const char *const re_llama3[] = {RE_LLAMA3_HEAD "\\p{N}{1,3}|" RE_LLAMA3_TAIL, NULL};
static const char *const re_qwen2[] = {RE_LLAMA3_HEAD "\\p{N}|" RE_LLAMA3_TAIL, NULL};
static const char *const re_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2,
                                        "[0-9][0-9][0-9]", NULL};
static const char *const re_starcoder[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const re_deepseek_coder[] = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK,
                                                "\\p{N}", NULL};
/* The letter class is llama.cpp's, with the six characters that Unicode
 * normalisation would silently change (U+1F7D, U+1FBE, U+1FD3, U+1FDB,
 * U+2126, U+212A) written as escapes. llama.cpp has "\\s+$": a match can
 * only start where a whitespace run starts, so the look-behind changes no
 * split and keeps a long run of spaces linear instead of retrying it from
 * every position. */
static const char *const re_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "(?<!\\s)\\s+$",
    RE_CJK,
    "\\p{N}+",
    NULL};
/* o200k (gpt-4o, gpt-oss). llama.cpp matches its spelling with std::regex
 * on text where every non-ASCII letter is one stand-in byte, so a non-ASCII
 * letter counts as both upper- and lower-case and only ASCII letters keep
 * their case: "letters but a-z" and "letters but A-Z" below are exactly
 * that ((?=[\p{L}])([^a-z]) in llama.cpp's string). */
#define RE_CONTRACTION "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
static const char *const re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]*[^\\P{L}A-Z]+" RE_CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]+[^\\P{L}A-Z]*" RE_CONTRACTION
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_bloom[] = {" ?[^(\\s|.,!?…。，、।۔،)]+", NULL};
static const char *const re_viking[] = {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}", NULL};

struct tok_pre_def {
    const char *name;       /* tokenizer.ggml.pre */
    const char *const *re;  /* NULL-terminated regexes, applied in order */
    int ignore_merges;      /* a piece that is a whole token is taken as is (llama3) */
    int add_bos;            /* BOS by default when add_bos_token is absent */
};

/* Names and settings from llama.cpp llama_vocab::impl::load. */
static const struct tok_pre_def pre_defs[] = {
    {"default", re_default, 0, 0},
    {"llama-bpe", re_llama3, 1, 1},
    {"llama3", re_llama3, 1, 1},
    {"llama-v3", re_llama3, 1, 1},
    {"falcon3", re_llama3, 1, 1},
    {"falcon-h1", re_llama3, 1, 1},
    {"pixtral", re_llama3, 1, 1},
    {"dbrx", re_llama3, 0, 0},
    {"smaug-bpe", re_llama3, 0, 0},
    {"chatglm-bpe", re_llama3, 0, 0}, /* (?i:'s|...) there; llama.cpp runs its llama3 splitter */
    {"qwen2", re_qwen2, 0, 0},
    {"gpt-4o", re_gpt4o, 0, 0},
    {"llama4", re_gpt4o, 0, 0},
    {"kanana2", re_gpt4o, 0, 0},
    {"talkie", re_gpt4o, 0, 0},
    {"deepseek-r1-qwen", re_qwen2, 0, 0},
    {"stablelm2", re_qwen2, 0, 0},
    {"megrez", re_qwen2, 0, 0},
    {"deepseek-llm", re_deepseek_llm, 0, 0},
    {"deepseek-coder", re_deepseek_coder, 0, 0},
    {"falcon", re_falcon, 0, 0},
    {"starcoder", re_starcoder, 0, 0},
    {"refact", re_starcoder, 0, 0},
    {"command-r", re_starcoder, 0, 0},
    {"smollm", re_starcoder, 0, 0},
    {"codeshell", re_starcoder, 0, 0},
    {"exaone", re_starcoder, 0, 0},
    {"minerva-7b", re_starcoder, 0, 0},
    {"gpt-2", re_gpt2, 0, 0},
    {"phi-2", re_gpt2, 0, 0},
    {"mpt", re_gpt2, 0, 0},
    {"olmo", re_gpt2, 0, 0},
    {"jais", re_gpt2, 0, 0},
    {"jina-es", re_gpt2, 0, 0},
    {"jina-de", re_gpt2, 0, 0},
    {"jina-v1-en", re_gpt2, 0, 0},
    {"jina-v2-es", re_gpt2, 0, 0},
    {"jina-v2-de", re_gpt2, 0, 0},
    {"jina-v2-code", re_gpt2, 0, 0},
    {"roberta-bpe", re_gpt2, 0, 0},
    {"gigachat", re_gpt2, 0, 0},
    {"poro-chat", re_bloom, 0, 0},
    {"bloom", re_bloom, 0, 0},
    {"gpt3-finnish", re_bloom, 0, 0},
    {"viking", re_viking, 0, 0},
};

const char *tok_bpe_pre_name(const struct tok *t)
{
    return t->pre->name;
}

int tok_bpe_pre_adds_bos(const struct tok *t)
{
    return t->pre->add_bos;
}

/* Unicode White_Space (PropList.txt), as a character-class body. */
#define WS_CLASS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static int is_ws_non_ascii(uint32_t c)
{
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Bytes of the character class starting at re[0] == '[', through its ']'. */
static size_t class_len(const char *re)
{
    size_t i = 1;
    while (re[i] && re[i] != ']')
        i += re[i] == '\\' && re[i + 1] ? 2 : 1;
    return re[i] ? i + 1 : i;
}

static int has_non_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return 1;
    return 0;
}

/* A class member that is one code point: a UTF-8 character or \x{HHHH}.
 * Returns its bytes and sets *cp, or 0 for anything else (\p{..}, \r, ...). */
static size_t class_cp(const char *s, uint32_t *cp)
{
    if (s[0] != '\\')
        return (size_t)mf_utf8_decode(s, strnlen(s, 4), cp);
    if (s[1] != 'x' || s[2] != '{')
        return 0;
    uint32_t v = 0;
    size_t i = 3;
    for (; s[i] && s[i] != '}' && i < 10; i++) {
        char c = s[i];
        v = v * 16 + (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    *cp = v;
    return s[i] == '}' ? i + 1 : 0;
}

/* Appends the code points lo..hi, less non-ASCII whitespace, as members. */
static int put_range(uint32_t lo, uint32_t hi, struct mf_buf *b, struct mf_err *err)
{
    int rc = 0;
    for (uint32_t c = lo; c <= hi && !rc; c++) {
        if (is_ws_non_ascii(c))
            continue;
        uint32_t e = c;
        while (e < hi && !is_ws_non_ascii(e + 1))
            e++;
        rc = mf_buf_printf(b, err, "\\x{%X}", (unsigned)c);
        if (!rc && e > c)
            rc = mf_buf_printf(b, err, "-\\x{%X}", (unsigned)e);
        c = e;
    }
    return rc;
}

/* Copies the positive class p[0..n) with non-ASCII whitespace taken out of
 * its literal characters and ranges (see translate). */
static int put_class(const char *p, size_t n, struct mf_buf *b, struct mf_err *err)
{
    int rc = mf_buf_putc(b, '[', err);
    for (size_t i = 1; i + 1 < n && !rc;) {
        const char *s = p + i;
        uint32_t lo, hi;
        size_t k = class_cp(s, &lo);
        if (k == 0 && s[1] == 's') { /* \s: whitespace is in, as U+000B is there */
            rc = mf_buf_puts(b, WS_CLASS, err);
            i += 2;
            continue;
        }
        if (k == 0) { /* another escape: \p{..} whole, else two bytes */
            const char *close = strchr(s, '}');
            size_t m = (s[1] == 'p' || s[1] == 'P') && s[2] == '{' && close ? (size_t)(close - s) + 1
                                                                           : 2;
            rc = mf_buf_append(b, s, m, err);
            i += m;
            continue;
        }
        hi = lo;
        size_t k2 = s[k] == '-' && i + k + 1 < n - 1 ? class_cp(s + k + 1, &hi) : 0;
        if (k2)
            k += 1 + k2;
        else
            hi = lo;
        rc = hi < lo ? mf_err_set(err, MF_EINVAL, "tokenizer: range out of order in '%.*s'",
                                  (int)n, p)
                     : put_range(lo, hi, b, err);
        i += k;
    }
    return rc ? rc : mf_buf_putc(b, ']', err);
}

/*
 * Rewrites a llama.cpp regex for PCRE2. llama.cpp matches with every
 * non-ASCII whitespace character replaced by U+000B (std::regex knows only
 * ASCII \s), so: \s and \S become the White_Space set spelled out, and a
 * positive class that lists non-ASCII characters (deepseek's CJK range
 * U+0800-U+4E00, its U+3000-U+3002) loses the non-ASCII whitespace in it,
 * as the U+000B stand-in is not in it there.
 */
static int translate(const char *re, struct mf_buf *b, struct mf_err *err)
{
    int rc = 0;
    const char *end = NULL; /* the ']' of the class being copied, or NULL */
    for (const char *p = re; *p && !rc; p++) {
        if (!end && p[0] == '[') {
            size_t n = class_len(p);
            if (p[1] != '^' && has_non_ascii(p, n)) {
                rc = put_class(p, n, b, err);
                p += n - 1;
                continue;
            }
            end = p + n - 1;
            rc = mf_buf_putc(b, '[', err);
        } else if (p[0] == '\\' && (p[1] == 's' || p[1] == 'S')) {
            if (p[1] == 'S' && end)
                return mf_err_set(err, MF_EUNSUPPORTED, "tokenizer: \\S inside [] in '%s'", re);
            rc = mf_buf_puts(b, end ? WS_CLASS : p[1] == 's' ? "[" WS_CLASS "]"
                                                             : "[^" WS_CLASS "]", err);
            p++;
        } else if (p[0] == '\\' && p[1]) {
            rc = mf_buf_append(b, p, 2, err);
            p++;
        } else {
            rc = mf_buf_putc(b, p[0], err);
            if (p == end)
                end = NULL;
        }
    }
    return rc;
}

static int compile_one(const char *re, pcre2_code **out, struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, 64 * 1024);
    int rc = translate(re, &b, err);
    if (rc) {
        mf_buf_free(&b);
        return rc;
    }
    int code;
    PCRE2_SIZE at;
    /* $ means the end of the piece only, as in std::regex (ECMAScript) */
    *out = pcre2_compile((PCRE2_SPTR)b.data, b.len, PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY,
                         &code, &at, NULL);
    mf_buf_free(&b);
    if (!*out) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return mf_err_set(err, MF_EINVAL, "tokenizer: regex '%s' does not compile: %s", re,
                          (const char *)msg);
    }
    /* JIT is an optimisation: without it (no JIT on this CPU) matching still works */
    (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
    return 0;
}

static int compile_pre(struct tok *t, struct mf_err *err)
{
    uint32_t n = 0;
    while (t->pre->re[n])
        n++;
    t->re = calloc(n, sizeof *t->re);
    if (!t->re)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for regexes");
    for (t->n_re = 0; t->n_re < n; t->n_re++) {
        pcre2_code *code;
        int rc = compile_one(t->pre->re[t->n_re], &code, err);
        if (rc)
            return rc;
        t->re[t->n_re] = code;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * byte-level alphabet (GPT-2 bytes_to_unicode)
 * ------------------------------------------------------------------------- */

/* Printable Latin-1 bytes stand for themselves; the other 68 (0x00-0x20,
 * 0x7F-0xA0, 0xAD) map to U+0100.. in byte order. */
static uint32_t byte_to_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    if (b <= 0x20)
        return 0x100 + b;
    if (b < 0xAD)
        return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 67;
}

/* The inverse; -1 for a code point outside the alphabet. */
static int cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return cp == byte_to_cp(cp) ? (int)cp : -1;
    uint32_t n = cp - 0x100;
    if (n < 33)
        return (int)n;
    if (n < 67)
        return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

size_t tok_bpe_unmap(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = mf_utf8_decode(s + i, len - i, &cp);
        int b = k ? cp_to_byte(cp) : -1;
        if (b >= 0) {
            out[n++] = (char)b;
        } else {
            /* outside the alphabet: kept as written (llama.cpp writes
             * "[UNK_BYTE_0x...]" here) */
            size_t m = k ? (size_t)k : 1;
            memcpy(out + n, s + i, m);
            n += m;
        }
        i += k ? (size_t)k : 1;
    }
    return n;
}

/* ---------------------------------------------------------------------------
 * merges
 * ------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static const struct tok_merge *find_merge(const struct tok *t, int32_t l, int32_t r)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint64_t i = mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const struct tok_merge *m = &t->merges[i];
        if (m->rank == UINT32_MAX)
            return NULL;
        if (m->key == key)
            return m;
    }
}

/* Resolves merge i ("left right": split at the first space after the first
 * byte, as llama.cpp does) to ids; every part and the result must be tokens. */
static int parse_merge(const struct tok *t, const struct tok_str *m, uint32_t i, char *cat,
                       int32_t ids[3], struct mf_err *err)
{
    const char *sp = m->len > 1 ? memchr(m->p + 1, ' ', m->len - 1) : NULL;
    int show = (int)(m->len > 48 ? 48 : m->len);
    if (!sp)
        return mf_err_set(err, MF_EFORMAT, "tokenizer: merge %u '%.*s' has no space", i, show,
                          m->p ? m->p : "");
    size_t nl = (size_t)(sp - m->p), nr = m->len - nl - 1;
    ids[0] = tok_lookup(t, m->p, nl);
    ids[1] = tok_lookup(t, sp + 1, nr);
    if (ids[0] < 0 || ids[1] < 0)
        return mf_err_set(err, MF_EFORMAT, "tokenizer: merge %u '%.*s' names '%.*s', which is not "
                          "a token", i, show, m->p, (int)(ids[0] < 0 ? nl : nr),
                          ids[0] < 0 ? m->p : sp + 1);
    memcpy(cat, m->p, nl);
    memcpy(cat + nl, sp + 1, nr);
    ids[2] = tok_lookup(t, cat, nl + nr);
    if (ids[2] < 0)
        return mf_err_set(err, MF_EFORMAT, "tokenizer: merge %u '%.*s' makes '%.*s', which is not "
                          "a token", i, show, m->p, (int)(nl + nr > 48 ? 48 : nl + nr), cat);
    return 0;
}

static int build_merges(struct tok *t, const struct tok_desc *d, struct mf_err *err)
{
    uint64_t size = 16;
    while (size < (uint64_t)d->n_merges + d->n_merges / 3 + 1)
        size <<= 1;
    t->merges = malloc(size * sizeof *t->merges);
    char *cat = malloc(2 * (size_t)TOK_MAX_TOKEN_BYTES);
    if (!t->merges || !cat) {
        free(cat);
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for %u merges", d->n_merges);
    }
    for (uint64_t i = 0; i < size; i++)
        t->merges[i].rank = UINT32_MAX;
    t->merge_mask = (uint32_t)(size - 1);
    int rc = 0;
    for (uint32_t i = 0; i < d->n_merges && !rc; i++) {
        int32_t ids[3] = {-1, -1, -1};
        if (d->merges[i].len > TOK_MAX_TOKEN_BYTES) {
            rc = mf_err_set(err, MF_ENOMEM, "tokenizer: merge %u is %zu bytes", i,
                            d->merges[i].len);
            break;
        }
        rc = parse_merge(t, &d->merges[i], i, cat, ids, err);
        if (rc)
            break;
        uint64_t key = (uint64_t)(uint32_t)ids[0] << 32 | (uint32_t)ids[1];
        uint64_t j = mix64(key) & t->merge_mask;
        while (t->merges[j].rank != UINT32_MAX && t->merges[j].key != key)
            j = (j + 1) & t->merge_mask;
        if (t->merges[j].rank == UINT32_MAX) /* a repeated pair keeps its first rank */
            t->merges[j] = (struct tok_merge){.key = key, .rank = i, .result = ids[2]};
    }
    free(cat);
    return rc;
}

/* ---------------------------------------------------------------------------
 * init
 * ------------------------------------------------------------------------- */

int tok_bpe_init(struct tok *t, const struct tok_desc *d, struct mf_err *err)
{
    const char *pre = d->pre && d->pre[0] ? d->pre : "default";
    for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++)
        if (strcmp(pre_defs[i].name, pre) == 0)
            t->pre = &pre_defs[i];
    if (!t->pre)
        return mf_err_set(err, MF_EUNSUPPORTED, "tokenizer: pre-tokenizer '%s' is not supported",
                          pre);
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        int n = mf_utf8_encode(byte_to_cp(b), u);
        memcpy(t->byte_utf8[b], u, 2);
        t->byte_utf8_len[b] = (uint8_t)n;
        t->byte_tok[b] = tok_lookup(t, u, (size_t)n);
    }
    int rc = build_merges(t, d, err);
    if (rc)
        return rc;
    return compile_pre(t, err);
}

void tok_bpe_fini(struct tok *t)
{
    for (uint32_t i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->re);
    free(t->merges);
    t->re = NULL;
    t->n_re = 0;
    t->merges = NULL;
}

void tok_bpe_scratch_fini(struct tok_scratch *s)
{
    pcre2_match_data_free(s->md);
    s->md = NULL;
}

/* ---------------------------------------------------------------------------
 * encode: sanitise, split, merge
 * ------------------------------------------------------------------------- */

/* Invalid UTF-8 bytes become U+FFFD, one per byte, as llama.cpp's
 * unicode_cpts_from_utf8 does; PCRE2 then needs no UTF check. */
static int sanitise(struct tok_scratch *s, const char **text, size_t *len, struct mf_err *err)
{
    size_t bad;
    if (mf_utf8_valid(*text, *len, &bad))
        return 0;
    int rc = tok_scratch_buf(&s->buf, &s->buf_cap, 3 * *len, err);
    if (rc)
        return rc;
    size_t n = 0;
    for (size_t i = 0; i < *len;) {
        uint32_t cp;
        int k = mf_utf8_decode(*text + i, *len - i, &cp);
        if (k) {
            memcpy(s->buf + n, *text + i, (size_t)k);
            n += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(s->buf + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i++;
        }
    }
    *text = s->buf;
    *len = n;
    return 0;
}

static int span_push(struct tok_scratch *s, int k, size_t off, size_t len, struct mf_err *err)
{
    int rc = tok_grow((void **)&s->span[k], &s->span_cap[k], s->span_n[k], sizeof *s->span[k], err);
    if (!rc)
        s->span[k][s->span_n[k]++] = (struct tok_span){off, len};
    return rc;
}

/* Splits the piece sp of text by regex re into list k: matches and the gaps
 * between them, in order (llama.cpp unicode_regex_split_stl). */
static int split_span(struct tok_scratch *s, const pcre2_code *re, const char *text,
                      struct tok_span sp, int k, struct mf_err *err)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + sp.off);
    size_t pos = 0, from = 0;
    int rc = 0;
    while (from < sp.len && !rc) {
        int m = pcre2_match(re, subj, sp.len, from, PCRE2_NO_UTF_CHECK, s->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(m, msg, sizeof msg);
            return mf_err_set(err, MF_EINVAL, "tokenizer: pre-tokenizer regex failed: %s",
                              (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        if (ov[1] == ov[0]) { /* an empty match splits nothing: step one character */
            from = ov[0] + 1;
            while (from < sp.len && (subj[from] & 0xC0) == 0x80)
                from++;
            continue;
        }
        if (ov[0] > pos)
            rc = span_push(s, k, sp.off + pos, ov[0] - pos, err);
        if (!rc)
            rc = span_push(s, k, sp.off + ov[0], ov[1] - ov[0], err);
        pos = from = ov[1];
    }
    if (!rc && pos < sp.len)
        rc = span_push(s, k, sp.off + pos, sp.len - pos, err);
    return rc;
}

/* Runs every regex of the pre-tokenizer; the pieces end up in list *which. */
static int pre_split(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                     int *which, struct mf_err *err)
{
    if (!s->md) {
        s->md = pcre2_match_data_create(1, NULL);
        if (!s->md)
            return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for regex matching");
    }
    int cur = 0, rc;
    s->span_n[0] = 0;
    rc = span_push(s, 0, 0, len, err);
    for (uint32_t r = 0; r < t->n_re && !rc; r++) {
        int next = !cur;
        s->span_n[next] = 0;
        for (size_t i = 0; i < s->span_n[cur] && !rc; i++)
            rc = split_span(s, t->re[r], text, s->span[cur][i], next, err);
        cur = next;
    }
    *which = cur;
    return rc;
}

static void add_pair(const struct tok *t, struct tok_scratch *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0 || s->sym[l].id < 0 || s->sym[r].id < 0)
        return;
    const struct tok_merge *m = find_merge(t, s->sym[l].id, s->sym[r].id);
    if (!m)
        return;
    /* lowest rank first, then leftmost: llm_bigram_bpe::comparator */
    struct tok_pair p = {.key = (uint64_t)m->rank << 32 | (uint32_t)l,
                         .left = l,
                         .right = r,
                         .a = s->sym[l].id,
                         .b = s->sym[r].id,
                         .c = m->result};
    tok_heap_push(s, &p);
}

static void merge_word(const struct tok *t, struct tok_scratch *s, const char *w, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        s->sym[i] = (struct tok_sym){.off = (size_t)i,
                                     .len = 1,
                                     .id = t->byte_tok[(unsigned char)w[i]],
                                     .prev = i - 1,
                                     .next = i + 1 < n ? i + 1 : -1};
    for (int32_t i = 1; i < n; i++)
        add_pair(t, s, i - 1, i);
    struct tok_pair p;
    while (tok_heap_pop(s, &p)) {
        struct tok_sym *a = &s->sym[p.left], *b = &s->sym[p.right];
        if (a->len == 0 || b->len == 0 || a->next != p.right || a->id != p.a || b->id != p.b)
            continue; /* stale: a side changed since this pair was queued */
        a->len += b->len;
        a->id = p.c;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            s->sym[b->next].prev = p.left;
        add_pair(t, s, a->prev, p.left);
        add_pair(t, s, p.left, a->next);
    }
}

/* The byte-level spelling of w[0..n) into s->word; its length. */
static int spell(const struct tok *t, struct tok_scratch *s, const char *w, size_t n,
                 size_t *out, struct mf_err *err)
{
    int rc = tok_scratch_buf(&s->word, &s->word_cap, 2 * n + 1, err);
    if (rc)
        return rc;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)w[i];
        memcpy(s->word + k, t->byte_utf8[b], t->byte_utf8_len[b]);
        k += t->byte_utf8_len[b];
    }
    *out = k;
    return 0;
}

/* A symbol that is no token: llama.cpp looks up each byte of its byte-level
 * spelling as a one-byte token and drops those that are not. */
static int emit_unknown(const struct tok *t, struct tok_scratch *s, const char *w, size_t n,
                        struct tok_ids *out, struct mf_err *err)
{
    size_t k;
    int rc = spell(t, s, w, n, &k, err);
    for (size_t i = 0; i < k && !rc; i++) {
        int32_t id = tok_lookup(t, s->word + i, 1);
        if (id >= 0)
            rc = tok_ids_push(out, id, err);
    }
    return rc;
}

static int merge_and_emit(const struct tok *t, struct tok_scratch *s, const char *w, size_t n,
                          struct tok_ids *out, struct mf_err *err)
{
    int rc;
    if (t->pre->ignore_merges && n <= t->max_token_len) {
        size_t k;
        rc = spell(t, s, w, n, &k, err);
        int32_t id = rc ? -1 : tok_lookup(t, s->word, k);
        if (rc || id >= 0)
            return rc ? rc : tok_ids_push(out, id, err);
    }
    rc = tok_scratch_reserve(s, n, err);
    if (rc)
        return rc;
    merge_word(t, s, w, (int32_t)n);
    for (int32_t i = 0; i >= 0 && !rc; i = s->sym[i].next) {
        if (s->sym[i].id >= 0)
            rc = tok_ids_push(out, s->sym[i].id, err);
        else
            rc = emit_unknown(t, s, w + s->sym[i].off, s->sym[i].len, out, err);
    }
    return rc;
}

static int encode_word(const struct tok *t, struct tok_scratch *s, const char *w, size_t n,
                       struct tok_ids *out, struct mf_err *err)
{
    int rc;
    if (tok_memo_get(s, w, n, out, err, &rc))
        return rc;
    size_t first = out->n;
    rc = merge_and_emit(t, s, w, n, out, err);
    if (!rc && out->n > first) /* a word may yield no ids (bytes the vocabulary lacks) */
        tok_memo_put(s, w, n, out->v + first, out->n - first);
    return rc;
}

int tok_bpe_encode(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                   struct tok_ids *out, struct mf_err *err)
{
    int k = 0, rc = sanitise(s, &text, &len, err);
    if (!rc)
        rc = pre_split(t, s, text, len, &k, err);
    for (size_t i = 0; !rc && i < s->span_n[k]; i++)
        rc = encode_word(t, s, text + s->span[k][i].off, s->span[k][i].len, out, err);
    return rc;
}
