/*
 * cuda.h: the CUDA backend (runtime/cuda/cuda.c over kernels/): weights uploaded
 * once in their GGUF block formats, a paged KV arena in device memory, one
 * step = a sequence of kernel launches on one stream.
 *
 * Always declared; in a build without the CUDA runtime libraries
 * (MFC_HAVE_CUDA_RUNTIME unset) cuda_device_count reports 0 and create
 * fails with MF_EUNSUPPORTED, so callers need no #ifdef.
 *
 * Differences from cpu_backend_ops (docs/cuda.md): KV in F16 or 8 bits
 * (BACKEND_KV_Q8, BACKEND_KV_FP8, CUDA only; BACKEND_KV_F32 is refused); LoRA adapters are those
 * attached to the model before create, F32/F16/BF16 only, and need cuBLAS (a batch naming another
 * is refused with MF_EUNSUPPORTED); kv_bytes 0 means MFC_GPU_MEMORY_UTILIZATION (default 0.9) of
 * the device's memory.
 */
#ifndef MFC_CUDA_H
#define MFC_CUDA_H

#include <stdint.h>

#include "common/err.h"
#include "runtime/engine/backend.h"

extern const struct backend_ops cuda_backend_ops;

/* Usable CUDA devices (0 without a driver, a GPU, or CUDA in this build). */
int cuda_device_count(void);

/* What create measured: bytes uploaded and seconds it took (host read of the
 * mapping + staging + DMA, end to end). */
struct cuda_upload_stats {
    uint64_t bytes;
    double seconds;
    uint64_t kv_bytes; /* KV arena after kv_alloc */
    int32_t gemm_min;  /* steps of this many tokens (2 for F32/F16/BF16 weights) use
                          tensor-core GEMM (cuBLAS); 0: never */
    int32_t gemm_from_q4k; /* the same for Q4_K weights (cuda_plan_gemm_from: past
                              mmq.cu's range unless MFC_CUDA_MMQ=0) */
    /* decode steps as CUDA graphs (MFC_CUDA_GRAPHS): shapes recorded, steps
     * replayed, recordings that failed (those shapes run eagerly) and why
     * the last one did */
    uint64_t graph_records, graph_replays, graph_failures;
    char graph_why[160];
    int sampling; /* tokens drawn on the device (ops->sample; MFC_CUDA_SAMPLING) */
    uint64_t bf16_bytes; /* bf16 copies of quantized matrices (MFC_CUDA_BF16_WEIGHTS=1) */
    double bf16_seconds; /* and the time making them took */
    /* the host's time around steps, seconds summed over `steps` (divide for a
     * step's): plan, from entry to the first copy queued (checks, planning,
     * the arrays filled); issue, queuing the copy and the launches or the
     * graph; wait, the closing sync (none when the logits stay for the device
     * draw, which syncs); gap, from a step's return to the next one's entry
     * (the engine's draws, scheduling and bookkeeping: the GPU runs nothing
     * of the model meanwhile), over `gaps` back-to-back pairs (a pause of
     * CUDA_HOST_GAP_MAX or more is idleness, not a gap) */
    uint64_t steps, gaps;
    double host_plan_s, host_issue_s, wait_s, gap_s;
};
#define CUDA_HOST_GAP_MAX 0.05 /* seconds */
void cuda_backend_stats(const struct backend *b, struct cuda_upload_stats *st);

/* Greedy sampling on the device over the logits rows of the last step:
 * ids[j] = argmax of row j, j < n (n at most that step's logits rows). */
int cuda_backend_argmax(struct backend *b, int32_t n, int32_t *ids, struct mf_err *err);

#endif
