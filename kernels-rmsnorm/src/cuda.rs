//! The safe RMSNorm ops on cudarc buffers (feature `cuda`): what Rust engines holding
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

use crate::plan::NormProblem;
use crate::{FusedAddRmsNorm, RmsNorm, RmsNormConfig};

/// `y = x / rms(x) * weight` per row, with the config the runtime's policy resolves.
/// Returns that config and where it came from.
///
/// ```no_run
/// # use kernels_core::{CudaRuntime, Rows, cudarc::driver::CudaSlice};
/// # fn f(rt: &CudaRuntime, stream: &std::sync::Arc<kernels_core::cudarc::driver::CudaStream>,
/// #      x: &CudaSlice<half::bf16>, w: &CudaSlice<half::bf16>, y: &mut CudaSlice<half::bf16>) -> kernels_core::Result<()> {
/// let shape = Rows::contiguous(16, 4096);
/// let used = kernels_rmsnorm::cuda::rmsnorm(rt, stream, &x.as_view(), shape, &w.as_view(), &mut y.as_view_mut(), shape, 1e-6)?;
/// println!("{:?} from {}", used.config, used.source);
/// # Ok(()) }
/// ```
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm<T: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    weight: &CudaView<'_, T>,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    eps: f32,
) -> Result<Resolved<RmsNormConfig>> {
    kernels_core::CudaDevice::check_capturable(stream)?;
    let y_len = y.len();
    let (xp, _gx) = x.device_ptr(stream);
    let (wp, _gw) = weight.device_ptr(stream);
    let (yp, _gy) = y.device_ptr_mut(stream);
    // SAFETY: the borrows keep the buffers alive and unaliased until the guards drop,
    // after the launch is enqueued.
    let p = unsafe {
        NormProblem::rmsnorm_raw(
            T::DTYPE,
            xp,
            x.len(),
            x_rows,
            wp,
            weight.len(),
            yp,
            y_len,
            y_rows,
            eps,
        )
    }?;
    Ok(rt.run::<RmsNorm>(stream, &p)?.resolved)
}

/// `residual += x; x = rmsnorm(residual) * weight`, in place (SGLang's and vLLM's
/// `fused_add_rmsnorm`), with the config the runtime's policy resolves.
#[allow(clippy::too_many_arguments)]
pub fn fused_add_rmsnorm<T: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    x: &mut CudaViewMut<'_, T>,
    x_rows: Rows,
    residual: &mut CudaViewMut<'_, T>,
    residual_rows: Rows,
    weight: &CudaView<'_, T>,
    eps: f32,
) -> Result<Resolved<RmsNormConfig>> {
    kernels_core::CudaDevice::check_capturable(stream)?;
    let (x_len, r_len, w_len) = (x.len(), residual.len(), weight.len());
    let (xp, _gx) = x.device_ptr_mut(stream);
    let (rp, _gr) = residual.device_ptr_mut(stream);
    let (wp, _gw) = weight.device_ptr(stream);
    // SAFETY: as for `rmsnorm`.
    let p = unsafe {
        NormProblem::fused_add_rmsnorm_raw(
            T::DTYPE,
            xp,
            x_len,
            x_rows,
            rp,
            r_len,
            residual_rows,
            wp,
            w_len,
            eps,
        )
    }?;
    Ok(rt.run::<FusedAddRmsNorm>(stream, &p)?.resolved)
}
