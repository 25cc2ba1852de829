//! `llm_kernels._ext`: the Python extension under the `llm_kernels` package. It takes
//! what the torch-facing module (`python/llm_kernels/__init__.py`) reads off tensors
//! (device addresses, row strides in elements, sizes, dtype code, device ordinal,
//! the raw stream handle) and calls `kernels_capi::raw`, which checks them again and
//! launches on that stream. It links no torch: torch is not a build dependency.
//!
//! These functions trust the addresses they are given, as the C ABI does; call them
//! through the package, which reads the addresses off live tensors. Invalid sizes,
//! codes and overlaps raise `ValueError` naming the argument; device, compiler and
//! driver failures raise `llm_kernels.KernelsError` (a `RuntimeError`).
//! The GIL is released while a call runs: a first call of a shape compiles.
//!
//! For arrays of other libraries it also reads DLPack capsules (`src/dlpack.rs`), finds the
//! device of an address and makes a stream wait for another
//! (`kernels_capi::raw::interop`).

mod dlpack;

use std::ffi::c_void;

use kernels_capi::raw::gemm::{GemmShape, GemmWarmShape, LayoutCode, Matrix};
use kernels_capi::raw::moe::{MoeShape, MoeWarmShape, RoutingCode, RoutingShape};
use kernels_capi::raw::{self, interop, Operand, Shape, WarmShape};
use kernels_capi::{DTypeCode, Op};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    llm_kernels,
    KernelsError,
    PyRuntimeError,
    "A kernel could not run: no CUDA device or driver, no NVRTC, a compile or driver \
     failure, or a shape that was not warmed while a CUDA graph is captured."
);

fn to_py(e: kernels_capi::Error) -> PyErr {
    match e {
        kernels_capi::Error::InvalidArgument { .. } => PyValueError::new_err(e.to_string()),
        other => KernelsError::new_err(other.to_string()),
    }
}

/// The stream handle, carried across the GIL release as an integer (a raw pointer
/// is not `Send`).
fn stream_ptr(stream: usize) -> *mut c_void {
    stream as *mut c_void
}

/// `y = softmax(x * scale)` (log-softmax with `log`) per row of `[rows, cols]`.
#[pyfunction]
#[pyo3(signature = (log, y, y_stride, x, x_stride, rows, cols, dtype, scale, device, stream))]
#[allow(clippy::too_many_arguments)]
fn softmax(
    py: Python<'_>,
    log: bool,
    y: u64,
    y_stride: i64,
    x: u64,
    x_stride: i64,
    rows: i64,
    cols: i64,
    dtype: i32,
    scale: f32,
    device: i32,
    stream: usize,
) -> PyResult<()> {
    let (y, x) = (
        Operand {
            ptr: y,
            stride: y_stride,
        },
        Operand {
            ptr: x,
            stride: x_stride,
        },
    );
    py.detach(|| {
        // SAFETY: the package passes addresses and strides read off live tensors of
        // `device` and torch's stream handle for that device (see the module docs).
        unsafe {
            raw::softmax(
                log,
                y,
                x,
                Shape { rows, cols },
                dtype,
                scale,
                device,
                stream_ptr(stream),
            )
        }
    })
    .map_err(to_py)
}

/// `y = x / rms(x) * weight` per row of `[rows, cols]`.
#[pyfunction]
#[pyo3(signature = (y, y_stride, x, x_stride, weight, rows, cols, dtype, eps, device, stream))]
#[allow(clippy::too_many_arguments)]
fn rmsnorm(
    py: Python<'_>,
    y: u64,
    y_stride: i64,
    x: u64,
    x_stride: i64,
    weight: u64,
    rows: i64,
    cols: i64,
    dtype: i32,
    eps: f32,
    device: i32,
    stream: usize,
) -> PyResult<()> {
    let (y, x) = (
        Operand {
            ptr: y,
            stride: y_stride,
        },
        Operand {
            ptr: x,
            stride: x_stride,
        },
    );
    py.detach(|| {
        // SAFETY: as in `softmax`.
        unsafe {
            raw::rmsnorm(
                y,
                x,
                weight,
                Shape { rows, cols },
                dtype,
                eps,
                device,
                stream_ptr(stream),
            )
        }
    })
    .map_err(to_py)
}

/// `residual += x; x = rmsnorm(residual) * weight`, in place.
#[pyfunction]
#[pyo3(signature = (x, x_stride, residual, residual_stride, weight, rows, cols, dtype, eps, device, stream))]
#[allow(clippy::too_many_arguments)]
fn fused_add_rmsnorm(
    py: Python<'_>,
    x: u64,
    x_stride: i64,
    residual: u64,
    residual_stride: i64,
    weight: u64,
    rows: i64,
    cols: i64,
    dtype: i32,
    eps: f32,
    device: i32,
    stream: usize,
) -> PyResult<()> {
    let x = Operand {
        ptr: x,
        stride: x_stride,
    };
    let residual = Operand {
        ptr: residual,
        stride: residual_stride,
    };
    py.detach(|| {
        // SAFETY: as in `softmax`.
        unsafe {
            raw::fused_add_rmsnorm(
                x,
                residual,
                weight,
                Shape { rows, cols },
                dtype,
                eps,
                device,
                stream_ptr(stream),
            )
        }
    })
    .map_err(to_py)
}

/// Resolves and compiles `(op, dtype, rows, cols)` shapes; returns one
/// `(kernel, config, source)` per shape.
#[pyfunction]
fn warm(
    py: Python<'_>,
    shapes: Vec<(i32, i32, i64, i64)>,
    device: i32,
    stream: usize,
) -> PyResult<Vec<(&'static str, String, String)>> {
    let shapes: Vec<WarmShape> = shapes
        .into_iter()
        .map(|(op, dtype, rows, cols)| WarmShape {
            op,
            dtype,
            rows,
            cols,
        })
        .collect();
    py.detach(|| {
        // SAFETY: the stream handle is torch's for `device` (or one the caller owns).
        unsafe { raw::warm(&shapes, device, stream_ptr(stream)) }
    })
    .map(|w| w.into_iter().map(|w| (w.kernel, w.config, w.source)).collect())
    .map_err(to_py)
}

/// `c = a · op(b) (+ bias)`; `bias` and `workspace` 0 for none.
#[pyfunction]
#[pyo3(signature = (c, ldc, c_dtype, a, lda, b, ldb, layout, bias, m, n, k, dtype, workspace, workspace_bytes, device, stream))]
#[allow(clippy::too_many_arguments)]
fn gemm(
    py: Python<'_>,
    c: u64,
    ldc: i64,
    c_dtype: i32,
    a: u64,
    lda: i64,
    b: u64,
    ldb: i64,
    layout: i32,
    bias: u64,
    m: i64,
    n: i64,
    k: i64,
    dtype: i32,
    workspace: u64,
    workspace_bytes: usize,
    device: i32,
    stream: usize,
) -> PyResult<()> {
    let (c, a, b) = (
        Matrix { ptr: c, ld: ldc },
        Matrix { ptr: a, ld: lda },
        Matrix { ptr: b, ld: ldb },
    );
    py.detach(|| {
        // SAFETY: as in `softmax`.
        unsafe {
            raw::gemm::gemm(
                c,
                c_dtype,
                a,
                b,
                layout,
                bias,
                GemmShape { m, n, k },
                dtype,
                (workspace, workspace_bytes),
                device,
                stream_ptr(stream),
            )
        }
    })
    .map_err(to_py)
}

/// The workspace bytes a GEMM of `[m, n, k]` may need on `device`.
#[pyfunction]
fn gemm_workspace_bytes(
    py: Python<'_>,
    m: i64,
    n: i64,
    k: i64,
    dtype: i32,
    layout: i32,
    device: i32,
) -> PyResult<usize> {
    py.detach(|| raw::gemm::gemm_workspace_bytes(GemmShape { m, n, k }, dtype, layout, device))
        .map_err(to_py)
}

/// Fused MoE with SiLU on the given routing.
#[pyfunction]
#[pyo3(signature = (out, hidden, w13, w2, topk_ids, topk_weights, tokens, experts, n, k, topk, dtype, workspace, workspace_bytes, device, stream))]
#[allow(clippy::too_many_arguments)]
fn fused_moe(
    py: Python<'_>,
    out: u64,
    hidden: u64,
    w13: u64,
    w2: u64,
    topk_ids: u64,
    topk_weights: u64,
    tokens: i64,
    experts: i64,
    n: i64,
    k: i64,
    topk: i64,
    dtype: i32,
    workspace: u64,
    workspace_bytes: usize,
    device: i32,
    stream: usize,
) -> PyResult<()> {
    let shape = MoeShape {
        tokens,
        experts,
        n,
        k,
        topk,
    };
    py.detach(|| {
        // SAFETY: as in `softmax`.
        unsafe {
            raw::moe::fused_moe(
                out,
                hidden,
                w13,
                w2,
                topk_ids,
                topk_weights,
                shape,
                dtype,
                (workspace, workspace_bytes),
                device,
                stream_ptr(stream),
            )
        }
    })
    .map_err(to_py)
}

/// The workspace bytes fused MoE needs for this shape (no GPU needed).
#[pyfunction]
fn moe_workspace_bytes(tokens: i64, experts: i64, n: i64, k: i64, topk: i64, dtype: i32) -> PyResult<usize> {
    let shape = MoeShape {
        tokens,
        experts,
        n,
        k,
        topk,
    };
    raw::moe::moe_workspace_bytes(shape, dtype).map_err(to_py)
}

/// Softmax top-k routing into `topk_ids` (i32) and `topk_weights` (f32).
#[pyfunction]
#[pyo3(signature = (topk_ids, topk_weights, logits, tokens, experts, topk, logits_dtype, renormalize, device, stream))]
#[allow(clippy::too_many_arguments)]
fn topk_softmax(
    py: Python<'_>,
    topk_ids: u64,
    topk_weights: u64,
    logits: u64,
    tokens: i64,
    experts: i64,
    topk: i64,
    logits_dtype: i32,
    renormalize: bool,
    device: i32,
    stream: usize,
) -> PyResult<()> {
    let shape = RoutingShape {
        tokens,
        experts,
        topk,
    };
    let scoring = kernels_capi::raw::moe::softmax_scoring(renormalize);
    py.detach(|| {
        // SAFETY: as in `softmax`.
        unsafe {
            raw::moe::route(
                topk_ids,
                topk_weights,
                logits,
                shape,
                logits_dtype,
                scoring,
                device,
                stream_ptr(stream),
            )
        }
    })
    .map_err(to_py)
}

/// DeepSeek-V3's grouped top-k routing; `bias` 0 for none.
#[pyfunction]
#[pyo3(signature = (topk_ids, topk_weights, logits, bias, tokens, experts, topk, n_group, topk_group, renormalize, scale, logits_dtype, device, stream))]
#[allow(clippy::too_many_arguments)]
fn grouped_topk(
    py: Python<'_>,
    topk_ids: u64,
    topk_weights: u64,
    logits: u64,
    bias: u64,
    tokens: i64,
    experts: i64,
    topk: i64,
    n_group: i32,
    topk_group: i32,
    renormalize: bool,
    scale: f32,
    logits_dtype: i32,
    device: i32,
    stream: usize,
) -> PyResult<()> {
    let shape = RoutingShape {
        tokens,
        experts,
        topk,
    };
    py.detach(|| {
        let scoring = raw::moe::grouped(n_group, topk_group, renormalize, scale, bias, experts)?;
        // SAFETY: as in `softmax`.
        unsafe {
            raw::moe::route(
                topk_ids,
                topk_weights,
                logits,
                shape,
                logits_dtype,
                scoring,
                device,
                stream_ptr(stream),
            )
        }
    })
    .map_err(to_py)
}

/// Resolves and compiles `(dtype, layout, m, n, k)` GEMM shapes; one
/// `(kernel, config, source)` per shape.
#[pyfunction]
fn warm_gemm(
    py: Python<'_>,
    shapes: Vec<(i32, i32, i64, i64, i64)>,
    device: i32,
    stream: usize,
) -> PyResult<Vec<(&'static str, String, String)>> {
    let shapes: Vec<GemmWarmShape> = shapes
        .into_iter()
        .map(|(dtype, layout, m, n, k)| GemmWarmShape {
            dtype,
            layout,
            m,
            n,
            k,
        })
        .collect();
    py.detach(|| {
        // SAFETY: as in `warm`.
        unsafe { raw::gemm::warm_gemm(&shapes, device, stream_ptr(stream)) }
    })
    .map(|w| w.into_iter().map(|w| (w.kernel, w.config, w.source)).collect())
    .map_err(to_py)
}

/// Resolves and compiles `(dtype, routing, logits_dtype, topk, tokens, experts, n, k)`
/// fused-MoE shapes; one `(kernel, config, source)` per shape.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn warm_moe(
    py: Python<'_>,
    shapes: Vec<(i32, i32, i32, i32, i64, i64, i64, i64)>,
    device: i32,
    stream: usize,
) -> PyResult<Vec<(&'static str, String, String)>> {
    let shapes: Vec<MoeWarmShape> = shapes
        .into_iter()
        .map(
            |(dtype, routing, logits_dtype, topk, tokens, experts, n, k)| MoeWarmShape {
                dtype,
                routing,
                logits_dtype,
                topk,
                tokens,
                experts,
                n,
                k,
            },
        )
        .collect();
    py.detach(|| {
        // SAFETY: as in `warm`.
        unsafe { raw::moe::warm_moe(&shapes, device, stream_ptr(stream)) }
    })
    .map(|w| w.into_iter().map(|w| (w.kernel, w.config, w.source)).collect())
    .map_err(to_py)
}

/// What a DLPack capsule describes, without consuming it: `(address, shape, strides or
/// None, (code, bits, lanes), (device type, device id), read_only)`.
#[pyfunction]
fn dlpack_info(capsule: &Bound<'_, PyAny>, name: &str) -> PyResult<dlpack::DlpackInfo> {
    dlpack::info(capsule, name)
}

/// The ordinal of the device `ptr` points into; errors name `name`.
#[pyfunction]
fn pointer_device(py: Python<'_>, name: &str, ptr: u64) -> PyResult<i32> {
    py.detach(|| interop::pointer_device(name, ptr)).map_err(to_py)
}

/// Makes `stream` wait for the work enqueued so far on each of `producers`.
#[pyfunction]
fn stream_wait(py: Python<'_>, device: i32, stream: usize, producers: Vec<u64>) -> PyResult<()> {
    py.detach(|| {
        // SAFETY: the package passes stream handles the arrays' producers exported
        // (CUDA array interface v3) and its own launch stream, all of `device`.
        unsafe { interop::stream_wait(device, stream_ptr(stream), &producers) }
    })
    .map_err(to_py)
}

/// The library's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule(name = "_ext")]
fn ext(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("KernelsError", m.py().get_type::<KernelsError>())?;
    for d in DTypeCode::ALL {
        m.add(d.c_name().trim_start_matches("KERNELS_"), d as i32)?;
    }
    for o in Op::ALL {
        m.add(o.c_name().trim_start_matches("KERNELS_"), o as i32)?;
    }
    for l in LayoutCode::ALL {
        m.add(l.c_name().trim_start_matches("KERNELS_"), l as i32)?;
    }
    for r in RoutingCode::ALL {
        m.add(r.c_name().trim_start_matches("KERNELS_"), r as i32)?;
    }
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(rmsnorm, m)?)?;
    m.add_function(wrap_pyfunction!(fused_add_rmsnorm, m)?)?;
    m.add_function(wrap_pyfunction!(warm, m)?)?;
    for f in [
        wrap_pyfunction!(gemm, m)?,
        wrap_pyfunction!(gemm_workspace_bytes, m)?,
        wrap_pyfunction!(fused_moe, m)?,
        wrap_pyfunction!(moe_workspace_bytes, m)?,
        wrap_pyfunction!(topk_softmax, m)?,
        wrap_pyfunction!(grouped_topk, m)?,
        wrap_pyfunction!(warm_gemm, m)?,
        wrap_pyfunction!(warm_moe, m)?,
        wrap_pyfunction!(dlpack_info, m)?,
        wrap_pyfunction!(pointer_device, m)?,
        wrap_pyfunction!(stream_wait, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
