//! RMSNorm and fused residual-add RMSNorm on AMD GPUs (feature `rocm`): the ops an
//! engine on AMD calls with device pointers ([`NormProblem::rmsnorm_raw`],
//! [`NormProblem::fused_add_rmsnorm_raw`]) and a [`HipStream`], and the
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
//! use kernels_rmsnorm::plan::NormProblem;
//! use tuned::DType;
//! let rt = HipRuntime::new(HipDevice::open(0)?)?;
//! let stream = rt.device().new_stream()?;
//! let (rows, cols) = (16, 4096);
//! let x = rt.device().alloc_zeros::<half::bf16>(rows * cols)?;
//! let w = rt.device().alloc_zeros::<half::bf16>(cols)?;
//! let y = rt.device().alloc_zeros::<half::bf16>(rows * cols)?;
//! let shape = Rows::contiguous(rows, cols);
//! // SAFETY: live allocations of this device with the lengths given.
//! let p = unsafe {
//!     NormProblem::rmsnorm_raw(DType::Bf16, x.device_ptr(), x.len(), shape, w.device_ptr(), w.len(),
//!                              y.device_ptr(), y.len(), shape, 1e-6)
//! }?;
//! let used = kernels_rmsnorm::hip::rmsnorm(&rt, &stream, &p)?;
//! println!("{:?} from {}", used.config, used.source);
//! stream.synchronize()?;
//! # Ok::<(), kernels_core::Error>(())
//! ```

use kernels_core::{
    encode, pseudo_random, HipBuffer, HipDevice, HipRuntime, HipStream, HipTunable, HipTunableDyn, Result,
};
use tuned::Resolved;

use crate::plan::NormProblem;
use crate::{FusedAddRmsNorm, RmsNorm, RmsNormConfig, RmsNormKey};

/// Buffers the HIP tuner allocates for a problem of its own (the CUDA tuner's
/// contents: the same seeds and ranges).
pub struct NormHipBuffers {
    key: RmsNormKey,
    rows: u64,
    x: HipBuffer<u8>,
    w: HipBuffer<u8>,
    out: HipBuffer<u8>,
}

impl NormHipBuffers {
    fn alloc(device: &HipDevice, key: &RmsNormKey, rows: u64) -> Result<NormHipBuffers> {
        let n = rows as usize * key.cols as usize;
        let random = |n, seed, scale, offset| encode(key.dtype, &pseudo_random(n, seed, scale, offset));
        Ok(NormHipBuffers {
            key: *key,
            rows,
            x: device.from_host(&random(n, 1, 2.0, 0.0))?,
            w: device.from_host(&random(key.cols as usize, 2, 0.5, 1.0))?,
            out: device.from_host(&random(n, 3, 2.0, 0.0))?,
        })
    }

    fn problem(&mut self) -> NormProblem<'_> {
        let (x, w, out) = (self.x.device_ptr(), self.w.device_ptr(), self.out.device_ptr());
        NormProblem::tuning(self.key, self.rows, x, w, out)
    }
}

macro_rules! hip_tunable {
    ($ty:ident, $dyn:ident) => {
        // Safety: the problem's x, weight and output are the three buffers, with the
        // lengths the problem describes.
        unsafe impl HipTunable for $ty {
            type HipOwned = NormHipBuffers;

            fn alloc_hip_problem(device: &HipDevice, key: &RmsNormKey, batch: u64) -> Result<NormHipBuffers> {
                NormHipBuffers::alloc(device, key, batch)
            }

            fn borrow_hip_problem(owned: &mut NormHipBuffers) -> NormProblem<'_> {
                owned.problem()
            }
        }

        #[doc = concat!("The `kernels tune --backend hip` view of [`", stringify!($ty), "`].")]
        pub static $dyn: HipTunableDyn<$ty> = HipTunableDyn::new();
    };
}

hip_tunable!(RmsNorm, RMSNORM_HIP_TUNABLE);
hip_tunable!(FusedAddRmsNorm, FUSED_ADD_RMSNORM_HIP_TUNABLE);

/// `y = x / rms(x) * weight` per row on `stream`, with the config the runtime's policy
/// resolves for the device's gfx target. Returns that config and where it came from.
pub fn rmsnorm(
    rt: &HipRuntime,
    stream: &HipStream,
    problem: &NormProblem<'_>,
) -> Result<Resolved<RmsNormConfig>> {
    Ok(rt.run::<RmsNorm>(stream, problem)?.resolved)
}

/// `residual += x; x = rmsnorm(residual) * weight`, in place, on `stream`. The problem
/// must come from [`NormProblem::fused_add_rmsnorm_raw`]; one built for plain RMSNorm
/// is an error naming `problem`, and nothing is launched.
pub fn fused_add_rmsnorm(
    rt: &HipRuntime,
    stream: &HipStream,
    problem: &NormProblem<'_>,
) -> Result<Resolved<RmsNormConfig>> {
    Ok(rt.run::<FusedAddRmsNorm>(stream, problem)?.resolved)
}
