// Softmax and log-softmax over the last dimension of a [rows, COLS] tensor.
//
// Not self-contained on purpose: the host compiles this text after the shared prelude
// (kernels-prelude/cuda/prelude.cuh) as one program (NVRTC / hipRTC), so there is no
// #include here.
//
// ABI (the Rust host follows exactly this)
//   extern "C" __global__ void softmax_kernel(const T* x, T* y, long long rows,
//       long long x_stride, long long y_stride, float scale)
//   y[r, :] = softmax(x[r, :] * scale), or log_softmax with LOG_SOFTMAX=1; inputs
//   are converted to fp32 and all arithmetic is fp32. Strides are in elements. y may
//   be x itself (in place, equal strides); other overlaps are not allowed.
// Defines (the config; the host guarantees kernels-softmax `space::fits`)
//   DTYPE 0 = f32, 1 = f16, 2 = bf16      COLS  row length (>= 1)
//   THREADS threads per row (per block for online and cluster), a multiple of the warp
//   VEC elements per vector access, VEC * sizeof(T) <= 16. Any COLS and any
//       alignment of x and y (to T): each row is split by kd::RowSplit into its
//       aligned vectors and its head and tail elements (the edges, fewer than 2 * VEC),
//       which threads 0 .. edges - 1 of the row's first block read one each and keep
//       in a register. The split is computed per row from the row's address, since
//       rows of an odd-length tensor start at different offsets. x and y rows must
//       split alike: x - y and (x_stride - y_stride) * sizeof(T) multiples of
//       VEC * sizeof(T) (the host narrows VEC until they are; always in place).
//   ROWS rows per block (row strategy; 1 otherwise)
//   STRATEGY 0 = row, 1 = online, 2 = cluster (sm_90), 3 = staged
//   SPLITS blocks per row (cluster: 2, 4, 8 or 16, where 16 is non-portable and the
//       host allows it on the function; staged: 1, or a cluster of 2..8 on sm_90)
//   LOG_SOFTMAX 0 or 1
//   KEEP 0 or 1: row and cluster strategies keep pass 1's exponentials in registers
//       (see part_sum_keep); no effect on log-softmax or the other strategies
//   KD_MIN_BLOCKS (optional compiler hint, NVIDIA) blocks per SM for __launch_bounds__
// Grid (1D, at most 2^31 - 1 blocks, blocks of the given size; dynamic shared memory
// for the staged strategy only)
//   row:     ceil(rows / ROWS) blocks of THREADS * ROWS threads. THREADS threads own
//            one row, held in registers: ceil((COLS / VEC) / THREADS) <= 16 vectors
//            and at most one edge element per thread. One pass over HBM.
//   online:  rows blocks of THREADS threads, any COLS. Pass 1 reads the row keeping a
//            running (max, sum); pass 2 reads it again, back to front so its first
//            reads hit what pass 1 left in L2, and writes, both evict-first.
//   cluster: rows * SPLITS blocks of THREADS threads; __cluster_dims__(SPLITS, 1, 1) is
//            compiled in, so a plain launch forms the clusters. Each block holds
//            1/SPLITS of the row in registers (<= 16 vectors per thread); each thread
//            folds its vectors into a running (max, sum) CHUNK at a time as they land,
//            each block merges its threads' (max, sum) once (or each warp, see
//            WARP_PARTS), and the blocks push theirs into each other's shared memory
//            (st.async, counted by an mbarrier; see Exchange). One pass over HBM.
//   staged:  rows * SPLITS blocks of THREADS threads with STAGE_VECS * sizeof(vector)
//            bytes of dynamic shared memory; sm_80+ (cp.async), vectors of 4 bytes or
//            more. Block `rank` of a row owns the contiguous slice of SLICE_VECS =
//            ceil(COLS / VEC / SPLITS) vectors from vector rank * SLICE_VECS. It issues
//            cp.async copies of the first STAGE_VECS vectors of its slice (all of it
//            when it fits; else whole steps, see below) into shared memory at once (no
//            registers held, all in flight), reads the rest (the tail) into registers
//            (at most 6 vectors per thread; a longer tail streams and is read again in
//            pass 2), folds each part into a running (max, sum), the blocks merge
//            (max, sum) (through distributed shared memory when SPLITS > 1:
//            __cluster_dims__(SPLITS, 1, 1), sm_90), and pass 2 writes everything.
//            One pass over HBM unless the tail is long.
//            STAGE_VECS (define): SLICE_VECS, or a multiple of THREADS below it.
//            PREFETCH_ROWS (define): 0, or (sm_90, where one block fills an SM) the
//            rows of one wave, SMs / SPLITS: before pass 2 each block asks L2 to
//            prefetch its slice of row + PREFETCH_ROWS, the row the next wave's block
//            takes, so those HBM reads overlap this wave's writes instead of
//            following them (all blocks of a wave start, read, reduce and write in
//            step, which leaves HBM idle between the phases otherwise).
//
// Programmatic dependent launch: every strategy calls kd::pdl_wait() before its first
// global memory access and kd::pdl_launch_dependents() once its block has read its
// inputs (see the prelude), so the host may launch it with the programmatic-stream-
// serialization attribute on sm_90.
//
// Special values, as torch.softmax: -inf contributes 0; a row of only -inf gives NaN
// everywhere; a NaN anywhere in a row makes the whole row NaN; so does +inf (its
// exp(inf - inf) is NaN). The same holds for x * scale (scale = 0 with inf gives NaN).
// The NaN travels through the sum: fmaxf ignores NaN, but 2^(NaN - max) is NaN.
//
// Numerics: t = x * scale * log2(e) (one fma), e = 2^(t - max) on the special-function
// unit (ex2.approx, ~2 ulp); softmax = e * (1 / sum) for f32, 2^(t - (max + log2(sum)))
// for 16-bit outputs (see Finish); log_softmax = (t - max) * ln 2 - ln(sum). 16-bit rows
// find the max with packed max instructions (see part_stats).

#if !defined(DTYPE) || !defined(COLS) || !defined(THREADS) || !defined(VEC) || \
    !defined(ROWS) || !defined(STRATEGY) || !defined(SPLITS) || !defined(LOG_SOFTMAX) || !defined(KEEP)
#error "softmax.cu needs DTYPE, COLS, THREADS, VEC, ROWS, STRATEGY, SPLITS, LOG_SOFTMAX, KEEP"
#endif

typedef kd::Dtype<DTYPE>::T T;
typedef kd::Vec<T, VEC> V;

typedef kd::RowSplit<T, VEC, COLS> Split;
// Aligned vectors per row: NVEC with no head (or a short one), NVEC_MIN with a head of
// VEC - 1 elements. Register storage is sized for NVEC; loop bounds below NVEC_MIN are
// known at compile time.
constexpr int NVEC = COLS / VEC;
constexpr int NVEC_MIN = COLS >= VEC - 1 ? (COLS - (VEC - 1)) / VEC : 0;
constexpr int WARPS = THREADS / kd::WARP;  // warps per row group
constexpr int MAX_ITERS = 16;              // schema::MAX_ITERS

static_assert(COLS >= 1, "COLS >= 1");
static_assert(2 * (VEC - 1) <= THREADS, "one thread per edge element");
static_assert(sizeof(V) <= 16, "a vector is at most 16 bytes");
static_assert(THREADS % kd::WARP == 0 && THREADS * ROWS <= 1024, "THREADS: whole warps");

// Running softmax statistics in log2 units: the max m of t = x * scale * log2(e), and
// s = sum of 2^(t - ref(m)). ref(-inf) is 0 so a part that has seen only -inf (or
// NaN) keeps s = 0 (or NaN) instead of 2^(-inf + inf) = NaN.
struct Stats {
    float m, s;
};

__device__ __forceinline__ float ref(float m) { return m == kd::neg_inf() ? 0.f : m; }

// Merges two parts. A part with m = -inf is scaled by 2^-inf = 0, keeping a NaN.
__device__ __forceinline__ Stats merge(Stats a, Stats b) {
    const float m = fmaxf(a.m, b.m);
    const float r = ref(m);
    return {m, a.s * kd::fast_exp2(a.m - r) + b.s * kd::fast_exp2(b.m - r)};
}

// One element's part: t, and 2^(t - ref(t)) (1; 0 for -inf; NaN for +inf and NaN).
__device__ __forceinline__ Stats single(float t) { return {t, kd::fast_exp2(t - ref(t))}; }

// The edge element of the row this thread holds, if any (see VEC above): `owner`
// threads tid < edges, the first block's of the row.
struct Edge {
    bool on;
    int col;
    float f;
    __device__ __forceinline__ Edge(const Split& sp, const T* row, int tid, bool owner)
        : on(owner && tid < sp.edges), col(sp.edge_col(tid)) {
        f = on ? kd::to_f32(row[col]) : 0.f;
    }
    // The part of the running (max, sum) it starts: its own, or an empty one.
    __device__ __forceinline__ Stats stats(float k) const { return on ? single(f * k) : Stats{kd::neg_inf(), 0.f}; }
};

template <int N>
__device__ __forceinline__ Stats warp_merge(Stats st) {
#pragma unroll
    for (int o = N / 2; o > 0; o /= 2) st = merge(st, {kd::shfl_xor(st.m, o), kd::shfl_xor(st.s, o)});
    return st;
}

// Max and sum of one part of the row held in registers: `valid(i)` says whether
// vector i is inside the row. The max is exact; the sum is relative to ref(max).
//
// Rounding is monotonic, so max(x * k) = max(x) * k for k >= 0 and min(x) * k for
// k < 0: 16-bit rows take the max (or min) of the raw values two at a time (one
// max.bf16x2 or max.f16x2 per pair, sm_80+) and scale once. Like fmaxf, the packed
// max ignores NaN; a NaN still reaches the sum.
#if !defined(KD_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && DTYPE != 0 && VEC % 2 == 0
#define KD_PACKED_MAX 1
template <bool MIN>
__device__ __forceinline__ kd::u32 max2(kd::u32 a, kd::u32 b) {
    kd::u32 d;
    if (MIN) {
        if (DTYPE == 2) asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        else asm("min.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    } else {
        if (DTYPE == 2) asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        else asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    }
    return d;
}

// The max (MIN: the min) of the valid vectors, as a float, or at least the lowest
// (MIN: at most the highest) finite value of the storage type.
//
// That start is finite on purpose: a part with no valid vector (the last step of a
// long row) then scales to a finite or -inf max even at k = 0, where an infinite
// start would give inf * 0 = NaN and turn the merged sum into NaN. It only ever wins
// over -inf (MIN: +inf) values, whose terms are 2^-inf = 0 either way, so the sum is
// the same; a row with no finite t still gets a sum of 0 and so NaN outputs.
template <bool MIN, int ITERS, typename Valid>
__device__ __forceinline__ float packed_extreme(const V (&buf)[ITERS], Valid valid) {
    // The largest finite value of the storage type, in both halves of a word.
    constexpr kd::u32 MAXF = DTYPE == 2 ? 0x7f7f7f7fu : 0x7bff7bffu;
    constexpr kd::u32 IDENTITY = MIN ? MAXF : (MAXF | 0x80008000u);
    kd::u32 acc = IDENTITY;
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        if (!valid(i)) continue;
        const kd::u32* w = reinterpret_cast<const kd::u32*>(&buf[i]);
#pragma unroll
        for (int e = 0; e < VEC / 2; ++e) acc = max2<MIN>(acc, w[e]);
    }
    kd::Vec<T, 2> pair;
    *reinterpret_cast<kd::u32*>(&pair) = acc;
    float f[2];
    kd::unpack(pair, f);
    return MIN ? fminf(f[0], f[1]) : fmaxf(f[0], f[1]);
}
#endif

template <int ITERS, typename Valid>
__device__ __forceinline__ Stats part_stats(const V (&buf)[ITERS], float k, Valid valid) {
#if defined(KD_PACKED_MAX)
    // k is uniform: every thread takes the same branch.
    if (k >= 0.f) return {packed_extreme<false>(buf, valid) * k, 0.f};
    return {packed_extreme<true>(buf, valid) * k, 0.f};
#else
    float m = kd::neg_inf();
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        if (!valid(i)) continue;
        float f[VEC];
        kd::unpack(buf[i], f);
#pragma unroll
        for (int e = 0; e < VEC; ++e) m = fmaxf(m, f[e] * k);
    }
    return {m, 0.f};
#endif
}

// Each pass starts with kd::opaque on the row so the floats of the previous pass
// are not kept alive (see the prelude).
template <int ITERS>
__device__ __forceinline__ void forget(V (&buf)[ITERS]) {
#pragma unroll
    for (int i = 0; i < ITERS; ++i) kd::opaque(buf[i]);
}

// The sum of 2^(t - r), t = x * k, over the valid elements, in two chains of adds;
// with KEEP_E each term is also kept in e[i][j] (otherwise e is never touched).
template <bool KEEP_E, int ITERS, typename Valid>
__device__ __forceinline__ float exp_sum(const V (&buf)[ITERS], float k, float r, Valid valid,
                                         float (&e)[ITERS][VEC]) {
    float s[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        if (!valid(i)) continue;
        float f[VEC];
        kd::unpack(buf[i], f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float t = kd::fast_exp2(fmaf(f[j], k, -r));
            if (KEEP_E) e[i][j] = t;
            s[j & 1] += t;
        }
    }
    return s[0] + s[1];
}

template <int ITERS, typename Valid>
__device__ __forceinline__ float part_sum(const V (&buf)[ITERS], float k, float r, Valid valid) {
    float unused[ITERS][VEC];
    return exp_sum<false>(buf, k, r, valid, unused);
}

// KEEP: pass 1 keeps each exponential in registers (fp32, ITERS * VEC per thread) and
// pass 2 only scales it: one multiply per element instead of an fma and an exp2 after
// the row's (max, sum) is known, which is the part no load overlaps. Softmax only
// (log-softmax needs no exponential in pass 2).
#define KD_KEEP (KEEP && !LOG_SOFTMAX)

// part_sum that also keeps e[i][j] = 2^(t - r) of every valid element.
template <int ITERS, typename Valid>
__device__ __forceinline__ float part_sum_keep(const V (&buf)[ITERS], float k, float r, Valid valid,
                                               float (&e)[ITERS][VEC]) {
    return exp_sum<true>(buf, k, r, valid, e);
}

// The output for kept exponentials 2^(t - r), where r = ref(m) of this thread's part
// max m, given the row's (max, sum): e * 2^(r - max) / sum, the factor once per thread.
// A part of only -inf (m = -inf, every e = 0) takes 0 * (max + 1 / sum) so its outputs
// are 0 in a normal row and NaN in a NaN row (sum NaN, max +inf, or only -inf: max
// -inf and 1 / sum = inf); 2^(0 - max) there could overflow and make 0 * inf = NaN.
struct FinishKept {
    float c;
    __device__ __forceinline__ FinishKept(float m, Stats all) {
        const float inv_s = 1.f / all.s;
        c = m == kd::neg_inf() ? 0.f * (all.m + inv_s) : kd::fast_exp2(m - all.m) * inv_s;
    }
    __device__ __forceinline__ V operator()(const float (&e)[VEC]) const {
        float f[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = e[j] * c;
        return kd::pack<T, VEC>(f);
    }
};

// The output vector for input vector `in`, given the row's max m and sum s.
//
// 16-bit outputs fold the sum into the exponent, 2^(t - m - log2 s), which saves a
// multiply per element; the extra rounding of m + log2 s is a few fp32 ulps, far
// below one rounding to 16 bits. f32 outputs multiply by 1 / s. Special rows still
// give NaN: s = 0 (only -inf) makes m + log2 s = -inf and t - (-inf) = NaN with
// t = -inf; s = NaN stays NaN.
constexpr bool FOLD_SUM = DTYPE != 0;
struct Finish {
    float k, m, inv_s, log_s;
    __device__ __forceinline__ Finish(float k_, Stats st) : k(k_), m(st.m) {
        inv_s = 1.f / st.s;
        log_s = logf(st.s);
        if (FOLD_SUM && !LOG_SOFTMAX) m = st.m + log2f(st.s);
    }
    __device__ __forceinline__ float one(float f) const {
        const float t = fmaf(f, k, -m);
        return LOG_SOFTMAX ? fmaf(t, kd::LN2, -log_s) : FOLD_SUM ? kd::fast_exp2(t) : kd::fast_exp2(t) * inv_s;
    }
    __device__ __forceinline__ V operator()(const V& in) const {
        float f[VEC];
        kd::unpack(in, f);
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = one(f[e]);
        return kd::pack<T, VEC>(f);
    }
};

// The block's (max, sum) from each thread's part: warps merge by shuffles, then the
// warps' parts through shared memory (`red_m`, `red_s`: WARPS floats each). Every
// thread ends with the block's result; every thread of the block must call it.
__device__ __forceinline__ Stats block_merge(Stats st, float* red_m, float* red_s) {
    st = warp_merge<kd::WARP>(st);
    if (WARPS > 1) {
        const int tid = int(threadIdx.x);
        if (kd::lane_id() == 0) {
            red_m[tid / kd::WARP] = st.m;
            red_s[tid / kd::WARP] = st.s;
        }
        __syncthreads();
        const int l = kd::lane_id() % WARPS;
        st = warp_merge<WARPS>({red_m[l], red_s[l]});
    }
    return st;
}

// ---- thread-block clusters (sm_90): the (max, sum) exchange -----------------------

#define KD_CLUSTER (STRATEGY == 2 || (STRATEGY == 3 && SPLITS > 1))
#if KD_CLUSTER
#if defined(KD_AMD) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900)
#error "the cluster and split staged strategies need thread-block clusters (sm_90)"
#endif

// The blocks of a cluster swap their (max, sum) with the prelude's push exchange: each
// part writes its pair into its own slot of every block's `Exchange::parts` (st.async,
// 8 bytes counted on the receiving block's mbarrier), and a block waits on its own
// mbarrier only, until all PARTS pairs (its own included) have landed, then reads them
// from its own shared memory.
//
// A part is a block (its warps merged first through shared memory and a barrier) or,
// with WARP_PARTS, a warp: each warp pushes its own pair and no block-wide merge or
// barrier runs. WARP_PARTS needs two warps or more per block and at most two pairs per
// lane to merge: there, skipping the block's barrier saves more than the wider merge
// costs; with one warp per block or four pairs per lane it does not (figures in
// docs/results/softmax.md). The split staged strategy (up to 32 warps) keeps the block
// merge.
constexpr bool WARP_PARTS = STRATEGY == 2 && WARPS >= 2 && SPLITS * WARPS <= 2 * kd::WARP;
constexpr int PARTS = WARP_PARTS ? SPLITS * WARPS : SPLITS;
struct Exchange {
    float parts[2 * PARTS];
    unsigned long long bar;  // mbarrier: one arrival (thread 0's) plus 8 * PARTS bytes
};

// At the start of the kernel, by every thread (see kd::exchange_begin).
__device__ __forceinline__ void cluster_begin(Exchange& x) { kd::exchange_begin(&x.bar, unsigned(8 * PARTS)); }

// The largest of the warp's v: one redux.sync on integer keys that order like the
// floats (a negative float's magnitude bits flipped). A NaN with the sign clear
// orders above +inf; it only arises where the row is NaN anyway (see ref and merge).
__device__ __forceinline__ float warp_max_redux(float v) {
    const int b = __float_as_int(v);
    int r;
    asm volatile("redux.sync.max.s32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(b ^ ((b >> 31) & 0x7fffffff)));
    return __int_as_float(r ^ ((r >> 31) & 0x7fffffff));
}

// The row's (max, sum) from each part's (max, sum) `st`: the block's (the same in every
// thread of the block), or with WARP_PARTS each thread's own, merged here per warp.
// Every thread of every block of the cluster calls it once, after cluster_begin.
__device__ __forceinline__ Stats cluster_merge(Stats st, Exchange& x) {
    const unsigned me = kd::cluster_rank();
    const int lane = kd::lane_id();
    unsigned slot = me;
    if (WARP_PARTS) {
        const float m = warp_max_redux(st.m);
        st = {m, kd::warp_sum(st.s * kd::fast_exp2(st.m - ref(m)))};
        slot = me * WARPS + threadIdx.x / kd::WARP;
    }
    kd::cluster_wait();
    // Lanes 0..SPLITS-1 of each part's first warp push its pair, one block each.
    if ((WARP_PARTS || threadIdx.x < kd::WARP) && lane < SPLITS) {
        kd::push(&x.parts[2 * slot], &x.bar, unsigned(lane), st.m, st.s);
    }
    kd::wait_pushes(&x.bar);
    Stats all = {kd::neg_inf(), 0.f};
    if (WARP_PARTS) {
        // Lane l merges parts l and l + 32, then the warp: one max, one rescale, a sum.
#pragma unroll
        for (int q = lane; q < PARTS; q += kd::WARP) all = merge(all, {x.parts[2 * q], x.parts[2 * q + 1]});
        const float m = warp_max_redux(all.m);
        return {m, kd::warp_sum(all.s * kd::fast_exp2(all.m - ref(m)))};
    }
    // Lane r of each warp takes block r's pair; the warp merges and broadcasts.
    if (lane < SPLITS) all = {x.parts[2 * lane], x.parts[2 * lane + 1]};
    all = warp_merge<SPLITS>(all);
    return {kd::shfl(all.m, 0), kd::shfl(all.s, 0)};
}
#endif  // KD_CLUSTER

#if STRATEGY == 0
// ---- row: THREADS threads per row, ROWS rows per block, row in registers ----------

constexpr int ITERS = NVEC < 1 ? 1 : (NVEC + THREADS - 1) / THREADS;
static_assert(ITERS <= MAX_ITERS, "row strategy holds at most 16 vectors per thread");

extern "C" __global__ void KD_LAUNCH_BOUNDS(THREADS * ROWS)
    softmax_kernel(const T* x, T* y, long long rows, long long x_stride, long long y_stride,
                   float scale) {
    kd::pdl_wait();
    // Two slot sets: the sum's partials must not overwrite the max's before all read.
    __shared__ float red_max[ROWS * WARPS];
    __shared__ float red_sum[ROWS * WARPS];
    const int group = int(threadIdx.x) / THREADS;
    const int tid = int(threadIdx.x) % THREADS;
    const long long row = (long long)blockIdx.x * ROWS + group;
    // Groups past the last row load and store nothing but still meet the barriers.
    const bool active = row < rows;
    const float k = scale * kd::LOG2E;
    // Vector i of this thread is i * THREADS + tid; only the last may fall outside.
    // One base pointer per thread and constant offsets keep addresses out of registers.
    const long long at = (active ? row : 0);
    const T* xr = x + at * x_stride;
    const Split sp(xr);
    const T* xp = xr + sp.head + tid * VEC;
    auto valid = [&](int i) { return active && ((i + 1) * THREADS <= NVEC_MIN || i * THREADS + tid < sp.nvec); };

    V buf[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) buf[i] = kd::load_vec<T, VEC>(xp + i * THREADS * VEC);
    const Edge edge(sp, xr, tid, active);

    Stats st = part_stats(buf, k, valid);
    if (edge.on) st.m = fmaxf(st.m, edge.f * k);
    kd::pdl_launch_dependents();
    st.m = kd::group_max<THREADS>(st.m, red_max + group * WARPS);
    // The exact max: a row of only -inf gives 2^(-inf + inf) = NaN, as torch does.
    forget(buf);
    T* yr = y + at * y_stride;
    T* yp = yr + sp.head + tid * VEC;
#if KD_KEEP
    // The row's exact max is known here, so the kept 2^(t - max) only need 1 / sum.
    float e[ITERS][VEC];
    st.s = part_sum_keep(buf, k, st.m, valid, e);
    const float edge_e = kd::fast_exp2(fmaf(edge.f, k, -st.m));
    if (edge.on) st.s += edge_e;
    st.s = kd::group_sum<THREADS>(st.s, red_sum + group * WARPS);
    const float inv_s = 1.f / st.s;
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        if (!valid(i)) continue;
        float f[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = e[i][j] * inv_s;
        kd::store_vec<T, VEC>(yp + i * THREADS * VEC, kd::pack<T, VEC>(f));
    }
    if (edge.on) yr[edge.col] = kd::from_f32<T>(edge_e * inv_s);
#else
    st.s = part_sum(buf, k, st.m, valid);
    if (edge.on) st.s += kd::fast_exp2(fmaf(edge.f, k, -st.m));
    st.s = kd::group_sum<THREADS>(st.s, red_sum + group * WARPS);
    forget(buf);

    const Finish finish(k, st);
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) kd::store_vec<T, VEC>(yp + i * THREADS * VEC, finish(buf[i]));
    if (edge.on) yr[edge.col] = kd::from_f32<T>(finish.one(edge.f));
#endif
}

#elif STRATEGY == 1
// ---- online: a block per row, two streaming passes, any length -------------------

// Vectors per thread per step: about 64 bytes in flight per thread.
constexpr int UNROLL = 64 / int(sizeof(V)) < 2 ? 2 : (64 / int(sizeof(V)) > 8 ? 8 : 64 / int(sizeof(V)));
constexpr int STEP = THREADS * UNROLL;  // vectors per block per step
constexpr int STEPS = (NVEC + STEP - 1) / STEP;

extern "C" __global__ void KD_LAUNCH_BOUNDS(THREADS)
    softmax_kernel(const T* x, T* y, long long rows, long long x_stride, long long y_stride,
                   float scale) {
    kd::pdl_wait();
    __shared__ float red_m[WARPS];
    __shared__ float red_s[WARPS];
    const int tid = int(threadIdx.x);
    const long long row = blockIdx.x;
    if (row >= rows) return;  // whole block: no barrier is skipped by part of it
    const T* xr = x + row * x_stride;
    const Split sp(xr);
    const T* xp = xr + sp.head + tid * VEC;
    T* yr = y + row * y_stride;
    T* yp = yr + sp.head + tid * VEC;
    const float k = scale * kd::LOG2E;
    const Edge edge(sp, xr, tid, true);

    // Pass 1: per step, the step's max first, then one rescale of the running sum.
    Stats st = edge.stats(k);
    for (int step = 0; step < STEPS; ++step) {
        const int base = step * STEP * VEC;  // this step's first element
        const int left = sp.nvec - step * STEP;  // cannot overflow where (step + 1) * STEP could
        auto valid = [&](int u) { return (u + 1) * THREADS <= left || u * THREADS + tid < left; };
        V buf[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (valid(u)) buf[u] = kd::load_vec<T, VEC>(xp + base + u * THREADS * VEC);
        Stats part = part_stats(buf, k, valid);
        part.s = part_sum(buf, k, ref(part.m), valid);
        st = merge(st, part);
    }
    kd::pdl_launch_dependents();

    st = block_merge(st, red_m, red_s);

    // Pass 2, last step first: the end of the row is the likeliest to be in L2. Its
    // reads and writes are evict-first so they do not push out the part of the row
    // pass 1 left in L2 (figures in docs/results/softmax.md).
    const Finish finish(k, st);
    if (edge.on) yr[edge.col] = kd::from_f32<T>(finish.one(edge.f));
    for (int step = STEPS - 1; step >= 0; --step) {
        const int base = step * STEP * VEC;  // this step's first element
        const int left = sp.nvec - step * STEP;  // cannot overflow where (step + 1) * STEP could
        auto valid = [&](int u) { return (u + 1) * THREADS <= left || u * THREADS + tid < left; };
        V buf[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (valid(u)) buf[u] = kd::load_stream<T, VEC>(xp + base + u * THREADS * VEC);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (valid(u)) kd::store_stream<T, VEC>(yp + base + u * THREADS * VEC, finish(buf[u]));
    }
}

#elif STRATEGY == 2
// ---- cluster: SPLITS blocks per row, each part in registers, stats over DSMEM -----

// 16 is a non-portable cluster size: the host allows it on the function before launch.
static_assert(SPLITS >= 2 && SPLITS <= 16, "a cluster has 2..16 blocks");

constexpr int ITERS = NVEC < 1 ? 1 : (NVEC + THREADS * SPLITS - 1) / (THREADS * SPLITS);
static_assert(ITERS <= MAX_ITERS, "cluster strategy holds at most 16 vectors per thread");
constexpr int CHUNK = 4;  // pass 1 vectors per step (see the kernel)

extern "C" __global__ void __cluster_dims__(SPLITS, 1, 1) KD_LAUNCH_BOUNDS(THREADS)
    softmax_kernel(const T* x, T* y, long long rows, long long x_stride, long long y_stride,
                   float scale) {
    __shared__ float red_m[WARPS];
    __shared__ float red_s[WARPS];
    __shared__ Exchange xch;
    cluster_begin(xch);
    kd::pdl_wait();
    const int tid = int(threadIdx.x);
    const long long row = blockIdx.x / SPLITS;  // a cluster is SPLITS consecutive blocks
    const int rank = int(kd::cluster_rank());
    const float k = scale * kd::LOG2E;
    // Pass i of the cluster covers THREADS * SPLITS vectors; block `rank` takes slice
    // `rank` of each, so every block reads contiguous THREADS * VEC elements at a time.
    // This thread's vector i is (i * SPLITS + rank) * THREADS + tid.
    const int first = rank * THREADS + tid;
    const T* xr = x + row * x_stride;
    const Split sp(xr);
    const T* xp = xr + sp.head + first * VEC;
    constexpr int PASS = SPLITS * THREADS * VEC;  // elements per pass
    auto valid = [&](int i) {
        return (i + 1) * SPLITS * THREADS <= NVEC_MIN || i * SPLITS * THREADS + first < sp.nvec;
    };

    V buf[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) buf[i] = kd::load_vec<T, VEC>(xp + i * PASS);
    const Edge edge(sp, xr, tid, rank == 0);

    // Each thread's (max, sum), then one merge over the block and one over the cluster.
    T* yr = y + row * y_stride;
    T* yp = yr + sp.head + first * VEC;
#if KD_KEEP
    Stats st = part_stats(buf, k, valid);
    if (edge.on) st.m = fmaxf(st.m, edge.f * k);
    kd::pdl_launch_dependents();
    forget(buf);
    float e[ITERS][VEC];
    const float m = st.m;
    st.s = part_sum_keep(buf, k, ref(m), valid, e);
    const float edge_e = kd::fast_exp2(fmaf(edge.f, k, -ref(m)));
    if (edge.on) st.s += edge_e;
    const FinishKept finish(m, cluster_merge(WARP_PARTS ? st : block_merge(st, red_m, red_s), xch));
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) kd::store_vec<T, VEC>(yp + i * PASS, finish(e[i]));
    if (edge.on) yr[edge.col] = kd::from_f32<T>(edge_e * finish.c);
#else
    // CHUNK vectors at a time, in load order, merged into a running (max, sum): the
    // exponentials of the first chunks run while the later loads are still landing.
    Stats st = edge.stats(k);
#pragma unroll
    for (int c0 = 0; c0 < ITERS; c0 += CHUNK) {
        auto in_chunk = [&](int i) { return i >= c0 && i < c0 + CHUNK && valid(i); };
        Stats p = part_stats(buf, k, in_chunk);
        p.s = part_sum(buf, k, ref(p.m), in_chunk);
        st = merge(st, p);
    }
    kd::pdl_launch_dependents();
    forget(buf);
    const Finish finish(k, cluster_merge(WARP_PARTS ? st : block_merge(st, red_m, red_s), xch));
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) kd::store_vec<T, VEC>(yp + i * PASS, finish(buf[i]));
    if (edge.on) yr[edge.col] = kd::from_f32<T>(finish.one(edge.f));
#endif
}

#elif STRATEGY == 3
// ---- staged: SPLITS blocks per row, each copies its slice into shared memory -----

#if defined(KD_AMD) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
#error "the staged strategy needs cp.async (sm_80)"
#endif
static_assert(SPLITS == 1 || (SPLITS >= 2 && SPLITS <= 8), "SPLITS: 1, or a cluster of 2..8");
static_assert(sizeof(V) >= 4, "cp.async copies 4, 8 or 16 bytes");
#if !defined(STAGE_VECS) || !defined(PREFETCH_ROWS)
#error "the staged strategy needs STAGE_VECS and PREFETCH_ROWS"
#endif
constexpr int SLICE_VECS = (NVEC + SPLITS - 1) / SPLITS;  // vectors per block (the last: fewer)
// Vectors per thread per step (one cp.async group): about 64 bytes per thread.
constexpr int UNROLL = 64 / int(sizeof(V)) < 2 ? 2 : (64 / int(sizeof(V)) > 8 ? 8 : 64 / int(sizeof(V)));
constexpr int STEP = THREADS * UNROLL;
// The first STAGE_VECS vectors of the slice go to shared memory in CSTEPS copy groups.
constexpr int CSTEPS = (STAGE_VECS + STEP - 1) / STEP;
static_assert(STAGE_VECS >= 1 && STAGE_VECS <= SLICE_VECS, "STAGE_VECS: 1 .. the slice");
static_assert(STAGE_VECS == SLICE_VECS || STAGE_VECS % THREADS == 0, "a partial stage: whole rounds of threads");
// The rest, the tail: vector i of a thread is STAGE_VECS + i * THREADS + tid. At most
// 6 per thread stay in registers between the passes (the slice is read once); a
// longer tail streams UNROLL at a time and is read again in pass 2.
constexpr int TAIL_ITERS = (SLICE_VECS - STAGE_VECS + THREADS - 1) / THREADS;
constexpr bool REG_TAIL = TAIL_ITERS <= 6;

#if SPLITS > 1
#define KD_STAGED_CLUSTER __cluster_dims__(SPLITS, 1, 1)
#else
#define KD_STAGED_CLUSTER
#endif

// Asynchronous copy of one vector from global to shared memory (no registers held).
__device__ __forceinline__ void copy_async(V* dst, const T* src) {
    const unsigned s = kd::smem_addr(dst);
    if (sizeof(V) == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(src), "n"(int(sizeof(V)))
                     : "memory");
    }
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most `n` of this thread's copy groups are pending (more than 7:
// waits as for 7, which is only stricter). Unrolled callers pass a constant.
__device__ __forceinline__ void copy_wait(int n) {
    switch (n < 7 ? n : 7) {
        case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
        case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
        case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
        case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
        case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
        case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
        case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
        default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
    }
}

extern "C" __global__ void KD_STAGED_CLUSTER KD_LAUNCH_BOUNDS(THREADS)
    softmax_kernel(const T* x, T* y, long long rows, long long x_stride, long long y_stride,
                   float scale) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    V* stage = reinterpret_cast<V*>(stage_bytes);
    __shared__ float red_m[WARPS];
    __shared__ float red_s[WARPS];
#if SPLITS > 1
    __shared__ Exchange xch;
    cluster_begin(xch);
    const int rank = int(kd::cluster_rank());
#else
    const int rank = 0;
#endif
    kd::pdl_wait();
    const int tid = int(threadIdx.x);
    const long long row = blockIdx.x / SPLITS;  // a cluster is SPLITS consecutive blocks
    if (SPLITS == 1 && row >= rows) return;  // whole block; clusters never exceed rows
    const int first = rank * SLICE_VECS;  // this block's first vector of the row
    const T* xr = x + row * x_stride;
    const Split sp(xr);
    // Vectors in this slice: SLICE_VECS except for the last block (space::fits keeps
    // every slice non-empty), and how many of them are staged.
    const int len = sp.nvec - first < SLICE_VECS ? sp.nvec - first : SLICE_VECS;
    const int staged = len < STAGE_VECS ? len : STAGE_VECS;
    const T* xp = xr + sp.head + (long long)(first + tid) * VEC;
    const float k = scale * kd::LOG2E;
    // Thread tid owns staged vectors step * STEP + u * THREADS + tid: it copies them,
    // reads them back and writes their results, so no barrier guards the stage.
    auto in_stage = [&](int step, int u) {
        const int left = staged - step * STEP;
        return (u + 1) * THREADS <= left || u * THREADS + tid < left;
    };
    auto in_tail = [&](int i) { return STAGE_VECS + i * THREADS + tid < len; };

    // The whole stage in flight at once: one copy group per step.
#pragma unroll
    for (int step = 0; step < CSTEPS; ++step) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (in_stage(step, u))
                copy_async(stage + step * STEP + u * THREADS + tid, xp + (step * STEP + u * THREADS) * VEC);
        copy_commit();
    }

    // Pass 1: a running (max, sum), one part at a time (the part's max, then one
    // rescale). The tail first, from HBM while the copies land, then the stage as its
    // copy groups land.
    const Edge edge(sp, xr, tid, rank == 0);
    Stats st = edge.stats(k);
    V tail[REG_TAIL && TAIL_ITERS > 0 ? TAIL_ITERS : 1];
    if (REG_TAIL && TAIL_ITERS > 0) {
#pragma unroll
        for (int i = 0; i < TAIL_ITERS; ++i)
            if (in_tail(i)) tail[i] = kd::load_vec<T, VEC>(xp + (STAGE_VECS + i * THREADS) * VEC);
        Stats p = part_stats(tail, k, in_tail);
        forget(tail);
        p.s = part_sum(tail, k, ref(p.m), in_tail);
        forget(tail);
        st = merge(st, p);
    }
    for (int i0 = 0; !REG_TAIL && i0 < TAIL_ITERS; i0 += UNROLL) {
        V buf[UNROLL];
        auto ok = [&](int u) { return i0 + u < TAIL_ITERS && in_tail(i0 + u); };
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (ok(u)) buf[u] = kd::load_vec<T, VEC>(xp + (STAGE_VECS + (i0 + u) * THREADS) * VEC);
        Stats p = part_stats(buf, k, ok);
        p.s = part_sum(buf, k, ref(p.m), ok);
        st = merge(st, p);
    }
#pragma unroll
    for (int step = 0; step < CSTEPS; ++step) {
        copy_wait(CSTEPS - 1 - step);
        V buf[UNROLL];
        auto ok = [&](int u) { return in_stage(step, u); };
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (ok(u)) buf[u] = stage[step * STEP + u * THREADS + tid];
        Stats p = part_stats(buf, k, ok);
        p.s = part_sum(buf, k, ref(p.m), ok);
        st = merge(st, p);
    }
    kd::pdl_launch_dependents();

    st = block_merge(st, red_m, red_s);
#if SPLITS > 1
    st = cluster_merge(st, xch);
#endif

#if PREFETCH_ROWS > 0 && !defined(KD_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The next wave's row: the 16-byte aligned part of this block's slice of it (a
    // bulk prefetch needs 16-byte bounds; nothing outside the slice is touched).
    if (tid == 0 && row + PREFETCH_ROWS < rows) {
        const T* nr = x + (row + PREFETCH_ROWS) * x_stride;
        const Split ns(nr);
        const int nlen = ns.nvec - first < SLICE_VECS ? ns.nvec - first : SLICE_VECS;
        const unsigned long long b = (unsigned long long)(nr + ns.head + (long long)first * VEC);
        const unsigned long long e = b + (unsigned long long)(nlen > 0 ? nlen : 0) * sizeof(V);
        const unsigned long long b16 = (b + 15) & ~15ull, e16 = e & ~15ull;
        if (e16 > b16)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b16), "r"(unsigned(e16 - b16)) : "memory");
    }
#endif

    // Pass 2: the tail (from registers, or read again last part first, the likeliest
    // still in L2), then the stage; stores evict-first, nothing reads y back here.
    const Finish finish(k, st);
    T* yr = y + row * y_stride;
    T* yp = yr + sp.head + (long long)(first + tid) * VEC;
    if (edge.on) yr[edge.col] = kd::from_f32<T>(finish.one(edge.f));
    if (REG_TAIL && TAIL_ITERS > 0) {
#pragma unroll
        for (int i = 0; i < TAIL_ITERS; ++i)
            if (in_tail(i)) kd::store_stream<T, VEC>(yp + (STAGE_VECS + i * THREADS) * VEC, finish(tail[i]));
    }
    for (int i0 = (TAIL_ITERS - 1) / UNROLL * UNROLL; !REG_TAIL && i0 >= 0; i0 -= UNROLL) {
        V buf[UNROLL];
        auto ok = [&](int u) { return i0 + u < TAIL_ITERS && in_tail(i0 + u); };
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (ok(u)) buf[u] = kd::load_stream<T, VEC>(xp + (STAGE_VECS + (i0 + u) * THREADS) * VEC);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (ok(u)) kd::store_stream<T, VEC>(yp + (STAGE_VECS + (i0 + u) * THREADS) * VEC, finish(buf[u]));
    }
#pragma unroll
    for (int step = 0; step < CSTEPS; ++step) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (in_stage(step, u))
                kd::store_stream<T, VEC>(yp + (step * STEP + u * THREADS) * VEC,
                                         finish(stage[step * STEP + u * THREADS + tid]));
    }
}

#else
#error "STRATEGY must be 0 (row), 1 (online), 2 (cluster) or 3 (staged)"
#endif
