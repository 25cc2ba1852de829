/*
 * kernels.h: the C ABI of the kernels library (crate kernels-capi).
 *
 * Softmax, log-softmax, RMSNorm and fused residual-add RMSNorm over row-major
 * [rows, cols] operands in device memory, launched on the caller's CUDA stream with
 * the launch configuration the library's baked tuning tables (or its analytic
 * default) give for the device and shape. Link with -lkernels_capi (shared) or
 * libkernels_capi.a (static; add -lpthread -ldl -lm). The library loads the CUDA
 * driver and NVRTC at run time; it needs neither to link.
 *
 * Conventions, for every function below:
 *  - Operands are row-major: element (r, c) of an operand at `p` with row stride `s`
 *    is at p + (r * s + c) elements. Strides and sizes are in elements, not bytes;
 *    a stride is at least `cols`. Element types: KERNELS_BF16, KERNELS_F16,
 *    KERNELS_F32; every operand of one call has the same type.
 *  - Device pointers belong to device `device` (a CUDA ordinal) and its primary
 *    context (the one the CUDA runtime, torch and most engines use).
 *  - `stream` is a CUstream / cudaStream_t of that context. NULL is the legacy
 *    default stream and is accepted as such (it synchronises with the other blocking
 *    streams of the context, as any launch on it does); CU_STREAM_PER_THREAD is
 *    accepted too. Launches are asynchronous: the call returns once the kernel is
 *    enqueued; the buffers must stay alive until it has run.
 *  - Every function returns a kernels_status. On failure nothing was launched and
 *    kernels_last_error() says what failed, naming the bad argument
 *    (e.g. "invalid argument `x_stride`: row stride 10 is less than cols 4096").
 *  - The calling thread's current CUDA context is left as the caller had it.
 *  - A shape's first call resolves its config and compiles its kernel (NVRTC, then
 *    a disk cache under $KERNELS_CACHE_DIR, else ~/.cache/kernels): call kernels_warm at
 *    start-up, before any CUDA-graph capture. A launch that would compile while its
 *    stream is capturing returns KERNELS_ERROR_NOT_WARMED instead.
 *  - Calls are thread-safe. No panic or exception crosses this boundary.
 *
 * New kernel families (GEMM, MoE) will be added as functions of the same shape:
 * outputs first, then inputs, sizes, dtype, scalars, device, stream.
 */
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The C ABI version this header describes; kernels_abi_version() returns the
 * library's. Compare them at start-up. */
#define KERNELS_ABI_VERSION 1

/* Every exported function is declared with this. */
#define KERNELS_API extern

/* Status codes. */
typedef int32_t kernels_status;
enum {
    KERNELS_OK = 0,
    /* An argument failed validation (null pointer, zero or negative size, stride
     * below cols, overflowing span, overlapping buffers, unknown dtype, bad eps or
     * scale, negative device); the message names it. Nothing was launched. */
    KERNELS_ERROR_INVALID_ARGUMENT = 1,
    /* No CUDA driver (libcuda), no GPU, a device ordinal out of range, or a GPU
     * older than compute capability 8.0. */
    KERNELS_ERROR_NO_DEVICE = 2,
    /* NVRTC (libnvrtc) could not be loaded; put its folder on LD_LIBRARY_PATH. */
    KERNELS_ERROR_NO_COMPILER = 3,
    /* NVRTC failed to compile a kernel variant; the message has its log. */
    KERNELS_ERROR_COMPILE = 4,
    /* The stream is capturing a CUDA graph and the shape's kernel is not compiled
     * yet: warm the shape (kernels_warm) before capture. */
    KERNELS_ERROR_NOT_WARMED = 5,
    /* A CUDA driver call failed (an invalid stream or context, a sticky error of
     * earlier work on the device). */
    KERNELS_ERROR_DRIVER = 6,
    /* Anything else, an internal panic included (caught, never propagated). */
    KERNELS_ERROR_INTERNAL = 7
};

/* Element types. */
typedef int32_t kernels_dtype;
enum {
    KERNELS_BF16 = 0,
    KERNELS_F16 = 1,
    KERNELS_F32 = 2
};

/* Kernels, as kernels_shape.op names them. */
typedef int32_t kernels_op;
enum {
    KERNELS_OP_SOFTMAX = 0,
    KERNELS_OP_LOG_SOFTMAX = 1,
    KERNELS_OP_RMSNORM = 2,
    KERNELS_OP_FUSED_ADD_RMSNORM = 3
};

/* A CUDA stream: CUstream and cudaStream_t are this type, so either passes as is. */
typedef struct CUstream_st *kernels_stream;

/* One shape to warm: a kernel (kernels_op), its element type (kernels_dtype), and
 * [rows, cols] (rows: the batch, e.g. tokens; cols: the row length, e.g. the
 * hidden size or the vocabulary). */
typedef struct kernels_shape {
    int32_t op;
    int32_t dtype;
    int64_t rows;
    int64_t cols;
} kernels_shape;

/* The library's version, "MAJOR.MINOR.PATCH". A static string. */
KERNELS_API const char *kernels_version(void);

/* The C ABI version the library implements (KERNELS_ABI_VERSION of its header). */
KERNELS_API uint32_t kernels_abi_version(void);

/* The message of the last failed call on the calling thread, or "" when the last
 * call succeeded. Never NULL. Valid until the next call into the library on this
 * thread; copy it to keep it. */
KERNELS_API const char *kernels_last_error(void);

/* The name of a status code ("KERNELS_ERROR_NO_DEVICE"), or
 * "KERNELS_ERROR_UNKNOWN". A static string. */
KERNELS_API const char *kernels_status_name(kernels_status status);

/* y = softmax(x * scale) along each row of [rows, cols].
 * y may be x itself (in place, with y_stride == x_stride); any other overlap is
 * KERNELS_ERROR_INVALID_ARGUMENT. scale must be finite (1.0f for a plain softmax). */
KERNELS_API kernels_status kernels_softmax(void *y, int64_t y_stride, const void *x, int64_t x_stride, int64_t rows,
                                           int64_t cols, kernels_dtype dtype, float scale, int32_t device,
                                           kernels_stream stream);

/* y = log_softmax(x * scale) along each row of [rows, cols]; as kernels_softmax. */
KERNELS_API kernels_status kernels_log_softmax(void *y, int64_t y_stride, const void *x, int64_t x_stride,
                                               int64_t rows, int64_t cols, kernels_dtype dtype, float scale,
                                               int32_t device, kernels_stream stream);

/* y = x / sqrt(mean(x^2) + eps) * weight along each row of [rows, cols], with
 * weight a contiguous vector of cols elements (sgl_kernel's and vLLM's rmsnorm).
 * y must not overlap x or weight; eps must be finite and > 0. */
KERNELS_API kernels_status kernels_rmsnorm(void *y, int64_t y_stride, const void *x, int64_t x_stride,
                                           const void *weight, int64_t rows, int64_t cols, kernels_dtype dtype,
                                           float eps, int32_t device, kernels_stream stream);

/* In place, along each row of [rows, cols]:
 *   residual = x + residual;  x = residual / sqrt(mean(residual^2) + eps) * weight
 * (sgl_kernel's and vLLM's fused_add_rmsnorm). x, residual and weight must not
 * overlap; eps must be finite and > 0. */
KERNELS_API kernels_status kernels_fused_add_rmsnorm(void *x, int64_t x_stride, void *residual,
                                                     int64_t residual_stride, const void *weight, int64_t rows,
                                                     int64_t cols, kernels_dtype dtype, float eps, int32_t device,
                                                     kernels_stream stream);

/* Resolves and compiles `count` shapes on device `device` (distinct kernels compile
 * in parallel), so that later calls of these shapes, and CUDA-graph captures of
 * them, compile nothing. Warm once per shape a model runs (each batch size it
 * captures). Every shape is checked first; a bad one fails naming "shapes[i].field".
 * Warm-up prepares every alignment of the operands' addresses and row strides (odd
 * column counts and offset views included), so none compiles on its first call or
 * fails a capture. shapes may be NULL when count is 0.
 * Under the online tuning policy (KERNELS_TUNING=online) candidates are timed on
 * `stream`. Returns when every kernel is compiled and loaded. */
KERNELS_API kernels_status kernels_warm(const kernels_shape *shapes, size_t count, int32_t device,
                                        kernels_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* KERNELS_H */
