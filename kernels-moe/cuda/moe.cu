// Fused mixture-of-experts with SiLU: routing, expert alignment, the two grouped GEMMs
// and the fixed-order top-k combine.
//
// Compiled after the shared prelude and kernels-gemm's PTX wrappers (namespace kg) as
// one NVRTC program; no #include. STEP picks the one entry point a variant holds:
//
//   1 moe_topk_softmax(const L* logits, int tokens, int experts, int topk, int renorm,
//                      int* ids, float* weights)
//   2 moe_grouped_topk(const L* logits, const float* bias, int tokens, int experts,
//                      int n_group, int topk_group, int topk, int renorm, float scale,
//                      int* ids, float* weights)
//   3 moe_align(const int* ids, int pairs, int experts, int* offsets, int* sorted)
//   4 moe_gemm (UP=1)  intermediate[p, :] = silu(x[p / topk] . gate_e^T) * (x[p / topk] . up_e^T)
//   5 moe_gemm (UP=0)  y[p, :] = weights[p] * (intermediate[p] . w2_e^T)
//       moe_gemm(const T* a, const T* w, T* out, const int* offsets, const int* sorted,
//                const float* weights, int experts, int topk, int n, int k)
//   6 moe_combine(const T* y, const int* ids, T* out, int tokens, int topk, int experts,
//                 int h)
//
// A pair p = token * topk + slot is one (token, expert) choice. Alignment counts the
// pairs of each expert (ids outside [0, experts) are dropped), writes the exclusive
// prefix `offsets[experts + 1]` and the pairs grouped by expert into `sorted`. A GEMM
// block finds its (expert, row tile) from `offsets` alone, so one alignment serves any
// BM and experts with no pairs start no work. Rows are written by pair index, never by
// sorted position, so the order inside an expert's group changes no result bit.
//
// Defines: STEP; DTYPE (1 f16, 2 bf16; for STEP 1-2 the logits' type, 0 f32 allowed);
// for STEP 4-5: BM BN BK (tile), WM WN (warp grid), STAGES (cp.async ring depth), UP.
// The host guarantees k and n multiples of 8 and 16-byte aligned operands.

#if !defined(STEP) || !defined(DTYPE)
#error "moe.cu needs STEP and DTYPE"
#endif

namespace km {

using kd::u32;

typedef typename kd::Dtype<DTYPE>::T T;

constexpr int NONE = 0x7fffffff;

// Ranking of routing candidates: larger score first, then the lower expert index.
__device__ __forceinline__ bool ranks_before(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// The warp's best (score, index) under `ranks_before`, in every lane.
__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ranks_before(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace km

#if STEP == 1 || STEP == 2

namespace km {
constexpr int ROUTE_WARPS = 4;  // tokens per block, one warp each
}

#if STEP == 1
// Softmax over the router logits, then the topk largest (descending, ties to the lower
// index); renorm rescales the chosen weights to sum to 1.
extern "C" __global__ void __launch_bounds__(km::ROUTE_WARPS * 32)
    moe_topk_softmax(const km::T* __restrict__ logits, int tokens, int experts, int topk, int renorm,
                     int* __restrict__ ids, float* __restrict__ weights) {
    using namespace km;
    const int lane = threadIdx.x % 32;
    const int t = blockIdx.x * ROUTE_WARPS + threadIdx.x / 32;
    if (t >= tokens) {
        return;
    }
    const T* row = logits + (long long)t * experts;
    float mx = kd::neg_inf();
    for (int e = lane; e < experts; e += 32) mx = fmaxf(mx, kd::to_f32(row[e]));
    mx = kd::warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < experts; e += 32) sum += expf(kd::to_f32(row[e]) - mx);
    sum = kd::warp_sum(sum);
    // Pick j is the best candidate ranked after pick j - 1: no selection mask needed.
    float pv = -kd::neg_inf();
    int pi = -1;
    float picked = 0.0f;
    for (int j = 0; j < topk; ++j) {
        float bv = kd::neg_inf();
        int bi = NONE;
        for (int e = lane; e < experts; e += 32) {
            const float v = kd::to_f32(row[e]);
            if (ranks_before(pv, pi, v, e) && ranks_before(v, e, bv, bi)) {
                bv = v;
                bi = e;
            }
        }
        warp_best(bv, bi);
        pv = bv;
        pi = bi;
        const float w = bi == NONE ? 0.0f : expf(bv - mx) / sum;
        picked += w;
        if (lane == 0) {
            ids[(long long)t * topk + j] = bi == NONE ? -1 : bi;
            weights[(long long)t * topk + j] = w;
        }
    }
    if (renorm && lane == 0 && picked > 0.0f) {
        for (int j = 0; j < topk; ++j) weights[(long long)t * topk + j] /= picked;
    }
}
#endif

#if STEP == 2
// DeepSeek-V3 routing: s = sigmoid(logit); choice score c = s + bias. A group's score
// is the sum of its two best c (its only c for one-expert groups); the topk_group best
// groups are kept and the topk best c among their experts chosen. Weights are s,
// rescaled to sum to 1 when renorm, then multiplied by scale.
extern "C" __global__ void __launch_bounds__(km::ROUTE_WARPS * 32)
    moe_grouped_topk(const km::T* __restrict__ logits, const float* __restrict__ bias, int tokens, int experts,
                     int n_group, int topk_group, int topk, int renorm, float scale, int* __restrict__ ids,
                     float* __restrict__ weights) {
    using namespace km;
    const int lane = threadIdx.x % 32;
    const int t = blockIdx.x * ROUTE_WARPS + threadIdx.x / 32;
    if (t >= tokens) {
        return;
    }
    const T* row = logits + (long long)t * experts;
    const int gs = experts / n_group;
    auto choice = [&](int e) { return sigmoid(kd::to_f32(row[e])) + (bias != nullptr ? bias[e] : 0.0f); };

    float my_group = kd::neg_inf();  // lane g < n_group: group g's score
    for (int g = 0; g < n_group; ++g) {
        float t1 = kd::neg_inf(), t2 = kd::neg_inf();
        for (int e = g * gs + lane; e < (g + 1) * gs; e += 32) {
            const float v = choice(e);
            if (v > t1) {
                t2 = t1;
                t1 = v;
            } else if (v > t2) {
                t2 = v;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            const float o1 = __shfl_xor_sync(0xffffffffu, t1, o);
            const float o2 = __shfl_xor_sync(0xffffffffu, t2, o);
            const float hi = fmaxf(t1, o1);
            t2 = fmaxf(fminf(t1, o1), fmaxf(t2, o2));
            t1 = hi;
        }
        if (lane == g) {
            my_group = gs >= 2 ? t1 + t2 : t1;
        }
    }
    u32 kept = 0;
    for (int j = 0; j < topk_group; ++j) {
        const bool cand = lane < n_group && !((kept >> lane) & 1u);
        float bv = cand ? my_group : kd::neg_inf();
        int bi = cand ? lane : NONE;
        warp_best(bv, bi);
        if (bi != NONE) {
            kept |= 1u << bi;
        }
    }
    float pv = -kd::neg_inf();
    int pi = -1;
    float picked = 0.0f;
    for (int j = 0; j < topk; ++j) {
        float bv = kd::neg_inf();
        int bi = NONE;
        for (int e = lane; e < experts; e += 32) {
            if (!((kept >> (e / gs)) & 1u)) {
                continue;
            }
            const float v = choice(e);
            if (ranks_before(pv, pi, v, e) && ranks_before(v, e, bv, bi)) {
                bv = v;
                bi = e;
            }
        }
        warp_best(bv, bi);
        pv = bv;
        pi = bi;
        const float w = bi == NONE ? 0.0f : sigmoid(kd::to_f32(row[bi]));
        picked += w;
        if (lane == 0) {
            ids[(long long)t * topk + j] = bi == NONE ? -1 : bi;
            weights[(long long)t * topk + j] = w;
        }
    }
    if (lane == 0) {
        const float f = renorm && picked > 0.0f ? scale / picked : scale;
        for (int j = 0; j < topk; ++j) weights[(long long)t * topk + j] *= f;
    }
}
#endif

#endif  // STEP 1-2

#if STEP == 3
namespace km {
constexpr int ALIGN_THREADS = 1024;
}

// One block: count pairs per expert in shared memory, scan, scatter. Integer atomics
// only place pairs inside their expert's group; no result depends on that order.
extern "C" __global__ void __launch_bounds__(km::ALIGN_THREADS)
    moe_align(const int* __restrict__ ids, int pairs, int experts, int* __restrict__ offsets,
              int* __restrict__ sorted) {
    using namespace km;
    extern __shared__ int cnt[];  // experts counters, then cursors
    __shared__ int warp_total[ALIGN_THREADS / 32];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int e = tid; e < experts; e += ALIGN_THREADS) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < pairs; p += ALIGN_THREADS) {
        const int e = ids[p];
        if (unsigned(e) < unsigned(experts)) {
            atomicAdd(&cnt[e], 1);
        }
    }
    __syncthreads();
    // Exclusive scan: each thread owns a run of consecutive experts.
    const int chunk = (experts + ALIGN_THREADS - 1) / ALIGN_THREADS;
    const int b = min(tid * chunk, experts), end = min(b + chunk, experts);
    int local = 0;
    for (int e = b; e < end; ++e) local += cnt[e];
    int incl = local;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int v = warp_total[lane];
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            const int u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += u;
        }
        warp_total[lane] = v;  // inclusive over warps
    }
    __syncthreads();
    int run = (warp > 0 ? warp_total[warp - 1] : 0) + incl - local;
    for (int e = b; e < end; ++e) {
        const int c = cnt[e];
        offsets[e] = run;
        cnt[e] = run;
        run += c;
    }
    if (tid == 0) {
        offsets[experts] = warp_total[ALIGN_THREADS / 32 - 1];
    }
    __syncthreads();
    for (int p = tid; p < pairs; p += ALIGN_THREADS) {
        const int e = ids[p];
        if (unsigned(e) < unsigned(experts)) {
            sorted[atomicAdd(&cnt[e], 1)] = p;
        }
    }
}
#endif  // STEP 3

#if STEP == 4 || STEP == 5

#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(WM) || !defined(WN) || !defined(STAGES) || !defined(UP)
#error "the MoE GEMM needs BM, BN, BK, WM, WN, STAGES, UP"
#endif

namespace km {

using kg::cp_async16;
using kg::cp_async_commit;
using kg::cp_async_wait;
using kg::ldmatrix_x4;

constexpr int THREADS = WM * WN * 32;
constexpr int TM = BM / WM;
constexpr int TN = BN / WN;
constexpr int MI = TM / 16;
constexpr int NJ = TN / 8;
constexpr int NB = UP ? 2 : 1;  // weight tiles per stage: gate and up, or w2
static_assert(BK % 16 == 0 && TM % 16 == 0 && TN % 16 == 0, "tile shape");
static_assert(STAGES >= 2, "a pipeline needs two stages");

// Rows padded by 16 bytes: eight consecutive rows start in eight bank groups, so
// ldmatrix and cp.async rows are conflict-free.
constexpr int SK = BK + 8;
constexpr int A_ELEMS = BM * SK;
constexpr int B_ELEMS = BN * SK;
constexpr int STAGE_BYTES = (A_ELEMS + NB * B_ELEMS) * 2;
constexpr int CH = BK / 8;  // 16-byte chunks per tile row

}  // namespace km

extern "C" __global__ void __launch_bounds__(km::THREADS)
    moe_gemm(const km::T* __restrict__ a, const km::T* __restrict__ w, km::T* __restrict__ out,
             const int* __restrict__ offsets, const int* __restrict__ sorted, const float* __restrict__ weights,
             int experts, int topk, int n, int k) {
    using namespace km;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int s_expert, s_row0, s_rows;
    __shared__ int s_pair[BM];

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp % WM, warp_n = warp / WM;

    // Row tile blockIdx.x of the expert-grouped pairs: warp 0 scans the tiles per
    // expert (lane l owns a run of experts) and the owning lane names the expert.
    if (warp == 0) {
        if (lane == 0) s_expert = -1;
        __syncwarp();
        const int t = blockIdx.x;
        const int chunk = (experts + 31) / 32;
        const int b = min(lane * chunk, experts), end = min(b + chunk, experts);
        int local = 0;
        for (int e = b; e < end; ++e) local += (offsets[e + 1] - offsets[e] + BM - 1) / BM;
        int incl = local;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            const int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        int acc = incl - local;
        if (t >= acc && t < incl) {
            for (int e = b; e < end; ++e) {
                const int c = offsets[e + 1] - offsets[e];
                const int tiles = (c + BM - 1) / BM;
                if (t < acc + tiles) {
                    const int j = t - acc;
                    s_expert = e;
                    s_row0 = offsets[e] + j * BM;
                    s_rows = min(BM, c - j * BM);
                    break;
                }
                acc += tiles;
            }
        }
    }
    __syncthreads();
    const int e = s_expert;
    if (e < 0) {
        return;  // a spare slot: the grid covers the most tiles any routing can need
    }
    const int rows = s_rows;
    for (int r = tid; r < BM; r += THREADS) s_pair[r] = r < rows ? sorted[s_row0 + r] : -1;
    __syncthreads();

    const int n0 = blockIdx.y * BN;
    const long long w_rows = (long long)NB * n;  // rows of one expert's weight
    const T* we = w + (long long)e * w_rows * k;
    const int ktiles = (k + BK - 1) / BK;
    const unsigned sbase = kd::smem_addr(smem);

    auto load_stage = [&](int slot, int kt) {
        const unsigned sa = sbase + slot * STAGE_BYTES;
        const int k0 = kt * BK;
        // A: the gathered rows of this tile's pairs (a token's hidden row for the up
        // GEMM, the pair's own intermediate row for the down GEMM); padding rows zero.
        for (int c = tid; c < BM * CH; c += THREADS) {
            const int r = c / CH, q = c % CH;
            const int p = s_pair[r];
            const int gc = k0 + q * 8;
            const T* src = a;
            int bytes = 0;
            if (p >= 0 && gc < k) {
                src = a + (long long)(UP ? p / topk : p) * k + gc;
                bytes = 16;
            }
            cp_async16(sa + (r * SK + q * 8) * 2, src, bytes);
        }
#pragma unroll
        for (int h = 0; h < NB; ++h) {
            const unsigned sb = sa + (A_ELEMS + h * B_ELEMS) * 2;
            const T* wh = we + (long long)h * n * k;
            for (int c = tid; c < BN * CH; c += THREADS) {
                const int r = c / CH, q = c % CH;
                const int gr = n0 + r, gc = k0 + q * 8;
                const T* src = wh;
                int bytes = 0;
                if (gr < n && gc < k) {
                    src = wh + (long long)gr * k + gc;
                    bytes = 16;
                }
                cp_async16(sb + (r * SK + q * 8) * 2, src, bytes);
            }
        }
    };

    float acc[NB][MI][NJ][4];
#pragma unroll
    for (int h = 0; h < NB; ++h)
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[h][i][j][q] = 0.0f;

    // One commit group per k tile, empty ones too, so the wait count always means
    // "the tile about to be used has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, s);
        cp_async_commit();
    }
    for (int i = 0; i < ktiles; ++i) {
        cp_async_wait<STAGES - 2>();
        // Tile i is visible to all warps, and all are done with the slot reloaded next.
        __syncthreads();
        const int next = i + STAGES - 1;
        if (next < ktiles) load_stage(next % STAGES, next);
        cp_async_commit();

        const unsigned sa = sbase + (i % STAGES) * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            u32 af[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const int row = warp_m * TM + mi * 16 + (lane % 16);
                const int col = kk * 16 + (lane / 16) * 8;
                ldmatrix_x4(af[mi], sa + (row * SK + col) * 2);
            }
#pragma unroll
            for (int h = 0; h < NB; ++h) {
                const unsigned sb = sa + (A_ELEMS + h * B_ELEMS) * 2;
                u32 bf[NJ / 2][4];
#pragma unroll
                for (int jj = 0; jj < NJ / 2; ++jj) {
                    const int row = warp_n * TN + jj * 16 + (lane / 16) * 8 + (lane % 8);
                    const int col = kk * 16 + ((lane / 8) % 2) * 8;
                    ldmatrix_x4(bf[jj], sb + (row * SK + col) * 2);
                }
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int j = 0; j < NJ; ++j)
                        kg::Mma<T>::run(acc[h][mi][j], af[mi], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
            }
        }
    }
    cp_async_wait<0>();

    // Epilogue: rows by pair index; n is even, so a column pair is in or out together.
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = warp_m * TM + mi * 16 + lane / 4 + half * 8;
            const int p = s_pair[r];
            if (p < 0) continue;
            const float scale = UP ? 1.0f : weights[p];
            T* orow = out + (long long)p * n;
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int col = n0 + warp_n * TN + j * 8 + (lane % 4) * 2;
                if (col >= n) continue;
                float v0, v1;
                if (UP) {
                    const float g0 = acc[0][mi][j][half * 2], g1 = acc[0][mi][j][half * 2 + 1];
                    v0 = g0 / (1.0f + expf(-g0)) * acc[NB - 1][mi][j][half * 2];
                    v1 = g1 / (1.0f + expf(-g1)) * acc[NB - 1][mi][j][half * 2 + 1];
                } else {
                    v0 = acc[0][mi][j][half * 2] * scale;
                    v1 = acc[0][mi][j][half * 2 + 1] * scale;
                }
                *reinterpret_cast<u32*>(orow + col) = kd::pack2(v0, v1, (T*)nullptr);
            }
        }
}
#endif  // STEP 4-5

#if STEP == 6
namespace km {
constexpr int COMBINE_THREADS = 256;
}

// out[t] = sum over slots j = 0, 1, ... of y[t * topk + j], in that order (fp32), slots
// whose id was dropped by alignment skipped: the same bits every run.
extern "C" __global__ void __launch_bounds__(km::COMBINE_THREADS)
    moe_combine(const km::T* __restrict__ y, const int* __restrict__ ids, km::T* __restrict__ out, int tokens,
                int topk, int experts, int h) {
    using namespace km;
    const int t = blockIdx.x;
    if (t >= tokens) {
        return;
    }
    for (int c = threadIdx.x * 8; c < h; c += COMBINE_THREADS * 8) {
        float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int j = 0; j < topk; ++j) {
            const long long p = (long long)t * topk + j;
            if (unsigned(ids[p]) >= unsigned(experts)) {
                continue;
            }
            float f[8];
            kd::unpack(kd::load_vec<T, 8>(y + p * h + c), f);
#pragma unroll
            for (int q = 0; q < 8; ++q) s[q] += f[q];
        }
        kd::store_vec<T, 8>(out + (long long)t * h + c, kd::pack<T, 8>(s));
    }
}
#endif  // STEP 6
