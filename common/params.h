/*
 * params.h: the limits of the sampling and context parameters, one table
 * that `mfc check`/`mfc build` (PARAMETER lines) and mfc-serve (model.yaml
 * params, request options on the OpenAI and Ollama routes) all read, so a
 * value the compiler accepts is one the runtime serves, and both routes
 * refuse the same values with the same sentence.
 */
#ifndef MFC_PARAMS_H
#define MFC_PARAMS_H

#include "common/err.h"

/* One parameter's range. */
struct mf_param_limit {
    const char *name; /* Ollama's name: "temperature", "num_ctx" */
    double lo, hi;    /* inclusive bounds */
    int integer;      /* nonzero: a whole number */
};

/* The limit of name, or NULL for a parameter without one (stop, num_gpu). */
const struct mf_param_limit *mf_params_find(const char *name);
/* Checks v against name's limit: 0 (also for a name without one), or
 * MF_EINVAL with "'<field>' is <v>; allowed <lo> to <hi>" (field names the
 * value as its writer wrote it: "temperature", "options.top_p"), or
 * "'<field>' must be a whole number" for 1.5 where an integer is due. */
int mf_params_check(const char *field, const char *name, double v, struct mf_err *err);

#endif
