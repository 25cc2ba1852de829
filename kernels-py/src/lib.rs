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

use std::ffi::c_void;

use kernels_capi::raw::{self, Operand, Shape, WarmShape};
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
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(rmsnorm, m)?)?;
    m.add_function(wrap_pyfunction!(fused_add_rmsnorm, m)?)?;
    m.add_function(wrap_pyfunction!(warm, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
