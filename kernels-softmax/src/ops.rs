//! The softmax ops on every backend: each runs a [`SoftmaxProblem`] (device addresses,
//! validated when built) on a stream with the config the runtime's policy resolves,
//! and says which config and where it came from. Also the [`Tunable`] implementations
//! the runtime and `kernels tune` search with. The safe ops on cudarc buffers are in
//! `crate::cuda` (feature `cuda`).
//!
//! ```no_run
//! # #[cfg(feature = "cuda")] {
//! use kernels_core::cudarc::driver::{DevicePtr, DevicePtrMut};
//! use kernels_core::{CudaDevice, CudaRuntime, Rows};
//! use kernels_softmax::plan::SoftmaxProblem;
//! use tuned::DType;
//! let rt = CudaRuntime::new(CudaDevice::open(0)?)?;
//! let stream = rt.device().new_stream()?;
//! let (rows, cols) = (8, 128256);
//! let x = stream.alloc_zeros::<half::bf16>(rows * cols).unwrap();
//! let mut y = stream.alloc_zeros::<half::bf16>(rows * cols).unwrap();
//! let (xp, _gx) = x.device_ptr(&stream);
//! let (yp, _gy) = y.device_ptr_mut(&stream);
//! let shape = Rows::contiguous(rows, cols);
//! // SAFETY: live allocations of this device with the lengths given.
//! let p = unsafe { SoftmaxProblem::raw(DType::Bf16, xp, rows * cols, shape, yp, rows * cols, shape, 1.0) }?;
//! let used = kernels_softmax::ops::softmax(&rt, &stream, &p)?;
//! println!("{:?} from {}", used.config, used.source);
//! # }
//! # Ok::<(), kernels_core::Error>(())
//! ```

use kernels_core::{
    launch::{encode, pseudo_random},
    Backend, Result, Runtime, Tunable, TunableDyn,
};
use tuned::Resolved;

use crate::{LogSoftmax, Softmax, SoftmaxConfig, SoftmaxKey};

pub use crate::plan::{SoftmaxProblem, SOURCE};

/// `y = softmax(x * scale)` per row on `stream`, with the config the runtime's policy
/// resolves for the device.
pub fn softmax<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    problem: &SoftmaxProblem<'_>,
) -> Result<Resolved<SoftmaxConfig>> {
    Ok(rt.run::<Softmax>(stream, problem)?.resolved)
}

/// `y = log_softmax(x * scale)` per row on `stream`.
pub fn log_softmax<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    problem: &SoftmaxProblem<'_>,
) -> Result<Resolved<SoftmaxConfig>> {
    Ok(rt.run::<LogSoftmax>(stream, problem)?.resolved)
}

/// The inputs of a problem the tuner makes itself: x in [-8, 8), y pre-filled.
fn tuning_inputs(key: &SoftmaxKey, rows: u64) -> Vec<Vec<u8>> {
    let n = rows as usize * key.cols as usize;
    vec![
        encode(key.dtype, &pseudo_random(n, 11, 8.0, 0.0)),
        encode(key.dtype, &pseudo_random(n, 12, 1.0, 0.0)),
    ]
}

macro_rules! tunable {
    ($ty:ident, $dyn:ident) => {
        // Safety: the problem's x and y are the two uploaded buffers, each rows x cols
        // elements.
        unsafe impl Tunable for $ty {
            fn tuning_inputs(key: &SoftmaxKey, batch: u64) -> Vec<Vec<u8>> {
                tuning_inputs(key, batch)
            }

            fn tuning_problem<'a>(key: &SoftmaxKey, batch: u64, at: &'a [u64]) -> SoftmaxProblem<'a> {
                SoftmaxProblem::tuning(*key, batch, at[0], at[1])
            }
        }

        #[doc = concat!("The `kernels tune` view of [`", stringify!($ty), "`], on every backend.")]
        pub static $dyn: TunableDyn<$ty> = TunableDyn::new();
    };
}

tunable!(Softmax, SOFTMAX_TUNABLE);
tunable!(LogSoftmax, LOG_SOFTMAX_TUNABLE);
