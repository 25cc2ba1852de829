// Thirteenth-session experiment (nvcc on the GPU machine; not part of the library): how
// fast can the memory traffic of fused_add_rmsnorm go, with no arithmetic and no
// reduction? fused_add_rmsnorm reads two [rows, cols] bf16 arrays and writes both back
// in place; this times that pattern, and its variants, against the driver's copy of the
// same bytes, at the shapes that miss their targets (4096 x 4096 and 4096 x 2048 at 0.95
// of the copy bandwidth, 64 x 8192 at 2 µs over an empty kernel).
//
//   rmw_floor   prints, per shape and variant, the per-launch µs (CUDA graph of 20
//               or more launches, one per rotating buffer set, the sets at least 4x the
//               L2, median of 20 replays), the rate, and the ratio to the rate of the bench's reference
//               copy (cudaMemcpyAsync of 1 GiB moved, on the stream) in the same run;
//               "moved" counts bytes read plus bytes written.
//
// Variants (a, b: the two arrays; v: 16-byte vectors; a block takes THREADS x ITERS
// consecutive vectors of both arrays, so one row per block where that is the row)
//   memcpy           the driver's copy of 2 x the array bytes (same bytes moved)
//   ip<T>x<I>        in place: load a and b, store b = a + b, then a = f(b)
//   ip<T>x<I>s       the same with a block barrier between the two stores (where the
//                    kernel's reduction sits)
//   ip<T>x<I>l       in place, both stores after the barrier
//   oop<T>x<I>       out of place: load a and b, store c and d
//   gsip<T>x<B>u<U>  grid-stride in place, B blocks per SM, U vectors of each in flight
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

typedef uint4 V;

__device__ __forceinline__ V addv(V x, V y) { return make_uint4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }
__device__ __forceinline__ V mixv(V x) { return make_uint4(x.x ^ 0x5a5a, x.y ^ 0x5a5a, x.z ^ 0x5a5a, x.w ^ 0x5a5a); }

__device__ int sink;

// MODE 0: in place, stores as loaded; 1: barrier between the stores; 2: both stores after
// the barrier; 3: out of place (c, d).
template <int T, int I, int MODE>
__global__ void __launch_bounds__(T) chunk_rmw(V* __restrict__ a, V* __restrict__ b, V* __restrict__ c,
                                               V* __restrict__ d, size_t n) {
    __shared__ int red[32];
    const size_t base = size_t(blockIdx.x) * (T * I) + threadIdx.x;
    V va[I], vb[I];
#pragma unroll
    for (int i = 0; i < I; ++i)
        if (base + i * T < n) va[i] = a[base + i * T];
#pragma unroll
    for (int i = 0; i < I; ++i)
        if (base + i * T < n) vb[i] = b[base + i * T];
    unsigned acc = 0;
#pragma unroll
    for (int i = 0; i < I; ++i) {
        vb[i] = addv(va[i], vb[i]);
        acc += vb[i].x;
        if (MODE == 0 || MODE == 1) {
            if (base + i * T < n) b[base + i * T] = vb[i];
        } else if (MODE == 3) {
            if (base + i * T < n) d[base + i * T] = vb[i];
        }
    }
    if (MODE == 1 || MODE == 2) {
        if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = int(acc);
        __syncthreads();
        acc += unsigned(red[0]);
    }
    V* out = MODE == 3 ? c : a;
#pragma unroll
    for (int i = 0; i < I; ++i) {
        if (base + i * T < n) {
            if (MODE == 2) b[base + i * T] = vb[i];
            V o = mixv(vb[i]);
            o.x += acc & 1;
            out[base + i * T] = o;
        }
    }
}

template <int U>
__global__ void gs_rmw(V* __restrict__ a, V* __restrict__ b, size_t n) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        V va[U], vb[U];
#pragma unroll
        for (int u = 0; u < U; ++u) va[u] = a[i + u * stride];
#pragma unroll
        for (int u = 0; u < U; ++u) vb[u] = b[i + u * stride];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            vb[u] = addv(va[u], vb[u]);
            b[i + u * stride] = vb[u];
            a[i + u * stride] = mixv(vb[u]);
        }
    }
    for (; i < n; i += stride) {
        V vb = addv(a[i], b[i]);
        b[i] = vb;
        a[i] = mixv(vb);
    }
}

__global__ void empty_kernel(int) {}

int main() {
    int dev = 0, sms = 0, l2 = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t ea, eb;
    CK(cudaEventCreate(&ea));
    CK(cudaEventCreate(&eb));
    const int ITER = 20;
    double ref_rate = 0;
    struct Shape {
        long long rows, cols;
    };
    {
        // The reference, as the bench measures it: cudaMemcpyAsync of 512 MiB (1 GiB
        // moved), launched on the stream (a memcpy node in a graph takes the copy
        // engines at this size), per copy over 20, median of 20 repetitions.
        const size_t half = size_t(512) << 20;
        void *x, *y;
        CK(cudaMalloc(&x, half));
        CK(cudaMalloc(&y, half));
        CK(cudaMemset(x, 1, half));
        std::vector<float> t;
        for (int rep = 0; rep < 23; ++rep) {
            CK(cudaEventRecord(ea, s));
            for (int i = 0; i < ITER; ++i) CK(cudaMemcpyAsync(y, x, half, cudaMemcpyDeviceToDevice, s));
            CK(cudaEventRecord(eb, s));
            CK(cudaEventSynchronize(eb));
            float ms;
            CK(cudaEventElapsedTime(&ms, ea, eb));
            if (rep >= 3) t.push_back(ms * 1000.f / ITER);
        }
        std::sort(t.begin(), t.end());
        ref_rate = 2.0 * half / t[t.size() / 2];
        printf("reference copy of 1 GiB moved: median_us=%.2f TB/s=%.3f\n", t[t.size() / 2], ref_rate / 1e6);
        CK(cudaFree(x));
        CK(cudaFree(y));
    }
    for (Shape sh : {Shape{4096, 4096}, Shape{4096, 2048}, Shape{64, 8192}, Shape{16, 4096}}) {
        const size_t bytes = size_t(sh.rows) * sh.cols * 2;  // one array
        const size_t n = bytes / 16;
        const size_t moved = 4 * bytes;
        const int sets = int(std::max<size_t>(2, (size_t(4) * l2) / moved + 1));
        // Every set is used once per replay, so the L2 never holds what a launch reads.
        const int iters = std::max(ITER, sets);
        std::vector<V*> as(sets), bs(sets), cs(sets), ds(sets);
        for (int i = 0; i < sets; ++i) {
            CK(cudaMalloc(&as[i], bytes));
            CK(cudaMalloc(&bs[i], bytes));
            CK(cudaMalloc(&cs[i], bytes));
            CK(cudaMalloc(&ds[i], bytes));
            CK(cudaMemset(as[i], 1, bytes));
            CK(cudaMemset(bs[i], 2, bytes));
        }
        // One buffer of 2 x bytes for the driver copy: a and b are separate allocations.
        std::vector<V*> src(sets), dst(sets);
        for (int i = 0; i < sets; ++i) {
            CK(cudaMalloc(&src[i], 2 * bytes));
            CK(cudaMalloc(&dst[i], 2 * bytes));
            CK(cudaMemset(src[i], 3, 2 * bytes));
        }
        auto time_graph = [&](const char* name, auto launch) {
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < iters; ++i) launch(i % sets);
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            std::vector<float> t;
            for (int rep = 0; rep < 23; ++rep) {
                CK(cudaEventRecord(ea, s));
                CK(cudaGraphLaunch(ge, s));
                CK(cudaEventRecord(eb, s));
                CK(cudaEventSynchronize(eb));
                float ms;
                CK(cudaEventElapsedTime(&ms, ea, eb));
                if (rep >= 3) t.push_back(ms * 1000.f / iters);
            }
            CK(cudaGetLastError());
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
            std::sort(t.begin(), t.end());
            const double med = t[t.size() / 2];
            const double rate = double(moved) / med;
            printf("%-18s shape=%lldx%lld sets=%d median_us=%.2f min_us=%.2f TB/s=%.3f x_copy=%.3f\n", name, sh.rows,
                   sh.cols, sets, med, t[0], rate / 1e6, rate / ref_rate);
            fflush(stdout);
        };
        time_graph("empty", [&](int) { empty_kernel<<<1, 32, 0, s>>>(0); });
        time_graph("memcpy", [&](int i) {
            CK(cudaMemcpyAsync(dst[i], src[i], 2 * bytes, cudaMemcpyDeviceToDevice, s));
        });
        char name[64];
#define RMW(T_, I_)                                                                                        \
    {                                                                                                      \
        const unsigned blocks = unsigned((n + T_ * I_ - 1) / (T_ * I_));                                   \
        snprintf(name, sizeof(name), "ip%dx%d", T_, I_);                                                   \
        time_graph(name, [&](int i) { chunk_rmw<T_, I_, 0><<<blocks, T_, 0, s>>>(as[i], bs[i], cs[i], ds[i], n); }); \
        snprintf(name, sizeof(name), "ip%dx%ds", T_, I_);                                                  \
        time_graph(name, [&](int i) { chunk_rmw<T_, I_, 1><<<blocks, T_, 0, s>>>(as[i], bs[i], cs[i], ds[i], n); }); \
        snprintf(name, sizeof(name), "ip%dx%dl", T_, I_);                                                  \
        time_graph(name, [&](int i) { chunk_rmw<T_, I_, 2><<<blocks, T_, 0, s>>>(as[i], bs[i], cs[i], ds[i], n); }); \
        snprintf(name, sizeof(name), "oop%dx%d", T_, I_);                                                  \
        time_graph(name, [&](int i) { chunk_rmw<T_, I_, 3><<<blocks, T_, 0, s>>>(as[i], bs[i], cs[i], ds[i], n); }); \
    }
        RMW(32, 8)
        RMW(64, 4)
        RMW(64, 8)
        RMW(128, 1)
        RMW(128, 2)
        RMW(128, 4)
        RMW(128, 8)
        RMW(256, 1)
        RMW(256, 2)
        RMW(256, 4)
        RMW(512, 1)
        RMW(512, 2)
        RMW(1024, 1)
        for (int T : {256, 512})
            for (int per_sm : {2, 4, 8}) {
                if (T * per_sm > 2048) continue;
                const int B = per_sm * sms;
                snprintf(name, sizeof(name), "gsip%dx%du1", T, per_sm);
                time_graph(name, [&](int i) { gs_rmw<1><<<B, T, 0, s>>>(as[i], bs[i], n); });
                snprintf(name, sizeof(name), "gsip%dx%du4", T, per_sm);
                time_graph(name, [&](int i) { gs_rmw<4><<<B, T, 0, s>>>(as[i], bs[i], n); });
            }
        for (int i = 0; i < sets; ++i) {
            CK(cudaFree(as[i]));
            CK(cudaFree(bs[i]));
            CK(cudaFree(cs[i]));
            CK(cudaFree(ds[i]));
            CK(cudaFree(src[i]));
            CK(cudaFree(dst[i]));
        }
    }
    return 0;
}
