//! Softmax and log-softmax on AMD GPUs (feature `rocm`): the ops an engine on AMD
//! calls with device pointers ([`SoftmaxProblem::raw`]) and a [`HipStream`], and the
//! [`HipTunable`] implementations `kernels tune --backend hip` searches.
//!
//! A call resolves its config as on CUDA (memo, the baked table of the device's gfx
//! target, else the analytic default; `KERNELS_TUNING` picks the policy), compiles the
//! variant with hipRTC once (module cache on disk), and launches the same
//! [`crate::plan`] the CUDA ops launch. Bad input is an error naming the argument,
//! and nothing is launched.
//!
//! ```no_run
//! use kernels_core::{HipDevice, HipRuntime, Rows};
//! use kernels_softmax::plan::SoftmaxProblem;
//! use tuned::DType;
//! let rt = HipRuntime::new(HipDevice::open(0)?)?;
//! let stream = rt.device().new_stream()?;
//! let (rows, cols) = (4, 32000);
//! let x = rt.device().alloc_zeros::<half::bf16>(rows * cols)?;
//! let y = rt.device().alloc_zeros::<half::bf16>(rows * cols)?;
//! let shape = Rows::contiguous(rows, cols);
//! // SAFETY: x and y are live allocations of this device of rows * cols bf16 each.
//! let p = unsafe {
//!     SoftmaxProblem::raw(DType::Bf16, x.device_ptr(), x.len(), shape, y.device_ptr(), y.len(), shape, 1.0)
//! }?;
//! let used = kernels_softmax::hip::softmax(&rt, &stream, &p)?;
//! println!("{:?} from {}", used.config, used.source);
//! stream.synchronize()?;
//! # Ok::<(), kernels_core::Error>(())
//! ```

use kernels_core::{
    encode, pseudo_random, HipBuffer, HipDevice, HipRuntime, HipStream, HipTunable, HipTunableDyn, Result,
};
use tuned::Resolved;

use crate::plan::SoftmaxProblem;
use crate::{LogSoftmax, Softmax, SoftmaxConfig, SoftmaxKey};

/// Buffers the HIP tuner allocates for a problem of its own (the CUDA tuner's
/// contents: the same seeds and ranges).
pub struct SoftmaxHipBuffers {
    key: SoftmaxKey,
    rows: u64,
    x: HipBuffer<u8>,
    y: HipBuffer<u8>,
}

impl SoftmaxHipBuffers {
    fn alloc(device: &HipDevice, key: &SoftmaxKey, rows: u64) -> Result<SoftmaxHipBuffers> {
        let n = rows as usize * key.cols as usize;
        Ok(SoftmaxHipBuffers {
            key: *key,
            rows,
            x: device.from_host(&encode(key.dtype, &pseudo_random(n, 11, 8.0, 0.0)))?,
            y: device.from_host(&encode(key.dtype, &pseudo_random(n, 12, 1.0, 0.0)))?,
        })
    }

    fn problem(&mut self) -> SoftmaxProblem<'_> {
        SoftmaxProblem::tuning(self.key, self.rows, self.x.device_ptr(), self.y.device_ptr())
    }
}

macro_rules! hip_tunable {
    ($ty:ident, $dyn:ident) => {
        // Safety: the problem's x and y are the two buffers, each rows x cols elements.
        unsafe impl HipTunable for $ty {
            type HipOwned = SoftmaxHipBuffers;

            fn alloc_hip_problem(
                device: &HipDevice,
                key: &SoftmaxKey,
                batch: u64,
            ) -> Result<SoftmaxHipBuffers> {
                SoftmaxHipBuffers::alloc(device, key, batch)
            }

            fn borrow_hip_problem(owned: &mut SoftmaxHipBuffers) -> SoftmaxProblem<'_> {
                owned.problem()
            }
        }

        #[doc = concat!("The `kernels tune --backend hip` view of [`", stringify!($ty), "`].")]
        pub static $dyn: HipTunableDyn<$ty> = HipTunableDyn::new();
    };
}

hip_tunable!(Softmax, SOFTMAX_HIP_TUNABLE);
hip_tunable!(LogSoftmax, LOG_SOFTMAX_HIP_TUNABLE);

/// `y = softmax(x * scale)` over the last dimension on `stream`, with the config the
/// runtime's policy resolves for the device's gfx target. Returns that config and
/// where it came from.
pub fn softmax(
    rt: &HipRuntime,
    stream: &HipStream,
    problem: &SoftmaxProblem<'_>,
) -> Result<Resolved<SoftmaxConfig>> {
    Ok(rt.run::<Softmax>(stream, problem)?.resolved)
}

/// `y = log_softmax(x * scale)` over the last dimension on `stream`.
pub fn log_softmax(
    rt: &HipRuntime,
    stream: &HipStream,
    problem: &SoftmaxProblem<'_>,
) -> Result<Resolved<SoftmaxConfig>> {
    Ok(rt.run::<LogSoftmax>(stream, problem)?.resolved)
}
