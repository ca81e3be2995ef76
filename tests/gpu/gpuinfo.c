/*
 * gpuinfo.c: lists the CUDA devices the kernels library sees.
 *
 * Built whenever nvcc is found, so CI proves the CUDA code compiles and links
 * even on machines without a GPU (where it reports 0 devices and exits 0).
 * On the GPU host tests/gpu/run calls it first to show what it runs on.
 */
#include <stdio.h>

#include "kernels/kernels.h"

int main(void)
{
    struct mf_err err = {0};
    int n = 0;
    if (mfk_device_count(&n, &err) != 0) {
        fprintf(stderr, "gpuinfo: %s\n", err.msg);
        return 1;
    }
    printf("%d CUDA device(s)\n", n);
    for (int i = 0; i < n; i++) {
        struct mfk_device_info d;
        if (mfk_device_query(i, &d, &err) != 0) {
            fprintf(stderr, "gpuinfo: %s\n", err.msg);
            return 1;
        }
        printf("%d: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f GiB free)\n", d.index, d.name,
               d.cc_major, d.cc_minor, d.sm_count, d.total_bytes / 1073741824.0,
               d.free_bytes / 1073741824.0);
    }
    return 0;
}
