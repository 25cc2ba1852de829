// Sixth-session device-code experiment harness for RMSNorm (nvcc on the GPU machine;
// not part of the library). Appended after the prelude and rmsnorm.cu with the
// config's defines (NORM_FUSED=1: fused_add_rmsnorm_kernel, else rmsnorm_kernel), it times
// the kernel on bf16 [ROWS_N, COLS] as the bench does (a CUDA graph of 20 launches over
// rotating buffers, per-launch microseconds, median of 20 replays) and checks every
// row of the first launch against a double-precision reference, in bf16 ulps.
//
//   harness NAME ROWS_N   (the bench has the copy of each shape's bytes)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                       \
    do {                                                                            \
        cudaError_t e_ = (x);                                                       \
        if (e_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#ifndef NORM_FUSED
#define NORM_FUSED 0
#endif
#ifndef SPLITS
#define SPLITS 1
#endif

// XP_SMEM (eighth session): dynamic shared memory per block, to cap blocks per SM.
#ifndef XP_SMEM
#define XP_SMEM 0
#endif
// XP_FIXED_Y (eighth session): every launch writes set 0's y, as a peer whose output
// comes from the caching allocator does.
// XP_CARVE (eighth session): the preferred shared memory carveout, percent (-1: unset).
#ifndef XP_CARVE
#define XP_CARVE -1
#endif
#ifndef XP_FIXED_Y
#define XP_FIXED_Y 0
#endif
// XP_ALL_SETS (thirteenth session): the graph has one launch per buffer set (at least
// 20), so no launch reads what an earlier launch of the same replay left in L2.
#ifndef XP_ALL_SETS
#define XP_ALL_SETS 0
#endif

static float bf(unsigned short b) {
    unsigned u = unsigned(b) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static unsigned short to_bf(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return (unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

#include "scripts/s9/pdl.cuh"

int main(int argc, char** argv) {
    if (argc < 3) return 2;
    const char* name = argv[1];
    const long long rows = atoll(argv[2]);
    const size_t n = size_t(rows) * COLS, bytes = n * 2;
    // Bytes one launch moves: x in, y out (fused: x and residual, in and out).
    const size_t moved = (NORM_FUSED ? 4 : 2) * bytes;
    const int sets = int(std::min<size_t>(64, std::max<size_t>(2, (size_t(512) << 20) / moved + 1)));
    std::vector<unsigned short> hx(n), hr(n), hw(COLS);
    unsigned long long s = 0x9E3779B97F4A7C15ull;
    auto rnd = [&]() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return float((s >> 40) & 0xffffff) / 16777216.f * 4.f - 2.f;
    };
    for (size_t i = 0; i < n; ++i) hx[i] = to_bf(rnd());
    for (size_t i = 0; i < n; ++i) hr[i] = to_bf(rnd());
    for (int i = 0; i < COLS; ++i) hw[i] = to_bf(1.f + 0.25f * rnd());
    std::vector<T*> xs(sets), rs(sets), ys(sets);
    T* w;
    CK(cudaMalloc(&w, COLS * 2));
    CK(cudaMemcpy(w, hw.data(), COLS * 2, cudaMemcpyHostToDevice));
    for (int i = 0; i < sets; ++i) {
        CK(cudaMalloc(&xs[i], bytes));
        CK(cudaMalloc(&rs[i], bytes));
        CK(cudaMalloc(&ys[i], bytes));
        CK(cudaMemcpy(xs[i], hx.data(), bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(rs[i], hr.data(), bytes, cudaMemcpyHostToDevice));
    }
    const float eps = 1e-6f;
    const unsigned grid = unsigned((rows + ROWS - 1) / ROWS * SPLITS);
    const unsigned block = THREADS * ROWS;
#if NORM_FUSED
    if (XP_SMEM > 48 * 1024) CK(cudaFuncSetAttribute(fused_add_rmsnorm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, XP_SMEM));
    if (XP_CARVE >= 0) CK(cudaFuncSetAttribute(fused_add_rmsnorm_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, XP_CARVE));
    if (SPLITS > 8) CK(cudaFuncSetAttribute(fused_add_rmsnorm_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    auto launch = [&](int i, cudaStream_t st) {
        xp_launch(fused_add_rmsnorm_kernel, grid, block, XP_SMEM, st, xs[i], (long long)COLS, rs[i], (long long)COLS, (const T*)w, rows, eps);
    };
#else
    if (XP_SMEM > 48 * 1024) CK(cudaFuncSetAttribute(rmsnorm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, XP_SMEM));
    if (XP_CARVE >= 0) CK(cudaFuncSetAttribute(rmsnorm_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, XP_CARVE));
    if (SPLITS > 8) CK(cudaFuncSetAttribute(rmsnorm_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    auto launch = [&](int i, cudaStream_t st) { xp_launch(rmsnorm_kernel, grid, block, XP_SMEM, st, (const T*)xs[i], (long long)COLS, (const T*)w, ys[XP_FIXED_Y ? 0 : i], (long long)COLS, rows, eps); };
#endif
#ifdef XP_SUCC
    // Eleventh session: the successor prefetch's distance, XP_SUCC times the rows in flight.
    {
#if NORM_FUSED
        auto kern0 = fused_add_rmsnorm_kernel;
#else
        auto kern0 = rmsnorm_kernel;
#endif
        int per_sm = 0, sms = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern0, int(block), XP_SMEM));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        const long long fit = (long long)per_sm * sms * ROWS, v = (long long)(XP_SUCC * fit);
        CK(cudaMemcpyToSymbol(xp_succ_rows, &v, sizeof v));
        printf("%-28s succ_rows=%lld fit_rows=%lld\n", name, v, fit);
    }
#endif
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    launch(0, st);
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    std::vector<unsigned short> out(n), res(n);
    CK(cudaMemcpy(out.data(), NORM_FUSED ? xs[0] : ys[0], bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(res.data(), rs[0], bytes, cudaMemcpyDeviceToHost));
    int maxulp = 0;
    for (long long r = 0; r < rows; ++r) {
        double ss = 0;
        std::vector<float> v(COLS);
        for (int c = 0; c < COLS; ++c) {
            const size_t i = size_t(r) * COLS + c;
            v[c] = NORM_FUSED ? bf(to_bf(bf(hx[i]) + bf(hr[i]))) : bf(hx[i]);
            if (NORM_FUSED) maxulp = std::max(maxulp, std::abs(int(res[i]) - int(to_bf(v[c]))));
            ss += double(v[c]) * v[c];
        }
        const double rstd = 1.0 / sqrt(ss / COLS + eps);
        for (int c = 0; c < COLS; ++c) {
            const size_t i = size_t(r) * COLS + c;
            const float want = float(double(v[c]) * rstd * bf(hw[c]));
            maxulp = std::max(maxulp, std::abs(int(out[i]) - int(to_bf(want))));
        }
    }
    const int ITER = XP_ALL_SETS ? std::max(20, sets) : 20;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < ITER; ++i) launch(i % sets, st);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int rep = 0; rep < 23; ++rep) {
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (rep >= 3) t.push_back(ms * 1000.f / ITER);
    }
    std::sort(t.begin(), t.end());
    printf("%-28s grid=%u rows=%lld cols=%d median_us=%.2f min_us=%.2f GB/s=%.0f max_ulp=%d\n", name, grid, rows, COLS,
           t[t.size() / 2], t[0], moved / (t[t.size() / 2] * 1e-6) / 1e9, maxulp);
    {
        // Eighth session: registers and resident blocks per SM of this build.
#if NORM_FUSED
        auto kern = fused_add_rmsnorm_kernel;
#else
        auto kern = rmsnorm_kernel;
#endif
        cudaFuncAttributes fa;
        int occ = -1;
        CK(cudaFuncGetAttributes(&fa, kern));
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, int(block), XP_SMEM) != cudaSuccess) occ = -1;
        printf("%-28s regs=%d blocks_per_sm=%d empty_us=%.2f pdl=%d\n", name, fa.numRegs, occ, xp_empty_us(st), XP_PDL);
    }
    return 0;
}
