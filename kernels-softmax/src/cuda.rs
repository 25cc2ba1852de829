//! The safe softmax ops on cudarc buffers (feature `cuda`): what Rust engines holding
//! cudarc views (candle's CUDA storage) call. Each validates its arguments, takes the
//! buffers' device addresses and keeps cudarc's stream-tracking guards until the
//! kernel is enqueued, so a consumer on another stream that relies on cudarc's
//! tracking waits for the kernel's output.
//!
//! In a CUDA-graph capture they need cudarc's event tracking off (CUDA does not let a
//! capture wait on the events cudarc recorded outside it); with tracking on they
//! refuse with an error naming `stream` and enqueue nothing
//! (`kernels_core::CudaDevice::check_capturable`). After `Runtime::warm`, a capture
//! compiles nothing, whatever the buffers' alignment.

use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{launch::Element, CudaRuntime, Result, Rows};
use tuned::Resolved;

use crate::plan::SoftmaxProblem;
use crate::{LogSoftmax, Softmax, SoftmaxConfig};

/// `y = softmax(x * scale)` per row, with the config the runtime's policy resolves.
/// Returns that config and where it came from.
pub fn softmax<T: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>> {
    run::<Softmax, T>(rt, stream, x, x_rows, y, y_rows, scale)
}

/// `y = log_softmax(x * scale)` per row.
pub fn log_softmax<T: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>> {
    run::<LogSoftmax, T>(rt, stream, x, x_rows, y, y_rows, scale)
}

/// Runs `K` (softmax or log-softmax) from `x` into `y`, keeping cudarc's guards until
/// the launch is enqueued.
fn run<K, T: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>>
where
    K: for<'a> kernels_core::Tunable<Config = SoftmaxConfig, Problem<'a> = SoftmaxProblem<'a>>,
{
    kernels_core::CudaDevice::check_capturable(stream)?;
    let y_len = y.len();
    let (xp, _gx) = x.device_ptr(stream);
    let (yp, _gy) = y.device_ptr_mut(stream);
    // SAFETY: the borrows keep the buffers alive and unaliased until the guards drop,
    // after the launch is enqueued.
    let p = unsafe { SoftmaxProblem::raw(T::DTYPE, xp, x.len(), x_rows, yp, y_len, y_rows, scale) }?;
    Ok(rt.run::<K>(stream, &p)?.resolved)
}

/// Softmax of `x` in place.
pub fn softmax_in_place<T: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    x: &mut CudaViewMut<'_, T>,
    rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>> {
    kernels_core::CudaDevice::check_capturable(stream)?;
    let len = x.len();
    let (xp, _gx) = x.device_ptr_mut(stream);
    // SAFETY: the mutable borrow keeps the buffer alive and exclusive until the guard
    // drops, after the launch is enqueued.
    let p = unsafe { SoftmaxProblem::raw(T::DTYPE, xp, len, rows, xp, len, rows, scale) }?;
    Ok(rt.run::<Softmax>(stream, &p)?.resolved)
}
