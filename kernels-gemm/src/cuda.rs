//! The GEMM ops on CUDA (feature `cuda`): a safe op on cudarc views, what Rust engines
//! holding cudarc buffers (candle's CUDA storage) call, and a launch on a raw
//! `CUstream` for engines that hold raw pointers and streams (C++, Python).
//!
//! The safe op validates its arguments, takes the buffers' device addresses and keeps
//! cudarc's stream-tracking guards until the kernel is enqueued, so a consumer on
//! another stream that relies on cudarc's tracking waits for the kernel's output.
//!
//! In a CUDA-graph capture they need cudarc's event tracking off (CUDA does not let a
//! capture wait on the events cudarc recorded outside it); with tracking on they
//! refuse with an error naming `stream` and enqueue nothing
//! (`kernels_core::CudaDevice::check_capturable`). After `Runtime::warm`, a capture
//! compiles nothing, whatever the buffers' alignment.

use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{
    backend::cuda::RawStream, launch::Element, Cuda, CudaRuntime, PlannedKernel, Prepared, Result,
};
use tuned::Resolved;

use crate::plan::{GemmProblem, Operand};
use crate::{Gemm, GemmConfig, Layout};

/// A matrix operand on cudarc: the view and its leading dimension (elements).
pub struct Matrix<'v, 'a, T> {
    pub view: &'v CudaView<'a, T>,
    pub ld: usize,
}

/// `c = a · op(b) (+ bias)` for `a` `[m, k]`, `b` `[n, k]` (`Layout::Nt`) or `[k, n]`
/// (`Layout::Nn`), `c` `[m, n]` of `T` or f32, with the config the runtime's policy
/// resolves. `workspace` is needed by split-K configs: [`crate::workspace_bytes`]
/// bytes, zeroed before its first use (the kernel leaves its tile counters at zero), one stream at a
/// time. Returns the config and where it came from; errors name the argument.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Element, O: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    layout: Layout,
    (m, n, k): (usize, usize, usize),
    a: Matrix<'_, '_, T>,
    b: Matrix<'_, '_, T>,
    bias: Option<&CudaView<'_, T>>,
    c: &mut CudaViewMut<'_, O>,
    ldc: usize,
    workspace: Option<&mut CudaViewMut<'_, u8>>,
) -> Result<Resolved<GemmConfig>> {
    kernels_core::CudaDevice::check_capturable(stream)?;
    let c_len = c.len();
    let (ap, _ga) = a.view.device_ptr(stream);
    let (bp, _gb) = b.view.device_ptr(stream);
    let bias_guard = bias.map(|v| (v.device_ptr(stream), v.len()));
    let (cp, _gc) = c.device_ptr_mut(stream);
    let ws_guard = workspace.map(|w| {
        let len = w.len();
        (w.device_ptr_mut(stream), len)
    });
    let bias_arg = bias_guard.as_ref().map(|((p, _), len)| (*p, *len));
    let ws_arg = ws_guard.as_ref().map(|((p, _), len)| (*p, *len));
    // SAFETY: the borrows keep the buffers alive and unaliased until the guards drop,
    // after the launch is enqueued.
    let p = unsafe {
        GemmProblem::raw(
            T::DTYPE,
            layout,
            m,
            n,
            k,
            Operand::new(ap, a.view.len(), a.ld),
            Operand::new(bp, b.view.len(), b.ld),
            Operand::new(cp, c_len, ldc),
            O::DTYPE,
            bias_arg,
            ws_arg,
        )
    }?;
    Ok(rt.run::<Gemm>(stream, &p)?.resolved)
}

/// Launches `problem` on a raw stream with a config and kernel resolved beforehand
/// (`rt.resolve::<Gemm>(&stream, &key, m)` at start-up, which compiles it): no
/// resolution, compile or allocation here, so it is CUDA-graph capturable. A problem
/// whose operands do not allow the resolved config (alignment, workspace) is an error
/// naming the argument, and nothing is launched.
///
/// # Safety
/// `stream` must be a live stream of the runtime's context, and `problem`'s addresses
/// valid until the kernel has run.
pub unsafe fn gemm_on_raw_stream(
    prepared: &Prepared<Cuda, GemmConfig>,
    stream: RawStream,
    problem: &GemmProblem<'_>,
) -> Result<()> {
    let config = &prepared.resolved.config;
    let kernel = prepared.kernel();
    let (dims, args) = <Gemm as PlannedKernel>::launch_args(kernel.info(), config, problem)?;
    // SAFETY: the plan matches the variant's entry point and stays within the
    // problem's buffers; the stream is the caller's promise.
    unsafe { kernel.launch_raw(stream, dims, &args) }
}
