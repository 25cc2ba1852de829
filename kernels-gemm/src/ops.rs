//! The GEMM op on every backend: runs a [`GemmProblem`] (device addresses, validated
//! when built) on a stream with the config the runtime's policy resolves, and says
//! which config and where it came from. Also the [`Tunable`] implementation the
//! runtime and `kernels tune` search with. The safe op on cudarc buffers is in
//! `crate::cuda` (feature `cuda`).
//!
//! ```no_run
//! # #[cfg(feature = "cuda")] {
//! use kernels_core::cudarc::driver::{DevicePtr, DevicePtrMut};
//! use kernels_core::{CudaDevice, CudaRuntime};
//! use kernels_gemm::plan::{GemmProblem, Operand};
//! use kernels_gemm::Layout;
//! use tuned::DType;
//! let rt = CudaRuntime::new(CudaDevice::open(0)?)?;
//! let stream = rt.device().new_stream()?;
//! let (m, n, k) = (16, 6144, 4096);
//! let a = stream.alloc_zeros::<half::bf16>(m * k).unwrap();
//! let w = stream.alloc_zeros::<half::bf16>(n * k).unwrap();
//! let mut c = stream.alloc_zeros::<half::bf16>(m * n).unwrap();
//! let key = kernels_gemm::GemmKey { dtype: DType::Bf16, layout: Layout::Nt, n: n as u32, k: k as u32 };
//! let ws_bytes = kernels_gemm::workspace_bytes(rt.info().tuning_target(), &key, m as u64);
//! let mut ws = stream.alloc_zeros::<u8>(ws_bytes.max(16)).unwrap();
//! let (ap, _ga) = a.device_ptr(&stream);
//! let (wp, _gw) = w.device_ptr(&stream);
//! let (cp, _gc) = c.device_ptr_mut(&stream);
//! let (sp, _gs) = ws.device_ptr_mut(&stream);
//! // SAFETY: live allocations of this device with the lengths given.
//! let p = unsafe {
//!     GemmProblem::raw(DType::Bf16, Layout::Nt, m, n, k, Operand::new(ap, m * k, k),
//!         Operand::new(wp, n * k, k), Operand::new(cp, m * n, n), DType::Bf16, None,
//!         Some((sp, ws_bytes)))
//! }?;
//! let used = kernels_gemm::ops::gemm(&rt, &stream, &p)?;
//! println!("{} from {}", used.config, used.source);
//! # }
//! # Ok::<(), kernels_core::Error>(())
//! ```

use kernels_core::{
    launch::{encode, pseudo_random},
    Backend, Result, Runtime, Tunable, TunableDyn,
};
use tuned::Resolved;

use crate::plan::tuning_workspace_bytes;
use crate::{Gemm, GemmConfig, GemmKey};

pub use crate::plan::{GemmProblem, Operand, SOURCE};

/// `C = A · op(B) (+ bias)` on `stream`, with the config the runtime's policy resolves
/// for the device.
pub fn gemm<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    problem: &GemmProblem<'_>,
) -> Result<Resolved<GemmConfig>> {
    Ok(rt.run::<Gemm>(stream, problem)?.resolved)
}

// Safety: the problem's A, B, C and workspace are the four uploaded buffers, of
// m x k, n x k (either layout), m x n elements and the tuning workspace's bytes.
unsafe impl Tunable for Gemm {
    fn tuning_inputs(key: &GemmKey, m: u64) -> Vec<Vec<u8>> {
        let (m, n, k) = (m as usize, key.n as usize, key.k as usize);
        vec![
            encode(key.dtype, &pseudo_random(m * k, 21, 1.0, 0.0)),
            encode(key.dtype, &pseudo_random(n * k, 22, 1.0, 0.0)),
            vec![0u8; m * n * key.dtype.size()], // C: zeros are all-zero bits in every dtype
            vec![0u8; tuning_workspace_bytes(key, m as u64).max(16)],
        ]
    }

    fn tuning_problem<'a>(key: &GemmKey, m: u64, at: &'a [u64]) -> GemmProblem<'a> {
        GemmProblem::tuning(*key, m, at)
    }

    /// Rows whose CPU reference stays within 2^30 multiply-adds (about a second): the
    /// weight is read once per row, so a 1 GB lm_head is checked on one or two rows and a
    /// router of n = 8 on its whole batch.
    fn check_batch(key: &GemmKey, m: u64) -> u64 {
        let per_row = u64::from(key.n) * u64::from(key.k);
        m.min(((1u64 << 30) / per_row.max(1)).max(1))
    }
}

/// The `kernels tune` view of [`Gemm`], on every backend.
pub static GEMM_TUNABLE: TunableDyn<Gemm> = TunableDyn::new();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    /// The served check runs Qwen2.5-7B's lm_head (1 GB) on one row, Llama's on two,
    /// 70B-tp8 qkv on 102 and a router of n = 8 on all its rows.
    #[test]
    fn the_served_check_bounds_its_reference_work() {
        let key = |n, k| GemmKey {
            dtype: tuned::DType::Bf16,
            layout: Layout::Nt,
            n,
            k,
        };
        assert_eq!(Gemm::check_batch(&key(152064, 3584), 8192), 1);
        assert_eq!(Gemm::check_batch(&key(128256, 4096), 8192), 2);
        assert_eq!(Gemm::check_batch(&key(1280, 8192), 8192), 102);
        assert_eq!(Gemm::check_batch(&key(8, 4096), 8192), 8192);
        assert_eq!(Gemm::check_batch(&key(1280, 8192), 16), 16);
    }
}
