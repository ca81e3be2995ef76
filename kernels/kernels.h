/*
 * kernels.h: the C interface of the CUDA kernels library (libmfc_kernels).
 *
 * Everything here is callable from C. Functions return 0 or a negative MF_E*
 * code and fill a struct mf_err; they never abort the process. The runtime's
 * CUDA backend (runtime/backend_cuda.c) is the only caller.
 */
#ifndef MFC_KERNELS_H
#define MFC_KERNELS_H

#include <stddef.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mfk_device_info {
    int index;                 /* CUDA device ordinal */
    char name[256];            /* e.g. "NVIDIA H200" */
    int cc_major, cc_minor;    /* compute capability, 9.0 for Hopper */
    size_t total_bytes;        /* device memory */
    size_t free_bytes;         /* free at the time of the query */
    int sm_count;              /* streaming multiprocessors */
};

/* Number of usable CUDA devices in *n (0 when there is no driver or GPU:
 * that is not an error). Fails only on a driver that answers with an error. */
int mfk_device_count(int *n, struct mf_err *err);

/* Describes device `index`. On failure *info is untouched. */
int mfk_device_query(int index, struct mfk_device_info *info, struct mf_err *err);

#ifdef __cplusplus
}
#endif

#endif
