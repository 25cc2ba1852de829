//! Launching softmax and log-softmax on CUDA: the [`Tunable`] implementations the
//! runtime compiles, launches and tunes (launching the backend-neutral
//! [`crate::plan`]), and the ops engines call (safe ones on cudarc buffers, raw ones
//! on device pointers).
//!
//! Every op validates shapes, lengths, strides, `scale`, aliasing and alignment
//! before anything is launched and returns an error naming the bad argument.

use std::marker::PhantomData;
use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{
    alloc_random, AlignClass, DeviceInfo, Element, Kernel, KernelSource, PlannedKernel, RawStream, Result,
    Rows, Runtime, Tunable, TunableDyn, TuneBuffer, Variant,
};
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
        let cols = self.key.cols as u64;
        SoftmaxProblem {
            key: self.key,
            rows: self.rows,
            x,
            x_stride: cols,
            y,
            y_stride: cols,
            scale: 1.0,
            _buffers: PhantomData,
        }
    }
}

/// Launches `c` on `p` on the kernel's device ([`PlannedKernel::launch_args`]).
fn launch<K: PlannedKernel>(
    kernel: &Kernel,
    stream: &CudaStream,
    c: &K::Config,
    p: &K::Problem<'_>,
) -> Result<()> {
    let (dims, args) = K::launch_args(kernel.info(), c, p)?;
    // Safe: the plan follows cuda/softmax.cu's ABI and the problem was validated
    // against the buffers' lengths when it was built.
    unsafe { kernel.launch_raw(RawStream::of(stream), dims, &args) }
}

macro_rules! tunable {
    ($ty:ident, $dyn:ident) => {
        // Safety: as the PlannedKernel implementation (crate::plan), whose buffers and
        // plan these delegate to.
        unsafe impl Tunable for $ty {
            type Problem<'a> = SoftmaxProblem<'a>;
            type Owned = SoftmaxBuffers;
            const SOURCE: &'static KernelSource = &SOURCE;

            fn search_space(device: &DeviceInfo, key: &SoftmaxKey, batch: u64) -> Vec<SoftmaxConfig> {
                <$ty as PlannedKernel>::search_space(device, key, batch)
            }

            fn variant(device: &DeviceInfo, key: &SoftmaxKey, c: &SoftmaxConfig) -> Variant {
                <$ty as PlannedKernel>::variant(device, key, c)
            }

            fn problem_shape(p: &SoftmaxProblem<'_>) -> (SoftmaxKey, u64) {
                <$ty as PlannedKernel>::problem_shape(p)
            }

            fn buffers(p: &SoftmaxProblem<'_>) -> Vec<TuneBuffer> {
                <$ty as PlannedKernel>::buffers(p)
            }

            fn alignment(p: &SoftmaxProblem<'_>) -> AlignClass {
                p.alignment()
            }

            fn fit_alignment(
                device: &DeviceInfo,
                key: &SoftmaxKey,
                c: SoftmaxConfig,
                align: AlignClass,
            ) -> SoftmaxConfig {
                <$ty as PlannedKernel>::fit_alignment(device, key, c, align)
            }

            fn launch(
                kernel: &Kernel,
                stream: &Arc<CudaStream>,
                c: &SoftmaxConfig,
                p: &SoftmaxProblem<'_>,
            ) -> Result<()> {
                launch::<$ty>(kernel, stream, c, p)
            }

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
