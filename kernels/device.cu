/*
 * device.cu: CUDA device discovery for the runtime's backend choice.
 *
 * A host without a GPU or driver reports zero devices rather than an error,
 * so mfc-serve falls back to the CPU backend there (the image runs anywhere).
 */
#include "kernels/kernels.h"

#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

extern "C" int mfk_device_count(int *n, struct mf_err *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        *n = 0;
        return 0;
    }
    if (e != cudaSuccess)
        return mf_err_set(err, MF_EIO, "CUDA cannot count devices: %s", cudaGetErrorString(e));
    *n = count;
    return 0;
}

extern "C" int mfk_device_query(int index, struct mfk_device_info *info, struct mf_err *err)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess)
        return mf_err_set(err, MF_EIO, "CUDA device %d: %s", index, cudaGetErrorString(e));
    size_t free_b = 0, total_b = 0;
    e = cudaSetDevice(index);
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess)
        return mf_err_set(err, MF_EIO, "CUDA device %d: cannot read memory: %s", index,
                          cudaGetErrorString(e));
    info->index = index;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->total_bytes = total_b;
    info->free_bytes = free_b;
    info->sm_count = p.multiProcessorCount;
    return 0;
}
