// GEMM for linear layers: C[m, n] = A[m, k] . op(B) (+ bias[n]), fp32 accumulation.
//
// Not self-contained on purpose: the host compiles this text after the shared prelude
// (kernels-prelude/cuda/prelude.cuh) and gemm_ptx.cuh as one program (NVRTC), so
// there is no #include here.
//
// ABI (the Rust host follows exactly this)
//   extern "C" __global__ void gemm_mma_kernel(const T* a, const T* b, void* c,
//       const T* bias, float* ws, int m, int n, int k, long long lda, long long ldb,
//       long long ldc, int split_k, int group_m, int flags)
//   A is [m, k] row-major with row stride lda. B is [n, k] with row stride ldb
//   (LAYOUT 0, "nt": a linear layer's weight) or [k, n] with row stride ldb (LAYOUT 1,
//   "nn"). C is [m, n] with row stride ldc, of T or of float (flags). bias is null
//   or n values of T. Strides are in elements. flags: bit 0 (C_PAIRS) set when C's base
//   and ldc allow stores of two adjacent elements (4 bytes for 16-bit C, 8 for float);
//   bit 1 (C_F32) set when C is float, else T. Both are run-time arguments: they change
//   only the epilogue, and one compiled variant serves every output type.
//   split_k > 1: blockIdx.y is the split; ws holds split_k * tiles * BM * BN fp32
//   partials then one u32 counter per tile, the counters zero before the launch
//   (the kernel leaves them zero again). The last block of a tile to finish sums the
//   partials in split order 0, 1, ..., so the result does not depend on timing.
// Defines (the config; the host guarantees kernels-gemm `space::fits`)
//   DTYPE 1 = f16, 2 = bf16     LAYOUT 0 = nt, 1 = nn
//   BM BN BK      block tile; BK a multiple of 16
//   WM WN         warps along m and n; the warp tile BM/WM x BN/WN is a multiple of 16x16
//   STAGES        shared-memory pipeline depth (>= 2)
//   ALIGNED       1: A and B bases are 16-byte aligned and lda, ldb multiples of 8
//                 elements, so tiles move by 16-byte cp.async; 0: element loads
// Grid: (tiles_m * tiles_n, split_k, 1) blocks of WM * WN * 32 threads, with
//   STAGES * stage_bytes of dynamic shared memory; tiles are walked in groups of
//   group_m tile rows so blocks running together share B tiles in L2.

#if !defined(DTYPE) || !defined(LAYOUT) || !defined(BM) || !defined(BN) || !defined(BK) || !defined(WM) || \
    !defined(WN) || !defined(STAGES) || !defined(ALIGNED)
#error "gemm.cu needs DTYPE, LAYOUT, BM, BN, BK, WM, WN, STAGES, ALIGNED"
#endif

namespace kg {

typedef typename kd::Dtype<DTYPE>::T T;

constexpr int C_PAIRS = 1;
constexpr int C_F32 = 2;

constexpr int THREADS = WM * WN * 32;
constexpr int TM = BM / WM;  // warp tile
constexpr int TN = BN / WN;
constexpr int MI = TM / 16;  // m16 fragments per warp
constexpr int NJ = TN / 8;   // n8 fragments per warp
static_assert(BK % 16 == 0 && TM % 16 == 0 && TN % 16 == 0, "tile shape");
static_assert(STAGES >= 2, "a pipeline needs two stages");

// Rows in shared memory are padded by 16 bytes: with an even number of 16-byte chunks
// per row, eight consecutive rows then start in eight different bank groups, so each
// ldmatrix phase and each cp.async row is conflict-free.
constexpr int PAD = 8;
constexpr int SA = BK + PAD;                      // A: [BM][SA], k contiguous
constexpr int SB_ROWS = LAYOUT == 0 ? BN : BK;   // B nt: [BN][BK + PAD]; nn: [BK][BN + PAD]
constexpr int SB = LAYOUT == 0 ? BK + PAD : BN + PAD;
constexpr int A_ELEMS = BM * SA;
constexpr int STAGE_ELEMS = A_ELEMS + SB_ROWS * SB;
constexpr int STAGE_BYTES = STAGE_ELEMS * 2;

// One tile of ROWS x COLS (COLS contiguous in memory and in shared memory) from
// global rows row0.. (valid below `rows`) and columns col0.. (valid below `cols`);
// what lies outside lands as zeros, so ragged m, n and k add nothing.
template <int ROWS, int COLS>
__device__ __forceinline__ void load_tile(unsigned dst, kd::u16* dst_ptr, const T* g, long long ld, int row0,
                                          int rows, int col0, int cols, int tid) {
#if ALIGNED
    (void)dst_ptr;
    constexpr int CH = COLS / 8;
#pragma unroll
    for (int it = 0; it < (ROWS * CH + THREADS - 1) / THREADS; ++it) {
        const int c = it * THREADS + tid;
        if (ROWS * CH % THREADS != 0 && c >= ROWS * CH) {
            break;
        }
        const int r = c / CH, q = c % CH;
        const int gr = row0 + r, gc = col0 + q * 8;
        int bytes = 0;
        const T* src = g;
        if (gr < rows && gc < cols) {
            bytes = min(cols - gc, 8) * 2;
            src = g + (long long)gr * ld + gc;
        }
        cp_async16(dst + (r * (COLS + PAD) + q * 8) * 2, src, bytes);
    }
#else
    (void)dst;
    const kd::u16* gp = reinterpret_cast<const kd::u16*>(g);
    for (int e = tid; e < ROWS * COLS; e += THREADS) {
        const int r = e / COLS, q = e % COLS;
        const int gr = row0 + r, gc = col0 + q;
        dst_ptr[r * (COLS + PAD) + q] = (gr < rows && gc < cols) ? gp[(long long)gr * ld + gc] : kd::u16(0);
    }
#endif
}

// Two adjacent outputs of row r from column col on, each only within [m, n].
template <typename OutT>
__device__ __forceinline__ void store_two(void* c, long long ldc, int m, int n, int r, int col, float v0, float v1,
                                          bool pairs) {
    if (r >= m) {
        return;
    }
    OutT* p = reinterpret_cast<OutT*>(c) + (long long)r * ldc + col;
    if (pairs && col + 1 < n) {
        if constexpr (sizeof(OutT) == 4) {
            *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        } else {
            const unsigned lo = kd::from_f32<OutT>(v0).bits, hi = kd::from_f32<OutT>(v1).bits;
            *reinterpret_cast<unsigned*>(p) = lo | (hi << 16);
        }
        return;
    }
    if (col < n) {
        p[0] = kd::from_f32<OutT>(v0);
    }
    if (col + 1 < n) {
        p[1] = kd::from_f32<OutT>(v1);
    }
}

// The block's accumulators (plus bias) into C, rows and columns past m and n skipped.
template <typename OutT, int MI_, int NJ_>
__device__ __forceinline__ void store_tile(void* c, long long ldc, int m, int n, int row0, int col0,
                                           const float (&acc)[MI_][NJ_][4], const T* bias, bool pairs) {
#pragma unroll
    for (int j = 0; j < NJ_; ++j) {
        const int col = col0 + j * 8;
        float b0 = 0.0f, b1 = 0.0f;
        if (bias != nullptr) {
            if (col < n) b0 = kd::to_f32(bias[col]);
            if (col + 1 < n) b1 = kd::to_f32(bias[col + 1]);
        }
#pragma unroll
        for (int mi = 0; mi < MI_; ++mi) {
            const int r = row0 + mi * 16;
            store_two<OutT>(c, ldc, m, n, r, col, acc[mi][j][0] + b0, acc[mi][j][1] + b1, pairs);
            store_two<OutT>(c, ldc, m, n, r + 8, col, acc[mi][j][2] + b0, acc[mi][j][3] + b1, pairs);
        }
    }
}

}  // namespace kg

extern "C" __global__ void __launch_bounds__(kg::THREADS)
    gemm_mma_kernel(const kg::T* __restrict__ a, const kg::T* __restrict__ b, void* __restrict__ c,
                    const kg::T* __restrict__ bias, float* __restrict__ ws, int m, int n, int k, long long lda,
                    long long ldb, long long ldc, int split_k, int group_m, int flags) {
    using namespace kg;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int is_last;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp % WM, warp_n = warp / WM;

    // Grouped raster: group_m tile rows walk the tile columns together.
    const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = group_m * tiles_n;
    const int first_m = (pid / per_group) * group_m;
    const int group_rows = min(tiles_m - first_m, group_m);
    const int pm = first_m + (pid % per_group) % group_rows;
    const int pn = (pid % per_group) / group_rows;
    const int m0 = pm * BM, n0 = pn * BN;

    // This split's k tiles.
    const int z = blockIdx.y;
    const int ktiles = (k + BK - 1) / BK;
    const int per_split = (ktiles + split_k - 1) / split_k;
    const int kt0 = z * per_split;
    const int nk = max(min(ktiles, kt0 + per_split) - kt0, 0);

    const unsigned sbase = kd::smem_addr(smem);
    kd::u16* sptr = reinterpret_cast<kd::u16*>(smem);

    auto load_stage = [&](int slot, int kt) {
        const unsigned sa = sbase + slot * STAGE_BYTES;
        kd::u16* pa = sptr + slot * STAGE_ELEMS;
        const int kk = kt * BK;
        load_tile<BM, BK>(sa, pa, a, lda, m0, m, kk, k, tid);
#if LAYOUT == 0
        load_tile<BN, BK>(sa + A_ELEMS * 2, pa + A_ELEMS, b, ldb, n0, n, kk, k, tid);
#else
        load_tile<BK, BN>(sa + A_ELEMS * 2, pa + A_ELEMS, b, ldb, kk, k, n0, n, tid);
#endif
    };

    float acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Prologue: STAGES - 1 tiles in flight; one commit group per tile, even when empty,
    // so the wait count below always means "the tile about to be used has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) {
            load_stage(s, kt0 + s);
        }
        cp_async_commit();
    }

    for (int i = 0; i < nk; ++i) {
        cp_async_wait<STAGES - 2>();
        // Tile i is visible to every warp, and every warp is done with the slot the
        // next load overwrites (used at step i - 1).
        __syncthreads();
        const int next = i + STAGES - 1;
        if (next < nk) {
            load_stage(next % STAGES, kt0 + next);
        }
        cp_async_commit();

        const int slot = i % STAGES;
        const unsigned sa = sbase + slot * STAGE_BYTES;
        const unsigned sb = sa + A_ELEMS * 2;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned af[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const int row = warp_m * TM + mi * 16 + (lane % 16);
                const int col = kk * 16 + (lane / 16) * 8;
                ldmatrix_x4(af[mi], sa + (row * SA + col) * 2);
            }
            unsigned bf[NJ / 2][4];
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj) {
#if LAYOUT == 0
                const int row = warp_n * TN + jj * 16 + (lane / 16) * 8 + (lane % 8);
                const int col = kk * 16 + ((lane / 8) % 2) * 8;
                ldmatrix_x4(bf[jj], sb + (row * SB + col) * 2);
#else
                const int row = kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8);
                const int col = warp_n * TN + jj * 16 + (lane / 16) * 8;
                ldmatrix_x4_trans(bf[jj], sb + (row * SB + col) * 2);
#endif
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int j = 0; j < NJ; ++j)
                    Mma<T>::run(acc[mi][j], af[mi], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
        }
    }
    cp_async_wait<0>();

    if (split_k > 1) {
        // Every split stores its partial tile (fragment order, one float4 per thread and
        // fragment: coalesced); the last one to finish sums all of them in split order.
        const int tiles = tiles_m * tiles_n;
        float4* part = reinterpret_cast<float4*>(ws) + (long long)pid * (BM * BN / 4);
        const long long split_stride = (long long)tiles * (BM * BN / 4);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
                part[z * split_stride + (mi * NJ + j) * THREADS + tid] =
                    make_float4(acc[mi][j][0], acc[mi][j][1], acc[mi][j][2], acc[mi][j][3]);
        __threadfence();
        __syncthreads();
        unsigned* counters = reinterpret_cast<unsigned*>(ws + (long long)split_k * tiles * BM * BN);
        if (tid == 0) {
            is_last = atomicAdd(&counters[pid], 1u) == unsigned(split_k - 1);
        }
        __syncthreads();
        if (!is_last) {
            return;
        }
        __threadfence();
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int at = (mi * NJ + j) * THREADS + tid;
                float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
                for (int zz = 0; zz < split_k; ++zz) {
                    const float4 v = zz == z ? make_float4(acc[mi][j][0], acc[mi][j][1], acc[mi][j][2], acc[mi][j][3])
                                             : __ldcg(&part[zz * split_stride + at]);
                    if (zz == 0) {
                        s = v;
                    } else {
                        s.x += v.x;
                        s.y += v.y;
                        s.z += v.z;
                        s.w += v.w;
                    }
                }
                acc[mi][j][0] = s.x;
                acc[mi][j][1] = s.y;
                acc[mi][j][2] = s.z;
                acc[mi][j][3] = s.w;
            }
        if (tid == 0) {
            counters[pid] = 0;  // ready for the next launch on this workspace
        }
    }

    const int row0 = m0 + warp_m * TM + lane / 4;
    const int col0 = n0 + warp_n * TN + (lane % 4) * 2;
    const bool pairs = (flags & C_PAIRS) != 0;
    if (flags & C_F32) {
        store_tile<float>(c, ldc, m, n, row0, col0, acc, bias, pairs);
    } else {
        store_tile<T>(c, ldc, m, n, row0, col0, acc, bias, pairs);
    }
}
