// Sixth session, not landed: softmax STRATEGY 4, a row split over blocks that swap (max, sum) through global memory (module globals stand in for a workspace); see 2026-11-30-h200-session6.md
#elif STRATEGY == 4
// ---- XP split: SPLITS blocks per row, no cluster; stats through global memory -----
// Experiment only (sixth session): module globals stand in for a workspace.

constexpr int ITERS = (NVEC + THREADS * SPLITS - 1) / (THREADS * SPLITS);
static_assert(ITERS <= MAX_ITERS, "split strategy holds at most 16 vectors per thread");
__device__ unsigned long long xp_count[4096];
__device__ unsigned xp_epoch[4096];
__device__ float xp_part[4096 * 256 * 2];

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}

extern "C" __global__ void KD_LAUNCH_BOUNDS(THREADS)
    softmax_kernel(const T* x, T* y, long long rows, long long x_stride, long long y_stride,
                   float scale) {
    __shared__ float red_m[WARPS];
    __shared__ float red_s[WARPS];
    const int tid = int(threadIdx.x);
    const long long row = blockIdx.x / SPLITS;
    const int rank = int(blockIdx.x % SPLITS);
    const float k = scale * kd::LOG2E;
    const int first = rank * THREADS + tid;
    const T* xp = x + row * x_stride + first * VEC;
    constexpr int PASS = SPLITS * THREADS * VEC;
    auto valid = [&](int i) { return (i + 1) * SPLITS * THREADS <= NVEC || i * SPLITS * THREADS + first < NVEC; };

    V buf[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) buf[i] = kd::load_vec<T, VEC>(xp + i * PASS);

    Stats st = part_stats(buf, k, valid);
    forget(buf);
    st.s = part_sum(buf, k, ref(st.m), valid);
    forget(buf);
    st = block_merge(st, red_m, red_s);
    float* part = xp_part + row * SPLITS * 2;
    if (tid == 0) {
        const unsigned e0 = ld_acquire(&xp_epoch[row]);
        part[2 * rank] = st.m;
        part[2 * rank + 1] = st.s;
        __threadfence();
        const unsigned long long t = atomicAdd(&xp_count[row], 1ull);
        if (t == SPLITS - 1) {
            xp_count[row] = 0;
            __threadfence();
            atomicAdd(&xp_epoch[row], 1u);
        } else {
            while (ld_acquire(&xp_epoch[row]) == e0) {
            }
        }
    }
    __syncthreads();
    Stats all = {kd::neg_inf(), 0.f};
    for (int i = kd::lane_id(); i < SPLITS; i += kd::WARP) all = merge(all, {ld_cg(&part[2 * i]), ld_cg(&part[2 * i + 1])});
    all = warp_merge<kd::WARP>(all);

    const Finish finish(k, all);
    T* yp = y + row * y_stride + first * VEC;
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
        if (valid(i)) kd::store_vec<T, VEC>(yp + i * PASS, finish(buf[i]));
}

