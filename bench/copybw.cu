/*
 * copybw.cu: the GPU's copy bandwidth, the limit bench/serve-gpu sets decode
 * throughput against (as cuda_bench's first line does): a device-to-device
 * cudaMemcpy of 4 GiB, 3 warm-ups then 10 timed copies with events, bytes
 * read + written over the time. Prints one JSON line:
 *   {"device": NAME, "copy_gbps": G, "bytes": B, "seconds": S}
 * CUDA runtime only, so `nvcc -O2 -o copybw bench/copybw.cu` builds it on a
 * GPU host without the rest of the toolchain. Exit 1 naming the failing call.
 */
#include <cstdio>

#include <cuda_runtime.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "copybw: %s: %s\n", #call, cudaGetErrorString(e_));                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main()
{
    const size_t bytes = (size_t)4 << 30;
    const int warm = 3, runs = 10;
    cudaDeviceProp prop;
    void *a = nullptr, *b = nullptr;
    cudaEvent_t t0, t1;
    float ms = 0;

    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemset(a, 1, bytes));
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    for (int i = 0; i < warm; i++)
        CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(t0));
    for (int i = 0; i < runs; i++)
        CHECK(cudaMemcpy(i & 1 ? a : b, i & 1 ? b : a, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    double moved = 2.0 * (double)bytes * runs, s = ms / 1e3;
    printf("{\"device\":\"%s\",\"copy_gbps\":%.1f,\"bytes\":%.0f,\"seconds\":%.4f}\n", prop.name,
           moved / s / 1e9, moved, s);
    cudaFree(a);
    cudaFree(b);
    return 0;
}
