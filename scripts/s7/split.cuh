// Seventh-session experiment, not part of the library: softmax STRATEGY 4, a row split
// over SPLITS blocks (no cluster) that swap (max, sum) through global memory, for many
// long rows. make_src.sh inserts this before softmax.cu's final #else. Module globals
// stand in for a workspace; they reset themselves, so back-to-back launches on one
// stream need no memset.
//   XP_TICKET 1: a block takes its chunk from an atomic ticket (the order blocks really
//     start in), so a waiting block only waits on blocks that have started or can start.
//   XP_CONTIG 1: block `rank` owns a contiguous chunk of the row; 0: pass-interleaved
//     slices, as the cluster strategy.
//   XP_SLEEP n: nanoseconds of backoff between polls (0: spin).
#elif STRATEGY == 4
#ifndef XP_TICKET
#define XP_TICKET 1
#endif
#ifndef XP_CONTIG
#define XP_CONTIG 0
#endif
#ifndef XP_SLEEP
#define XP_SLEEP 0
#endif
constexpr int ITERS = (NVEC + THREADS * SPLITS - 1) / (THREADS * SPLITS);
static_assert(ITERS <= MAX_ITERS, "split strategy holds at most 16 vectors per thread");
constexpr int CHUNK = ITERS * THREADS;  // vectors per block, contiguous layout
__device__ unsigned xp_ticket;
__device__ unsigned xp_done;
__device__ unsigned xp_count[8192];
__device__ unsigned xp_epoch[8192];
__device__ float2 xp_part[8192 * 64];

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float2 ld_cg2(const float2* p) {
    float2 v;
    asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p) : "memory");
    return v;
}

extern "C" __global__ void KD_LAUNCH_BOUNDS(THREADS)
    softmax_kernel(const T* x, T* y, long long rows, long long x_stride, long long y_stride,
                   float scale) {
    __shared__ float red_m[WARPS];
    __shared__ float red_s[WARPS];
    const int tid = int(threadIdx.x);
#if XP_TICKET
    __shared__ unsigned s_blk;
    if (tid == 0) s_blk = atomicAdd(&xp_ticket, 1u);
    __syncthreads();
    const unsigned blk = s_blk;
#else
    const unsigned blk = blockIdx.x;
#endif
    const long long row = blk / SPLITS;
    const int rank = int(blk % SPLITS);
    const float k = scale * kd::LOG2E;
#if XP_CONTIG
    const int first = rank * CHUNK + tid;
    constexpr int PASS = THREADS * VEC;
    auto valid = [&](int i) { return first + i * THREADS < NVEC; };
#else
    const int first = rank * THREADS + tid;
    constexpr int PASS = SPLITS * THREADS * VEC;
    auto valid = [&](int i) { return (i + 1) * SPLITS * THREADS <= NVEC || i * SPLITS * THREADS + first < NVEC; };
#endif
    const T* xp = x + row * x_stride + (long long)first * VEC;

    V buf[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) buf[i] = kd::load_vec<T, VEC>(xp + i * PASS);

    Stats st = part_stats(buf, k, valid);
    forget(buf);
    st.s = part_sum(buf, k, ref(st.m), valid);
    forget(buf);
    st = block_merge(st, red_m, red_s);
    float2* part = xp_part + row * SPLITS;
    if (tid == 0) {
        const unsigned e0 = ld_acquire(&xp_epoch[row]);
        part[rank] = make_float2(st.m, st.s);
        __threadfence();
        const unsigned t = atomicAdd(&xp_count[row], 1u);
        if (t == SPLITS - 1) {
            xp_count[row] = 0;
            __threadfence();
            atomicAdd(&xp_epoch[row], 1u);
        } else {
            while (ld_acquire(&xp_epoch[row]) == e0) {
#if XP_SLEEP > 0
                __nanosleep(XP_SLEEP);
#endif
            }
        }
        __threadfence();
    }
    __syncthreads();
    Stats all = {kd::neg_inf(), 0.f};
    for (int i = kd::lane_id(); i < SPLITS; i += kd::WARP) {
        const float2 p = ld_cg2(&part[i]);
        all = merge(all, {p.x, p.y});
    }
    all = warp_merge<kd::WARP>(all);

    const Finish finish(k, all);
    T* yp = y + row * y_stride + (long long)first * VEC;
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) kd::store_vec<T, VEC>(yp + i * PASS, finish(buf[i]));
#if XP_TICKET
    if (tid == 0 && atomicAdd(&xp_done, 1u) == gridDim.x - 1) {
        xp_ticket = 0;
        xp_done = 0;
    }
#endif
}

