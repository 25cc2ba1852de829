// Twelfth-session experiment (nvcc on the GPU machine; not part of the library): the
// fastest copy of N bytes we can find on this device, at the sizes of the norm shapes
// that miss 0.95 of the copy bandwidth (64 and 128 MiB moved) and around them.
// "Moved" counts bytes read plus bytes written, as the bench does: a copy of M bytes
// moves 2M.
//
//   copy_floor            prints, per size, every variant's per-launch µs (CUDA graph of
//                         20 launches over rotating buffer sets of at least 4x the L2,
//                         median of 20 replays) and the ratio of the best to the rate
//                         of the 1 GiB-moved driver copy of the same run
//
// Variants
//   memcpy        cudaMemcpyAsync device to device, captured in the graph
//   gs<T>x<B>u<U> grid-stride 16-byte copy, B blocks (per SM when B < 0) of T threads,
//                 U vectors loaded before they are stored
//   chunk<K>      one block of 512 threads per K KiB contiguous chunk
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

typedef uint4 V;  // 16 bytes

template <int U>
__global__ void gs_copy(const V* __restrict__ x, V* __restrict__ y, size_t n) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        V v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = x[i + u * stride];
#pragma unroll
        for (int u = 0; u < U; ++u) y[i + u * stride] = v[u];
    }
    for (; i < n; i += stride) y[i] = x[i];
}

__global__ void chunk_copy(const V* __restrict__ x, V* __restrict__ y, size_t n, int cv) {
    const size_t base = size_t(blockIdx.x) * cv;
    for (int j = threadIdx.x; j < cv && base + j < n; j += blockDim.x) y[base + j] = x[base + j];
}

int main() {
    int dev = 0, sms = 0, l2 = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    const int ITER = 20;
    double ref_rate = 0;  // bytes moved per µs of the 1 GiB-moved memcpy
    // Largest first, so the reference rate is known before the ratios.
    for (size_t moved_mib : {1024, 512, 256, 128, 96, 64, 48, 32, 16}) {
        const size_t bytes = moved_mib << 19;  // copied bytes: half of those moved
        const size_t n = bytes / 16;
        const int sets = int(std::max<size_t>(2, (size_t(4) * l2) / (2 * bytes) + 1));
        std::vector<V*> xs(sets), ys(sets);
        for (int i = 0; i < sets; ++i) {
            CK(cudaMalloc(&xs[i], bytes));
            CK(cudaMalloc(&ys[i], bytes));
            CK(cudaMemset(xs[i], 1, bytes));
            CK(cudaMemset(ys[i], 2, bytes));
        }
        double best = 1e30;
        const char* best_name = "";
        static char names[64][32];
        int nn = 0;
        auto time_graph = [&](const char* name, auto launch) {
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < ITER; ++i) launch(xs[i % sets], ys[i % sets]);
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            std::vector<float> t;
            for (int rep = 0; rep < 23; ++rep) {
                CK(cudaEventRecord(a, s));
                CK(cudaGraphLaunch(ge, s));
                CK(cudaEventRecord(b, s));
                CK(cudaEventSynchronize(b));
                float ms;
                CK(cudaEventElapsedTime(&ms, a, b));
                if (rep >= 3) t.push_back(ms * 1000.f / ITER);
            }
            CK(cudaGetLastError());
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
            std::sort(t.begin(), t.end());
            const double med = t[t.size() / 2];
            const double rate = 2.0 * bytes / med;
            if (moved_mib == 1024 && !strcmp(name, "memcpy")) ref_rate = rate;
            printf("%-16s moved_mib=%zu sets=%d median_us=%.2f min_us=%.2f TB/s=%.3f x_copy=%.3f\n", name, moved_mib,
                   sets, med, t[0], rate / 1e6, ref_rate > 0 ? rate / ref_rate : 0.0);
            fflush(stdout);
            if (med < best) {
                best = med;
                snprintf(names[nn % 64], 32, "%s", name);
                best_name = names[nn % 64];
                ++nn;
            }
        };
        time_graph("memcpy", [&](V* x, V* y) { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s)); });
        char name[64];
        for (int T : {256, 512, 1024})
            for (int per_sm : {1, 2, 4, 8}) {
                if (T * per_sm > 2048) continue;
                const int B = per_sm * sms;
                snprintf(name, sizeof(name), "gs%dx%dsm_u1", T, per_sm);
                time_graph(name, [&](V* x, V* y) { gs_copy<1><<<B, T, 0, s>>>(x, y, n); });
                snprintf(name, sizeof(name), "gs%dx%dsm_u4", T, per_sm);
                time_graph(name, [&](V* x, V* y) { gs_copy<4><<<B, T, 0, s>>>(x, y, n); });
            }
        for (int K : {8, 16, 32, 64}) {
            const int cv = K * 1024 / 16;
            const unsigned blocks = unsigned((n + cv - 1) / cv);
            snprintf(name, sizeof(name), "chunk%dk", K);
            time_graph(name, [&](V* x, V* y) { chunk_copy<<<blocks, 512, 0, s>>>(x, y, n, cv); });
        }
        printf("BEST moved_mib=%zu %s median_us=%.2f x_copy=%.3f need_for_0.95_us=%.2f\n", moved_mib, best_name, best,
               2.0 * bytes / best / ref_rate, 2.0 * bytes / (0.95 * ref_rate));
        fflush(stdout);
        for (int i = 0; i < sets; ++i) {
            CK(cudaFree(xs[i]));
            CK(cudaFree(ys[i]));
        }
    }
    return 0;
}
