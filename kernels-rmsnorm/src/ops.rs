//! Launching RMSNorm on CUDA: the [`Tunable`] implementations the runtime compiles,
//! launches and tunes (launching the backend-neutral [`crate::plan`]), and the ops
//! engines call (safe ones on cudarc buffers, raw ones on device pointers).
//!
//! Every op validates shapes, lengths, strides, `eps`, aliasing and alignment before
//! anything is launched and returns an error naming the bad argument.

use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{alloc_random, Element, Result, Rows, Runtime, Tunable, TunableDyn};
use tuned::Resolved;

use crate::{FusedAddRmsNorm, RmsNorm, RmsNormConfig, RmsNormKey};

pub use crate::plan::{NormProblem, SOURCE};

impl<'a> NormProblem<'a> {
    /// `y = rmsnorm(x) * weight` on cudarc buffers.
    pub fn rmsnorm<T: Element>(
        stream: &CudaStream,
        x: &'a CudaView<'_, T>,
        x_rows: Rows,
        weight: &'a CudaView<'_, T>,
        y: &'a mut CudaViewMut<'_, T>,
        y_rows: Rows,
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        let y_len = y.len();
        let (xp, _gx) = x.device_ptr(stream);
        let (wp, _gw) = weight.device_ptr(stream);
        let (yp, _gy) = y.device_ptr_mut(stream);
        // Safe: the borrows keep the buffers alive for 'a and Rust forbids them aliasing.
        unsafe {
            Self::rmsnorm_raw(
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
        }
    }

    /// `residual += x; x = rmsnorm(residual) * weight`, in place, on cudarc buffers.
    #[allow(clippy::too_many_arguments)]
    pub fn fused_add_rmsnorm<T: Element>(
        stream: &CudaStream,
        x: &'a mut CudaViewMut<'_, T>,
        x_rows: Rows,
        residual: &'a mut CudaViewMut<'_, T>,
        residual_rows: Rows,
        weight: &'a CudaView<'_, T>,
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        let (x_len, r_len, w_len) = (x.len(), residual.len(), weight.len());
        let (xp, _gx) = x.device_ptr_mut(stream);
        let (rp, _gr) = residual.device_ptr_mut(stream);
        let (wp, _gw) = weight.device_ptr(stream);
        // Safe: the borrows keep the buffers alive for 'a and Rust forbids them aliasing.
        unsafe {
            Self::fused_add_rmsnorm_raw(
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
        }
    }
}

/// Buffers the tuner allocates for a problem of its own.
pub struct NormBuffers {
    key: RmsNormKey,
    rows: u64,
    x: CudaSlice<u8>,
    w: CudaSlice<u8>,
    out: CudaSlice<u8>,
    stream: Arc<CudaStream>,
}

impl NormBuffers {
    fn alloc(stream: &Arc<CudaStream>, key: &RmsNormKey, rows: u64) -> Result<NormBuffers> {
        let n = rows as usize * key.cols as usize;
        Ok(NormBuffers {
            key: *key,
            rows,
            x: alloc_random(stream, key.dtype, n, 1, 2.0, 0.0)?,
            w: alloc_random(stream, key.dtype, key.cols as usize, 2, 0.5, 1.0)?,
            out: alloc_random(stream, key.dtype, n, 3, 2.0, 0.0)?,
            stream: stream.clone(),
        })
    }

    fn problem(&mut self) -> NormProblem<'_> {
        let (x, _) = self.x.device_ptr(&self.stream);
        let (w, _) = self.w.device_ptr(&self.stream);
        let (out, _) = self.out.device_ptr(&self.stream);
        NormProblem::tuning(self.key, self.rows, x, w, out)
    }
}

macro_rules! tunable {
    ($ty:ident, $dyn:ident) => {
        // Safety: the launch is the PlannedKernel plan (crate::plan), whose buffers
        // and arguments follow the kernel's ABI.
        unsafe impl Tunable for $ty {
            type Owned = NormBuffers;

            fn alloc_problem(stream: &Arc<CudaStream>, key: &RmsNormKey, batch: u64) -> Result<NormBuffers> {
                NormBuffers::alloc(stream, key, batch)
            }

            fn borrow_problem(owned: &mut NormBuffers) -> NormProblem<'_> {
                owned.problem()
            }
        }

        #[doc = concat!("The `kernels tune` view of [`", stringify!($ty), "`].")]
        pub static $dyn: TunableDyn<$ty> = TunableDyn::new();
    };
}

tunable!(RmsNorm, RMSNORM_TUNABLE);
tunable!(FusedAddRmsNorm, FUSED_ADD_RMSNORM_TUNABLE);

/// `y = x / rms(x) * weight` per row, with the config the runtime's policy resolves.
/// Returns that config and where it came from.
///
/// ```no_run
/// # use kernels_core::{Runtime, Rows, cudarc::driver::CudaSlice};
/// # fn f(rt: &Runtime, stream: &std::sync::Arc<kernels_core::cudarc::driver::CudaStream>,
/// #      x: &CudaSlice<half::bf16>, w: &CudaSlice<half::bf16>, y: &mut CudaSlice<half::bf16>) -> kernels_core::Result<()> {
/// let shape = Rows::contiguous(16, 4096);
/// let used = kernels_rmsnorm::ops::rmsnorm(rt, stream, &x.as_view(), shape, &w.as_view(), &mut y.as_view_mut(), shape, 1e-6)?;
/// println!("{:?} from {}", used.config, used.source);
/// # Ok(()) }
/// ```
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    weight: &CudaView<'_, T>,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    eps: f32,
) -> Result<Resolved<RmsNormConfig>> {
    let p = NormProblem::rmsnorm(stream, x, x_rows, weight, y, y_rows, eps)?;
    Ok(rt.run::<RmsNorm>(stream, &p)?.resolved)
}

/// `residual += x; x = rmsnorm(residual) * weight`, in place (SGLang's and vLLM's
/// `fused_add_rmsnorm`), with the config the runtime's policy resolves.
#[allow(clippy::too_many_arguments)]
pub fn fused_add_rmsnorm<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &mut CudaViewMut<'_, T>,
    x_rows: Rows,
    residual: &mut CudaViewMut<'_, T>,
    residual_rows: Rows,
    weight: &CudaView<'_, T>,
    eps: f32,
) -> Result<Resolved<RmsNormConfig>> {
    let p = NormProblem::fused_add_rmsnorm(stream, x, x_rows, residual, residual_rows, weight, eps)?;
    Ok(rt.run::<FusedAddRmsNorm>(stream, &p)?.resolved)
}
