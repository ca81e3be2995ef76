/*
 * graph.cu: CUDA graphs of the context's stream (record once, replay).
 *
 * A decode step is some 400 small launches; replaying them as one graph
 * takes the host's launch calls and most of the gaps between kernels out
 * of the step. The caller records a step with mfk_capture_begin/_end and
 * replays it with mfk_graph_launch for later steps of the same shape: the
 * graph keeps every kernel's arguments, so what changes between steps must
 * live in device memory the kernels read (runtime/cuda/cuda.c's step arrays).
 *
 * Recording is thread-local (cudaStreamCaptureModeThreadLocal): a call
 * that may not be recorded (a synchronisation, an allocation) fails, the
 * capture is then invalid, and mfk_capture_end says so and leaves capture
 * mode, so the caller can run the step the ordinary way instead.
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <new>

#include <cuda_runtime.h>

struct mfk_graph {
    cudaGraphExec_t exec;
};

static int fail(cudaError_t e, const char *what, struct mf_err *err)
{
    cudaGetLastError(); /* not sticky: later calls should see their own errors */
    return mf_err_set(err, e == cudaErrorMemoryAllocation ? MF_ENOMEM : MF_EIO, "CUDA graph %s: %s",
                      what, cudaGetErrorString(e));
}

extern "C" int mfk_capture_begin(struct mfk_ctx *c, struct mf_err *err)
{
    cudaError_t e = cudaStreamBeginCapture(mfk_stream(c), cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? 0 : fail(e, "capture", err);
}

extern "C" int mfk_capture_end(struct mfk_ctx *c, struct mfk_graph **out, struct mf_err *err)
{
    cudaGraph_t g = nullptr;
    cudaGraphExec_t x = nullptr;
    *out = nullptr;
    cudaError_t e = cudaStreamEndCapture(mfk_stream(c), &g);
    if (e != cudaSuccess) {
        if (g)
            cudaGraphDestroy(g);
        return fail(e, "capture (a call that cannot be recorded)", err);
    }
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g); /* the executable graph keeps what it needs */
    if (e != cudaSuccess)
        return fail(e, "instantiate", err);
    struct mfk_graph *r = new (std::nothrow) mfk_graph();
    if (!r) {
        cudaGraphExecDestroy(x);
        return mf_err_set(err, MF_ENOMEM, "out of memory for a CUDA graph");
    }
    r->exec = x;
    *out = r;
    return 0;
}

extern "C" int mfk_graph_launch(struct mfk_ctx *c, struct mfk_graph *g, struct mf_err *err)
{
    cudaError_t e = cudaGraphLaunch(g->exec, mfk_stream(c));
    return e == cudaSuccess ? 0 : fail(e, "launch", err);
}

extern "C" void mfk_graph_free(struct mfk_graph *g)
{
    if (!g)
        return;
    cudaGraphExecDestroy(g->exec);
    delete g;
}
