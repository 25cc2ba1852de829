// Fourteenth-session experiment (nvcc on the GPU machine; not part of the library): how
// fast can any one-pass softmax over a cluster go at decode batches, with no arithmetic?
// No output of a softmax row can be written before the whole row has been read and
// reduced, so its floor is: read the row, exchange one partial per warp across the
// blocks of the row, write the row. This times exactly that traffic and dependency
// (the library's own push exchange, kd::exchange_begin / push / wait_pushes from the
// prelude), the same geometry without the exchange, and the driver's copy of the same
// bytes, at the softmax decode shapes whose targets are not met (1 x 128256,
// 8 x 151936, 64 x 128256 bf16: kernel time within 2 us of an empty kernel's).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. -o decode_floor scripts/s14/decode_floor.cu
//   decode_floor     prints per shape and variant the per-launch us (CUDA graph of one
//                    launch per rotating buffer set, the sets at least 4x the L2 so no
//                    launch reads what the L2 holds, at least 20 launches; median of 20
//                    replays) and that minus the empty kernel's, timed the same way.
//
// Variants: <mode> S<blocks per row> T<threads> I<16-byte vectors per thread>
//   copy     each thread stores its vectors once it has loaded them (no dependency
//            between threads)
//   block    a block-wide sum (two barriers) between the loads and the stores
//   cluster  the push exchange across the S blocks of the row's cluster between the
//            loads and the stores: the dependency a one-pass cluster softmax has
//   global   no cluster: each block adds its sum into a slot in global memory, counts
//            itself on the row's counter (atomicAdd after a fence) and spins until all
//            S blocks of the row have counted, then adds the S slots: the dependency a
//            one-pass softmax split over more blocks than a cluster holds would have
//            (only where every block is resident at once: rows x S <= the SM count)
//   copy/block run with and without the cluster launch attribute ("nc": none).
// Call A of the session ran a first version whose loads waited on each other (see the
// kernel); its numbers are not floors. The last call ran this one.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels-core/cuda/prelude.cuh"

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

typedef uint4 V;
constexpr int MAX_S = 16;

// MODE 0: copy; 1: block sum; 2: cluster exchange; 3: exchange through global memory
// (`cnt`: a counter per row, only ever increased, so launch g waits for (g + 1) * s;
// `slots`: s floats per row). A row is `nv` vectors; block
// `blockIdx.x % s` of a row owns the slice of `slice` vectors from rank * slice.
template <int T, int I, int MODE>
__global__ void __launch_bounds__(T) floor_kernel(const V* __restrict__ x, V* __restrict__ y, int nv, int s,
                                                   int slice, unsigned long long* cnt, float* slots) {
    constexpr int W = T / 32;
    __shared__ float parts[MAX_S * W];
    __shared__ unsigned long long bar;
    __shared__ float red[W];
    if (MODE == 2) kd::exchange_begin(&bar, unsigned(4 * s * W));
    const int row = blockIdx.x / s, rank = blockIdx.x % s;
    const long long base = (long long)row * nv;
    const int lo = rank * slice, hi = min(nv, lo + slice);
    // Every load is issued before any value is used: a use inside the guarded load
    // (the first version of this file) made each thread wait for one load before
    // issuing the next, which the library's kernels do not do.
    V v[I];
#pragma unroll
    for (int i = 0; i < I; ++i) {
        const int c = lo + i * T + int(threadIdx.x);
        v[i] = c < hi ? x[base + c] : make_uint4(0, 0, 0, 0);
    }
    if (MODE == 0) {
#pragma unroll
        for (int i = 0; i < I; ++i) {
            const int c = lo + i * T + int(threadIdx.x);
            if (c < hi) y[base + c] = v[i];
        }
        return;
    }
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < I; ++i) acc += float(v[i].x & 0xff);
    acc = kd::warp_sum(acc);
    const int lane = kd::lane_id(), warp = int(threadIdx.x) / 32;
    float all = 0.f;
    if (MODE == 1 || MODE == 3) {
        if (lane == 0) red[warp] = acc;
        __syncthreads();
        for (int q = lane; q < W; q += 32) all += red[q];
        all = kd::warp_sum(all);
    }
    if (MODE == 3) {
        // Thread 0 publishes the block's sum and waits for the row's other blocks; then
        // every warp reads the row's s sums from L2, a lane per sum.
        if (threadIdx.x == 0) {
            slots[row * s + rank] = all;
            __threadfence();
            const unsigned long long ticket = atomicAdd(&cnt[row], 1ull);
            const unsigned long long want = (ticket / unsigned(s) + 1) * unsigned(s);
            volatile unsigned long long* c = &cnt[row];
            long long spins = 0;
            while (*c < want && ++spins < (1ll << 24)) {
            }
            __threadfence();
        }
        __syncthreads();
        all = 0.f;
        for (int q = lane; q < s; q += 32) all += __ldcg(&slots[row * s + q]);
        all = kd::warp_sum(all);
    } else if (MODE == 2) {
        kd::cluster_wait();
        if (lane < s) kd::push(&parts[rank * W + warp], &bar, unsigned(lane), acc);
        kd::wait_pushes(&bar);
        for (int q = lane; q < s * W; q += 32) all += parts[q];
        all = kd::warp_sum(all);
    }
    const unsigned bit = unsigned(all) & 1u;
#pragma unroll
    for (int i = 0; i < I; ++i) {
        const int c = lo + i * T + int(threadIdx.x);
        if (c < hi) {
            V o = v[i];
            o.x ^= bit;
            y[base + c] = o;
        }
    }
}

__global__ void empty_kernel(int) {}

typedef void (*Kern)(const V*, V*, int, int, int, unsigned long long*, float*);

template <int T, int MODE>
static Kern pick(int iters) {
    switch (iters) {
        case 1: return floor_kernel<T, 1, MODE>;
        case 2: return floor_kernel<T, 2, MODE>;
        case 4: return floor_kernel<T, 4, MODE>;
        case 8: return floor_kernel<T, 8, MODE>;
        case 16: return floor_kernel<T, 16, MODE>;
    }
    return nullptr;
}

static Kern pick(int t, int iters, int mode) {
#define PICK_T(T_)                                             \
    if (t == T_) {                                             \
        if (mode == 0) return pick<T_, 0>(iters);              \
        if (mode == 1) return pick<T_, 1>(iters);              \
        if (mode == 2) return pick<T_, 2>(iters);              \
        return pick<T_, 3>(iters);                             \
    }
    PICK_T(64)
    PICK_T(128)
    PICK_T(256)
    PICK_T(512)
    return nullptr;
}

int main() {
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t ea, eb;
    CK(cudaEventCreate(&ea));
    CK(cudaEventCreate(&eb));
    struct Shape {
        int rows, cols;
    };
    for (Shape sh : {Shape{1, 128256}, Shape{8, 151936}, Shape{64, 128256}}) {
        const int nv = sh.cols / 8;
        const size_t bytes = size_t(sh.rows) * sh.cols * 2;
        const int sets = int(std::max<size_t>(2, (size_t(4) * l2) / (2 * bytes) + 1));
        const int iters = std::max(20, sets);  // every set once per replay
        std::vector<V*> xs(sets), ys(sets);
        for (int i = 0; i < sets; ++i) {
            CK(cudaMalloc(&xs[i], bytes));
            CK(cudaMalloc(&ys[i], bytes));
            CK(cudaMemset(xs[i], 1, bytes));
        }
        float empty_us = 0;
        auto time_graph = [&](const char* name, auto launch) {
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < iters; ++i) launch(i % sets);
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            std::vector<float> t;
            for (int rep = 0; rep < 23; ++rep) {
                CK(cudaEventRecord(ea, st));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(eb, st));
                CK(cudaEventSynchronize(eb));
                float ms;
                CK(cudaEventElapsedTime(&ms, ea, eb));
                if (rep >= 3) t.push_back(ms * 1000.f / iters);
            }
            CK(cudaGetLastError());
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
            std::sort(t.begin(), t.end());
            const float med = t[t.size() / 2];
            if (!strcmp(name, "empty")) empty_us = med;
            printf("%-24s shape=%dx%d sets=%d median_us=%.2f min_us=%.2f over_empty=%+.2f\n", name, sh.rows, sh.cols,
                   sets, med, t[0], med - empty_us);
            fflush(stdout);
        };
        time_graph("empty", [&](int) { empty_kernel<<<1, 32, 0, st>>>(0); });
        time_graph("memcpy", [&](int i) { CK(cudaMemcpyAsync(ys[i], xs[i], bytes, cudaMemcpyDeviceToDevice, st)); });
        char name[64];
        int sms = 0;
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        unsigned long long* cnt;
        float* slots;
        CK(cudaMalloc(&cnt, sizeof(unsigned long long) * sh.rows));
        CK(cudaMemset(cnt, 0, sizeof(unsigned long long) * sh.rows));
        CK(cudaMalloc(&slots, sizeof(float) * sh.rows * 128));
        for (int s : {4, 8, 16, 32, 64, 128}) {
            const int slice = (nv + s - 1) / s;
            for (int t : {64, 128, 256, 512}) {
                int it = 1;
                while (it * t < slice) it *= 2;
                if (it > 16) continue;
                for (int mode = 0; mode < 4; ++mode) {
                    if ((mode < 3) != (s <= 16)) continue;
                    if (mode == 3 && sh.rows * s > sms) continue;
                    for (int clustered = 1; clustered >= 0; --clustered) {
                        if (mode == 2 && !clustered) continue;
                        if (mode == 3 && clustered) continue;
                        Kern k = pick(t, it, mode);
                        if (!k) continue;
                        if (s > 8) CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
                        static const char* modes[] = {"copy", "block", "cluster", "global"};
                        snprintf(name, sizeof(name), "%s%s S%d T%d I%d", modes[mode], clustered ? "" : "-nc", s, t, it);
                        time_graph(name, [&](int i) {
                            cudaLaunchConfig_t cfg = {};
                            cfg.gridDim = dim3(unsigned(sh.rows * s));
                            cfg.blockDim = dim3(unsigned(t));
                            cfg.stream = st;
                            cudaLaunchAttribute at[1];
                            at[0].id = cudaLaunchAttributeClusterDimension;
                            at[0].val.clusterDim.x = unsigned(s);
                            at[0].val.clusterDim.y = 1;
                            at[0].val.clusterDim.z = 1;
                            cfg.attrs = at;
                            cfg.numAttrs = clustered ? 1 : 0;
                            CK(cudaLaunchKernelEx(&cfg, k, (const V*)xs[i], ys[i], nv, s, slice, cnt, slots));
                        });
                    }
                }
            }
        }
        CK(cudaFree(cnt));
        CK(cudaFree(slots));
        for (int i = 0; i < sets; ++i) {
            CK(cudaFree(xs[i]));
            CK(cudaFree(ys[i]));
        }
    }
    return 0;
}
