/*
 * The C ABI as a C engine sees it, against include/kernels.h and the built library.
 *
 * Without a GPU: every bad-argument path returns KERNELS_ERROR_INVALID_ARGUMENT and
 * names the argument, messages are per thread, and a valid call reports that there
 * is no device. With a GPU (libcuda loadable and a device present): the four ops on
 * f32 and bf16 against a double-precision CPU reference, on a created stream and on
 * the legacy default stream, the caller's current context kept, warm-up, and the
 * per-call time of back-to-back rmsnorm 1 x 4096 launches.
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
        printf("%s: checked the no-device error (\"%s\"); GPU checks skipped\n",
               gpus < 0 ? "no CUDA driver" : "no CUDA GPU", kernels_last_error());
        CHECK(!require, "KERNELS_REQUIRE_GPU is set and no GPU can be used");
    } else {
        gpu_checks();
    }
    printf("capi_check: %s (%d failed checks)\n", failures == 0 ? "ok" : "FAILED", failures);
    return failures == 0 ? 0 : 1;
}
