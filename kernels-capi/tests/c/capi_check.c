/*
 * The C ABI as a C engine sees it, against include/kernels.h and the built library.
 *
 * Without a GPU: every bad-argument path returns KERNELS_ERROR_INVALID_ARGUMENT and
 * names the argument, messages are per thread, the MoE workspace size (which needs
 * no GPU), and a valid call reports that there is no device. With a GPU (libcuda
 * loadable and a device present): the four row ops on f32 and bf16 against a
 * double-precision CPU reference, on a created stream and on the legacy default
 * stream, the caller's current context kept, warm-up, and the per-call time of
 * back-to-back rmsnorm 1 x 4096 launches; GEMM (both layouts, bias, bf16 and f32
 * output) and softmax-routed fused MoE against the CPU reference, eagerly and
 * replayed from a CUDA graph captured after warm-up.
 *
 * KERNELS_REQUIRE_GPU=1 (any value but "", "0", "false", "no") fails the run when no
 * GPU can be used. Exit status 0 on success; each failed check prints a line.
 */
#include "kernels.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures = 0;

#define CHECK(cond, ...)                                                                                           \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            failures++;                                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                            \
            printf(__VA_ARGS__);                                                                                   \
            printf("\n");                                                                                          \
        }                                                                                                          \
    } while (0)

/* The call returned `want` and its message mentions `needle`. */
static void expect(const char *what, kernels_status got, kernels_status want, const char *needle) {
    const char *msg = kernels_last_error();
    CHECK(got == want, "%s: status %s, want %s (%s)", what, kernels_status_name(got), kernels_status_name(want), msg);
    CHECK(needle == NULL || strstr(msg, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, needle);
}

static int truthy(const char *v) {
    return v != NULL && *v != '\0' && strcmp(v, "0") != 0 && strcmp(v, "false") != 0 && strcmp(v, "no") != 0;
}

/* Addresses that are never dereferenced: every call using them fails validation. */
#define FAKE_X ((void *)(uintptr_t)0x10000000u)
#define FAKE_Y ((void *)(uintptr_t)0x20000000u)
#define FAKE_W ((void *)(uintptr_t)0x30000000u)

static void *other_thread(void *arg) {
    (void)arg;
    kernels_status s = kernels_softmax(FAKE_Y, 8, NULL, 8, 1, 8, KERNELS_F32, 1.0f, 0, NULL);
    CHECK(s == KERNELS_ERROR_INVALID_ARGUMENT, "other thread: %s", kernels_status_name(s));
    return NULL;
}

#define FAKE_B ((void *)(uintptr_t)0x40000000u)
#define FAKE_C ((void *)(uintptr_t)0x50000000u)
#define FAKE_WS ((void *)(uintptr_t)0x60000000u)

/* kernels_gemm with valid arguments for [8, 256, 512] bf16 (nt, bf16 out, no bias)
 * except what the caller changes. */
typedef struct {
    void *c;
    int64_t ldc;
    kernels_dtype c_dtype;
    const void *a;
    int64_t lda;
    const void *b;
    int64_t ldb;
    kernels_layout layout;
    const void *bias;
    int64_t m, n, k;
    kernels_dtype dtype;
    void *ws;
    size_t ws_bytes;
    int32_t device;
} gemm_args;

static gemm_args gemm_ok(void) {
    gemm_args g = {FAKE_C, 256, KERNELS_BF16, FAKE_X, 512, FAKE_B, 512, KERNELS_LAYOUT_NT, NULL,
                   8, 256, 512, KERNELS_BF16, FAKE_WS, 1 << 20, 0};
    return g;
}

static kernels_status gemm_call(gemm_args g) {
    return kernels_gemm(g.c, g.ldc, g.c_dtype, g.a, g.lda, g.b, g.ldb, g.layout, g.bias, g.m, g.n, g.k, g.dtype, g.ws,
                        g.ws_bytes, g.device, NULL);
}

static void gemm_argument_checks(void) {
    gemm_args g;
#define GEMM_EXPECT(what, change, needle)                                                                            \
    g = gemm_ok();                                                                                                   \
    change;                                                                                                          \
    expect("gemm " what, gemm_call(g), KERNELS_ERROR_INVALID_ARGUMENT, needle)
    GEMM_EXPECT("null a", g.a = NULL, "`a`");
    GEMM_EXPECT("null b", g.b = NULL, "`b`");
    GEMM_EXPECT("null c", g.c = NULL, "`c`");
    GEMM_EXPECT("f32 inputs", g.dtype = KERNELS_F32; g.c_dtype = KERNELS_F32, "`dtype`");
    GEMM_EXPECT("f16 out of bf16", g.c_dtype = KERNELS_F16, "`c_dtype`");
    GEMM_EXPECT("bad layout", g.layout = 5, "`layout`");
    GEMM_EXPECT("zero m", g.m = 0, "`m`");
    GEMM_EXPECT("negative n", g.n = -3, "`n`");
    GEMM_EXPECT("huge k", g.k = (int64_t)1 << 40; g.lda = g.k; g.ldb = g.k, "`k`");
    GEMM_EXPECT("short lda", g.lda = 511, "`lda`");
    GEMM_EXPECT("short ldb (nt: b is [n, k])", g.ldb = 300, "`ldb`");
    GEMM_EXPECT("short ldb (nn: b is [k, n])", g.layout = KERNELS_LAYOUT_NN; g.ldb = 255, "`ldb`");
    GEMM_EXPECT("short ldc", g.ldc = 100, "`ldc`");
    GEMM_EXPECT("negative ldc", g.ldc = -256, "`ldc`");
    GEMM_EXPECT("c over a", g.c = (char *)FAKE_X + 64, "`c`");
    GEMM_EXPECT("c over bias", g.bias = FAKE_C, "`bias`");
    GEMM_EXPECT("misaligned bias", g.bias = (char *)FAKE_W + 1, "`bias`");
    GEMM_EXPECT("null workspace with bytes", g.ws = NULL, "`workspace`");
    GEMM_EXPECT("misaligned workspace", g.ws = (char *)FAKE_WS + 8, "`workspace`");
    GEMM_EXPECT("negative device", g.device = -1, "`device`");
#undef GEMM_EXPECT
    size_t bytes = 0;
    expect("gemm workspace null out", kernels_gemm_workspace_bytes(8, 256, 512, KERNELS_BF16, KERNELS_LAYOUT_NT, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`bytes`");
    expect("gemm workspace bad k", kernels_gemm_workspace_bytes(8, 256, 0, KERNELS_BF16, KERNELS_LAYOUT_NT, 0, &bytes),
           KERNELS_ERROR_INVALID_ARGUMENT, "`k`");
    expect("gemm workspace f32", kernels_gemm_workspace_bytes(8, 256, 64, KERNELS_F32, KERNELS_LAYOUT_NT, 0, &bytes),
           KERNELS_ERROR_INVALID_ARGUMENT, "`dtype`");
    kernels_gemm_shape shapes[2] = {{KERNELS_BF16, KERNELS_LAYOUT_NT, 16, 4096, 4096},
                                    {KERNELS_BF16, 7, 16, 4096, 4096}};
    expect("warm gemm bad layout", kernels_warm_gemm(shapes, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT,
           "shapes[1].layout");
    shapes[1].layout = KERNELS_LAYOUT_NN;
    shapes[1].m = 0;
    expect("warm gemm bad m", kernels_warm_gemm(shapes, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT, "shapes[1].m");
    expect("warm gemm null shapes", kernels_warm_gemm(NULL, 1, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT, "`shapes`");
}

/* kernels_fused_moe with valid arguments for 5 tokens, 8 experts, n 64, k 128, top-2,
 * bf16, except what the caller changes. */
typedef struct {
    void *out;
    const void *hidden, *w13, *w2;
    const int32_t *ids;
    const float *weights;
    int64_t tokens, experts, n, k, topk;
    kernels_dtype dtype;
    void *ws;
    size_t ws_bytes;
} moe_args;

#define GB ((uintptr_t)1 << 30)
static moe_args moe_ok(void) {
    moe_args a = {(void *)(6 * GB), (const void *)(1 * GB), (const void *)(2 * GB), (const void *)(3 * GB),
                  (const int32_t *)(4 * GB), (const float *)(5 * GB), 5, 8, 64, 128, 2, KERNELS_BF16,
                  (void *)(7 * GB), 0};
    CHECK(kernels_moe_workspace_bytes(5, 8, 64, 128, 2, KERNELS_BF16, &a.ws_bytes) == KERNELS_OK, "moe workspace: %s",
          kernels_last_error());
    return a;
}

static kernels_status moe_call(moe_args a) {
    return kernels_fused_moe(a.out, a.hidden, a.w13, a.w2, a.ids, a.weights, a.tokens, a.experts, a.n, a.k, a.topk,
                             a.dtype, a.ws, a.ws_bytes, 0, NULL);
}

static void moe_argument_checks(void) {
    /* The workspace size needs no GPU: the routing, intermediate and outputs of every
     * token-expert pair, growing with the tokens. */
    size_t one = 0, two = 0;
    expect("moe workspace", kernels_moe_workspace_bytes(1, 128, 768, 2048, 8, KERNELS_BF16, &one), KERNELS_OK, NULL);
    expect("moe workspace", kernels_moe_workspace_bytes(2, 128, 768, 2048, 8, KERNELS_BF16, &two), KERNELS_OK, NULL);
    CHECK(one >= 8 * (768 + 2048) * 2 && two > one, "moe workspace %zu for 1 token, %zu for 2", one, two);
    size_t bytes = 0;
    expect("moe workspace n", kernels_moe_workspace_bytes(1, 8, 60, 128, 2, KERNELS_BF16, &bytes),
           KERNELS_ERROR_INVALID_ARGUMENT, "`n`");
    expect("moe workspace topk", kernels_moe_workspace_bytes(1, 8, 64, 128, 9, KERNELS_BF16, &bytes),
           KERNELS_ERROR_INVALID_ARGUMENT, "`topk`");
    expect("moe workspace null out", kernels_moe_workspace_bytes(1, 8, 64, 128, 2, KERNELS_BF16, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`bytes`");

    moe_args a;
#define MOE_EXPECT(what, change, needle)                                                                             \
    a = moe_ok();                                                                                                    \
    change;                                                                                                          \
    expect("fused_moe " what, moe_call(a), KERNELS_ERROR_INVALID_ARGUMENT, needle)
    MOE_EXPECT("null hidden", a.hidden = NULL, "`hidden`");
    MOE_EXPECT("null ids", a.ids = NULL, "`topk_ids`");
    MOE_EXPECT("null weights", a.weights = NULL, "`topk_weights`");
    MOE_EXPECT("misaligned w13", a.w13 = (const char *)a.w13 + 2, "`w13`");
    MOE_EXPECT("misaligned w2", a.w2 = (const char *)a.w2 + 8, "`w2`");
    MOE_EXPECT("f32", a.dtype = KERNELS_F32, "`dtype`");
    MOE_EXPECT("zero tokens", a.tokens = 0, "`tokens`");
    MOE_EXPECT("too many experts", a.experts = 5000, "`experts`");
    MOE_EXPECT("n not a multiple of 8", a.n = 60, "`n`");
    MOE_EXPECT("topk over experts", a.topk = 9, "`topk`");
    MOE_EXPECT("small workspace", a.ws_bytes -= 1, "`workspace`");
    MOE_EXPECT("null workspace", a.ws = NULL, "`workspace`");
    MOE_EXPECT("out over hidden", a.out = (void *)a.hidden, "`out`");
#undef MOE_EXPECT

    int32_t *ids = (int32_t *)(4 * GB);
    float *w = (float *)(5 * GB);
    const void *logits = (const void *)(1 * GB);
    expect("topk_softmax zero topk", kernels_moe_topk_softmax(ids, w, logits, 5, 64, 0, KERNELS_F32, 1, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`topk`");
    expect("topk_softmax topk over 64", kernels_moe_topk_softmax(ids, w, logits, 5, 128, 65, KERNELS_F32, 1, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`topk`");
    expect("topk_softmax dtype", kernels_moe_topk_softmax(ids, w, logits, 5, 64, 8, 9, 1, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`logits_dtype`");
    expect("topk_softmax ids on weights", kernels_moe_topk_softmax(ids, (float *)ids, logits, 5, 64, 8, KERNELS_F32, 1, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`topk_weights`");
    expect("topk_softmax null logits", kernels_moe_topk_softmax(ids, w, NULL, 5, 64, 8, KERNELS_F32, 1, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`logits`");
    const float *bias = (const float *)(3 * GB);
    expect("grouped n_group", kernels_moe_grouped_topk(ids, w, logits, bias, 5, 64, 8, 7, 4, 1, 2.5f, KERNELS_F32, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`n_group`");
    expect("grouped negative n_group",
           kernels_moe_grouped_topk(ids, w, logits, bias, 5, 64, 8, -8, 4, 1, 2.5f, KERNELS_F32, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`n_group`");
    expect("grouped topk_group", kernels_moe_grouped_topk(ids, w, logits, bias, 5, 64, 8, 8, 0, 1, 2.5f, KERNELS_F32, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`topk_group`");
    expect("grouped scale", kernels_moe_grouped_topk(ids, w, logits, bias, 5, 64, 8, 8, 4, 1, NAN, KERNELS_F32, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`scale`");
    expect("grouped bias on ids",
           kernels_moe_grouped_topk(ids, w, logits, (const float *)ids, 5, 64, 8, 8, 4, 1, 1.0f, KERNELS_F32, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "overlaps");

    kernels_moe_shape shapes[2] = {{KERNELS_BF16, KERNELS_ROUTING_SOFTMAX, KERNELS_F32, 8, 16, 128, 768, 2048},
                                   {KERNELS_BF16, 3, KERNELS_F32, 8, 16, 128, 768, 2048}};
    expect("warm moe bad routing", kernels_warm_moe(shapes, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT,
           "shapes[1].routing");
    shapes[1].routing = KERNELS_ROUTING_GROUPED;
    shapes[1].logits_dtype = 11;
    expect("warm moe bad logits dtype", kernels_warm_moe(shapes, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT,
           "shapes[1].logits_dtype");
    shapes[1].logits_dtype = KERNELS_BF16;
    shapes[1].k = 2050;
    expect("warm moe bad k", kernels_warm_moe(shapes, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT, "shapes[1].k");
}

static void argument_checks(void) {
    const char *v = kernels_version();
    CHECK(v != NULL && strchr(v, '.') != NULL, "version \"%s\"", v ? v : "(null)");
    CHECK(kernels_abi_version() == KERNELS_ABI_VERSION, "abi %u vs header %d", kernels_abi_version(),
          KERNELS_ABI_VERSION);
    CHECK(strcmp(kernels_last_error(), "") == 0, "fresh thread has message \"%s\"", kernels_last_error());
    CHECK(strcmp(kernels_status_name(KERNELS_ERROR_NO_DEVICE), "KERNELS_ERROR_NO_DEVICE") == 0, "status name");
    CHECK(strcmp(kernels_status_name(42), "KERNELS_ERROR_UNKNOWN") == 0, "unknown status name");

    expect("null x", kernels_softmax(FAKE_Y, 4096, NULL, 4096, 8, 4096, KERNELS_BF16, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`x`");
    expect("null y", kernels_log_softmax(NULL, 4096, FAKE_X, 4096, 8, 4096, KERNELS_BF16, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`y`");
    expect("unknown dtype", kernels_softmax(FAKE_Y, 4096, FAKE_X, 4096, 8, 4096, 7, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`dtype`");
    expect("zero rows", kernels_softmax(FAKE_Y, 4096, FAKE_X, 4096, 0, 4096, KERNELS_F32, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`rows`");
    expect("negative cols", kernels_rmsnorm(FAKE_Y, 4096, FAKE_X, 4096, FAKE_W, 8, -1, KERNELS_F32, 1e-6f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`cols`");
    expect("huge rows", kernels_softmax(FAKE_Y, 4096, FAKE_X, 4096, INT64_MAX, 4096, KERNELS_F32, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`x`");
    expect("short stride", kernels_softmax(FAKE_Y, 100, FAKE_X, 4096, 8, 4096, KERNELS_F32, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`y_stride`");
    expect("negative stride", kernels_rmsnorm(FAKE_Y, 4096, FAKE_X, -4096, FAKE_W, 8, 4096, KERNELS_F32, 1e-6f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`x_stride`");
    expect("overlap", kernels_softmax((char *)FAKE_X + 64, 4096, FAKE_X, 4096, 8, 4096, KERNELS_F32, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`y`");
    expect("y on weight", kernels_rmsnorm(FAKE_W, 4096, FAKE_X, 4096, FAKE_W, 8, 4096, KERNELS_F32, 1e-6f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "overlaps");
    expect("null weight", kernels_rmsnorm(FAKE_Y, 4096, FAKE_X, 4096, NULL, 8, 4096, KERNELS_F32, 1e-6f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`weight`");
    expect("zero eps", kernels_rmsnorm(FAKE_Y, 4096, FAKE_X, 4096, FAKE_W, 8, 4096, KERNELS_F32, 0.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`eps`");
    expect("nan scale", kernels_softmax(FAKE_Y, 4096, FAKE_X, 4096, 8, 4096, KERNELS_F32, NAN, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`scale`");
    expect("residual is x",
           kernels_fused_add_rmsnorm(FAKE_X, 4096, FAKE_X, 4096, FAKE_W, 8, 4096, KERNELS_BF16, 1e-6f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`residual`");
    expect("misaligned", kernels_softmax(FAKE_Y, 4096, (char *)FAKE_X + 1, 4096, 8, 4096, KERNELS_F32, 1.0f, 0, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`x`");
    expect("negative device", kernels_softmax(FAKE_Y, 4096, FAKE_X, 4096, 8, 4096, KERNELS_F32, 1.0f, -1, NULL),
           KERNELS_ERROR_INVALID_ARGUMENT, "`device`");
    expect("null shapes", kernels_warm(NULL, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT, "`shapes`");
    kernels_shape shapes[2] = {{KERNELS_OP_RMSNORM, KERNELS_BF16, 16, 4096}, {9, KERNELS_BF16, 16, 4096}};
    expect("bad op", kernels_warm(shapes, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT, "shapes[1].op");
    shapes[1].op = KERNELS_OP_SOFTMAX;
    shapes[1].cols = 0;
    expect("bad cols", kernels_warm(shapes, 2, 0, NULL), KERNELS_ERROR_INVALID_ARGUMENT, "shapes[1].cols");

    /* A message belongs to its thread: another thread's failure leaves ours. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0, "pthread_create");
    pthread_join(t, NULL);
    CHECK(strstr(kernels_last_error(), "shapes[1].cols") != NULL, "message changed by another thread: \"%s\"",
          kernels_last_error());

    gemm_argument_checks();
    moe_argument_checks();

    expect("empty warm", kernels_warm(NULL, 0, 0, NULL), KERNELS_OK, NULL);
    CHECK(strcmp(kernels_last_error(), "") == 0, "a success leaves message \"%s\"", kernels_last_error());
}

/* ---- the CUDA driver, loaded at run time so this file builds without CUDA ---- */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*StreamCreate)(kernels_stream *, unsigned);
    CUresult (*StreamSynchronize)(kernels_stream);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*StreamBeginCapture)(kernels_stream, int);
    CUresult (*StreamEndCapture)(kernels_stream, void **);
    CUresult (*GraphInstantiateWithFlags)(void **, void *, unsigned long long);
    CUresult (*GraphLaunch)(void *, kernels_stream);
    CUresult (*GraphExecDestroy)(void *);
    CUresult (*GraphDestroy)(void *);
} cu;

/* The number of usable GPUs, or -1 when the driver cannot be loaded. */
static int load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) return -1;
#define SYM(field, name) *(void **)(&cu.field) = dlsym(lib, name)
    SYM(Init, "cuInit");
    SYM(DeviceGetCount, "cuDeviceGetCount");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(CtxGetCurrent, "cuCtxGetCurrent");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemFree, "cuMemFree_v2");
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    SYM(StreamCreate, "cuStreamCreate");
    SYM(StreamSynchronize, "cuStreamSynchronize");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(MemsetD8, "cuMemsetD8_v2");
    SYM(StreamBeginCapture, "cuStreamBeginCapture_v2");
    SYM(StreamEndCapture, "cuStreamEndCapture");
    SYM(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    SYM(GraphLaunch, "cuGraphLaunch");
    SYM(GraphExecDestroy, "cuGraphExecDestroy");
    SYM(GraphDestroy, "cuGraphDestroy");
#undef SYM
    int n = 0;
    if (cu.Init == NULL || cu.Init(0) != 0 || cu.DeviceGetCount(&n) != 0) return 0;
    return n;
}

#define CU(call) CHECK((call) == 0, "%s failed", #call)

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t rng = 12345u;
static float uniform(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}

/* Host values of one operand in `dtype`, uploaded; `vals` holds what the device sees. */
static CUdeviceptr upload(const float *vals, size_t n, kernels_dtype dtype) {
    CUdeviceptr d = 0;
    size_t es = dtype == KERNELS_F32 ? 4 : 2;
    CU(cu.MemAlloc(&d, n * es));
    if (dtype == KERNELS_F32) {
        CU(cu.MemcpyHtoD(d, vals, n * 4));
    } else {
        uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) h[i] = to_bf16(vals[i]);
        CU(cu.MemcpyHtoD(d, h, n * 2));
        free(h);
    }
    return d;
}

static void download(float *out, CUdeviceptr d, size_t n, kernels_dtype dtype) {
    if (dtype == KERNELS_F32) {
        CU(cu.MemcpyDtoH(out, d, n * 4));
    } else {
        uint16_t *h = malloc(n * 2);
        CU(cu.MemcpyDtoH(h, d, n * 2));
        for (size_t i = 0; i < n; i++) out[i] = from_bf16(h[i]);
        free(h);
    }
}

/* Random values, rounded to what `dtype` stores. */
static float *random_values(size_t n, float lo, float hi, kernels_dtype dtype) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        v[i] = uniform(lo, hi);
        if (dtype == KERNELS_BF16) v[i] = from_bf16(to_bf16(v[i]));
    }
    return v;
}

/* Largest |got - want| / (atol + rtol * |want|); <= 1 passes. */
static double worst(const float *got, const double *want, size_t n, double atol, double rtol) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(e <= w)) w = e; /* NaN propagates as a failure */
    }
    return w;
}

static void ref_softmax(const float *x, double *y, int64_t rows, int64_t cols, int log_softmax) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < cols; c++) m = xr[c] > m ? xr[c] : m;
        for (int64_t c = 0; c < cols; c++) s += exp(xr[c] - m);
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = log_softmax ? (xr[c] - m) - log(s) : exp(xr[c] - m) / s;
    }
}

static void ref_rmsnorm(const double *x, const float *w, double *y, int64_t rows, int64_t cols, double eps) {
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t c = 0; c < cols; c++) ss += x[r * cols + c] * x[r * cols + c];
        double inv = 1.0 / sqrt(ss / (double)cols + eps);
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = x[r * cols + c] * inv * w[c];
    }
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

#define DEV(p) ((void *)(uintptr_t)(p))

/* Captures `launch(ctx)` on `stream` into a graph and returns its executable (NULL
 * on failure, with a failed check). */
static void *capture(kernels_stream stream, kernels_status (*launch)(void *), void *ctx, const char *what) {
    void *graph = NULL, *exec = NULL;
    CU(cu.StreamBeginCapture(stream, 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */));
    kernels_status st = launch(ctx);
    CU(cu.StreamEndCapture(stream, &graph));
    expect(what, st, KERNELS_OK, NULL);
    if (graph == NULL) return NULL;
    CU(cu.GraphInstantiateWithFlags(&exec, graph, 0));
    CU(cu.GraphDestroy(graph));
    return exec;
}

typedef struct {
    CUdeviceptr c, a, b, bias, ws;
    int64_t m, n, k, ldb;
    kernels_layout layout;
    kernels_dtype c_dtype;
    size_t ws_bytes;
    kernels_stream stream;
} gemm_case;

static kernels_status run_gemm(void *p) {
    gemm_case *g = p;
    return kernels_gemm(DEV(g->c), g->n, g->c_dtype, DEV(g->a), g->k, DEV(g->b), g->ldb, g->layout, DEV(g->bias), g->m,
                        g->n, g->k, KERNELS_BF16, DEV(g->ws), g->ws_bytes, 0, g->stream);
}

/* C = A * op(B) + bias in double, B [n, k] (nt) or [k, n] (nn). */
static void ref_gemm(const float *a, const float *b, const float *bias, double *c, int64_t m, int64_t n, int64_t k,
                     kernels_layout layout) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int64_t p = 0; p < k; p++)
                acc += (double)a[i * k + p] * (layout == KERNELS_LAYOUT_NT ? b[j * k + p] : b[p * n + j]);
            c[i * n + j] = acc;
        }
}

static void gemm_gpu_checks(kernels_stream stream) {
    const int64_t m = 17, n = 96, k = 256;
    kernels_gemm_shape warm[2] = {{KERNELS_BF16, KERNELS_LAYOUT_NT, m, n, k}, {KERNELS_BF16, KERNELS_LAYOUT_NN, m, n, k}};
    expect("warm gemm", kernels_warm_gemm(warm, 2, 0, stream), KERNELS_OK, NULL);
    for (int li = 0; li < 2; li++) {
        kernels_layout layout = li == 0 ? KERNELS_LAYOUT_NT : KERNELS_LAYOUT_NN;
        float *a = random_values((size_t)(m * k), -1.0f, 1.0f, KERNELS_BF16);
        float *b = random_values((size_t)(n * k), -1.0f, 1.0f, KERNELS_BF16);
        float *bias = random_values((size_t)n, -1.0f, 1.0f, KERNELS_BF16);
        float *got = malloc((size_t)(m * n) * 4);
        double *want = malloc((size_t)(m * n) * 8);
        gemm_case g = {0, upload(a, (size_t)(m * k), KERNELS_BF16), upload(b, (size_t)(n * k), KERNELS_BF16),
                       upload(bias, (size_t)n, KERNELS_BF16), 0, m, n, k, layout == KERNELS_LAYOUT_NT ? k : n,
                       layout, KERNELS_F32, 0, stream};
        expect("gemm workspace", kernels_gemm_workspace_bytes(m, n, k, KERNELS_BF16, layout, 0, &g.ws_bytes), KERNELS_OK,
               NULL);
        CU(cu.MemAlloc(&g.ws, g.ws_bytes + 16));
        CU(cu.MemsetD8(g.ws, 0, g.ws_bytes + 16));
        CU(cu.MemAlloc(&g.c, (size_t)(m * n) * 4));
        for (int ci = 0; ci < 2; ci++) {
            g.c_dtype = ci == 0 ? KERNELS_F32 : KERNELS_BF16;
            double rtol = ci == 0 ? 1e-5 : 1.6e-2, atol = ci == 0 ? 1e-3 : 2e-2;
            expect("gemm", run_gemm(&g), KERNELS_OK, NULL);
            CU(cu.StreamSynchronize(stream));
            download(got, g.c, (size_t)(m * n), g.c_dtype);
            ref_gemm(a, b, bias, want, m, n, k, layout);
            double e = worst(got, want, (size_t)(m * n), atol, rtol);
            CHECK(e <= 1.0, "gemm %s %s out: error %.3g of tolerance", li ? "nn" : "nt", ci ? "bf16" : "f32", e);
            printf("gemm        %s %dx%dx%d +bias, %s out: %.3g of tolerance\n", li ? "nn" : "nt", (int)m, (int)n, (int)k,
                   ci ? "bf16" : "f32", e);
        }
        /* Captured after warm-up, replayed on new inputs. */
        g.c_dtype = KERNELS_F32;
        void *exec = capture(stream, run_gemm, &g, "gemm under capture");
        for (int rep = 0; exec != NULL && rep < 2; rep++) {
            free(a);
            a = random_values((size_t)(m * k), -1.0f, 1.0f, KERNELS_BF16);
            uint16_t *h = malloc((size_t)(m * k) * 2);
            for (int64_t i = 0; i < m * k; i++) h[i] = to_bf16(a[i]);
            CU(cu.MemcpyHtoD(g.a, h, (size_t)(m * k) * 2));
            free(h);
            CU(cu.GraphLaunch(exec, stream));
            CU(cu.StreamSynchronize(stream));
            download(got, g.c, (size_t)(m * n), KERNELS_F32);
            ref_gemm(a, b, bias, want, m, n, k, layout);
            double e = worst(got, want, (size_t)(m * n), 1e-3, 1e-5);
            CHECK(e <= 1.0, "gemm %s graph replay %d: error %.3g of tolerance", li ? "nn" : "nt", rep, e);
            printf("gemm        %s graph replay %d: %.3g of tolerance\n", li ? "nn" : "nt", rep, e);
        }
        if (exec != NULL) CU(cu.GraphExecDestroy(exec));
        CU(cu.MemFree(g.a));
        CU(cu.MemFree(g.b));
        CU(cu.MemFree(g.bias));
        CU(cu.MemFree(g.c));
        CU(cu.MemFree(g.ws));
        free(a), free(b), free(bias), free(got), free(want);
    }
}

typedef struct {
    CUdeviceptr logits, ids, weights, hidden, w13, w2, out, ws;
    int64_t tokens, experts, n, k, topk;
    size_t ws_bytes;
    kernels_stream stream;
} moe_case;

static kernels_status run_moe(void *p) {
    moe_case *c = p;
    kernels_status st = kernels_moe_topk_softmax(DEV(c->ids), DEV(c->weights), DEV(c->logits), c->tokens, c->experts,
                                                 c->topk, KERNELS_F32, 1, 0, c->stream);
    if (st != KERNELS_OK) return st;
    return kernels_fused_moe(DEV(c->out), DEV(c->hidden), DEV(c->w13), DEV(c->w2), DEV(c->ids), DEV(c->weights),
                             c->tokens, c->experts, c->n, c->k, c->topk, KERNELS_BF16, DEV(c->ws), c->ws_bytes, 0,
                             c->stream);
}

static double bf16_round(double v) { return from_bf16(to_bf16((float)v)); }

/* The routing's ids against a CPU top-k of the softmax (the largest logits), and out
 * against a double-precision fused MoE on those ids and weights, with the kernel's
 * roundings to bf16 of the intermediate and of each weighted expert output. */
static void check_moe(moe_case *c, const float *logits, const float *x, const float *w13, const float *w2,
                      const char *what) {
    int64_t T = c->tokens, E = c->experts, N = c->n, K = c->k, P = c->topk;
    int32_t *ids = malloc((size_t)(T * P) * 4);
    float *wts = malloc((size_t)(T * P) * 4), *got = malloc((size_t)(T * K) * 4);
    double *want = calloc((size_t)(T * K), 8), *inter = malloc((size_t)N * 8);
    CU(cu.MemcpyDtoH(ids, c->ids, (size_t)(T * P) * 4));
    CU(cu.MemcpyDtoH(wts, c->weights, (size_t)(T * P) * 4));
    download(got, c->out, (size_t)(T * K), KERNELS_BF16);
    int id_errors = 0;
    for (int64_t t = 0; t < T; t++) {
        double wsum = 0;
        for (int64_t j = 0; j < P; j++) {
            /* the j-th largest logit: exactly j logits are larger */
            int32_t e = ids[t * P + j];
            int larger = 0;
            for (int64_t q = 0; q < E && e >= 0 && e < E; q++) larger += logits[t * E + q] > logits[t * E + e];
            id_errors += !(e >= 0 && e < E && larger == j);
            wsum += wts[t * P + j];
        }
        CHECK(fabs(wsum - 1.0) < 1e-5, "%s: token %d weights sum to %.7f after renormalising", what, (int)t, wsum);
        for (int64_t j = 0; j < P && id_errors == 0; j++) {
            int64_t e = ids[t * P + j];
            for (int64_t i = 0; i < N; i++) {
                double g = 0, u = 0;
                for (int64_t q = 0; q < K; q++) {
                    g += (double)w13[(e * 2 * N + i) * K + q] * x[t * K + q];
                    u += (double)w13[(e * 2 * N + N + i) * K + q] * x[t * K + q];
                }
                inter[i] = bf16_round(g / (1.0 + exp(-g)) * u);
            }
            for (int64_t h = 0; h < K; h++) {
                double d = 0;
                for (int64_t i = 0; i < N; i++) d += (double)w2[(e * K + h) * N + i] * inter[i];
                want[t * K + h] += bf16_round(d * wts[t * P + j]);
            }
        }
    }
    CHECK(id_errors == 0, "%s: %d routing ids are not the top-k of the logits", what, id_errors);
    double e = worst(got, want, (size_t)(T * K), 2e-3, 2e-2);
    CHECK(e <= 1.0, "%s: error %.3g of tolerance", what, e);
    printf("fused_moe   %s: %.3g of tolerance\n", what, e);
    free(ids), free(wts), free(got), free(want), free(inter);
}

static void moe_gpu_checks(kernels_stream stream) {
    moe_case c = {0};
    c.tokens = 5, c.experts = 8, c.n = 64, c.k = 128, c.topk = 2, c.stream = stream;
    int64_t T = c.tokens, E = c.experts, N = c.n, K = c.k, P = c.topk;
    kernels_moe_shape warm = {KERNELS_BF16, KERNELS_ROUTING_SOFTMAX, KERNELS_F32, (int32_t)P, T, E, N, K};
    expect("warm moe", kernels_warm_moe(&warm, 1, 0, stream), KERNELS_OK, NULL);
    expect("moe workspace", kernels_moe_workspace_bytes(T, E, N, K, P, KERNELS_BF16, &c.ws_bytes), KERNELS_OK, NULL);
    float *logits = random_values((size_t)(T * E), -3.0f, 3.0f, KERNELS_F32);
    float *x = random_values((size_t)(T * K), -1.0f, 1.0f, KERNELS_BF16);
    float *w13 = random_values((size_t)(E * 2 * N * K), -0.1f, 0.1f, KERNELS_BF16);
    float *w2 = random_values((size_t)(E * K * N), -0.15f, 0.15f, KERNELS_BF16);
    c.logits = upload(logits, (size_t)(T * E), KERNELS_F32);
    c.hidden = upload(x, (size_t)(T * K), KERNELS_BF16);
    c.w13 = upload(w13, (size_t)(E * 2 * N * K), KERNELS_BF16);
    c.w2 = upload(w2, (size_t)(E * K * N), KERNELS_BF16);
    CU(cu.MemAlloc(&c.ids, (size_t)(T * P) * 4));
    CU(cu.MemAlloc(&c.weights, (size_t)(T * P) * 4));
    CU(cu.MemAlloc(&c.out, (size_t)(T * K) * 2));
    CU(cu.MemAlloc(&c.ws, c.ws_bytes));
    expect("topk_softmax + fused_moe", run_moe(&c), KERNELS_OK, NULL);
    CU(cu.StreamSynchronize(stream));
    check_moe(&c, logits, x, w13, w2, "eager, softmax top-2 of 8 experts");
    void *exec = capture(stream, run_moe, &c, "routing and fused_moe under capture");
    for (int rep = 0; exec != NULL && rep < 2; rep++) {
        free(logits);
        logits = random_values((size_t)(T * E), -3.0f, 3.0f, KERNELS_F32);
        CU(cu.MemcpyHtoD(c.logits, logits, (size_t)(T * E) * 4));
        CU(cu.GraphLaunch(exec, stream));
        CU(cu.StreamSynchronize(stream));
        check_moe(&c, logits, x, w13, w2, rep == 0 ? "graph replay 0" : "graph replay 1");
    }
    if (exec != NULL) CU(cu.GraphExecDestroy(exec));
    CUdeviceptr bufs[8] = {c.logits, c.ids, c.weights, c.hidden, c.w13, c.w2, c.out, c.ws};
    for (int i = 0; i < 8; i++) CU(cu.MemFree(bufs[i]));
    free(logits), free(x), free(w13), free(w2);
}

static void gpu_checks(void) {
    CUdevice dev;
    CUcontext ctx = NULL, current = NULL;
    kernels_stream stream = NULL;
    CU(cu.DeviceGet(&dev, 0));
    CU(cu.DevicePrimaryCtxRetain(&ctx, dev));
    CU(cu.CtxSetCurrent(ctx));
    CU(cu.StreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */));

    kernels_shape warm[3] = {{KERNELS_OP_RMSNORM, KERNELS_BF16, 1, 4096},
                             {KERNELS_OP_SOFTMAX, KERNELS_F32, 32, 1000},
                             {KERNELS_OP_FUSED_ADD_RMSNORM, KERNELS_F32, 64, 4096}};
    expect("warm", kernels_warm(warm, 3, 0, stream), KERNELS_OK, NULL);

    const kernels_dtype dtypes[2] = {KERNELS_F32, KERNELS_BF16};
    for (int di = 0; di < 2; di++) {
        kernels_dtype dt = dtypes[di];
        const char *dn = dt == KERNELS_F32 ? "f32" : "bf16";
        double tol_rel = dt == KERNELS_F32 ? 1e-5 : 1.6e-2; /* bf16 keeps 8 bits */
        /* softmax and log-softmax, 32 x 1000 (rows not a multiple of the vector), on
         * the created stream and then on the legacy default stream. */
        {
            int64_t rows = 32, cols = 1000;
            size_t n = (size_t)(rows * cols);
            float *x = random_values(n, -8.0f, 8.0f, dt), *got = malloc(n * 4);
            double *want = malloc(n * 8);
            CUdeviceptr dx = upload(x, n, dt), dy = upload(x, n, dt);
            for (int log_softmax = 0; log_softmax < 2; log_softmax++) {
                for (int on_default = 0; on_default < 2; on_default++) {
                    kernels_stream s = on_default ? NULL : stream;
                    kernels_status st = (log_softmax ? kernels_log_softmax : kernels_softmax)(
                        (void *)(uintptr_t)dy, cols, (const void *)(uintptr_t)dx, cols, rows, cols, dt, 1.0f, 0, s);
                    expect(log_softmax ? "log_softmax" : "softmax", st, KERNELS_OK, NULL);
                    CU(cu.CtxSynchronize());
                    download(got, dy, n, dt);
                    ref_softmax(x, want, rows, cols, log_softmax);
                    double e = log_softmax ? worst(got, want, n, 4e-3 + 4 * tol_rel, tol_rel)
                                           : worst(got, want, n, 1e-7, tol_rel);
                    CHECK(e <= 1.0, "%s %s %s stream: error %.3g of tolerance", log_softmax ? "log_softmax" : "softmax",
                          dn, on_default ? "default" : "created", e);
                    printf("%-11s %-4s %dx%d on the %s stream: %.3g of tolerance\n",
                           log_softmax ? "log_softmax" : "softmax", dn, (int)rows, (int)cols,
                           on_default ? "legacy default" : "created", e);
                }
            }
            CU(cu.MemFree(dx));
            CU(cu.MemFree(dy));
            free(x), free(got), free(want);
        }
        /* rmsnorm and fused add rmsnorm, 64 x 4096, rows of x 5000 elements apart. */
        {
            int64_t rows = 64, cols = 4096, xs = 5000;
            size_t nx = (size_t)(rows * xs), n = (size_t)(rows * cols);
            float *x = random_values(nx, -2.0f, 2.0f, dt), *w = random_values((size_t)cols, 0.5f, 1.5f, dt);
            float *res = random_values(n, -2.0f, 2.0f, dt), *got = malloc(n * 4), *got_x = malloc(nx * 4);
            double *xd = malloc(n * 8), *want = malloc(n * 8);
            CUdeviceptr dx = upload(x, nx, dt), dw = upload(w, (size_t)cols, dt), dy = upload(res, n, dt);
            CUdeviceptr dr = upload(res, n, dt);
            expect("rmsnorm",
                   kernels_rmsnorm((void *)(uintptr_t)dy, cols, (const void *)(uintptr_t)dx, xs,
                                   (const void *)(uintptr_t)dw, rows, cols, dt, 1e-6f, 0, stream),
                   KERNELS_OK, NULL);
            CU(cu.CtxGetCurrent(&current));
            CHECK(current == ctx, "the caller's current context changed");
            CU(cu.StreamSynchronize(stream));
            download(got, dy, n, dt);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) xd[r * cols + c] = x[r * xs + c];
            ref_rmsnorm(xd, w, want, rows, cols, 1e-6);
            double e = worst(got, want, n, 1e-5, tol_rel);
            CHECK(e <= 1.0, "rmsnorm %s: error %.3g of tolerance", dn, e);
            printf("%-11s %-4s %dx%d (x stride %d): %.3g of tolerance\n", "rmsnorm", dn, (int)rows, (int)cols,
                   (int)xs, e);

            expect("fused_add_rmsnorm",
                   kernels_fused_add_rmsnorm((void *)(uintptr_t)dx, xs, (void *)(uintptr_t)dr, cols,
                                             (const void *)(uintptr_t)dw, rows, cols, dt, 1e-6f, 0, stream),
                   KERNELS_OK, NULL);
            CU(cu.StreamSynchronize(stream));
            download(got, dr, n, dt);
            download(got_x, dx, nx, dt);
            double *sum = malloc(n * 8);
            for (int64_t i = 0; i < rows * cols; i++) sum[i] = xd[i] + res[i];
            double *sum_as_stored = malloc(n * 8);
            for (size_t i = 0; i < n; i++) sum_as_stored[i] = dt == KERNELS_F32 ? sum[i] : from_bf16(to_bf16((float)sum[i]));
            double er = worst(got, sum_as_stored, n, 1e-5, tol_rel);
            ref_rmsnorm(sum, w, want, rows, cols, 1e-6);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) got[r * cols + c] = got_x[r * xs + c];
            double ex = worst(got, want, n, 1e-5, 2 * tol_rel);
            CHECK(er <= 1.0 && ex <= 1.0, "fused_add_rmsnorm %s: residual %.3g, x %.3g of tolerance", dn, er, ex);
            printf("%-11s %-4s %dx%d: residual %.3g, x %.3g of tolerance\n", "fused_add", dn, (int)rows, (int)cols,
                   er, ex);
            CU(cu.MemFree(dx));
            CU(cu.MemFree(dw));
            CU(cu.MemFree(dy));
            CU(cu.MemFree(dr));
            free(x), free(w), free(res), free(got), free(got_x), free(xd), free(want), free(sum), free(sum_as_stored);
        }
    }

    gemm_gpu_checks(stream);
    moe_gpu_checks(stream);

    /* Host cost per call: back-to-back rmsnorm 1 x 4096 bf16 on one stream. */
    {
        int64_t cols = 4096;
        float *x = random_values((size_t)cols, -2.0f, 2.0f, KERNELS_BF16);
        CUdeviceptr dx = upload(x, (size_t)cols, KERNELS_BF16), dw = upload(x, (size_t)cols, KERNELS_BF16);
        CUdeviceptr dy = upload(x, (size_t)cols, KERNELS_BF16);
        const int warmup = 1000, calls = 20000;
        double best = INFINITY;
        for (int rep = 0; rep < 5; rep++) {
            for (int i = 0; i < warmup; i++)
                kernels_rmsnorm((void *)(uintptr_t)dy, cols, (const void *)(uintptr_t)dx, cols,
                                (const void *)(uintptr_t)dw, 1, cols, KERNELS_BF16, 1e-6f, 0, stream);
            CU(cu.StreamSynchronize(stream));
            double t0 = now_us();
            kernels_status st = KERNELS_OK;
            for (int i = 0; i < calls; i++)
                st |= kernels_rmsnorm((void *)(uintptr_t)dy, cols, (const void *)(uintptr_t)dx, cols,
                                      (const void *)(uintptr_t)dw, 1, cols, KERNELS_BF16, 1e-6f, 0, stream);
            double host = (now_us() - t0) / calls;
            CU(cu.StreamSynchronize(stream));
            double total = (now_us() - t0) / calls;
            CHECK(st == KERNELS_OK, "timed calls failed: %s", kernels_last_error());
            if (total < best) best = total;
            printf("rmsnorm 1x4096 bf16, %d back-to-back calls: %.2f us/call enqueue, %.2f us/call to completion\n",
                   calls, host, total);
        }
        printf("TIMING c_rmsnorm_1x4096_us_per_call %.3f\n", best);
        CU(cu.MemFree(dx));
        CU(cu.MemFree(dw));
        CU(cu.MemFree(dy));
        free(x);
    }
}

int main(void) {
    argument_checks();
    int gpus = load_driver();
    int require = truthy(getenv("KERNELS_REQUIRE_GPU"));
    if (gpus <= 0) {
        /* A call with valid arguments gets as far as opening the device. */
        kernels_status s = kernels_softmax(FAKE_Y, 4096, FAKE_X, 4096, 8, 4096, KERNELS_BF16, 1.0f, 0, NULL);
        expect("no device", s, KERNELS_ERROR_NO_DEVICE, gpus < 0 ? "no CUDA driver found" : NULL);
        gemm_args g = gemm_ok();
        expect("gemm, no device", gemm_call(g), KERNELS_ERROR_NO_DEVICE, NULL);
        expect("fused_moe, no device", moe_call(moe_ok()), KERNELS_ERROR_NO_DEVICE, NULL);
        printf("%s: checked the no-device error (\"%s\"); GPU checks skipped\n",
               gpus < 0 ? "no CUDA driver" : "no CUDA GPU", kernels_last_error());
        CHECK(!require, "KERNELS_REQUIRE_GPU is set and no GPU can be used");
    } else {
        gpu_checks();
    }
    printf("capi_check: %s (%d failed checks)\n", failures == 0 ? "ok" : "FAILED", failures);
    return failures == 0 ? 0 : 1;
}
