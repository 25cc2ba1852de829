//! Launching softmax and log-softmax on CUDA: the [`Tunable`] implementations the
//! runtime compiles, launches and tunes (launching the backend-neutral
//! [`crate::plan`]), and the ops engines call (safe ones on cudarc buffers, raw ones
//! on device pointers).
//!
//! Every op validates shapes, lengths, strides, `scale`, aliasing and alignment
//! before anything is launched and returns an error naming the bad argument.

use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{alloc_random, Element, Result, Rows, Runtime, Tunable, TunableDyn};
use tuned::Resolved;

use crate::{LogSoftmax, Softmax, SoftmaxConfig, SoftmaxKey};

pub use crate::plan::{SoftmaxProblem, SOURCE};

impl<'a> SoftmaxProblem<'a> {
    /// `y = softmax(x * scale)` per row on cudarc buffers.
    pub fn new<T: Element>(
        stream: &CudaStream,
        x: &'a CudaView<'_, T>,
        x_rows: Rows,
        y: &'a mut CudaViewMut<'_, T>,
        y_rows: Rows,
        scale: f32,
    ) -> Result<SoftmaxProblem<'a>> {
        let y_len = y.len();
        let (xp, _gx) = x.device_ptr(stream);
        let (yp, _gy) = y.device_ptr_mut(stream);
        // Safe: the borrows keep the buffers alive for 'a and Rust forbids them aliasing.
        unsafe { Self::raw(T::DTYPE, xp, x.len(), x_rows, yp, y_len, y_rows, scale) }
    }

    /// Softmax of `x` in place.
    pub fn in_place<T: Element>(
        stream: &CudaStream,
        x: &'a mut CudaViewMut<'_, T>,
        rows: Rows,
        scale: f32,
    ) -> Result<SoftmaxProblem<'a>> {
        let len = x.len();
        let (xp, _gx) = x.device_ptr_mut(stream);
        // Safe: the mutable borrow keeps the buffer alive and exclusive for 'a.
        unsafe { Self::raw(T::DTYPE, xp, len, rows, xp, len, rows, scale) }
    }
}

/// Buffers the tuner allocates for a problem of its own.
pub struct SoftmaxBuffers {
    key: SoftmaxKey,
    rows: u64,
    x: CudaSlice<u8>,
    y: CudaSlice<u8>,
    stream: Arc<CudaStream>,
}

impl SoftmaxBuffers {
    fn alloc(stream: &Arc<CudaStream>, key: &SoftmaxKey, rows: u64) -> Result<SoftmaxBuffers> {
        let n = rows as usize * key.cols as usize;
        Ok(SoftmaxBuffers {
            key: *key,
            rows,
            x: alloc_random(stream, key.dtype, n, 11, 8.0, 0.0)?,
            y: alloc_random(stream, key.dtype, n, 12, 1.0, 0.0)?,
            stream: stream.clone(),
        })
    }

    fn problem(&mut self) -> SoftmaxProblem<'_> {
        let (x, _) = self.x.device_ptr(&self.stream);
        let (y, _) = self.y.device_ptr(&self.stream);
        SoftmaxProblem::tuning(self.key, self.rows, x, y)
    }
}

macro_rules! tunable {
    ($ty:ident, $dyn:ident) => {
        // Safety: the launch is the PlannedKernel plan (crate::plan), whose buffers
        // and arguments follow the kernel's ABI.
        unsafe impl Tunable for $ty {
            type Owned = SoftmaxBuffers;

            fn alloc_problem(
                stream: &Arc<CudaStream>,
                key: &SoftmaxKey,
                batch: u64,
            ) -> Result<SoftmaxBuffers> {
                SoftmaxBuffers::alloc(stream, key, batch)
            }

            fn borrow_problem(owned: &mut SoftmaxBuffers) -> SoftmaxProblem<'_> {
                owned.problem()
            }
        }

        #[doc = concat!("The `kernels tune` view of [`", stringify!($ty), "`].")]
        pub static $dyn: TunableDyn<$ty> = TunableDyn::new();
    };
}

tunable!(Softmax, SOFTMAX_TUNABLE);
tunable!(LogSoftmax, LOG_SOFTMAX_TUNABLE);

/// `y = softmax(x * scale)` over the last dimension, with the config the runtime's
/// policy resolves. Returns that config and where it came from.
pub fn softmax<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>> {
    let p = SoftmaxProblem::new(stream, x, x_rows, y, y_rows, scale)?;
    Ok(rt.run::<Softmax>(stream, &p)?.resolved)
}

/// `y = log_softmax(x * scale)` over the last dimension.
pub fn log_softmax<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>> {
    let p = SoftmaxProblem::new(stream, x, x_rows, y, y_rows, scale)?;
    Ok(rt.run::<LogSoftmax>(stream, &p)?.resolved)
}
