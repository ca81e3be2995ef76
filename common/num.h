/*
 * num.h: strict number parsing (atoi/atof are banned: they cannot fail),
 * hex digits, and byte counts for people.
 *
 * Each parser takes the whole string: leading/trailing garbage, empty input,
 * overflow and (for doubles) NaN/inf are errors, reported as MF_EINVAL or
 * MF_ERANGE with *out untouched.
 */
#ifndef MF_NUM_H
#define MF_NUM_H

#include <stddef.h>
#include <stdint.h>

int mf_num_parse_i64(const char *s, int64_t *out);
int mf_num_parse_u64(const char *s, uint64_t *out);
int mf_num_parse_f64(const char *s, double *out);
/* "true"/"false" and the spellings Go's strconv.ParseBool takes (1, t, T,
 * TRUE, True, 0, f, F, FALSE, False), since Ollama parses bools with it. */
int mf_num_parse_bool(const char *s, int *out);

/* The value 0..15 of one hex digit (0-9, a-f, A-F), or -1 for any other c
 * (including EOF and bytes past 0x7f). */
int mf_num_hex_digit(int c);

/* Formats n bytes in binary units into buf (cap bytes, always terminated,
 * truncated if short): under 1 KiB "N B", else the largest unit up to PiB
 * with 2 decimals ("1.50 GiB"), or with compact set 1 decimal under 10 and
 * none above ("1.5 GiB", "310 MiB"), as progress lines want. */
void mf_num_fmt_bytes(uint64_t n, int compact, char *buf, size_t cap);

#endif
