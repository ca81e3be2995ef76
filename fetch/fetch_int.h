/*
 * fetch_int.h: what fetch.c and fetch_http.c share. Not an API.
 */
#ifndef MFC_FETCH_INT_H
#define MFC_FETCH_INT_H

#include "fetch/fetch.h"

/* Downloads a FETCH_URL source into the store (fetch_http.c). */
int fetch_http_run(struct store *s, const struct fetch_source *src, const struct fetch_opts *o,
                   struct fetch_result *r, struct mf_err *err);

#endif
