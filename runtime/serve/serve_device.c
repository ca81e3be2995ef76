/*
 * serve_device.c: the one place mfc-serve decides which compute backend runs
 * a model (MFC_DEVICE, docs/api.md and docs/cuda.md).
 *
 *   cpu   the CPU backend.
 *   cuda  the CUDA backend; refused (MF_EUNSUPPORTED) when no GPU is visible
 *         or when the CUDA plan (runtime/cuda/cuda_plan.h) refuses a tensor of
 *         the model, e.g. Q5_0/Q5_1 weights the kernels do not read.
 *   auto  the CUDA backend when a GPU is visible and the plan accepts every
 *         tensor; otherwise the CPU backend, with the reason returned so the
 *         caller can say on stderr why the GPU is not used.
 *
 * The plan check is host-only (no device memory, no CUDA call), so the
 * decision is unit-tested without a GPU (tests/unit/test_serve_device.c).
 */
#include "runtime/serve/serve.h"

#include <stdio.h>
#include <string.h>

#include "runtime/cuda/cuda_plan.h"
#include "runtime/model/model.h"

int serve_pick_device(const char *device, int gpus, const struct model *m,
                      enum serve_device *out, char *why, size_t cap, struct mf_err *err)
{
    struct cuda_wplan p = {0};
    struct mf_err perr = {0};
    int forced = !strcmp(device, "cuda");

    if (cap)
        why[0] = '\0';
    *out = SERVE_DEVICE_CPU;
    if (!strcmp(device, "cpu"))
        return 0;
    if (!forced && strcmp(device, "auto"))
        return mf_err_set(err, MF_EUSAGE, "MFC_DEVICE \"%s\": expected cpu, cuda or auto", device);
    if (gpus <= 0) {
        if (forced)
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "MFC_DEVICE \"cuda\": no CUDA GPU is visible (or this mfc-serve "
                              "was built without CUDA)");
        return 0; /* auto on a host without a GPU: the CPU, nothing to explain */
    }
    if (cuda_plan_weights(m, &p, &perr)) {
        cuda_wplan_free(&p);
        if (forced)
            return mf_err_set(err, MF_EUNSUPPORTED, "MFC_DEVICE \"cuda\": %s", perr.msg);
        if (cap)
            snprintf(why, cap, "%s, so the CPU backend runs this model (MFC_DEVICE=cpu "
                     "chooses it without this check)", perr.msg);
        return 0;
    }
    cuda_wplan_free(&p);
    *out = SERVE_DEVICE_CUDA;
    return 0;
}
