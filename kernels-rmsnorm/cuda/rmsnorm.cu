// RMSNorm and fused residual-add RMSNorm (in place) over [rows, COLS] tensors.
//
// Not self-contained on purpose: the host compiles this text after the shared prelude
// (kernels-prelude/cuda/prelude.cuh) as one program (NVRTC / hipRTC), so there is no
// #include here.
//
// ABI (the Rust host follows exactly this; one module holds both entry points)
//   extern "C" __global__ void rmsnorm_kernel(const T* x, long long x_stride,
//       const T* w, T* y, long long y_stride, long long rows, float eps)
//     y[r, :] = round(x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w)
//   extern "C" __global__ void fused_add_rmsnorm_kernel(T* x, long long x_stride,
//       T* residual, long long r_stride, const T* w, long long rows, float eps)
//     residual[r, :] = round(x[r, :] + residual[r, :])            (stored)
//     x[r, :] = round(residual[r, :] * rsqrt(mean(residual^2) + eps) * w)
//   That is SGLang's (flashinfer) and vLLM's fused_add_rmsnorm: the norm reads the
//   residual as rounded to T; all arithmetic is fp32 and the output is rounded once
//   (round = to T, nearest even). Strides are in elements; w has COLS elements. x, y,
//   residual and w must not overlap (y = x is not allowed in rmsnorm_kernel).
// Defines (the config; the host guarantees kernels-rmsnorm `space::fits`)
//   DTYPE 0 = f32, 1 = f16, 2 = bf16      COLS  row length (hidden size, >= 1)
//   THREADS threads per row, a multiple of the warp      ROWS rows per block
//   VEC elements per vector access, VEC * sizeof(T) <= 16. Any COLS and any
//       alignment (to T): each row is split by kd::RowSplit, from its own address
//       (rows of an odd hidden size start at different offsets), into its aligned
//       vectors and its head and tail elements (the edges, fewer than 2 * VEC), which
//       threads 0 .. edges - 1 of the row read one each and keep in a register. The
//       rows of x and y (fused: x and residual) must split alike: their addresses'
//       and strides' differences multiples of VEC * sizeof(T) (the host narrows VEC
//       until they are). w may sit anywhere: where w's element at the row's first
//       vector is aligned to a vector, w is read by vectors; otherwise one element at
//       a time (the same row of w for every row, so from L1 or L2).
//   SPLITS (optional, default 1) blocks per row: 1, or (sm_90, ROWS = 1, ITERS <= 16)
//       a thread-block cluster of 2..16 blocks that share one row held in registers;
//       16 is a non-portable cluster size, which the host allows on the function
//   LATE (optional, default 0) fused only: 1 stores the updated residual after the
//       row's reduction, next to x, instead of as each vector of it is summed; needs
//       the row in registers (ITERS <= 16). The plain kernel has no residual.
//   KD_MIN_BLOCKS (optional compiler hint, NVIDIA) blocks per SM for __launch_bounds__
// Grid: ceil(rows / ROWS) * SPLITS (at most 2^31 - 1) blocks of THREADS * ROWS threads,
//   no dynamic shared memory; with SPLITS > 1, __cluster_dims__(SPLITS, 1, 1) is
//   compiled in, so a plain launch forms the clusters (SPLITS consecutive blocks).
//   Each thread handles ITERS = ceil((COLS / VEC) / (THREADS * SPLITS)) vectors of
//   its row and at most one edge element. With ITERS <= 16 the row stays in
//   registers between the reduction and the write (one pass over HBM; with ITERS <= 8
//   the weights are loaded with the row);
//   longer rows are read a second time, last part first so that the re-read starts
//   with what is still in L2, evict-first (as is the write of y).
// Programmatic dependent launch: both entry points call kd::pdl_wait() before their
// first global memory access and kd::pdl_launch_dependents() once a block has read its
// rows (see the prelude), so the host may launch them with the programmatic-stream-
// serialization attribute on sm_90.
// Special values: they propagate as in torch (an inf in a row makes its sum of squares
// inf, so that row's outputs are 0 and NaN where x is inf).

#if !defined(DTYPE) || !defined(COLS) || !defined(THREADS) || !defined(VEC) || !defined(ROWS)
#error "rmsnorm.cu needs DTYPE, COLS, THREADS, VEC, ROWS"
#endif

typedef kd::Dtype<DTYPE>::T T;
typedef kd::Vec<T, VEC> V;

#ifndef SPLITS
#define SPLITS 1
#endif
#ifndef LATE
#define LATE 0
#endif

typedef kd::RowSplit<T, VEC, COLS> Split;
// Aligned vectors per row: NVEC with no head (or a short one), NVEC_MIN with a head of
// VEC - 1 elements. Register storage is sized for NVEC; loop bounds below NVEC_MIN are
// known at compile time.
constexpr int NVEC = COLS / VEC;
constexpr int NVEC_MIN = COLS >= VEC - 1 ? (COLS - (VEC - 1)) / VEC : 0;
constexpr int WARPS = THREADS / kd::WARP;  // warps per row group
constexpr int MAX_ITERS = 16;              // schema::MAX_ITERS
constexpr int ROW_THREADS = THREADS * SPLITS;  // threads sharing one row
constexpr int ITERS = NVEC < 1 ? 1 : (NVEC + ROW_THREADS - 1) / ROW_THREADS;
constexpr bool CACHED = ITERS <= MAX_ITERS;  // the row fits in registers
// Short cached rows load their weights with the row, before the reduction, so the
// weights' latency is not paid after it (the barrier keeps later loads after it).
constexpr bool EARLY_W = CACHED && ITERS <= 8;
// Streaming path (long rows): vectors per thread per step, about 64 bytes in flight.
constexpr int UNROLL = CACHED ? ITERS : (64 / int(sizeof(V)) > 8 ? 8 : 64 / int(sizeof(V)));
constexpr int STEP = ROW_THREADS * UNROLL;  // vectors per row (group or cluster) per step
constexpr int STEPS = (NVEC + STEP - 1) / STEP;

static_assert(COLS >= 1, "COLS >= 1");
static_assert(2 * (VEC - 1) <= THREADS, "one thread per edge element");
static_assert(sizeof(V) <= 16, "a vector is at most 16 bytes");
static_assert(THREADS % kd::WARP == 0 && THREADS * ROWS <= 1024, "THREADS: whole warps");
static_assert(SPLITS == 1 || (SPLITS >= 2 && SPLITS <= 16 && ROWS == 1 && CACHED),
              "a cluster of 2..16 blocks per row holds one row in registers");
static_assert(LATE == 0 || (LATE == 1 && CACHED), "a late residual store holds the row in registers");

// x + residual, rounded to T: the value fused_add_rmsnorm stores and normalises.
__device__ __forceinline__ V add_round(const V& a, const V& b) {
    float fa[VEC], fb[VEC];
    kd::unpack(a, fa);
    kd::unpack(b, fb);
#pragma unroll
    for (int e = 0; e < VEC; ++e) fa[e] += fb[e];
    return kd::pack<T, VEC>(fa);
}

__device__ __forceinline__ float sum_squares(const V& a) {
    float f[VEC];
    kd::unpack(a, f);
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) s = fmaf(f[e], f[e], s);
    return s;
}

// VEC weights from `p`: one vector load where `aligned`, else one load per element.
__device__ __forceinline__ V load_w(const T* p, bool aligned) {
    if (aligned) return kd::load_vec<T, VEC>(p);
    V v;
#pragma unroll
    for (int e = 0; e < VEC; ++e) v.v[e] = p[e];
    return v;
}

__device__ __forceinline__ V normalise(const V& a, const V& w, float r) {
    float f[VEC], fw[VEC];
    kd::unpack(a, f);
    kd::unpack(w, fw);
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = f[e] * r * fw[e];
    return kd::pack<T, VEC>(f);
}

// ---- a row over a thread-block cluster (SPLITS > 1, sm_90) -----------------------
//
// Each warp adds its threads' sums of squares and pushes the result into its own slot
// of every block's `Cluster::parts` (the prelude's push exchange: st.async counted on
// the receiving block's mbarrier); a block then waits on its own mbarrier only, until
// all SPLITS * WARPS sums (its own included) have landed, and adds them. No block-wide
// barrier runs. The softmax cluster exchanges its (max, sum) pairs the same way
// (kernels-softmax/cuda/softmax.cu, Exchange and cluster_merge).
#if SPLITS > 1
#if defined(KD_AMD) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900)
#error "SPLITS > 1 needs thread-block clusters (sm_90)"
#endif
#define KD_ROW_CLUSTER __cluster_dims__(SPLITS, 1, 1)

struct Cluster {
    float parts[SPLITS * WARPS];
    unsigned long long bar;  // mbarrier: one arrival (thread 0's) plus 4 * SPLITS * WARPS bytes
};

// At the start, by every thread (see kd::exchange_begin).
__device__ __forceinline__ void cluster_begin(Cluster& c) {
    kd::exchange_begin(&c.bar, unsigned(4 * SPLITS * WARPS));
}

// The row's sum of squares from each thread's `ss`. Every thread of every block of the
// cluster calls it once, after cluster_begin.
__device__ __forceinline__ float cluster_sum(float ss, Cluster& c) {
    const unsigned slot = kd::cluster_rank() * WARPS + threadIdx.x / kd::WARP;
    ss = kd::warp_sum(ss);
    kd::cluster_wait();
    const int lane = kd::lane_id();
    if (lane < SPLITS) kd::push(&c.parts[slot], &c.bar, unsigned(lane), ss);
    kd::wait_pushes(&c.bar);
    float all = 0.f;
#pragma unroll
    for (int q = lane; q < SPLITS * WARPS; q += kd::WARP) all += c.parts[q];
    return kd::warp_sum(all);
}
#else
#define KD_ROW_CLUSTER
#endif

// One row per THREADS threads. FUSED: `in` is x and `res` the residual (both updated);
// plain: `in` is x, `res` unused, the result goes to `out`.
template <bool FUSED>
__device__ __forceinline__ void rmsnorm_rows(const T* in, long long in_stride, T* res,
                                             long long res_stride, const T* __restrict__ w,
                                             T* out, long long out_stride, long long rows,
                                             float eps) {
#if SPLITS > 1
    // Block `rank` of the row's cluster: its threads are threads rank * THREADS ..
    // of the row, so vector u of a thread is u * ROW_THREADS + tid as below.
    __shared__ Cluster cl;
    cluster_begin(cl);
    const int tid = int(kd::cluster_rank()) * THREADS + int(threadIdx.x);
    const long long row = blockIdx.x / SPLITS;
#else
    __shared__ float red[ROWS * WARPS];
    const int group = int(threadIdx.x) / THREADS;
    const int tid = int(threadIdx.x) % THREADS;
    const long long row = (long long)blockIdx.x * ROWS + group;
#endif
    kd::pdl_wait();
    // Groups past the last row load and store nothing but still meet the barrier.
    const bool active = row < rows;
    const long long r = active ? row : 0;
    const T* xr = in + r * in_stride;
    T* rr = FUSED ? res + r * res_stride : nullptr;
    T* yr = out + r * out_stride;
    const Split sp(xr);
    // Vector u of step s of this thread is s * STEP + u * ROW_THREADS + tid: one base
    // pointer per thread and constant offsets keep addresses out of registers.
    const T* xp = xr + sp.head + tid * VEC;
    T* rp = FUSED ? rr + sp.head + tid * VEC : nullptr;
    T* yp = yr + sp.head + tid * VEC;
    const T* wp = w + sp.head + tid * VEC;
    // Uniform over the row: w's vectors line up with the row's.
    const bool w_vec = (unsigned long long)(w + sp.head) % sizeof(V) == 0;
    auto at = [&](int s, int u) { return (s * STEP + u * ROW_THREADS) * VEC; };
    // Only the last step may be partial; `nvec - s * STEP` cannot overflow where
    // (s + 1) * STEP could.
    auto valid = [&](int s, int u) {
        return active && ((u + 1) * ROW_THREADS <= NVEC_MIN - s * STEP || u * ROW_THREADS + tid < sp.nvec - s * STEP);
    };
    // This thread's edge element, if any, kept as a float (fused: the rounded sum).
    const bool edge = active && tid < sp.edges;
    const int ecol = sp.edge_col(tid);
    float ev = 0.f;
    // Its loads issued first, so they are in flight with the row's.
    T ex, er;
    if (edge) {
        ex = xr[ecol];
        if (FUSED) er = rr[ecol];
    }

    // Pass 1: read the row (fused: add the residual, store the rounded sum), sum x^2.
    V buf[UNROLL];
    V wb[UNROLL];
    float ss = 0.f;
    for (int s = 0; s < STEPS; ++s) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (valid(s, u)) buf[u] = kd::load_vec<T, VEC>(xp + at(s, u));
        if (EARLY_W) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                if (valid(s, u)) wb[u] = load_w(wp + at(s, u), w_vec);
        }
        if (FUSED) {
            V rb[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                if (valid(s, u)) rb[u] = kd::load_vec<T, VEC>(rp + at(s, u));
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (!valid(s, u)) continue;
                buf[u] = add_round(buf[u], rb[u]);
                if (!LATE) kd::store_vec<T, VEC>(rp + at(s, u), buf[u]);
                // Square the stored (rounded) values now, from the packed vector: the
                // inputs and the unrounded floats die here (see kd::opaque).
                kd::opaque(buf[u]);
                ss += sum_squares(buf[u]);
            }
        } else {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                if (valid(s, u)) ss += sum_squares(buf[u]);
        }
    }
    if (edge) {
        ev = kd::to_f32(ex);
        if (FUSED) {
            ev = kd::to_f32(kd::from_f32<T>(ev + kd::to_f32(er)));
            if (!LATE) rr[ecol] = kd::from_f32<T>(ev);
        }
        ss = fmaf(ev, ev, ss);
    }
    kd::pdl_launch_dependents();
#if SPLITS > 1
    ss = cluster_sum(ss, cl);
#else
    ss = kd::group_sum<THREADS>(ss, red + group * WARPS);
#endif
    const float rstd = rsqrtf(ss * (1.f / float(COLS)) + eps);

    // Pass 2, last step first. The cached path (one step) reuses `buf`; the streaming
    // path re-reads what pass 1 read (fused: the residual this thread just stored),
    // evict-first, as it also writes y, so that what pass 1 left in L2 stays there
    // (figures in docs/results/rmsnorm.md).
    const T* src = FUSED ? rp : xp;
    if (edge) {
        if (FUSED && LATE) rr[ecol] = kd::from_f32<T>(ev);
        yr[ecol] = kd::from_f32<T>(ev * rstd * kd::to_f32(w[ecol]));
    }
    for (int s = STEPS - 1; s >= 0; --s) {
        if (CACHED) {
            // Re-unpack rather than keep pass 1's floats alive (see kd::opaque).
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) kd::opaque(buf[u]);
        } else {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                if (valid(s, u)) buf[u] = kd::load_stream<T, VEC>(src + at(s, u));
        }
        if (!EARLY_W) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                if (valid(s, u)) wb[u] = load_w(wp + at(s, u), w_vec);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (valid(s, u)) {
                const V out = normalise(buf[u], wb[u], rstd);
                if (CACHED) {
                    if (FUSED && LATE) kd::store_vec<T, VEC>(rp + at(s, u), buf[u]);
                    kd::store_vec<T, VEC>(yp + at(s, u), out);
                } else {
                    kd::store_stream<T, VEC>(yp + at(s, u), out);
                }
            }
    }
}

extern "C" __global__ void KD_ROW_CLUSTER KD_LAUNCH_BOUNDS(THREADS * ROWS)
    rmsnorm_kernel(const T* __restrict__ x, long long x_stride, const T* __restrict__ w,
                   T* __restrict__ y, long long y_stride, long long rows, float eps) {
    rmsnorm_rows<false>(x, x_stride, nullptr, 0, w, y, y_stride, rows, eps);
}

extern "C" __global__ void KD_ROW_CLUSTER KD_LAUNCH_BOUNDS(THREADS * ROWS)
    fused_add_rmsnorm_kernel(T* __restrict__ x, long long x_stride, T* __restrict__ residual,
                             long long r_stride, const T* __restrict__ w, long long rows,
                             float eps) {
    rmsnorm_rows<true>(x, x_stride, residual, r_stride, w, x, x_stride, rows, eps);
}
