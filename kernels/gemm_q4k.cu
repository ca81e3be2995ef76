/*
 * gemm_q4k.cu: Q4_K weights times a few dozen tokens on the bf16 tensor
 * cores, dequantized in registers on the way (mfk_gemm's small steps).
 *
 * mfk_gemm otherwise dequantizes every Q4_K weight to bf16 in memory each
 * step and hands it to cuBLAS: at 64 tokens a step that writes and reads
 * the model again in bf16, 3.3 times its Q4_K bytes, most of a batch-64
 * step (bench/results/cuda-graphs-h200-2026-11-30). mmq.cu's int8 products
 * avoid that but pay four float operations per four products for each
 * sub-block's scales. Here the scales go into the weights instead, as the
 * dequantizer applies them: each warp turns its 16 rows x 16 columns of a
 * super-block into an A fragment of bf16 values (bit for bit what
 * mfk_dequant_half writes: (d * sc) * q - dmin * m, rounded), against the
 * input mfk_gemm already rounded to bf16 for cuBLAS; mma.m16n8k16 keeps the
 * fp32 sums, with no per-sub-block work after it. The products therefore
 * equal cuBLAS's on the dequantized weights up to the order of the fp32
 * additions.
 *
 * A block takes 64 rows x 32 tokens: a warp per 16 rows over all 32 tokens
 * (four n8 tiles, so each A fragment serves four mma), in two K-groups
 * taking the even and the odd super-blocks, each with a double-buffered
 * stage (cp.async) of the rows' 144-byte super-blocks and the tokens' 256
 * inputs, their sums added in a fixed order at the end. B fragments come
 * with ldmatrix from token rows 528 bytes apart (conflict-free).
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define GQ_TM 32 /* rows of a block: a warp per 16 */
#define GQ_TN 64 /* tokens of a block */
#define GQ_KG 4  /* K-groups */
#define GQ_KGT (GQ_TM / 16 * 32) /* threads of a K-group */
#define GQ_QB 144                /* bytes of a Q4_K super-block */
#define GQ_WROW 80               /* a row's staged half super-block: head, 64 nibble bytes */
#define GQ_XSTRIDE 272           /* bytes between staged token rows (256 of bf16 + 16) */
#define GQ_W_BYTES (GQ_TM * GQ_WROW)
#define GQ_STAGE (GQ_W_BYTES + GQ_TN * GQ_XSTRIDE)
#define GQ_SMEM (GQ_KG * 2 * GQ_STAGE)

/* Half hs of super-block sb (piece 2 sb + hs: its 16-byte head and nibble
 * bytes 64 hs.., columns 128 hs..) of rows row0.. (those past ne1 zero) and
 * of tokens tok0.. (past nt zero) into stage dst by the K-group's threads
 * (i), one cp.async group. */
__device__ __forceinline__ void gq_stage(uint8_t *dst, const uint8_t *w, uint64_t rb,
                                         int64_t row0, int64_t ne1, const __nv_bfloat16 *x,
                                         int64_t ne0, int tok0, int nt, int piece, int i)
{
    const int sb = piece >> 1, hs = piece & 1;
    for (int v = i; v < GQ_TM * 5; v += GQ_KGT) {
        const int rr = v / 5, cc = v - rr * 5;
        const bool live = row0 + rr < ne1;
        const uint64_t off = cc == 0 ? 0 : 16 + 64 * hs + 16 * (cc - 1);
        cp_async16(dst + 16 * v,
                   w + (uint64_t)(live ? row0 + rr : 0) * rb + (uint64_t)sb * GQ_QB + off,
                   live ? 16 : 0);
    }
    uint8_t *xd = dst + GQ_W_BYTES;
    for (int v = i; v < GQ_TN * 16; v += GQ_KGT) { /* 16 chunks of 16 bytes a token */
        const int t = tok0 + (v >> 4);
        const bool live = t < nt;
        cp_async16(xd + (v >> 4) * GQ_XSTRIDE + 16 * (v & 15),
                   x + (int64_t)(live ? t : 0) * ne0 + (int64_t)piece * 128 + 8 * (v & 15),
                   live ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void gq_sync(int kg)
{
    /* immediates: a register id makes ptxas reserve all 16 barriers */
    switch (kg) {
    case 0: asm volatile("bar.sync 1, %0;\n" ::"n"(N)); break;
    case 1: asm volatile("bar.sync 2, %0;\n" ::"n"(N)); break;
    case 2: asm volatile("bar.sync 3, %0;\n" ::"n"(N)); break;
    default: asm volatile("bar.sync 4, %0;\n" ::"n"(N)); break;
    }
}

/* q (0..15) as an exact float without the slow int conversion */
__device__ __forceinline__ float gq_nib(uint32_t q)
{
    return __uint_as_float(0x4B000000u | q) - 8388608.0f;
}

/* Two weights (d1 * q - m1, rounded as the dequantizer rounds) packed as
 * the bf16 pair of an A register, the first in the low half. */
__device__ __forceinline__ uint32_t gq_pair(float d1, float m1, uint32_t q0, uint32_t q1)
{
    const float v0 = __fsub_rn(__fmul_rn(d1, gq_nib(q0)), m1);
    const float v1 = __fsub_rn(__fmul_rn(d1, gq_nib(q1)), m1);
    const __nv_bfloat162 p = __floats2bfloat162_rn(v0, v1);
    return *reinterpret_cast<const uint32_t *>(&p);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* grid (tokens / GQ_TN, rows / GQ_TM), GQ_KG x 2 warps: y[t][r] = alpha *
 * (row r of w . x[t]) (+ y[t][r] when add); x: bf16 [nt][ne0]. */
__global__ void __launch_bounds__(GQ_KG * GQ_KGT, 1)
    k_gemm_q4k(const uint8_t *__restrict__ w, uint64_t rb, int64_t ne0, int64_t ne1,
               const __nv_bfloat16 *__restrict__ x, int nt, float *y, int64_t ldy, float alpha,
               int add)
{
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int NN = GQ_TN / 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int kg = threadIdx.x / GQ_KGT, ik = threadIdx.x % GQ_KGT, rw = ik >> 5;
    const int64_t row0 = (int64_t)blockIdx.y * GQ_TM;
    const int tok0 = blockIdx.x * GQ_TN, np = (int)(ne0 >> 7);
    uint8_t *stage[2] = {smem + (size_t)(2 * kg) * GQ_STAGE,
                         smem + (size_t)(2 * kg + 1) * GQ_STAGE};
    float acc[NN][4];
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            acc[n][k] = 0.0f;
    /* ldmatrix.x4 row address of this lane: matrix lane / 8 = (n8 tile
     * offset lane / 16, k half (lane / 8) & 1), row (token) lane & 7 */
    const int lm_tok = 8 * (lane >> 4) + (lane & 7), lm_k = 8 * ((lane >> 3) & 1);

    int buf = 0;
    if (kg < np)
        gq_stage(stage[0], w, rb, row0, ne1, x, ne0, tok0, nt, kg, ik);
    for (int pc = kg; pc < np; pc += GQ_KG, buf ^= 1) {
        if (pc + GQ_KG < np) {
            gq_stage(stage[buf ^ 1], w, rb, row0, ne1, x, ne0, tok0, nt, pc + GQ_KG, ik);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        gq_sync<GQ_KGT>(kg); /* every warp's copies of this stage have landed */
        const int hs = pc & 1;
        const uint8_t *ws = stage[buf] + (size_t)(16 * rw) * GQ_WROW;
        const unsigned xs =
            (unsigned)__cvta_generic_to_shared(stage[buf] + GQ_W_BYTES) + lm_tok * GQ_XSTRIDE +
            2 * lm_k;
        const uint8_t *rg[2] = {ws + g * GQ_WROW, ws + (g + 8) * GQ_WROW};
        uint4 hd[2];
        float dd[2], dm[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            hd[h] = *reinterpret_cast<const uint4 *>(rg[h]);
            dd[h] = __half2float(__ushort_as_half((uint16_t)(hd[h].x & 0xFFFF)));
            dm[h] = __half2float(__ushort_as_half((uint16_t)(hd[h].x >> 16)));
        }
#pragma unroll
        for (int cl = 0; cl < 2; cl++) { /* 64 columns: sub-blocks 2c (low nibbles), 2c + 1 */
            /* bytes 2qd, +1, +8, +9 of each 16-byte half of the 32 */
            uint32_t u[2][2][2]; /* [row][half][+0 / +8] */
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
#pragma unroll
                    for (int o = 0; o < 2; o++)
                        u[h][hf][o] = *reinterpret_cast<const uint16_t *>(
                            rg[h] + 16 + 32 * cl + 16 * hf + 2 * qd + 8 * o);
#pragma unroll
            for (int p = 0; p < 2; p++) { /* sub-block j = 2c + p: nibble p */
                const int jl = 2 * cl + p, sh = 4 * p; /* j = 4 hs + jl */
                float d1[2], m1[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int sc, mn;
                    if (hs)
                        q4k_scale_min(hd[h], 4 + jl, &sc, &mn);
                    else
                        q4k_scale_min(hd[h], jl, &sc, &mn);
                    d1[h] = __fmul_rn(dd[h], (float)sc);
                    m1[h] = __fmul_rn(dm[h], (float)mn);
                }
#pragma unroll
                for (int hf = 0; hf < 2; hf++) { /* k16 chunk 2 jl + hf of the piece */
                    uint32_t a[4]; /* a0: row g, k 2qd..+1; a1: row g + 8; a2, a3: k + 8 */
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const uint32_t v = u[r & 1][hf][r >> 1] >> sh;
                        a[r] = gq_pair(d1[r & 1], m1[r & 1], v & 0xF, (v >> 8) & 0xF);
                    }
                    const unsigned kb = (unsigned)(2 * (32 * jl + 16 * hf));
#pragma unroll
                    for (int n = 0; n < NN; n += 2) {
                        uint32_t b[4];
                        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, "
                                     "[%4];\n"
                                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                                     : "r"(xs + kb + 8 * n * GQ_XSTRIDE));
                        mma_bf16(acc[n], a, b[0], b[1]);
                        mma_bf16(acc[n + 1], a, b[2], b[3]);
                    }
                }
            }
        }
        gq_sync<GQ_KGT>(kg); /* stage[buf] is free for the copy after next */
    }
    /* the other K-groups' sums into shared memory (the stages are done
     * with), added to K-group 0's in K-group order */
    __syncthreads();
    float *part = reinterpret_cast<float *>(smem);
    constexpr int PW = (GQ_TM / 16) * NN * 4 * 32; /* floats of one K-group */
    if (kg > 0)
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                part[(kg - 1) * PW + ((rw * NN + n) * 4 + k) * 32 + lane] = acc[n][k];
    __syncthreads();
    if (kg > 0)
        return;
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float v = acc[n][k];
            for (int o = 0; o < GQ_KG - 1; o++)
                v += part[o * PW + ((rw * NN + n) * 4 + k) * 32 + lane];
            const int64_t r = row0 + 16 * rw + g + 8 * (k >> 1);
            const int t = tok0 + 8 * n + 2 * qd + (k & 1);
            if (r < ne1 && t < nt) {
                float *out = y + (int64_t)t * ldy + r;
                *out = add ? *out + alpha * v : alpha * v;
            }
        }
}

int mfk_gemm_q4k(cudaStream_t st, const struct mfk_weight *w, const void *x, int32_t nt,
                 float *y, int64_t ldy, float alpha, int add, struct mf_err *err)
{
    int rc = mfk_raise_smem((const void *)k_gemm_q4k, GQ_SMEM, "gemm (Q4_K)", err);
    if (rc)
        return rc;
    k_gemm_q4k<<<dim3((unsigned)((nt + GQ_TN - 1) / GQ_TN), (unsigned)((w->ne1 + GQ_TM - 1) / GQ_TM)),
                 GQ_KG * GQ_KGT, GQ_SMEM, st>>>((const uint8_t *)w->data, w->row_bytes, w->ne0,
                                                w->ne1, (const __nv_bfloat16 *)x, nt, y, ldy,
                                                alpha, add);
    return mfk_launched("gemm (Q4_K)", err);
}
