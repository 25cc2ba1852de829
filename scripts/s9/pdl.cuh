// Ninth session: programmatic dependent launch for the nvcc harnesses (included by
// scripts/s5/harness.cu and scripts/s6/norm_harness.cu after the kernel source).
// XP_PDL=1 launches with the programmatic-stream-serialization attribute (the kernel
// source then needs KD_PDL=1 for its griddepcontrol instructions: call 1 ran with
// scripts/s9/pdl-switch.patch applied); xp_empty_us()
// times an empty kernel (one block of 32 threads) the same way, in a graph.
#ifndef XP_PDL
#define XP_PDL 0
#endif
// XP_PREV (tenth session): cycles (about 2 per ns) of another kernel, 132 blocks of 128
// threads that spin and then each write one word, launched plainly (no attribute, no
// trigger) before every measured launch, as an engine's previous kernel (a GEMM) would
// be; the times are then per pair. 0: none.
#ifndef XP_PREV
#define XP_PREV 0
#endif
__device__ int xp_sink[132 * 128];
__global__ void xp_prev_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    xp_sink[blockIdx.x * blockDim.x + threadIdx.x] = int(t0);
}
template <typename... P, typename... A>
static void xp_launch(void (*k)(P...), unsigned grid, unsigned block, size_t smem, cudaStream_t st, A... args) {
    if (XP_PREV > 0) xp_prev_kernel<<<132, 128, 0, st>>>((long long)XP_PREV);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = XP_PDL ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}
__global__ void xp_empty(int) {
#if XP_PDL
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static float xp_empty_us(cudaStream_t st) {
    const int ITER = 20;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < ITER; ++i) xp_launch(xp_empty, 1, 32, 0, st, 0);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int rep = 0; rep < 53; ++rep) {
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (rep >= 3) t.push_back(ms * 1000.f / ITER);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
