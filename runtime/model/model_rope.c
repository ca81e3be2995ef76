/*
 * model_rope.c: RoPE's cos/sin tables, one row per position, for every
 * backend (the CPU computes its tables per step, the CUDA backend uploads
 * them with the step's arrays).
 *
 * The angles follow ggml's rope cache (ggml-cpu ops.cpp, rope_yarn and
 * ggml_rope_cache_init) step for step in float: theta advanced by repeated
 * multiplication, divided by the frequency factor (llama3 rope_freqs or
 * LongRoPE's), times the frequency scale, mixed with the unscaled angle by
 * YaRN's ramp, and cos/sin times the mscale. Matching its float operations
 * keeps mfc's angles equal to llama.cpp's before the cosf/sinf. Owns nothing.
 */
#include "runtime/model/model.h"

#include <math.h>
#include <string.h>

static float rd_f32(const void *base, int64_t i)
{
    float f;
    memcpy(&f, (const uint8_t *)base + 4 * i, 4);
    return f;
}

/* YaRN's ramp over dimension pairs: 1 below corr[0], 0 above corr[1]. */
static float yarn_ramp(const float corr[2], int32_t i0)
{
    float hi = corr[1] - corr[0] > 0.001f ? corr[1] - corr[0] : 0.001f;
    float y = ((float)(i0 / 2) - corr[0]) / hi;

    y = y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
    return 1.0f - y;
}

void model_rope_row(const struct model *m, int kind, int32_t pos, float *cs)
{
    const struct model_hparams *hp = &m->hp;
    const float fs = m->rope_scales[kind];
    const float theta_scale = powf(m->rope_bases[kind], -2.0f / (float)hp->n_rot);
    float theta = (float)pos, mscale = hp->rope_mscale;

    if (hp->yarn_ext != 0.0f)
        mscale *= 1.0f + 0.1f * logf(1.0f / fs);
    for (int32_t i = 0; i < hp->n_rot / 2; i++) {
        float ff = m->rope_freqs.data ? rd_f32(m->rope_freqs.data, i) : 1.0f;
        float extrap = theta / ff, th = fs * extrap;
        if (hp->yarn_ext != 0.0f) {
            float mix = yarn_ramp(m->rope_corr[kind], 2 * i) * hp->yarn_ext;
            th = th * (1.0f - mix) + extrap * mix;
        }
        cs[2 * i] = cosf(th) * mscale;
        cs[2 * i + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}
