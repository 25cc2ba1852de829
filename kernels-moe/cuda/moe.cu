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
//       offsets holds experts + 1 + 4 ints: the prefix, then the wgmma GEMMs' work
//       counters (gate-up's next item and finished blocks, then down's), zeroed here
//   4 moe_gemm (UP=1)  intermediate[p, :] = silu(x[p / topk] . gate_e^T) * (x[p / topk] . up_e^T)
//   5 moe_gemm (UP=0)  y[p, :] = weights[p] * (intermediate[p] . w2_e^T)
//       mma path:   moe_gemm(const T* a, const T* w, T* out, const int* offsets,
//                            const int* sorted, const float* weights, int experts,
//                            int topk, int n, int k)
//       wgmma path: moe_gemm(const __grid_constant__ kg::TmaMap w, const T* a, T* out,
//                            then as the mma path from offsets on), w the TMA map of
//                            the weights (see the wgmma kernel)
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
// Programmatic dependent launch: every entry point calls kd::pdl_wait() before its first
// global memory access; align (one block) lets the next kernel start at once, the GEMMs
// once a block has read its inputs (the wgmma blocks when no item is left), so the host
// may launch the steps with the programmatic-stream-serialization attribute on sm_90.
//
// Defines: STEP; DTYPE (1 f16, 2 bf16; for STEP 1-2 the logits' type, 0 f32 allowed);
// for STEP 4-5: UP, STAGES (ring depth), BM BN (pairs x output columns per block) and
// either BK WM WN (mma path: k step, warp grid) or WGMMA CONSUMERS (wgmma path, sm_90a:
// WGMMA 1 unswapped, 2 swapped; consumer warpgroups).
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
    kd::pdl_wait();
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
    kd::pdl_wait();
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
constexpr int COUNTERS = 4;  // after the prefix: (next item, finished blocks) per GEMM step
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
    kd::pdl_wait();
    // One block: the next kernel's blocks may take the other SMs now (they wait for this
    // one's results in their own pdl_wait).
    kd::pdl_launch_dependents();
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
    if (tid < COUNTERS) {
        offsets[experts + 1 + tid] = 0;  // the wgmma GEMMs' work counters
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

namespace km {

// Row tile `t` of the expert-grouped pairs in tiles of `bm` rows, found by one warp:
// lane l sums the tiles of a run of experts, a shuffle scan places the runs, and the
// lane whose run holds tile t names its expert, first sorted row and rows. The expert
// stays -1 for a spare slot (the grid covers the most tiles any routing can need).
__device__ __forceinline__ void find_row_tile(const int* __restrict__ offsets, int experts, int bm, int t, int lane,
                                              int& expert, int& row0, int& rows) {
    if (lane == 0) expert = -1;
    __syncwarp();
    const int chunk = (experts + 31) / 32;
    const int b = min(lane * chunk, experts), end = min(b + chunk, experts);
    int local = 0;
    for (int e = b; e < end; ++e) local += (offsets[e + 1] - offsets[e] + bm - 1) / bm;
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
            const int tiles = (c + bm - 1) / bm;
            if (t < acc + tiles) {
                const int j = t - acc;
                expert = e;
                row0 = offsets[e] + j * bm;
                rows = min(bm, c - j * bm);
                break;
            }
            acc += tiles;
        }
    }
}

}  // namespace km

#if !WGMMA

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
    kd::pdl_wait();

    // Row tile blockIdx.x of the expert-grouped pairs.
    if (warp == 0) {
        find_row_tile(offsets, experts, BM, blockIdx.x, lane, s_expert, s_row0, s_rows);
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
    // Every input this block reads is read: the next kernel may start its blocks.
    kd::pdl_launch_dependents();

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

#else  // WGMMA

// Hopper path (sm_90a). Persistent blocks, each taking (row tile, column tile) items in
// turn (see the kernel): a
// producer warpgroup fills an mbarrier ring of STAGES k steps of 64 and 1-2 consumer
// warpgroups multiply out of it with wgmma m64nNk16, both operands K-major in 128-byte
// swizzle.
//
// Per stage: the weight tiles first (gate then up for UP=1, w2 for UP=0; BN rows each),
// loaded by TMA from the map `w` over all experts' rows (w13 as [E * 2n, k], w2 as
// [E * n, k] with this kernel's n and k), then the tile's BM activation rows gathered
// by pair (x[pair / topk] for UP=1, intermediate[pair] for UP=0) with 16-byte cp.async
// into the layout TMA's 128-byte swizzle writes: chunk c of row r at chunk c ^ (r % 8)
// of its 128-byte row, 8-row atoms of 1024 bytes. A stage's full barrier completes on
// the TMA bytes plus one cp.async-tracking arrival of each producer thread.
//
// WGMMA 1: pairs on wgmma's 64-row side (each consumer owns BM / CONSUMERS of them),
// weight rows on its N side (N = BN). WGMMA 2 (few pairs per expert): weight rows on
// the 64-row side (each consumer owns BN / CONSUMERS), the pairs on the N side (N = BM),
// so the weights stream at full tensor-core width however few pairs there are.
// Rows are stored by pair index exactly as on the mma path; padding rows of a ragged
// tile (pair -1) and columns past n are computed but never stored.
//
// Grid: one dimension, at most as many blocks as are resident at once (the host's
// `persistent_blocks`), taking items from a counter; (CONSUMERS + 1) * 128 threads,
// warpgroup 0 the producer;
// STAGES * (BM + NB * BN) * 128 + 1024 bytes of dynamic shared memory (the 1024 realigns
// the ring to the swizzle atom), plus CONSUMERS * STAGING_BYTES unswapped. Short k (a down GEMM of k = 256-768) makes an item a few
// k steps: a block per item paid its start, its pipeline fill and its stores of C on
// every one.

#if !defined(BM) || !defined(BN) || !defined(CONSUMERS) || !defined(STAGES) || !defined(UP)
#error "the wgmma MoE GEMM needs WGMMA, BM, BN, CONSUMERS, STAGES, UP"
#endif

namespace km {

using kg::cp_async16;
using kg::TmaMap;

constexpr bool SWAP = WGMMA == 2;
constexpr int NB = UP ? 2 : 1;           // weight tiles per stage: gate and up, or w2
// Paired (the swapped gate-up step with 32-row weight tiles): the gate and up tiles lie
// back to back in the stage, one m64 product over both, so a tile covers 32 output
// columns and the step has twice the items of a 64-row tile (Qwen3-30B-A3B at T = 1:
// 192 instead of 96, for 132 SMs).
constexpr bool PAIRED = SWAP && UP && BN == 32;
constexpr int NP = PAIRED ? 1 : NB;      // products per k16 step
constexpr int BK = 64;                   // 16-bit elements in one 128-byte swizzle row
constexpr int ROW = 128;                 // bytes of a tile row
constexpr int BX = PAIRED ? 2 * BN : SWAP ? BN : BM;  // rows on wgmma's 64-row side
constexpr int BY = SWAP ? BM : BN;       // rows on its N side
constexpr int WG_X = BX / CONSUMERS;     // rows of the 64-row side per consumer
constexpr int MW = WG_X / 64;            // m64 products per consumer, weight tile and k16
constexpr int ACC = BY / 2;              // accumulators per thread and m64 product
constexpr int PRODUCERS = 128;
constexpr int THREADS = (CONSUMERS + 1) * 128;
constexpr int W_BYTES = BN * ROW;        // one weight tile
constexpr int A_OFF = NB * W_BYTES;      // the activation tile follows the weight tiles
constexpr int STAGE_BYTES = A_OFF + BM * ROW;
constexpr int TMA_BYTES = NB * W_BYTES;  // a stage's TMA transaction bytes
// Unswapped: each consumer warpgroup's epilogue staging (64 rows x 128 bytes), after the
// ring; the host's `MoeConfig::gemm_smem_bytes` counts it.
constexpr int STAGING_BYTES = SWAP ? 0 : 64 * ROW;
constexpr int GATHER_ROWS = BM / 16;     // rows per producer thread: 128 threads, 8 chunks a row
static_assert(WG_X == 64 || WG_X == 128, "a consumer owns 64 or 128 rows of the 64-row side");
static_assert(BY % 16 == 0 && BY >= 16 && BY <= 256, "the N side is a wgmma width");
static_assert(BM % 16 == 0, "every producer thread gathers whole rows");
static_assert(W_BYTES % 1024 == 0 && (BM * ROW) % 1024 == 0, "each tile starts on a swizzle atom");
static_assert(NP * MW * ACC <= 128, "accumulators stay in registers");
static_assert(!PAIRED || (CONSUMERS == 1 && BM <= 32), "a paired tile is one consumer's, at most 32 pairs");
static_assert(STAGES >= 2, "a ring needs two stages");
// Two blocks an SM where few accumulators leave registers to spare (the cap halves to
// 128 a thread); one where setmaxnreg moves the producer's registers to the consumers.
constexpr int MIN_BLOCKS = CONSUMERS == 1 && NP * MW * ACC <= 64 ? 2 : 1;

// Arrives on `bar` once every cp.async this thread issued so far has landed; the
// barrier's expected count includes this arrival (noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ uint4 ld_shared_v4(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

// fence_proxy_async (gemm_ptx.cuh) orders shared-memory writes seen through the generic
// proxy (cp.async) before this thread's wgmma reads, which go through the async proxy.

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// A tile's pairs for the stage writers and the epilogue, double-buffered: the producer
// fills the next tile's while the consumers still store the last one's.
struct TileInfo {
    int expert, row0, rows;  // expert -1: the end of the block's items
    int n0;
};

// Orders the producer warpgroup's threads among themselves (named barrier 1).
__device__ __forceinline__ void producers_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
// Orders one consumer warpgroup's threads (named barriers 2 and 3).
__device__ __forceinline__ void warpgroup_sync(int cw) { asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory"); }

// Bytes of activation rows a band of row tiles may keep in L2 (see item_tile): 24 MiB, 40%
// of the H200's L2, leaving the rest to the weight tiles the band's blocks stream.
constexpr long long BAND_BYTES = 24ll << 20;

// Row tiles in a band: as many as keep their k-long activation rows within BAND_BYTES,
// 1 to 16.
__device__ __forceinline__ int band_rows(int bm, int k) {
    return (int)max(1ll, min(16ll, BAND_BYTES / ((long long)bm * k * 2)));
}

// Work item -> (row tile r, column tile c). Row tiles are taken in bands of `g`: a band's
// items cover every column tile, its row tiles fastest, before the next band starts. So
// a band's activation rows stay in L2 while its blocks sweep the columns (all row tiles
// a column tile, as a plain raster would take them, re-read every activation row from
// memory once a column tile), and the row tiles of one expert, adjacent in a band, read
// each weight tile at about the same time.
__device__ __forceinline__ void item_tile(int item, int row_tiles, int tiles_n, int g, int& r, int& c) {
    const int per_band = g * tiles_n;
    const int band = item / per_band;
    const int first = band * g;
    const int size = min(row_tiles - first, g);
    const int j = item - band * per_band;
    r = first + j % size;
    c = j / size;
}

// The total row tiles of `bm` rows over all experts, in every lane of the calling warp.
__device__ __forceinline__ int total_row_tiles(const int* __restrict__ offsets, int experts, int bm, int lane) {
    int local = 0;
    for (int e = lane; e < experts; e += 32) local += (offsets[e + 1] - offsets[e] + bm - 1) / bm;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) local += __shfl_xor_sync(0xffffffffu, local, o);
    return local;
}

}  // namespace km

// Persistent: block b takes item b, then the next free one from a counter in the
// workspace (offsets[experts + 1], gate-up, or [experts + 3], down; moe_align zeroes
// them, and the last block to finish zeroes its step's again, so a step may also be
// launched on its own). Item i is (row tile r, column tile c) in bands of row tiles
// (item_tile). Items are taken in that order whatever the blocks' speeds, so the tiles a
// band shares stay in L2 while its blocks need them, and a block that finishes early
// takes more. row_tiles is the routing's actual count, read from `offsets`. The producer
// runs ahead across items: it gathers the next item's pairs into the other TileInfo
// buffer and fills the ring with its first stages while the consumers store the last
// item's C.
extern "C" __global__ void __launch_bounds__(km::THREADS, km::MIN_BLOCKS)
    moe_gemm(const __grid_constant__ kg::TmaMap w, const km::T* __restrict__ a, km::T* __restrict__ out,
             const int* __restrict__ offsets, const int* __restrict__ sorted, const float* __restrict__ weights,
             int experts, int topk, int n, int k) {
    using namespace km;
    using namespace kg;
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    // info_full[b]: buffer b holds the next item's pairs (one arrival, the producer's);
    // info_free[b]: every consumer warpgroup has stored the item buffer b held.
    __shared__ __align__(8) unsigned long long info_full[2], info_free[2];
    __shared__ TileInfo s_info[2];
    __shared__ int s_pair[2][BM];
    // The down step's routing weights of the tile's pairs, read by the producer with the
    // pairs, so no epilogue waits on a global load.
    __shared__ float s_weight[2][UP ? 1 : BM];
    // Paired: the up rows' accumulators, handed from the warps that hold them to the
    // warps holding the gate rows of the same columns ([accumulator][thread]).
    __shared__ float s_up[PAIRED ? ACC * 64 : 1];

    const int tid = threadIdx.x, lane = tid % 32;
    // Lane 0's value: the compiler then knows it is warp-uniform and keeps the wgmma
    // descriptors derived from it in uniform registers.
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const u32 ring = (kd::smem_addr(smem) + 1023u) & ~1023u;
    const u32 full0 = kd::smem_addr(full), empty0 = kd::smem_addr(empty);
    const u32 ifull0 = kd::smem_addr(info_full), ifree0 = kd::smem_addr(info_free);

    // full[s]: stage s has landed (the TMA bytes, an expect_tx arrival and one arrival
    // of each producer thread's cp.async); empty[s]: every consumer is done reading it.
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, PRODUCERS + 1);
            mbar_init(empty0 + 8 * s, CONSUMERS);
        }
        for (int b = 0; b < 2; ++b) {
            mbar_init(ifull0 + 8 * b, 1);
            mbar_init(ifree0 + 8 * b, CONSUMERS);
        }
        mbar_init_fence();
    }
    __syncthreads();
    // Under programmatic dependent launch, nothing global before the previous kernel is done.
    kd::pdl_wait();

    const int ktiles = (k + BK - 1) / BK;
    const int tiles_n = (n + BN - 1) / BN;

    if (wg == 0) {
        // Producer: warp 0 finds each item's row tile; every thread then gathers chunk
        // tid % 8 of rows tid / 8, tid / 8 + 16, ... of the activation tile, and thread 0
        // issues the weight boxes.
        if constexpr (CONSUMERS == 2) {
            regs_dec<56>();
        }
        int* const next = const_cast<int*>(offsets) + experts + 1 + (UP ? 0 : 2);  // then `done`
        const int q = tid % 8;
        const int r0 = tid / 8;
        // Rows r0 + 16 j all sit at r0 % 8 within their swizzle atom.
        const u32 chunk_at = A_OFF + r0 * ROW + ((q ^ (r0 % 8)) * 16);
        const int row_tiles = total_row_tiles(offsets, experts, BM, lane);  // warp-uniform; every warp
        const int items = row_tiles * tiles_n;
        const int band = band_rows(BM, k);
        int it = 0;
        for (int local = 0;; ++local) {
            const int b = local & 1;
            // The consumers are done with the item this buffer held two items ago (a fresh
            // barrier counts as having completed the phase before its first).
            mbar_wait(ifree0 + 8 * b, ((local / 2) & 1) ^ 1);
            if (tid < 32) {
                // Warp 0 takes the next item: its own index first (no wait for the counter
                // to start the first wave), then from the counter, which counts the items
                // after the first gridDim.x. Every block's last take is past the end.
                int item = blockIdx.x;
                if (local > 0) {
                    if (lane == 0) {
                        item = atomicAdd(next, 1);
                    }
                    item = __shfl_sync(0xffffffffu, item, 0) + (int)gridDim.x;
                }
                if (item < items) {
                    int r, c;
                    item_tile(item, row_tiles, tiles_n, band, r, c);
                    find_row_tile(offsets, experts, BM, r, lane, s_info[b].expert, s_info[b].row0, s_info[b].rows);
                    if (lane == 0) {
                        s_info[b].n0 = c * BN;
                    }
                } else if (lane == 0) {
                    s_info[b].expert = -1;  // the end mark
                }
            }
            producers_sync();
            const TileInfo ti = s_info[b];
            if (ti.expert >= 0) {
                for (int r = tid; r < BM; r += PRODUCERS) {
                    const int p = r < ti.rows ? sorted[ti.row0 + r] : -1;
                    s_pair[b][r] = p;
                    if constexpr (!UP) {
                        s_weight[b][r] = p >= 0 ? weights[p] : 0.0f;
                    }
                }
            }
            producers_sync();
            if (tid == 0) {
                mbar_arrive(ifull0 + 8 * b);
            }
            if (ti.expert < 0) {
                // The end (an item below `items` always names an expert): the consumers
                // stop at the same mark. The last block to get here zeroes the counters
                // for the next launch (every block's takes come before its count).
                if (tid == 0) {
                    __threadfence();
                    if (atomicAdd(next + 1, 1) == (int)gridDim.x - 1) {
                        next[0] = 0;
                        next[1] = 0;
                    }
                }
                break;
            }
            const T* src[GATHER_ROWS];
#pragma unroll
            for (int j = 0; j < GATHER_ROWS; ++j) {
                const int p = s_pair[b][r0 + 16 * j];
                src[j] = p >= 0 ? a + (long long)(UP ? p / topk : p) * k : nullptr;
            }
            // Expert e's first weight row of this column tile (its up rows n further on).
            const int wrow = ti.expert * (NB * n) + ti.n0;
            for (int i = 0; i < ktiles; ++i, ++it) {
                const int s = it % STAGES;
                mbar_wait(empty0 + 8 * s, ((it / STAGES) & 1) ^ 1);
                const u32 bar = full0 + 8 * s;
                const u32 stage = ring + s * STAGE_BYTES;
                if (tid == 0) {
                    mbar_expect_tx(bar, TMA_BYTES);
#pragma unroll
                    for (int h = 0; h < NB; ++h) tma_load_2d(stage + h * W_BYTES, &w, bar, i * BK, wrow + h * n);
                }
                const int col = i * BK + q * 8;
#pragma unroll
                for (int j = 0; j < GATHER_ROWS; ++j) {
                    // Padding rows and columns past k land as zeros.
                    const bool ok = src[j] != nullptr && col < k;
                    cp_async16(stage + chunk_at + j * 16 * ROW, ok ? src[j] + col : a, ok ? 16 : 0);
                }
                cp_async_arrive_noinc(bar);
            }
        }
        cp_async_wait_all();
        return;
    }

    // Consumers.
    if constexpr (CONSUMERS == 2) {
        regs_inc<224>();
    }
    const int cw = wg - 1;
    const int t = tid % 128;
    const int wl = t / 32;
    int it = 0;
    const unsigned long long d_ring = smem_desc_sw128(ring);
    for (int local = 0;; ++local) {
        const int b = local & 1;
        mbar_wait(ifull0 + 8 * b, (local / 2) & 1);
        const TileInfo ti = s_info[b];
        if (ti.expert < 0) {
            // The producer's end mark: no input is read after it, the next kernel may
            // start its blocks.
            kd::pdl_launch_dependents();
            break;
        }
        // acc[mw]: the NP products' accumulators of m64 product mw, product h from h * ACC.
        float acc[MW][NP * ACC];
#pragma unroll
        for (int mw = 0; mw < MW; ++mw)
#pragma unroll
            for (int x = 0; x < NP * ACC; ++x) acc[mw][x] = 0.0f;

        // One wgmma group in flight: a stage is released once the group after the one
        // that read it has been issued and the older group has completed.
        int prev = -1;
        // The ring slot and phase of the tile's first stage, then stepped along without a
        // division per stage.
        u32 s = u32(it) % STAGES, phase = (u32(it) / STAGES) & 1;
        it += ktiles;
        for (int i = 0; i < ktiles; ++i) {
            mbar_wait(full0 + 8 * s, phase);
            fence_proxy_async();
            // Descriptors: the ring's, its address field moved by byte offsets / 16 (every
            // address here is a multiple of 16 below 2^18: the field neither carries nor wraps).
            const u32 stage = s * STAGE_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
                for (int mw = 0; mw < MW; ++mw) {
                    const u32 mine = (cw * WG_X + mw * 64) * ROW + kk * 32;
                    // One product per weight tile. One product of width NB * BN over the gate
                    // and up tiles (A read from shared memory once) timed within 5% of this on
                    // the H200 with the same configs; the table was tuned on this form.
#pragma unroll
                    for (int h = 0; h < NP; ++h) {
                        auto& a = *reinterpret_cast<float(*)[ACC]>(&acc[mw][h * ACC]);
                        if constexpr (SWAP)
                            Wgmma<BY>::run(a, d_ring + ((stage + h * W_BYTES + mine) >> 4),
                                           d_ring + ((stage + A_OFF + kk * 32) >> 4));
                        else
                            Wgmma<BY>::run(a, d_ring + ((stage + A_OFF + mine) >> 4),
                                           d_ring + ((stage + h * W_BYTES + kk * 32) >> 4));
                    }
                }
            wgmma_commit();
            wgmma_wait<1>();
            if (prev >= 0 && t == 0) {
                mbar_arrive(empty0 + 8 * prev);
            }
            prev = int(s);
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
        wgmma_wait<0>();
        if (prev >= 0 && t == 0) {
            mbar_arrive(empty0 + 8 * prev);
        }

        // Epilogue. The m64nN fragment: thread t holds rows 16 (t / 32) + (t % 32) / 4 (+ 8)
        // of its m64 block and columns 8 j + 2 (t % 4) (+ 1), as acc[4 j + 2 half + c].
        const int* pair = s_pair[b];
        const float* weight = s_weight[b];
        if constexpr (PAIRED) {
            // Rows 0-31 of the product are gate rows (warps 0 and 1), rows 32-63 the up
            // rows of the same columns (warps 2 and 3, lane for lane): the up warps hand
            // theirs over in shared memory and the gate warps store silu(gate) * up.
            if (wl >= 2) {
#pragma unroll
                for (int a = 0; a < ACC; ++a) s_up[a * 64 + (wl - 2) * 32 + lane] = acc[0][a];
            }
            warpgroup_sync(cw);
            if (wl < 2) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int col = ti.n0 + wl * 16 + lane / 4 + half * 8;
                    if (col >= n) continue;
#pragma unroll
                    for (int j = 0; j < BY / 8; ++j)
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            const int p = pair[j * 8 + (lane % 4) * 2 + c];
                            if (p < 0) continue;
                            const int at = 4 * j + 2 * half + c;
                            out[(long long)p * n + col] = kd::from_f32<T>(silu_mul(acc[0][at], s_up[at * 64 + wl * 32 + lane]));
                        }
                }
            }
        } else if constexpr (SWAP) {
#pragma unroll
            for (int mw = 0; mw < MW; ++mw)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    // x is an output column; the N side's columns are the tile's pairs.
                    const int x = cw * WG_X + mw * 64 + wl * 16 + lane / 4 + half * 8;
                    const int col = ti.n0 + x;
                    if (col >= n) continue;
#pragma unroll
                    for (int j = 0; j < BY / 8; ++j)
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            const int y = j * 8 + (lane % 4) * 2 + c;
                            const int p = pair[y];
                            if (p < 0) continue;
                            const int at = 4 * j + 2 * half + c;
                            const float v = UP ? silu_mul(acc[mw][at], acc[mw][(NB - 1) * ACC + at])
                                               : acc[mw][at] * weight[y];
                            out[(long long)p * n + col] = kd::from_f32<T>(v);
                        }
                }
        } else if constexpr (UP) {
            // The gate-up step stores its fragments directly: staging them as the down step
            // does made it slower on the H200 (Qwen3 T = 512: 208 -> 243 us, same config).
#pragma unroll
            for (int mw = 0; mw < MW; ++mw)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int x = cw * WG_X + mw * 64 + wl * 16 + lane / 4 + half * 8;
                    const int p = pair[x];
                    if (p < 0) continue;
                    T* orow = out + (long long)p * n;
#pragma unroll
                    for (int j = 0; j < BY / 8; ++j) {
                        const int col = ti.n0 + j * 8 + (lane % 4) * 2;
                        if (col >= n) continue;
                        const int at = 4 * j + 2 * half;
                        const float v0 = silu_mul(acc[mw][at], acc[mw][(NB - 1) * ACC + at]);
                        const float v1 = silu_mul(acc[mw][at + 1], acc[mw][(NB - 1) * ACC + at + 1]);
                        *reinterpret_cast<u32*>(orow + col) = kd::pack2(v0, v1, (T*)nullptr);
                    }
                }
        } else {
            // The tile's rows are pairs, each an output row of n contiguous elements. The
            // warpgroup stages 64 rows x 64 columns at a time (STAGING_BYTES; 16-byte chunk
            // c of row r at c ^ (r % 8), so the fragment writes and the row reads are both
            // free of bank conflicts) and stores them as 16-byte pieces of whole 128-byte
            // row spans: a warp store covers 4 rows x 128 bytes, where storing the fragments
            // directly covered 8 rows x 16 bytes.
            const u32 stg = ring + STAGES * STAGE_BYTES + u32(cw) * STAGING_BYTES;
            const bool whole = n % 8 == 0;  // every row starts on 16 bytes
#pragma unroll
            for (int mw = 0; mw < MW; ++mw) {
                const int x0 = cw * WG_X + mw * 64;  // the m64 block's first tile row
#pragma unroll
                for (int q = 0; q < BY / 64; ++q) {
                    const int c0 = ti.n0 + q * 64;  // the sub-tile's first output column
                    if (c0 >= n) break;
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const int r = wl * 16 + lane / 4 + half * 8;
                        const float scale = UP ? 1.0f : weight[x0 + r];
#pragma unroll
                        for (int jj = 0; jj < 8; ++jj) {
                            const int at = 4 * (q * 8 + jj) + 2 * half;
                            float v0, v1;
                            if (UP) {
                                v0 = silu_mul(acc[mw][at], acc[mw][(NB - 1) * ACC + at]);
                                v1 = silu_mul(acc[mw][at + 1], acc[mw][(NB - 1) * ACC + at + 1]);
                            } else {
                                v0 = acc[mw][at] * scale;
                                v1 = acc[mw][at + 1] * scale;
                            }
                            st_shared_b32(stg + u32(r) * 128u + (u32(jj ^ (r % 8)) << 4) + u32(lane % 4) * 4u,
                                          kd::pack2(v0, v1, (T*)nullptr));
                        }
                    }
                    warpgroup_sync(cw);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int r = t / 8 + 16 * i;
                        const int ch = t % 8;
                        const int p = pair[x0 + r];
                        const int col = c0 + ch * 8;
                        if (p < 0 || col >= n) continue;
                        const uint4 v = ld_shared_v4(stg + u32(r) * 128u + (u32(ch ^ (r % 8)) << 4));
                        T* dst = out + (long long)p * n + col;
                        if (whole && col + 8 <= n) {
                            *reinterpret_cast<uint4*>(dst) = v;
                        } else {
                            // A ragged row (n not a multiple of 8): element by element, to n.
                            const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                            for (int c = 0; c < 8; ++c)
                                if (col + c < n)
                                    reinterpret_cast<unsigned short*>(dst)[c] = (unsigned short)(w[c / 2] >> (16 * (c % 2)));
                        }
                    }
                    // The staging buffer is read out before the next sub-tile fills it.
                    warpgroup_sync(cw);
                }
            }
        }
        // Every thread of this warpgroup has read the buffer's pairs: the producer may refill it.
        warpgroup_sync(cw);
        if (t == 0) {
            mbar_arrive(ifree0 + 8 * b);
        }
    }
}

#endif  // WGMMA
#endif  // STEP 4-5

#if STEP == 6
namespace km {
constexpr int COMBINE_THREADS = 256;
// Slots read per round: every id of the round, then every kept slot's piece, are in
// flight before the sums (two round trips a round, not two a slot).
constexpr int COMBINE_ROUND = 4;
}

// out[t] = sum over slots j = 0, 1, ... of y[t * topk + j], in that order (fp32), slots
// whose id was dropped by alignment skipped: the same bits every run.
extern "C" __global__ void __launch_bounds__(km::COMBINE_THREADS)
    moe_combine(const km::T* __restrict__ y, const int* __restrict__ ids, km::T* __restrict__ out, int tokens,
                int topk, int experts, int h) {
    using namespace km;
    kd::pdl_wait();
    const int t = blockIdx.x;
    if (t >= tokens) {
        return;
    }
    const long long first = (long long)t * topk;
    for (int c = threadIdx.x * 8; c < h; c += COMBINE_THREADS * 8) {
        float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int j0 = 0; j0 < topk; j0 += COMBINE_ROUND) {
            unsigned kept = 0;  // bit q: slot j0 + q exists and its id survived alignment
#pragma unroll
            for (int q = 0; q < COMBINE_ROUND; ++q) {
                if (j0 + q < topk && unsigned(ids[first + j0 + q]) < unsigned(experts)) {
                    kept |= 1u << q;
                }
            }
            kd::Vec<T, 8> v[COMBINE_ROUND];
#pragma unroll
            for (int q = 0; q < COMBINE_ROUND; ++q) {
                if (kept >> q & 1u) {
                    v[q] = kd::load_vec<T, 8>(y + (first + j0 + q) * h + c);
                }
            }
#pragma unroll
            for (int q = 0; q < COMBINE_ROUND; ++q) {
                if (kept >> q & 1u) {
                    float f[8];
                    kd::unpack(v[q], f);
#pragma unroll
                    for (int e = 0; e < 8; ++e) s[e] += f[e];
                }
            }
        }
        kd::store_vec<T, 8>(out + (long long)t * h + c, kd::pack<T, 8>(s));
    }
}
#endif  // STEP 6
