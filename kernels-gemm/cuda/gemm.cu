// GEMM for linear layers: C[m, n] = A[m, k] . op(B) (+ bias[n]), fp32 accumulation.
// Two kernels, one per compiled variant: gemm_mma_kernel (portable, sm_80+; the
// variants without WGMMA) and gemm_wgmma_kernel (Hopper, sm_90a; WGMMA = 1 or 2),
// described where each begins below.
//
// Not self-contained on purpose: the host compiles this text after the shared prelude
// (kernels-prelude/cuda/prelude.cuh) and gemm_ptx.cuh as one program (NVRTC), so
// there is no #include here.
//
// Portable path: ABI (the Rust host follows exactly this)
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
//   split_k > 1: blockIdx.y is the split; ws holds SPLIT_COUNTERS u32 counters (one
//   per tile, the first `tiles` used; zero before the launch, and the kernel leaves
//   them zero again) then split_k * tiles * BM * BN fp32 partials. The counters sit
//   first, at a fixed size, so no config's partials ever land on another's counters
//   when configs of different shapes share one workspace. The last block of a tile to finish sums the
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

#ifndef DTYPE
#error "gemm.cu needs DTYPE"
#endif

namespace kg {

typedef typename kd::Dtype<DTYPE>::T T;

// Bits of `flags`, shared by both kernels (and C_TMA, bit 2, of EPILOGUE_TMA variants).
constexpr int C_PAIRS = 1;
constexpr int C_F32 = 2;

// Split-K tile counters at the head of the workspace (kernels-gemm SPLIT_COUNTERS).
constexpr int SPLIT_COUNTERS = 16384;

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
            // One cvt for the pair (two software roundings cost a 128x128 tile's
            // epilogue some 1400 instructions more).
            *reinterpret_cast<unsigned*>(p) = kd::pack2(v0, v1, (OutT*)nullptr);
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

// Split-K through the workspace, the part the kernels share. After a block has stored
// its partial tile: its arrival is counted at the tile's counter, and only the last split
// to arrive goes on (true), to sum the partials with split_sum and then split_reset.
// flag is the kernel's shared int; sync its barrier over the threads that store C.
template <typename Sync>
__device__ __forceinline__ bool split_arrive(float* ws, int tile, int split_k, bool leader, int& flag, Sync sync) {
    __threadfence();
    sync();
    if (leader) {
        flag = atomicAdd(&reinterpret_cast<unsigned*>(ws)[tile], 1u) == unsigned(split_k - 1);
    }
    sync();
    if (!flag) {
        return false;
    }
    __threadfence();
    return true;
}

__device__ __forceinline__ void split_add(float& s, float v) { s += v; }
__device__ __forceinline__ void split_add(float4& s, const float4& v) {
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
}

// Splits 0, 1, ..., split_k - 1 summed in that order, so the result does not depend on
// timing; p is split 0's element, the others stride apart, and split z's own is in registers.
template <typename V>
__device__ __forceinline__ V split_sum(const V* p, long long at, long long stride, int split_k, int z, const V& own) {
    V s = V{};
    for (int zz = 0; zz < split_k; ++zz) {
        const V v = zz == z ? own : __ldcg(&p[zz * stride + at]);
        if (zz == 0) {
            s = v;
        } else {
            split_add(s, v);
        }
    }
    return s;
}

// The tile's counter back to zero, ready for the next launch on this workspace.
__device__ __forceinline__ void split_reset(float* ws, int tile, bool leader) {
    if (leader) {
        reinterpret_cast<unsigned*>(ws)[tile] = 0;
    }
}

}  // namespace kg

#if WGMMA
// Hopper path (sm_90a): TMA loads into 128-byte-swizzled shared memory through an
// mbarrier ring, one producer warpgroup and 1-2 consumer warpgroups issuing wgmma,
// persistent blocks, optionally in clusters of 2 sharing the Y tile by TMA multicast.
//
// ABI (the Rust host follows exactly this)
//   extern "C" __global__ void gemm_wgmma_kernel(const __grid_constant__ TmaMap x,
//       const __grid_constant__ TmaMap y, [const __grid_constant__ TmaMap tc,]
//       void* c, const T* bias, float* ws, int m, int n, int k, long long ldc,
//       int split_k, int group_m, int flags)
//   (tc only where EPILOGUE_TMA is 1.)
//   The kernel computes X . Y^T with both operands K-major (layout nt only). WGMMA 1:
//   X = A [m, k], Y = B [n, k]. WGMMA 2 (swapped operands, for few tokens): X = B,
//   Y = A, so the weight fills wgmma's 64-row side and the tokens its N side, and C is
//   written transposed from the accumulators. x and y are tensor maps of X and Y
//   (columns k, 128-byte swizzle) with boxes of 64 x BX and 64 x BY elements; their
//   zero fill past m, n and k makes ragged edges add nothing. c, bias, ws, split_k,
//   group_m and flags mean what they mean for gemm_mma_kernel, except that split_k > 1
//   needs a variant with the reduction (WS_SPLIT 1 and SPLITS below: swapped, or
//   unswapped at 64 accumulators a thread at most, without a cluster or pingpong) or
//   with CLUSTER SPLITS (split_k = CLUSTER; ws unused).
//   EPILOGUE_TMA 1 (WGMMA 1 only): tc is a tensor map of C ([m, n], row stride ldc,
//   C's element type, 128-byte swizzle) with boxes of 64 rows x 128 bytes. With flags
//   bit 2 (C_TMA) set, C is stored by TMA from shared staging buffers (see
//   store_acc_tma); the host sets it only where tc could be encoded and clips at n
//   (C's base, ldc * size and n * size multiples of 16 bytes), and otherwise passes any valid map as tc and
//   the kernel stores C directly, as without EPILOGUE_TMA.
// Defines: DTYPE; WGMMA 1 or 2; BX, BY the tile's rows of X and of Y (BY is wgmma's N);
//   CONSUMERS 1 or 2 warpgroups, each owning BX / CONSUMERS rows of X (64 or 128);
//   STAGES the ring depth; CLUSTER 2 (absent: 1) for clusters of 2 (WGMMA 1), or 2, 3,
//   4, 6 or 8 for the splits of a tile as one cluster (CLUSTER SPLITS below: WGMMA 2,
//   or WGMMA 1 with CLUSTER_SPLIT 1);
//   EPILOGUE_TMA 1 (WGMMA 1 only, BY a multiple of 64; absent: 0) for TMA stores of C;
//   PINGPONG 1 (WGMMA 1, CONSUMERS 2, no cluster; absent: 0): see below;
//   KSUB 2 (WGMMA 2 only; absent: 1): each stage holds two k sub-blocks of 64 (two
//   boxes of each operand), so a weight row is read 256 contiguous bytes at a time and
//   a ring of the same depth keeps twice the bytes in flight;
//   WS_SPLIT 1 (absent: 0) compiles the split-K reduction through the workspace (the
//   host defines it for configs with split_k > 1 and no cluster splits): without it a
//   variant takes split_k = 1 only, and its code is a third smaller.
// PINGPONG 1: the two consumer warpgroups take the block's units in turn (warpgroup 0
//   the first, third, ..., warpgroup 1 the second, fourth, ...), each owning all BX
//   rows of its tile, so one stores its C while the other's wgmma keep the tensor
//   cores busy. The producer fills the ring in unit order as before and each stage is
//   read by one warpgroup. A warpgroup starts waiting on its unit's stages only once
//   the other has waited on all of its previous unit's (the turn barriers): a full
//   barrier's phase is waited on by parity, so no warpgroup may wait two phases ahead.
// Grid: persistent, at most one block per SM; block b takes work units (tile, split)
//   b, b + gridDim.x, ...; (CONSUMERS + 1) * 128 threads, warpgroup 0 the producer;
//   STAGES * (BX + BY) * 128 * KSUB + 1024 bytes of dynamic shared memory (the 1024 realigns
//   the ring to the 1024-byte swizzle atom), plus CONSUMERS * 16384 staging bytes
//   after the ring with EPILOGUE_TMA.
// CLUSTER 2 (WGMMA 1, no CLUSTER_SPLIT): __cluster_dims__(2, 1, 1) is compiled in and
//   gridDim.x is even. A work unit is a band of two vertically adjacent tiles sharing
//   one Y tile; cluster b / 2 takes units b / 2, b / 2 + gridDim.x / 2, ..., and its
//   block of rank r the band's tile r (past m when the band is the ragged last one with
//   one tile: computed from zero fill, never stored). Each block loads its own X tile
//   and half the Y tile (rows r * BY / 2 on), multicast into both blocks, so y's box is
//   64 x BY / 2 and each block's full barrier still counts a whole stage's bytes. A
//   stage is refilled only when the consumers of both blocks are done with it: every
//   consumer warpgroup arrives on the empty barrier of both blocks. group_m counts tile
//   rows; the raster groups group_m / 2 bands (at least one).
// CLUSTER SPLITS (CLUSTER = split_k = 2, 3, 4, 6 or 8; WGMMA 2, or WGMMA 1 with
//   CLUSTER_SPLIT 1, no pingpong, 64 accumulators a thread at most): a work unit is one
//   tile and the cluster's blocks are its splits, rank r computing split r; cluster
//   b / CLUSTER takes tiles b / CLUSTER, b / CLUSTER + gridDim.x / CLUSTER, ... Each
//   block loads its own boxes (no multicast). The partial tiles are summed by
//   reduce-scatter: the tile's fragment groups (8 columns of an m64 block; 64 columns,
//   a whole staging sub-tile, with EPILOGUE_TMA) are dealt to the ranks in turn (see
//   owns); each rank leaves its whole partial tile in its own shared memory (BX * BY * 4
//   bytes after the ring and any staging buffers of C), sums every rank's copy of the
//   groups it owns in rank order 0, 1, ... through distributed shared memory, and
//   stores those groups of C. So each rank reads a CLUSTER-th of every partial (one
//   tile's worth in all), where rank 0 alone would read all of them, and the sums are
//   the workspace split's in the same order (the same bits), without ws, its counters
//   or a trip through L2. red_full (in each rank) completes a phase when every
//   peer has written the unit's partial, red_free when every peer is done reading it:
//   one thread of each peer arrives, after a barrier of its consumer threads, with
//   release at cluster scope, and the waits acquire at cluster scope.

#if !defined(BX) || !defined(BY) || !defined(CONSUMERS) || !defined(STAGES)
#error "the wgmma GEMM needs DTYPE, WGMMA, BX, BY, CONSUMERS, STAGES"
#endif
#ifndef CLUSTER
#define CLUSTER 1
#endif
#ifndef EPILOGUE_TMA
#define EPILOGUE_TMA 0
#endif
#ifndef KSUB
#define KSUB 1
#endif
#ifndef PINGPONG
#define PINGPONG 0
#endif
#ifndef WS_SPLIT
#define WS_SPLIT 0
#endif
#if CLUSTER > 1
#define KG_CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define KG_CLUSTER_DIMS
#endif
#ifndef CLUSTER_SPLIT
#define CLUSTER_SPLIT 0
#endif
#if CLUSTER > 1 && (WGMMA == 2 || CLUSTER_SPLIT)
#define KG_CSPLIT 1
#else
#define KG_CSPLIT 0
#endif

namespace kg {

constexpr bool SWAP = WGMMA == 2;
constexpr bool PP = PINGPONG != 0;
constexpr int BK = 64;                         // 16-bit elements in one 128-byte swizzle row
constexpr int KS = KSUB;                       // k sub-blocks of BK per stage
constexpr int BKS = BK * KS;                   // k elements per stage
constexpr int WG_X = PP ? BX : BX / CONSUMERS;  // rows of X per consumer warpgroup
constexpr int MW = WG_X / 64;         // m64 products per consumer and k16 step
constexpr int ACC = BY / 2;           // accumulators per thread and m64 product
constexpr int CT = CONSUMERS * 128;   // consumer threads
constexpr int THREADS = CT + 128;
constexpr int X_BYTES = BX * BK * 2;
constexpr int Y_BYTES = BY * BK * 2;
// A stage: KS sub-tiles of X (each BK wide, whole swizzle atoms), then KS of Y.
constexpr int STAGE_BYTES = KS * (X_BYTES + Y_BYTES);
static_assert(WG_X == 64 || WG_X == 128, "a consumer warpgroup owns 64 or 128 rows of X");
static_assert(BY % 16 == 0 && BY <= 256, "BY is a wgmma N");
static_assert(X_BYTES % 1024 == 0 && Y_BYTES % 1024 == 0, "each tile starts on a swizzle atom");
// The splits of a tile as one cluster (CLUSTER SPLITS).
constexpr bool CSPLIT = KG_CSPLIT != 0;
// Tile rows of X per work unit: CLUSTER for the unswapped pairs, else one.
constexpr int BAND = CSPLIT ? 1 : CLUSTER;
static_assert(CLUSTER == 1 || (CLUSTER == 2 && !CSPLIT) ||
                  (CSPLIT && (CLUSTER == 2 || CLUSTER == 3 || CLUSTER == 4 || CLUSTER == 6 || CLUSTER == 8)),
              "clusters of 2 sharing Y (unswapped), or of 2, 3, 4, 6 or 8 splits");
static_assert(!CSPLIT || SWAP || (!PP && MW * ACC <= 64),
              "unswapped cluster splits: no pingpong, 64 accumulators a thread at most");
// With clusters each block loads a slice of Y_BYTES / CLUSTER; each slice starts on a
// swizzle atom, so the slices land exactly as one whole-tile box would have put them
// (the 128-byte swizzle depends on the address within the atom).
static_assert((Y_BYTES / BAND) % 1024 == 0, "each Y slice starts on a swizzle atom");
static_assert(!EPILOGUE_TMA || (!SWAP && BY % 64 == 0), "TMA stores of C: unswapped, whole 128-byte rows");
static_assert(!PP || (CONSUMERS == 2 && !SWAP && CLUSTER == 1), "pingpong: two consumers, unswapped, no cluster");
static_assert(KS == 1 || (KS == 2 && SWAP), "two k sub-blocks a stage: swapped operands only");
// Whether the variant has the split-K reduction through the workspace: asked for
// (WS_SPLIT), and swapped, or unswapped without a cluster or pingpong (their units are
// not one tile's split) at 64 accumulators a thread at most (CLUSTER SPLITS compile their
// own exchange instead). Other variants compile without it and take split_k = 1 only.
constexpr bool SPLITS = WS_SPLIT != 0 && (SWAP || (!PP && CLUSTER == 1 && MW * ACC <= 64));

// One unit of work: the tile's first rows of X and Y, its split and its index (with
// clusters, the index of its band of CLUSTER tiles).
struct Unit {
    int x0, y0, z, tile;
};

// Grouped raster over bands of CLUSTER tile rows of X (a band is one tile row without
// clusters): `group` bands walk the tile columns of Y together, so blocks running at
// once share Y tiles in L2; the splits of a tile are adjacent. Block `rank` of a
// cluster takes the band's rank-th tile.
// With CLUSTER SPLITS a unit is a tile and the block's rank is its split.
__device__ __forceinline__ Unit unit_at(int u, int bands, int tiles_y, int split_k, int group, int rank) {
    const int tile = CSPLIT ? u : u / split_k;
    const int per_group = group * tiles_y;
    const int first = (tile / per_group) * group;
    const int rows = min(bands - first, group);
    const int band = first + (tile % per_group) % rows;
    const int py = (tile % per_group) / rows;
    if constexpr (CSPLIT) {
        return Unit{band * BX, py * BY, rank, tile};
    }
    return Unit{(band * CLUSTER + rank) * BX, py * BY, u % split_k, tile};
}

// A consumer warpgroup is done reading stage `bar` (its empty barrier): with clusters,
// on the barrier of every block, as each block's producer refills the shared Y tile
// of both.
__device__ __forceinline__ void release_stage(u32 bar) {
    if constexpr (BAND == 1) {
        mbar_arrive(bar);
    } else {
#pragma unroll
        for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(cluster_addr(bar, r));
    }
}

#if KG_CSPLIT
// CLUSTER SPLITS: the ownership of the tile's float4 groups. Group v of consumer
// warpgroup cw is acc[v / (ACC / 4)][4 (v % (ACC / 4)) ..] of its threads (8 columns of
// an m64 block). The groups are dealt to the ranks in turn, in units of OWN groups (64
// columns, whole staging sub-tiles, with EPILOGUE_TMA), the warpgroups' units numbered
// one after the other: unit i of warpgroup cw goes to rank (cw * UNITS + i) % CLUSTER.
// (Inside the #if: a namespace-scope constant reaches every variant's image.)
constexpr int OWN = EPILOGUE_TMA ? 8 : 1;
constexpr int UNITS = MW * (ACC / 4) / OWN;  // ownership units a consumer warpgroup holds
static_assert((ACC / 4) % OWN == 0, "an m64 block holds whole ownership units");
#endif

// Whether `rank` sums and stores group v of warpgroup cw (see above; without cluster
// splits a block stores every group).
__device__ __forceinline__ bool owns(int rank, int cw, int v) {
#if KG_CSPLIT
    return (cw * UNITS + v / OWN) % CLUSTER == rank;
#else
    return true;
#endif
}

#if KG_CSPLIT
// CLUSTER SPLITS: the exchange of partial tiles between the ranks of a cluster.
constexpr int RED_BYTES = BX * BY * 4;  // one fp32 partial tile

// Spins until the phase of parity `parity` has completed, acquiring at cluster scope
// what the arrivals released (from any block of the cluster).
__device__ __forceinline__ void mbar_wait_acq_cluster(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 "
            "%0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

// Arrives once on an mbarrier of any block of the cluster (a cluster_addr address),
// releasing this thread's earlier accesses at cluster scope.
__device__ __forceinline__ void mbar_arrive_rel_cluster(u32 bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void st_shared_v4_f32(u32 addr, float a, float b, float c, float d) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}

// Four floats at a shared::cluster address (another block's shared memory).
__device__ __forceinline__ float4 ld_cluster_v4_f32(u32 addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

// One thread's part of the reduce-scatter once every rank's whole partial tile is in
// its shared memory (peer[r]: rank r's, as a shared::cluster address; at: this thread's
// offset in each): the groups whose unit i has i % CLUSTER == SLOT (this rank's, see
// owns), all ranks' copies loaded first so the distributed loads overlap, then summed
// into acc in rank order 0, 1, ... (the workspace split's order: the same bits).
template <int SLOT>
__device__ __forceinline__ void sum_owned(float (&acc)[MW][ACC], const u32 (&peer)[CLUSTER], u32 at) {
    constexpr int V4 = MW * (ACC / 4);
    constexpr int MINE = (UNITS - SLOT + CLUSTER - 1) / CLUSTER * OWN;  // groups owned
    float4 got[MINE > 0 ? MINE : 1][CLUSTER];
#pragma unroll
    for (int i = 0; i < MINE; ++i) {
        const int v = ((i / OWN) * CLUSTER + SLOT) * OWN + i % OWN;
#pragma unroll
        for (int r = 0; r < CLUSTER; ++r) got[i][r] = ld_cluster_v4_f32(peer[r] + at + u32(v * CT * 16));
    }
    static_assert(MINE == 0 || ((MINE - 1) / OWN * CLUSTER + SLOT) * OWN + (MINE - 1) % OWN < V4,
                  "owned groups lie in the tile");
#pragma unroll
    for (int i = 0; i < MINE; ++i) {
        const int v = ((i / OWN) * CLUSTER + SLOT) * OWN + i % OWN;
        float4 sum = got[i][0];
#pragma unroll
        for (int r = 1; r < CLUSTER; ++r) {
            sum.x += got[i][r].x;
            sum.y += got[i][r].y;
            sum.z += got[i][r].z;
            sum.w += got[i][r].w;
        }
        float* a = &acc[v / (ACC / 4)][4 * (v % (ACC / 4))];
        a[0] = sum.x;
        a[1] = sum.y;
        a[2] = sum.z;
        a[3] = sum.w;
    }
}
#endif

// Fetches the descriptor of a tensor map (a __grid_constant__ parameter) into the TMA
// unit's descriptor cache ahead of its first use.
__device__ __forceinline__ void prefetch_tensormap(const TmaMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// Orders the consumer warpgroups among themselves (barrier 1; the producer never joins).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(CT) : "memory"); }

// Rows r and r + 1 of column col (a swapped tile's pair: adjacent in the fragment, a
// row apart in C), each only below m; 16-bit outputs take one cvt for both.
template <typename OutT>
__device__ __forceinline__ void store_column_pair(void* c, long long ldc, int m, int r, int col, float v0, float v1) {
    OutT* p = reinterpret_cast<OutT*>(c) + (long long)r * ldc + col;
    if constexpr (sizeof(OutT) == 4) {
        if (r < m) p[0] = kd::from_f32<OutT>(v0);
        if (r + 1 < m) p[ldc] = kd::from_f32<OutT>(v1);
    } else {
        const u32 both = kd::pack2(v0, v1, (OutT*)nullptr);
        if (r < m) *reinterpret_cast<unsigned short*>(p) = (unsigned short)(both & 0xffffu);
        if (r + 1 < m) *reinterpret_cast<unsigned short*>(p + ldc) = (unsigned short)(both >> 16);
    }
}

// The accumulators of consumer thread t (warpgroup-relative) plus bias into C. The
// m64nN fragment: thread t holds rows 16 * (t / 32) + (t % 32) / 4 (+ 8) and columns
// 8 j + 2 (t % 4) (+ 1) of its m64 block, as acc[4 j + 2 half + e]. With cluster
// splits only the groups rank owns (of consumer warpgroup cw).
template <typename OutT>
__device__ __forceinline__ void store_acc(void* c, long long ldc, int m, int n, int x_base, int y_base,
                                          const float (&acc)[MW][ACC], const T* bias, bool pairs, int t, int rank,
                                          int cw) {
    const int warp = t / 32, lane = t % 32;
#pragma unroll
    for (int mw = 0; mw < MW; ++mw)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int x = x_base + mw * 64 + warp * 16 + lane / 4 + h * 8;
            if constexpr (SWAP) {
                if (x >= n) {
                    continue;
                }
                const float b = bias != nullptr ? kd::to_f32(bias[x]) : 0.0f;
#pragma unroll
                for (int j = 0; j < BY / 8; ++j) {
                    if (!owns(rank, cw, mw * (ACC / 4) + j)) {
                        continue;
                    }
                    const int y = y_base + j * 8 + (lane % 4) * 2;
                    store_column_pair<OutT>(c, ldc, m, y, x, acc[mw][4 * j + 2 * h] + b,
                                            acc[mw][4 * j + 2 * h + 1] + b);
                }
            } else {
#pragma unroll
                for (int j = 0; j < BY / 8; ++j) {
                    if (!owns(rank, cw, mw * (ACC / 4) + j)) {
                        continue;
                    }
                    const int y = y_base + j * 8 + (lane % 4) * 2;
                    float b0 = 0.0f, b1 = 0.0f;
                    if (bias != nullptr) {
                        if (y < n) b0 = kd::to_f32(bias[y]);
                        if (y + 1 < n) b1 = kd::to_f32(bias[y + 1]);
                    }
                    store_two<OutT>(c, ldc, m, n, x, y, acc[mw][4 * j + 2 * h] + b0, acc[mw][4 * j + 2 * h + 1] + b1,
                                    pairs);
                }
            }
        }
}

#if EPILOGUE_TMA
// TMA stores of C. Direct stores write 8 rows x 16 bytes a warp instruction while the
// tensor cores idle. Here each consumer warpgroup stages its rows in sub-tiles of 64
// rows x 128 bytes (64 16-bit or 32 f32 columns: one box of tc, 8 KiB), and one of its
// threads hands each to the TMA unit, which writes it while the warpgroup fills its
// other buffer (and, after a tile's last sub-tile, runs the next tile's main loop).
// The 128-byte swizzle of tc puts 16-byte chunk c of row r at chunk c ^ (r % 8): the 8
// rows one warp store touches then start in 8 different bank groups (conflict-free for
// 16-bit C; for f32, rows 2i and 2i + 1 share banks, a 2-way conflict). The TMA unit
// does not write the rows of a box past m, nor its 16-byte column chunks past n (the
// launch sets C_TMA only where n fills whole chunks), so ragged edges need no masks;
// whole sub-tiles past m or n are skipped.
// flags bit 2: C is stored through tc. Defined here only: a namespace-scope constant
// changes the cubin of every variant, and those without EPILOGUE_TMA stay as they were.
constexpr int C_TMA = 4;
constexpr int SUB_BYTES = 64 * 128;
constexpr int STAGING_BYTES = 2 * SUB_BYTES;  // per consumer warpgroup: double-buffered
// Named barriers 2 and 3, one per consumer warpgroup (0 is __syncthreads, 1 consumers_sync).
constexpr int EPILOGUE_BARRIER = 2;

// The accumulators of consumer thread t of warpgroup cw plus bias, as OutT, into C by
// TMA through the warpgroup's staging buffers at `staging`. `sub` counts the sub-tiles
// the warpgroup has issued (the same in all its threads): it picks the buffer, and its
// parity carries over from tile to tile. Values and rounding are store_acc's; with
// cluster splits only the sub-tiles `rank` owns (whole ownership units: see owns).
template <typename OutT>
__device__ __forceinline__ void store_acc_tma(const TmaMap* tc, u32 staging, int& sub, int m, int n, int x_base,
                                              int y_base, const float (&acc)[MW][ACC], const T* bias, int t, int cw,
                                              int rank) {
    constexpr int COLS = 128 / sizeof(OutT);  // columns of a sub-tile
    constexpr int J = COLS / 8;               // 8-column fragment groups per sub-tile
    const int warp = t / 32, lane = t % 32;
    const int row = warp * 16 + lane / 4;  // (+ 8) within the m64 block and the sub-tile
    const u32 swz = u32(lane / 4);         // row % 8 for both rows: the swizzle's XOR term
#pragma unroll
    for (int q = 0; q < BY / COLS; ++q) {
        const int y0 = y_base + q * COLS;
        if (y0 >= n) {
            break;
        }
#pragma unroll
        for (int mw = 0; mw < MW; ++mw) {
            const int x0 = x_base + mw * 64;
            if (x0 >= m) {
                break;
            }
            if (!owns(rank, cw, mw * (ACC / 4) + q * J)) {
                continue;
            }
            const u32 buf = staging + u32(sub & 1) * SUB_BYTES;
            // The store that last read this buffer (two sub-tiles ago) is done with it.
            if (t == 0) {
                bulk_wait_read<1>();
            }
            named_sync(EPILOGUE_BARRIER + cw, 128);
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const int jj = q * J + j;  // the fragment group among the tile's BY / 8
                const int y = y0 + j * 8 + (lane % 4) * 2;
                float b0 = 0.0f, b1 = 0.0f;
                if (bias != nullptr) {
                    if (y < n) b0 = kd::to_f32(bias[y]);
                    if (y + 1 < n) b1 = kd::to_f32(bias[y + 1]);
                }
                const u32 off = u32(j * 8 + (lane % 4) * 2) * u32(sizeof(OutT));  // byte within the row
                const u32 col = ((((off >> 4) ^ swz) << 4) | (off & 15u));
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u32 at = buf + u32(row + 8 * h) * 128u + col;
                    const float v0 = acc[mw][4 * jj + 2 * h] + b0, v1 = acc[mw][4 * jj + 2 * h + 1] + b1;
                    if constexpr (sizeof(OutT) == 4) {
                        st_shared_v2_f32(at, v0, v1);
                    } else {
                        st_shared_b32(at, kd::pack2(v0, v1, (OutT*)nullptr));
                    }
                }
            }
            // Every thread's writes are visible to the TMA unit before the store reads them.
            fence_proxy_async();
            named_sync(EPILOGUE_BARRIER + cw, 128);
            if (t == 0) {
                tma_store_2d(tc, buf, y0, x0);
                bulk_commit();
            }
            ++sub;
        }
    }
}
#endif

}  // namespace kg

namespace kg {

// One stage's weight tile into the ring stage at `xs` (signalling `bar`): X swapped,
// Y unswapped; with clusters, this block's slice of the shared Y tile, into every
// block of the cluster.
__device__ __forceinline__ void load_weight(u32 xs, const TmaMap* tx, const TmaMap* ty, u32 bar, int k0,
                                            const Unit& w, int rank) {
    if constexpr (SWAP) {
#pragma unroll
        for (int kb = 0; kb < KS; ++kb) tma_load_2d(xs + kb * X_BYTES, tx, bar, k0 + kb * BK, w.x0);
    } else if constexpr (BAND > 1) {
        constexpr int slice_bytes = Y_BYTES / CLUSTER, slice_rows = BY / CLUSTER;
        tma_load_2d_multicast(xs + X_BYTES + rank * slice_bytes, ty, bar, k0, w.y0 + rank * slice_rows,
                              (unsigned short)((1 << CLUSTER) - 1));
    } else {
        tma_load_2d(xs + X_BYTES, ty, bar, k0, w.y0);
    }
}

// One stage's activation tile: Y swapped, X unswapped.
__device__ __forceinline__ void load_activations(u32 xs, const TmaMap* tx, const TmaMap* ty, u32 bar, int k0,
                                                 const Unit& w) {
    if constexpr (SWAP) {
#pragma unroll
        for (int kb = 0; kb < KS; ++kb) tma_load_2d(xs + KS * X_BYTES + kb * Y_BYTES, ty, bar, k0 + kb * BK, w.y0);
    } else {
        tma_load_2d(xs, tx, bar, k0, w.x0);
    }
}

}  // namespace kg

extern "C" __global__ void KG_CLUSTER_DIMS __launch_bounds__(kg::THREADS, 1)
    gemm_wgmma_kernel(const __grid_constant__ kg::TmaMap tx, const __grid_constant__ kg::TmaMap ty,
#if EPILOGUE_TMA
                      const __grid_constant__ kg::TmaMap tc,
#endif
                      void* __restrict__ c, const kg::T* __restrict__ bias, float* __restrict__ ws, int m, int n,
                      int k, long long ldc, int split_k, int group_m, int flags) {
    using namespace kg;
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
#if PINGPONG
    // turn[w]: the other warpgroup has waited on every stage of its unit before
    // warpgroup w's next one (one arrival a unit).
    __shared__ __align__(8) unsigned long long turn[2];
#endif
#if KG_CSPLIT
    // red_full: every peer has written its partial of the unit; red_free: every peer is
    // done reading this block's (one arrival a peer and unit each).
    __shared__ __align__(8) unsigned long long red_full, red_free;
#endif
    __shared__ int is_last;

    // Read from lane 0, so the compiler knows it is the same across the warp and keeps what
    // derives from it (the wgmma descriptors) in uniform registers.
    const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
    const u32 ring = (kd::smem_addr(smem) + 1023u) & ~1023u;
    const u32 full0 = kd::smem_addr(full), empty0 = kd::smem_addr(empty);
    const int x_rows = SWAP ? n : m, y_rows = SWAP ? m : n;
    const int tiles_x = (x_rows + BX - 1) / BX, tiles_y = (y_rows + BY - 1) / BY;
    const int bands = BAND > 1 ? (tiles_x + BAND - 1) / BAND : tiles_x;
    const int group = BAND > 1 ? max(group_m / BAND, 1) : group_m;
    const int tiles = bands * tiles_y;
    // With CLUSTER SPLITS a unit is a whole tile (its splits are the cluster's blocks).
    const int units = CSPLIT ? tiles : tiles * split_k;
    const int ktiles = (k + BKS - 1) / BKS;  // stages of k
    const int per_split = (ktiles + split_k - 1) / split_k;
    // This block's rank in its cluster; both blocks of a cluster walk the same units,
    // cluster b / CLUSTER taking units b / CLUSTER, b / CLUSTER + gridDim.x / CLUSTER, ...
    const int rank = CLUSTER > 1 ? int(kd::cluster_rank()) : 0;

    if (threadIdx.x == 0) {
        // The tensor maps' descriptors into the TMA unit's cache while the barriers are
        // set up, so the first loads (and stores of C) do not wait for their fetch.
        prefetch_tensormap(&tx);
        prefetch_tensormap(&ty);
#if EPILOGUE_TMA
        prefetch_tensormap(&tc);
#endif
    }
    // The ring's first pass, by the producer thread (nothing to wait for); returns the
    // stages it filled. The weight (Y unswapped, X swapped) does not depend on the kernel
    // before this one, the activations may: under programmatic dependent launch the first
    // stage's weight box goes out before kd::pdl_wait(), overlapping the previous kernel's
    // tail (a plain launch waits for nothing); then each stage's two boxes in turn, so the
    // TMA unit issues stage 0 whole before the later stages' weights (all the weight boxes
    // first made stage 0 complete with the last of them).
    auto first_ring = [&]() -> int {
        if (blockIdx.x / CLUSTER >= units) {
            kd::pdl_wait();
            return 0;
        }
        const Unit w = unit_at(blockIdx.x / CLUSTER, bands, tiles_y, split_k, group, rank);
        const int kt0 = w.z * per_split;
        const int filled = min(max(min(ktiles, kt0 + per_split) - kt0, 0), STAGES);
        if (filled > 0) {
            mbar_expect_tx(full0, STAGE_BYTES);
            load_weight(ring, &tx, &ty, full0, kt0 * BKS, w, rank);
        }
        kd::pdl_wait();
        for (int i = 0; i < filled; ++i) {
            const u32 bar = full0 + 8 * i;
            if (i > 0) {
                mbar_expect_tx(bar, STAGE_BYTES);
                load_weight(ring + i * STAGE_BYTES, &tx, &ty, bar, (kt0 + i) * BKS, w, rank);
            }
            load_activations(ring + i * STAGE_BYTES, &tx, &ty, bar, (kt0 + i) * BKS, w);
        }
        return filled;
    };
    int prefetched = 0;  // the first pass's stages (the producer thread's)
    // full[s]: stage s has landed (one arrival with its bytes, by the producer; with
    // clusters, half the Y bytes come from the peer's multicast);
    // empty[s]: every consumer warpgroup (of every block of the cluster) is done reading it
    // (with PINGPONG, the one warpgroup that read it).
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, PP ? 1 : CONSUMERS * BAND);
        }
#if KG_CSPLIT
        mbar_init(kd::smem_addr(&red_full), CLUSTER - 1);
        mbar_init(kd::smem_addr(&red_free), CLUSTER - 1);
#endif
#if PINGPONG
        mbar_init(kd::smem_addr(&turn[0]), 1);
        mbar_init(kd::smem_addr(&turn[1]), 1);
#endif
        mbar_init_fence();
        if constexpr (CLUSTER == 1) {
            // With no peer to set up its barriers first, the first pass goes out here,
            // from the block's first instructions: the producer's branch below lies far
            // from them and starts cold in the instruction cache.
            prefetched = first_ring();
        }
    }
    if constexpr (CONSUMERS == 2) {
        if (wg == 0) {
            // The producer warpgroup's registers go back before the block barrier: the
            // consumers' raise below waits for them, and the producer's own branch starts
            // cold in the instruction cache.
            regs_dec<40>();
        }
    }
    if constexpr (CLUSTER > 1) {
        // The peer multicasts into this block and arrives on its barriers only after this.
        cluster_sync();
    } else {
        __syncthreads();
    }

    if (wg == 0) {
        // Producer: one thread keeps the ring full, running ahead across tiles.
        if (threadIdx.x == 0) {
            if constexpr (CLUSTER > 1) {
                prefetched = first_ring();
            }
            int it = 0;
            for (int u = blockIdx.x / CLUSTER; u < units; u += gridDim.x / CLUSTER) {
                const Unit w = unit_at(u, bands, tiles_y, split_k, group, rank);
                const int kt0 = w.z * per_split;
                const int nk = max(min(ktiles, kt0 + per_split) - kt0, 0);
                for (int i = 0; i < nk; ++i, ++it) {
                    const int s = it % STAGES;
                    const u32 bar = full0 + 8 * s;
                    const u32 xs = ring + s * STAGE_BYTES;
                    if (it < prefetched) {
                        continue;  // loaded above
                    }
                    // A fresh barrier counts as having completed the phase before its
                    // first, so the first pass over the ring does not wait.
                    mbar_wait(empty0 + 8 * s, ((it / STAGES) & 1) ^ 1);
                    // With clusters the peer's slice may land before this arrival: the
                    // transaction count dips below zero, and the phase cannot complete
                    // before the arrival.
                    mbar_expect_tx(bar, STAGE_BYTES);
                    load_weight(xs, &tx, &ty, bar, (kt0 + i) * BKS, w, rank);
                    load_activations(xs, &tx, &ty, bar, (kt0 + i) * BKS, w);
                }
            }
        }
        if constexpr (CLUSTER > 1) {
            // No block exits while its peer's consumers may still arrive on its empty
            // barriers: this producer never waits for their last releases. (Its own
            // multicasts have landed by then: the peer's consumers waited for them.)
            cluster_sync();
        }
        return;
    }

    // Consumers: C, the bias and the split-K workspace only after the kernel before.
    if constexpr (CONSUMERS == 2) {
        regs_inc<232>();
    }
    kd::pdl_wait();
    const int cw = wg - 1;
    const int ct = threadIdx.x - 128;
    const int t = threadIdx.x % 128;
    const bool pairs = (flags & C_PAIRS) != 0;
#if EPILOGUE_TMA
    // This warpgroup's two staging buffers, after the ring (1024-byte aligned, as the
    // swizzle needs: the ring and its stages are whole atoms).
    const u32 staging = ring + STAGES * STAGE_BYTES + cw * STAGING_BYTES;
    int sub = 0;
#endif
    int it = 0;
    // Ring slot 0's descriptors of this warpgroup's X rows and of Y.
    const unsigned long long dx0 = smem_desc_sw128(ring + (PP ? 0 : cw * WG_X * 128));
    const unsigned long long dy0 = smem_desc_sw128(ring + KS * X_BYTES);
    // The block's units in order (`local`); with PINGPONG this warpgroup's own count
    // (`mine`) numbers its turns.
    int local = 0, mine = 0;
    for (int u = blockIdx.x / CLUSTER; u < units; u += gridDim.x / CLUSTER, ++local) {
        const Unit w = unit_at(u, bands, tiles_y, split_k, group, rank);
        const int kt0 = w.z * per_split;
        const int nk = max(min(ktiles, kt0 + per_split) - kt0, 0);
#if PINGPONG
        if ((local & 1) != cw) {
            it += nk;  // the other warpgroup's stages
            continue;
        }
        // Warpgroup 1's turn j follows warpgroup 0's unit j; warpgroup 0's turn j > 0
        // follows warpgroup 1's unit j - 1.
        if (cw == 1) {
            mbar_wait(kd::smem_addr(&turn[1]), u32(mine & 1));
        } else if (mine > 0) {
            mbar_wait(kd::smem_addr(&turn[0]), u32((mine - 1) & 1));
        }
        ++mine;
#endif
        float acc[MW][ACC];
#pragma unroll
        for (int mw = 0; mw < MW; ++mw)
#pragma unroll
            for (int e = 0; e < ACC; ++e) acc[mw][e] = 0.0f;

        // One wgmma group in flight: a stage is released once the group after the one
        // that read it has been issued and the older group has completed.
        int prev = -1;
        // The ring slot and phase of the unit's first stage, then stepped along without
        // a division per stage.
        u32 s = u32(it) % STAGES, phase = (u32(it) / STAGES) & 1;
        it += nk;
        for (int i = 0; i < nk; ++i) {
            mbar_wait(full0 + 8 * s, phase);
            // The descriptors of the stage's first X and Y sub-tiles, those of ring slot 0
            // moved by the slot's offset; the others follow by adding byte offsets / 16
            // to the address field (every address here is a multiple of 16 below 2^18,
            // so the field neither carries nor wraps).
            const unsigned long long dx = dx0 + s * (STAGE_BYTES >> 4);
            const unsigned long long dy = dy0 + s * (STAGE_BYTES >> 4);
            wgmma_fence();
#pragma unroll
            for (int kb = 0; kb < KS; ++kb)
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
                    for (int mw = 0; mw < MW; ++mw)
                        Wgmma<BY>::run(acc[mw], dx + u32((kb * X_BYTES + mw * 64 * 128 + kk * 32) >> 4),
                                       dy + u32((kb * Y_BYTES + kk * 32) >> 4));
            wgmma_commit();
            wgmma_wait<1>();
            if (prev >= 0 && t == 0) {
                release_stage(empty0 + 8 * prev);
            }
            prev = int(s);
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
#if PINGPONG
        if (t == 0) {
            // Every phase this unit waited on has completed: the other warpgroup may wait
            // on the next ones.
            mbar_arrive(kd::smem_addr(&turn[1 - cw]));
        }
#endif
        wgmma_wait<0>();
        if (prev >= 0 && t == 0) {
            release_stage(empty0 + 8 * prev);
        }
        if (u + (PP ? 2 : 1) * (gridDim.x / CLUSTER) >= units) {
            // Every input this warpgroup reads is read: the next kernel may start its blocks.
            kd::pdl_launch_dependents();
        }

#if KG_CSPLIT
        {
            // Reduce-scatter of the cluster's partial tiles (see CLUSTER SPLITS); `local`
            // numbers this block's units, hence the barriers' phases.
            constexpr int V4 = MW * (ACC / 4);  // float4 groups a thread holds
            static_assert(V4 * CT * 16 == RED_BYTES, "a thread's float4s tile the partial");
#if EPILOGUE_TMA
            const u32 red = ring + STAGES * STAGE_BYTES + CONSUMERS * STAGING_BYTES;
#else
            const u32 red = ring + STAGES * STAGE_BYTES;
#endif
            const u32 full_bar = kd::smem_addr(&red_full), free_bar = kd::smem_addr(&red_free);
            const u32 at = u32(ct * 16);  // this thread's float4 of group 0
            // The peers are done reading this block's previous partial (a fresh barrier
            // counts as having completed the phase before its first).
            mbar_wait_acq_cluster(free_bar, (local & 1) ^ 1);
#pragma unroll
            for (int mw = 0; mw < MW; ++mw)
#pragma unroll
                for (int j = 0; j < ACC / 4; ++j)
                    st_shared_v4_f32(red + at + u32((mw * (ACC / 4) + j) * CT * 16), acc[mw][4 * j],
                                     acc[mw][4 * j + 1], acc[mw][4 * j + 2], acc[mw][4 * j + 3]);
            // Every consumer thread's writes precede the one release each peer acquires.
            consumers_sync();
            if (ct == 0) {
                for (int r = 0; r < CLUSTER; ++r)
                    if (r != rank) mbar_arrive_rel_cluster(cluster_addr(full_bar, u32(r)));
            }
            mbar_wait_acq_cluster(full_bar, local & 1);
            u32 peer[CLUSTER];  // each rank's partial (this one's too), as shared::cluster addresses
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) peer[r] = cluster_addr(red, u32(r));
            // This warpgroup's units that are this rank's: those i with i % CLUSTER == slot.
            const int slot = (rank - (cw * UNITS) % CLUSTER + CLUSTER) % CLUSTER;
            switch (slot) {
                case 0: sum_owned<0>(acc, peer, at); break;
                case 1: sum_owned<1>(acc, peer, at); break;
#if CLUSTER > 2
                case 2: sum_owned<2>(acc, peer, at); break;
#endif
#if CLUSTER > 3
                case 3: sum_owned<3>(acc, peer, at); break;
#endif
#if CLUSTER > 4
                case 4: sum_owned<4>(acc, peer, at); break;
                case 5: sum_owned<5>(acc, peer, at); break;
#endif
#if CLUSTER > 6
                case 6: sum_owned<6>(acc, peer, at); break;
                case 7: sum_owned<7>(acc, peer, at); break;
#endif
                default: break;
            }
            // Every consumer thread's reads precede the release that lets a peer rewrite.
            consumers_sync();
            if (ct == 0) {
                for (int r = 0; r < CLUSTER; ++r)
                    if (r != rank) mbar_arrive_rel_cluster(cluster_addr(free_bar, u32(r)));
            }
        }
#else
        // Split-K where a thread holds at most 64 accumulators (SPLITS): holding a
        // prefill tile's 128 through the reduction spills registers.
        if (SPLITS && split_k > 1) {
            // Each split stores its partial tile (fragment order, one float4 per thread
            // and 4 accumulators: coalesced); the last to finish sums all of them in
            // split order 0, 1, ..., so the result does not depend on timing.
            float4* part = reinterpret_cast<float4*>(ws + SPLIT_COUNTERS) + (long long)w.tile * (BX * BY / 4);
            const long long split_stride = (long long)tiles * (BX * BY / 4);
#pragma unroll
            for (int mw = 0; mw < MW; ++mw)
#pragma unroll
                for (int j = 0; j < ACC / 4; ++j)
                    part[w.z * split_stride + (mw * (ACC / 4) + j) * CT + ct] =
                        make_float4(acc[mw][4 * j], acc[mw][4 * j + 1], acc[mw][4 * j + 2], acc[mw][4 * j + 3]);
            if (!split_arrive(ws, w.tile, split_k, ct == 0, is_last, [] { consumers_sync(); })) {
                continue;
            }
#pragma unroll
            for (int mw = 0; mw < MW; ++mw)
#pragma unroll
                for (int j = 0; j < ACC / 4; ++j) {
                    const float4 sum = split_sum(
                        part, (mw * (ACC / 4) + j) * CT + ct, split_stride, split_k, w.z,
                        make_float4(acc[mw][4 * j], acc[mw][4 * j + 1], acc[mw][4 * j + 2], acc[mw][4 * j + 3]));
                    acc[mw][4 * j] = sum.x;
                    acc[mw][4 * j + 1] = sum.y;
                    acc[mw][4 * j + 2] = sum.z;
                    acc[mw][4 * j + 3] = sum.w;
                }
            split_reset(ws, w.tile, ct == 0);
        }
#endif

        const int x_base = w.x0 + (PP ? 0 : cw * WG_X);
#if EPILOGUE_TMA
        if (flags & C_TMA) {
            if (flags & C_F32) {
                store_acc_tma<float>(&tc, staging, sub, m, n, x_base, w.y0, acc, bias, t, cw, rank);
            } else {
                store_acc_tma<T>(&tc, staging, sub, m, n, x_base, w.y0, acc, bias, t, cw, rank);
            }
            continue;
        }
#endif
        if (flags & C_F32) {
            store_acc<float>(c, ldc, m, n, x_base, w.y0, acc, bias, pairs, t, rank, cw);
        } else {
            store_acc<T>(c, ldc, m, n, x_base, w.y0, acc, bias, pairs, t, rank, cw);
        }
    }
#if EPILOGUE_TMA
    if (t == 0) {
        // This warpgroup's stores have read its staging buffers and written C before the
        // block exits (no-op where C was stored directly).
        bulk_wait<0>();
    }
#endif
    if constexpr (CLUSTER > 1) {
        cluster_sync();  // see the producer's
    }
}
#elif !STREAM  // portable path

#if !defined(DTYPE) || !defined(LAYOUT) || !defined(BM) || !defined(BN) || !defined(BK) || !defined(WM) || \
    !defined(WN) || !defined(STAGES) || !defined(ALIGNED)
#error "gemm.cu needs DTYPE, LAYOUT, BM, BN, BK, WM, WN, STAGES, ALIGNED"
#endif

namespace kg {

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

    // Every global access after the kernel before this one (programmatic dependent
    // launch; nothing to wait for on a plain launch).
    kd::pdl_wait();

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
        float4* part = reinterpret_cast<float4*>(ws + SPLIT_COUNTERS) + (long long)pid * (BM * BN / 4);
        const long long split_stride = (long long)tiles * (BM * BN / 4);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
                part[z * split_stride + (mi * NJ + j) * THREADS + tid] =
                    make_float4(acc[mi][j][0], acc[mi][j][1], acc[mi][j][2], acc[mi][j][3]);
        if (!split_arrive(ws, pid, split_k, tid == 0, is_last, [] { __syncthreads(); })) {
            return;
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const float4 s =
                    split_sum(part, (mi * NJ + j) * THREADS + tid, split_stride, split_k, z,
                              make_float4(acc[mi][j][0], acc[mi][j][1], acc[mi][j][2], acc[mi][j][3]));
                acc[mi][j][0] = s.x;
                acc[mi][j][1] = s.y;
                acc[mi][j][2] = s.z;
                acc[mi][j][3] = s.w;
            }
        split_reset(ws, pid, tid == 0);
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

#endif  // WGMMA

#if STREAM
// Decode path (sm_80+, layout nt): the weight streams from global memory straight into
// the A fragments of mma.sync m16n8k16, with no shared-memory ring, no barrier and no
// producer, so a block starts loading at once and each SM keeps as many 16-byte loads
// in flight as its warps issue. The weight's rows are the product's 16-row side and the
// tokens its 8-column side (C^T = B . A^T, as on the swapped wgmma path).
//
// ABI (the Rust host follows exactly this): gemm_mma_kernel's, layout nt only;
//   group_m is taken and unused (one token tile row: nothing to group).
// Defines: DTYPE; STREAM 1; TOK 8 or 16 tokens a block (the config's block_m); WR warps
//   along the weight's rows, 16 rows each (block_n = 16 WR); WK warps splitting the
//   block's share of k, summed in shared memory in warp order; UNROLL blocks of 32 k
//   each warp loads before their products (the config's stages); ALIGNED 1: A and B
//   bases 16-byte aligned and lda, ldb multiples of 8 elements (16-byte loads); 0:
//   element loads.
//   CLUSTER (absent: 1) 2, 3, 4, 6 or 8 = split_k (sm_90): the splits of a tile run as
//   one cluster and rank 0 adds the others' partials from their shared memory, in
//   split order (the workspace split's sum, without the workspace's round trips).
// Grid: (ceil(n / (16 WR)), split_k, ceil(m / TOK)) blocks of WR * WK * 32 threads, or
//   with CLUSTER (ceil(n / (16 WR)) * CLUSTER, 1, ceil(m / TOK)), block x of a tile's
//   cluster being split x % CLUSTER; WR * WK * 32 * TOK / 2 floats of dynamic shared
//   memory where WK > 1 or CLUSTER > 1. split_k > 1 without CLUSTER sums the splits
//   through the workspace as gemm_mma_kernel does (the last block of a tile adds the
//   partials in split order), a tile being TOK tokens x 16 WR rows.
//
// Fragments without a transpose: a lane with g = lane / 4, t = lane % 4 loads 8
// consecutive k (16 bytes) of weight rows g and g + 8 at 8t within each block of 32 k
// and the same 8 k of token g's row of A. Within the block, mma step 0 takes elements
// 0-3 of every lane's 8 and step 1 elements 4-7: the products' k order is a fixed
// permutation of the block's 32 k, the same for both operands, so each dot product is
// whole (fp32 sums in another order than the tiled paths', within the same tolerance).

#if !defined(DTYPE) || !defined(TOK) || !defined(WR) || !defined(WK) || !defined(UNROLL) || !defined(ALIGNED)
#error "the stream GEMM needs DTYPE, TOK, WR, WK, UNROLL, ALIGNED"
#endif
#ifndef CLUSTER
#define CLUSTER 1
#endif
#if CLUSTER > 1
#define KG_STREAM_CLUSTER __cluster_dims__(CLUSTER, 1, 1)
#else
#define KG_STREAM_CLUSTER
#endif

namespace kg {

constexpr int S_THREADS = WR * WK * 32;
constexpr int S_NT = TOK / 8;  // n8 token tiles a warp
static_assert(TOK == 8 || TOK == 16, "8 or 16 tokens a block");
static_assert(S_THREADS == 128 || S_THREADS == 256, "4 or 8 warps");
static_assert(UNROLL >= 1 && UNROLL <= 8, "1 to 8 blocks of k in flight");
static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 3 || CLUSTER == 4 || CLUSTER == 6 || CLUSTER == 8,
              "clusters of 2, 3, 4, 6 or 8 splits");

// 16 bytes (8 elements) from p, with no element at or past `left` read (left <= 0: zeros).
// Full chunks of an aligned operand move as one 16-byte load (`stream`: the weight,
// read once, not kept in L1); the rest element by element.
template <bool STREAMED>
__device__ __forceinline__ uint4 load8(const T* p, int left) {
#if ALIGNED
    if (left >= 8) {
        uint4 v;
        if constexpr (STREAMED) {
            // Not volatile: the weight, which no kernel this one may wait for writes (it is
            // prefetched before the wait too), so the compiler may schedule it freely.
            asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                : "l"(p));
        } else {
            // Volatile: the activations may be the output of the kernel this one waits for
            // (kd::pdl_wait), and a non-volatile asm could be moved above that wait.
            asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "l"(p));
        }
        return v;
    }
#endif
    const kd::u16* q = reinterpret_cast<const kd::u16*>(p);
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 lo = 2 * i < left ? u32(q[2 * i]) : 0u;
        const u32 hi = 2 * i + 1 < left ? u32(q[2 * i + 1]) : 0u;
        w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// One block of 32 k: two m16n8k16 products per token tile (elements 0-3, then 4-7).
__device__ __forceinline__ void stream_mma(float (&acc)[S_NT][4], const uint4& wa, const uint4& wb,
                                           const uint4 (&x)[S_NT]) {
#pragma unroll
    for (int i = 0; i < S_NT; ++i) {
        const u32 a0[4] = {wa.x, wb.x, wa.y, wb.y};
        const u32 a1[4] = {wa.z, wb.z, wa.w, wb.w};
        Mma<T>::run(acc[i], a0, x[i].x, x[i].y);
        Mma<T>::run(acc[i], a1, x[i].z, x[i].w);
    }
}

}  // namespace kg

extern "C" __global__ void __launch_bounds__(kg::S_THREADS) KG_STREAM_CLUSTER
    gemm_stream_kernel(const kg::T* __restrict__ a, const kg::T* __restrict__ b, void* __restrict__ c,
                       const kg::T* __restrict__ bias, float* __restrict__ ws, int m, int n, int k, long long lda,
                       long long ldb, long long ldc, int split_k, int group_m, int flags) {
    using namespace kg;
    (void)group_m;
    extern __shared__ __align__(16) float red[];
    __shared__ int is_last;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wr = warp % WR, wk = warp / WR;
    const int g = lane / 4, t = lane % 4;
    // The split and the row tile: along y, or with CLUSTER the rank within x's cluster.
    const int split = CLUSTER > 1 ? int(blockIdx.x % CLUSTER) : int(blockIdx.y);
    const int tile_x = CLUSTER > 1 ? int(blockIdx.x / CLUSTER) : int(blockIdx.x);
    const int row0 = (tile_x * WR + wr) * 16;
    const int tok0 = blockIdx.z * TOK;
    // This warp's blocks of 32 k: share split * WK + wk of split_k * WK.
    const int kblocks = (k + 31) / 32;
    const int shares = split_k * WK;
    const int per = (kblocks + shares - 1) / shares;
    const int kb0 = min((split * WK + wk) * per, kblocks);
    const int kb1 = min(kb0 + per, kblocks);
    // Rows past n read row n - 1 (its products are never stored).
    const T* wa = b + (long long)min(row0 + g, n - 1) * ldb + 8 * t;
    const T* wb = b + (long long)min(row0 + g + 8, n - 1) * ldb + 8 * t;

    // The first blocks of the weight head for L2 while the kernel before finishes
    // (the weight is not written by the kernels this one waits for, as on the wgmma path).
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        if (kb0 + u < kb1 && (kb0 + u) * 32 + 8 * t < k) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wa + (kb0 + u) * 32));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wb + (kb0 + u) * 32));
        }
    }
    kd::pdl_wait();

    // Tokens past m read token m - 1's row (in bounds; their products are never stored).
    const T* xa[S_NT];
#pragma unroll
    for (int i = 0; i < S_NT; ++i) xa[i] = a + (long long)min(tok0 + 8 * i + g, m - 1) * lda + 8 * t;
    float acc[S_NT][4];
#pragma unroll
    for (int i = 0; i < S_NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

    // Whole blocks (all 32 k within k), UNROLL at a time: every load first, then the products.
    // Addresses from the block index, not pointers stepped along k: stepping cut the loop's
    // instructions but ptxas then kept fewer blocks in flight (46 registers against 61 at 8
    // tokens) and the m = 1 streams ran 6-12% slower on the H100.
    const int whole = min(kb1, k / 32);
    int kb = kb0;
    for (; kb + UNROLL <= whole; kb += UNROLL) {
        uint4 ra[UNROLL], rb[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            ra[u] = load8<true>(wa + (kb + u) * 32, 8);
            rb[u] = load8<true>(wb + (kb + u) * 32, 8);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            uint4 x[S_NT];
#pragma unroll
            for (int i = 0; i < S_NT; ++i) x[i] = load8<false>(xa[i] + (kb + u) * 32, 8);
            stream_mma(acc, ra[u], rb[u], x);
        }
    }
    // The rest one block at a time, the last one ragged where k is not a multiple of 32.
    for (; kb < kb1; ++kb) {
        const int left = k - (kb * 32 + 8 * t);
        const uint4 ra = load8<true>(wa + kb * 32, left), rb = load8<true>(wb + kb * 32, left);
        uint4 x[S_NT];
#pragma unroll
        for (int i = 0; i < S_NT; ++i) x[i] = load8<false>(xa[i] + kb * 32, left);
        stream_mma(acc, ra, rb, x);
    }
    // Every input this block reads is read: the next kernel may start its blocks.
    kd::pdl_launch_dependents();

    // The block's k shares, summed in warp order by the warps of share 0.
    if constexpr (WK > 1) {
        if (wk > 0) {
#pragma unroll
            for (int i = 0; i < S_NT; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) red[(((wk - 1) * WR + wr) * S_NT * 4 + i * 4 + j) * 32 + lane] = acc[i][j];
        }
        __syncthreads();
        if (wk == 0) {
#pragma unroll
            for (int i = 0; i < S_NT; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    for (int q = 1; q < WK; ++q) acc[i][j] += red[(((q - 1) * WR + wr) * S_NT * 4 + i * 4 + j) * 32 + lane];
        }
    }

#if CLUSTER > 1
    {
        // Each split leaves its partial tile in its shared memory (after the k shares');
        // rank 0 adds the others' in split order through distributed shared memory.
        float* part = red + (WK - 1) * WR * S_NT * 4 * 32;
        const int at = wr * 32 + lane;
        if (wk == 0) {
#pragma unroll
            for (int i = 0; i < S_NT; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) part[(i * 4 + j) * WR * 32 + at] = acc[i][j];
        }
        asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
        asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
        if (split == 0 && wk == 0) {
            const u32 mine = kd::smem_addr(part);
#pragma unroll
            for (int r = 1; r < CLUSTER; ++r) {
                u32 peer;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(peer) : "r"(mine), "r"(r));
#pragma unroll
                for (int i = 0; i < S_NT; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        float v;
                        asm volatile("ld.shared::cluster.f32 %0, [%1];\n"
                                     : "=f"(v)
                                     : "r"(peer + u32(((i * 4 + j) * WR * 32 + at) * 4)));
                        acc[i][j] += v;
                    }
            }
        }
        // The peers' partials stay until rank 0 has read them.
        asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
        asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
        if (split != 0) {
            return;
        }
    }
#else
    if (split_k > 1) {
        // Each split stores its partial tile (fragment order: coalesced); the last block
        // of the tile to finish sums all of them in split order 0, 1, ...
        const int tiles_n = (n + 16 * WR - 1) / (16 * WR);
        const int tiles = tiles_n * ((m + TOK - 1) / TOK);
        const int tile = blockIdx.z * tiles_n + blockIdx.x;
        constexpr int TILE = TOK * 16 * WR;
        float* part = ws + SPLIT_COUNTERS + (long long)tile * TILE;
        const long long split_stride = (long long)tiles * TILE;
        const int z = blockIdx.y;
        if (wk == 0) {
#pragma unroll
            for (int i = 0; i < S_NT; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) part[z * split_stride + ((i * 4 + j) * WR + wr) * 32 + lane] = acc[i][j];
        }
        if (!split_arrive(ws, tile, split_k, tid == 0, is_last, [] { __syncthreads(); })) {
            return;
        }
        if (wk == 0) {
#pragma unroll
            for (int i = 0; i < S_NT; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    acc[i][j] =
                        split_sum(part, ((i * 4 + j) * WR + wr) * 32 + lane, split_stride, split_k, z, acc[i][j]);
        }
        split_reset(ws, tile, tid == 0);
    }
#endif
    if (wk != 0) {
        return;
    }
    // C[token][row] (+ bias[row]): accumulator j of token tile i is row g + 8 (j / 2),
    // token 8 i + 2 t + j % 2.
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int row = row0 + g + 8 * (j / 2);
        if (row >= n) {
            continue;
        }
        const float bv = bias != nullptr ? kd::to_f32(bias[row]) : 0.f;
#pragma unroll
        for (int i = 0; i < S_NT; ++i) {
            const int tok = tok0 + 8 * i + 2 * t + j % 2;
            if (tok < m) {
                const long long at = (long long)tok * ldc + row;
                if (flags & C_F32) {
                    reinterpret_cast<float*>(c)[at] = acc[i][j] + bv;
                } else {
                    reinterpret_cast<T*>(c)[at] = kd::from_f32<T>(acc[i][j] + bv);
                }
            }
        }
    }
}
#endif  // STREAM
