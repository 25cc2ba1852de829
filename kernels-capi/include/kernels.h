/*
 * kernels.h: the C ABI of the kernels library (crate kernels-capi).
 *
 * Softmax, log-softmax, RMSNorm and fused residual-add RMSNorm over row-major
 * [rows, cols] operands, GEMM, and fused mixture-of-experts with its routing, in
 * device memory, launched on the caller's CUDA stream with the launch configuration
 * the library's baked tuning tables (or its analytic default) give for the device
 * and shape. Link with -lkernels_capi (shared) or
 * libkernels_capi.a (static; add -lpthread -ldl -lm). The library loads the CUDA
 * driver and NVRTC at run time; it needs neither to link.
 *
 * Conventions, for every function below:
 *  - Operands are row-major: element (r, c) of an operand at `p` with row stride `s`
 *    is at p + (r * s + c) elements. Strides and sizes are in elements, not bytes;
 *    a stride is at least `cols`. Element types: KERNELS_BF16, KERNELS_F16,
 *    KERNELS_F32; every operand of a row kernel's call has the same type (GEMM and
 *    MoE say which of theirs differ).
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
 *  - Argument order: outputs first, then inputs, sizes, dtype, scalars, workspace,
 *    device, stream. A workspace is the caller's: size it with the family's
 *    *_workspace_bytes function once (for the largest batch), allocate it before any
 *    CUDA-graph capture, and give one stream at a time each.
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

/* The layout of a GEMM's B operand. */
typedef int32_t kernels_layout;
enum {
    /* B is [n, k] row-major, C = A * B^T: nn.Linear's weight (F.linear). */
    KERNELS_LAYOUT_NT = 0,
    /* B is [k, n] row-major, C = A * B. */
    KERNELS_LAYOUT_NN = 1
};

/* The routing kernel kernels_warm_moe prepares beside a fused-MoE shape. */
typedef int32_t kernels_routing;
enum {
    /* The engine computes topk_ids and topk_weights itself. */
    KERNELS_ROUTING_NONE = 0,
    /* kernels_moe_topk_softmax. */
    KERNELS_ROUTING_SOFTMAX = 1,
    /* kernels_moe_grouped_topk. */
    KERNELS_ROUTING_GROUPED = 2
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

/* One GEMM shape to warm: A's and B's element type (kernels_dtype), B's layout
 * (kernels_layout), and [m, n, k] (m: the batch, e.g. tokens). The output type is a
 * run-time argument: both share the warmed kernel. */
typedef struct kernels_gemm_shape {
    int32_t dtype;
    int32_t layout;
    int64_t m;
    int64_t n;
    int64_t k;
} kernels_gemm_shape;

/* One fused-MoE shape to warm: its element type, the routing kernel to prepare too
 * (kernels_routing) with the router logits' type (unused with KERNELS_ROUTING_NONE),
 * topk, and tokens (the batch), experts, n (the intermediate size) and k (the hidden
 * size). */
typedef struct kernels_moe_shape {
    int32_t dtype;
    int32_t routing;
    int32_t logits_dtype;
    int32_t topk;
    int64_t tokens;
    int64_t experts;
    int64_t n;
    int64_t k;
} kernels_moe_shape;

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

/* C[m, n] = A[m, k] * op(B) (+ bias[n]), fp32 accumulation (F.linear for layout
 * KERNELS_LAYOUT_NT). A, B and bias are of `dtype` (KERNELS_BF16 or KERNELS_F16);
 * C is of c_dtype, `dtype` or KERNELS_F32. B is [n, k] with rows ldb apart (NT) or
 * [k, n] (NN); lda >= k, ldc >= n. bias is NULL or n contiguous elements. C must not
 * overlap A, B, bias or the workspace; A and B may be at any element alignment (16
 * bytes is fastest).
 * workspace: NULL with workspace_bytes 0, or kernels_gemm_workspace_bytes() bytes
 * (16-byte aligned), zeroed once before its first use (each call leaves its tile counters
 * at zero again). Split-K configs need it; without one, a shape whose config splits k fails
 * naming `workspace`. */
KERNELS_API kernels_status kernels_gemm(void *c, int64_t ldc, kernels_dtype c_dtype, const void *a, int64_t lda,
                                        const void *b, int64_t ldb, kernels_layout layout, const void *bias, int64_t m,
                                        int64_t n, int64_t k, kernels_dtype dtype, void *workspace,
                                        size_t workspace_bytes, int32_t device, kernels_stream stream);

/* Writes to *bytes the workspace a GEMM of [m, n, k] may need on device `device`:
 * the most any config the tuning policy can pick for it takes (0: none splits k).
 * Opens the device; compiles nothing. */
KERNELS_API kernels_status kernels_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, kernels_dtype dtype,
                                                        kernels_layout layout, int32_t device, size_t *bytes);

/* Fused mixture-of-experts with SiLU (vLLM's and SGLang's fused_experts):
 *   out[t] = sum_j topk_weights[t, j] * w2[e] (silu(w13[e, :n] x_t) * (w13[e, n:] x_t)),
 *   e = topk_ids[t, j],
 * with hidden and out [tokens, k], w13 [experts, 2n, k] (gate rows, then up rows),
 * w2 [experts, k, n], all contiguous, of `dtype` (KERNELS_BF16 or KERNELS_F16) and
 * 16-byte aligned; n and k multiples of 8; topk_ids [tokens, topk] int32 and
 * topk_weights [tokens, topk] float, from kernels_moe_topk_softmax,
 * kernels_moe_grouped_topk or the engine. An id outside [0, experts) is skipped on
 * the device (it adds nothing to its token); duplicate ids each count. The sum over
 * j is in fp32 in a fixed order: the same bits on every run.
 * workspace: kernels_moe_workspace_bytes() bytes, 256-byte aligned, no
 * initialisation needed. out must not overlap an input or the workspace. */
KERNELS_API kernels_status kernels_fused_moe(void *out, const void *hidden, const void *w13, const void *w2,
                                             const int32_t *topk_ids, const float *topk_weights, int64_t tokens,
                                             int64_t experts, int64_t n, int64_t k, int64_t topk, kernels_dtype dtype,
                                             void *workspace, size_t workspace_bytes, int32_t device,
                                             kernels_stream stream);

/* Writes to *bytes the workspace kernels_fused_moe needs for this shape (any device
 * and config). Needs no GPU. */
KERNELS_API kernels_status kernels_moe_workspace_bytes(int64_t tokens, int64_t experts, int64_t n, int64_t k,
                                                       int64_t topk, kernels_dtype dtype, size_t *bytes);

/* Routing, softmax top-k (Mixtral, Qwen3-MoE; vLLM's topk_softmax): for each of
 * `tokens` rows of logits [tokens, experts] (of logits_dtype: bf16, f16 or f32,
 * contiguous), the topk largest softmax probabilities, in descending order, ties to
 * the lower expert. renormalize != 0 rescales each token's weights to sum to 1.
 * Writes topk_ids [tokens, topk] and topk_weights [tokens, topk]; topk <= 64. */
KERNELS_API kernels_status kernels_moe_topk_softmax(int32_t *topk_ids, float *topk_weights, const void *logits,
                                                    int64_t tokens, int64_t experts, int64_t topk,
                                                    kernels_dtype logits_dtype, int32_t renormalize, int32_t device,
                                                    kernels_stream stream);

/* Routing, DeepSeek-V3's grouped top-k (vLLM's grouped_topk with sigmoid scoring):
 * scores sigmoid(logits) + bias choose (bias: NULL or `experts` float, the
 * e_score_correction_bias); the experts split into n_group groups (1..32, dividing
 * experts), ranked by the sum of their two best scores; the topk_group best are kept
 * and the topk best experts among them chosen. Weights are the sigmoid scores,
 * rescaled to sum to 1 when renormalize != 0, times scale (routed_scaling_factor). */
KERNELS_API kernels_status kernels_moe_grouped_topk(int32_t *topk_ids, float *topk_weights, const void *logits,
                                                    const float *bias, int64_t tokens, int64_t experts, int64_t topk,
                                                    int32_t n_group, int32_t topk_group, int32_t renormalize,
                                                    float scale, kernels_dtype logits_dtype, int32_t device,
                                                    kernels_stream stream);

/* kernels_warm for GEMM shapes: every alignment class of each, so no later call or
 * capture of the shape compiles. Failures name "shapes[i].field". */
KERNELS_API kernels_status kernels_warm_gemm(const kernels_gemm_shape *shapes, size_t count, int32_t device,
                                             kernels_stream stream);

/* kernels_warm for fused-MoE shapes: every step's kernel, and the routing kernel each
 * names. A later kernels_fused_moe of these tokens (and its capture) compiles
 * nothing. Failures name "shapes[i].field". */
KERNELS_API kernels_status kernels_warm_moe(const kernels_moe_shape *shapes, size_t count, int32_t device,
                                            kernels_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* KERNELS_H */
