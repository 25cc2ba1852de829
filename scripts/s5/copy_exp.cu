// Session-5 experiment (nvcc on the GPU machine; not part of the library): how fast can
// a kernel with the staged softmax's access pattern copy a [rows, cols] bf16 tensor,
// against cudaMemcpyAsync and a grid-stride copy? No arithmetic, the same traffic.
//
//   copy_exp ROWS COLS     prints one line per variant: per-launch µs (CUDA graph of 20
//                          launches over rotating buffers, median of 20 replays), GB/s
//
// Variants
//   memcpy            cudaMemcpyAsync device to device on the stream (not in a graph)
//   gs<T>x<B>         grid-stride 16-byte copy, B blocks of T threads
//   row<T>            one block per row, each thread copies its 16-byte vectors
//                     (4 loads in flight, then 4 stores)
//   staged<T>         one block per row (one per SM): cp.async of the whole row (up to
//                     the stage) into shared memory, wait, then store it; the rest of
//                     the row copied through registers, like the staged softmax
//   chunk<K>          one block of 512 threads per K KiB contiguous chunk
#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

__global__ void gs_copy(const V* __restrict__ x, V* __restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        y[i] = x[i];
}

__global__ void row_copy(const V* __restrict__ x, V* __restrict__ y, int nvec) {
    const V* xr = x + size_t(blockIdx.x) * nvec;
    V* yr = y + size_t(blockIdx.x) * nvec;
    for (int i = threadIdx.x; i < nvec; i += 4 * blockDim.x) {
        V b[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (i + u * int(blockDim.x) < nvec) b[u] = xr[i + u * blockDim.x];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (i + u * int(blockDim.x) < nvec) yr[i + u * blockDim.x] = b[u];
    }
}

__global__ void staged_copy(const V* __restrict__ x, V* __restrict__ y, int nvec, int stage_vecs) {
    extern __shared__ V st[];
    const V* xr = x + size_t(blockIdx.x) * nvec;
    V* yr = y + size_t(blockIdx.x) * nvec;
    const int staged = nvec < stage_vecs ? nvec : stage_vecs;
    for (int i = threadIdx.x; i < staged; i += blockDim.x) {
        unsigned s = unsigned(__cvta_generic_to_shared(st + i));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(xr + i) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    // The rest through registers while the copies land.
    for (int i = staged + threadIdx.x; i < nvec; i += blockDim.x) yr[i] = xr[i];
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    // Each thread stores what it copied: no barrier needed.
    for (int i = threadIdx.x; i < staged; i += blockDim.x) {
        V v = st[i];
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(yr + i), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
    }
}

__global__ void chunk_copy(const V* __restrict__ x, V* __restrict__ y, size_t n, int chunk_vecs) {
    const size_t b = size_t(blockIdx.x) * chunk_vecs;
    for (int i = threadIdx.x; i < chunk_vecs; i += 4 * blockDim.x) {
        V t[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (b + i + u * blockDim.x < n && i + u * int(blockDim.x) < chunk_vecs) t[u] = x[b + i + u * blockDim.x];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (b + i + u * blockDim.x < n && i + u * int(blockDim.x) < chunk_vecs) y[b + i + u * blockDim.x] = t[u];
    }
}

int main(int argc, char** argv) {
    if (argc < 3) return 2;
    const int rows = atoi(argv[1]), cols = atoi(argv[2]);
    const int nvec = cols * 2 / 16;
    const size_t bytes = size_t(rows) * cols * 2, n = bytes / 16;
    const int sets = 2;
    std::vector<V*> xs(sets), ys(sets);
    for (int i = 0; i < sets; ++i) {
        CK(cudaMalloc(&xs[i], bytes));
        CK(cudaMalloc(&ys[i], bytes));
        CK(cudaMemset(xs[i], 1, bytes));
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    const int ITER = 20;
    auto report = [&](const char* name, std::vector<float>& t) {
        std::sort(t.begin(), t.end());
        const float med = t[t.size() / 2];
        printf("%-16s rows=%d cols=%d median_us=%.2f min_us=%.2f GB/s=%.0f\n", name, rows, cols, med, t[0],
               2.0 * bytes / (med * 1e-6) / 1e9);
        fflush(stdout);
    };
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
        report(name, t);
    };
    {
        std::vector<float> t;
        for (int rep = 0; rep < 23; ++rep) {
            CK(cudaEventRecord(a, s));
            for (int i = 0; i < ITER; ++i) CK(cudaMemcpyAsync(ys[i % sets], xs[i % sets], bytes, cudaMemcpyDeviceToDevice, s));
            CK(cudaEventRecord(b, s));
            CK(cudaEventSynchronize(b));
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (rep >= 3) t.push_back(ms * 1000.f / ITER);
        }
        report("memcpy", t);
    }
    char name[64];
    for (int T : {256, 512, 1024})
        for (int B : {132, 264, 528, 1056, 4224}) {
            snprintf(name, sizeof(name), "gs%dx%d", T, B);
            time_graph(name, [&](V* x, V* y) { gs_copy<<<B, T, 0, s>>>(x, y, n); });
        }
    for (int T : {256, 512, 1024}) {
        snprintf(name, sizeof(name), "row%d", T);
        time_graph(name, [&](V* x, V* y) { row_copy<<<rows, T, 0, s>>>(x, y, nvec); });
    }
    const int stage_vecs = 14336;  // 229,376 bytes, as the staged softmax at 1024 threads
    CK(cudaFuncSetAttribute(staged_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, stage_vecs * 16));
    for (int T : {512, 1024}) {
        snprintf(name, sizeof(name), "staged%d", T);
        time_graph(name, [&](V* x, V* y) { staged_copy<<<rows, T, stage_vecs * 16, s>>>(x, y, nvec, stage_vecs); });
    }
    for (int K : {16, 64, 256}) {
        const int cv = K * 1024 / 16;
        const unsigned blocks = unsigned((n + cv - 1) / cv);
        snprintf(name, sizeof(name), "chunk%dk", K);
        time_graph(name, [&](V* x, V* y) { chunk_copy<<<blocks, 512, 0, s>>>(x, y, n, cv); });
    }
    return 0;
}
