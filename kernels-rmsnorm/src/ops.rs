//! The RMSNorm ops on every backend: each runs a [`NormProblem`] (device addresses,
//! validated when built) on a stream with the config the runtime's policy resolves,
//! and says which config and where it came from. Also the [`Tunable`] implementations
//! the runtime and `kernels tune` search with. The safe ops on cudarc buffers are in
//! `crate::cuda` (feature `cuda`).
//!
//! Every problem constructor validates shapes, lengths, strides, `eps`, aliasing and
//! alignment before anything is launched and returns an error naming the bad argument.

use kernels_core::{
    launch::{encode, pseudo_random},
    Backend, Result, Runtime, Tunable, TunableDyn,
};
use tuned::Resolved;

use crate::{FusedAddRmsNorm, RmsNorm, RmsNormConfig, RmsNormKey};

pub use crate::plan::{NormProblem, SOURCE};

/// `y = x / rms(x) * weight` per row on `stream`, with the config the runtime's policy
/// resolves for the device. The problem must come from [`NormProblem::rmsnorm_raw`].
pub fn rmsnorm<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    problem: &NormProblem<'_>,
) -> Result<Resolved<RmsNormConfig>> {
    Ok(rt.run::<RmsNorm>(stream, problem)?.resolved)
}

/// `residual += x; x = rmsnorm(residual) * weight`, in place (SGLang's and vLLM's
/// `fused_add_rmsnorm`), on `stream`. The problem must come from
/// [`NormProblem::fused_add_rmsnorm_raw`]; one built for plain RMSNorm is an error
/// naming `problem`, and nothing is launched.
pub fn fused_add_rmsnorm<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    problem: &NormProblem<'_>,
) -> Result<Resolved<RmsNormConfig>> {
    Ok(rt.run::<FusedAddRmsNorm>(stream, problem)?.resolved)
}

/// The inputs of a problem the tuner makes itself: x, weight near 1, and the output
/// (the residual of the fused kernel).
fn tuning_inputs(key: &RmsNormKey, rows: u64) -> Vec<Vec<u8>> {
    let n = rows as usize * key.cols as usize;
    vec![
        encode(key.dtype, &pseudo_random(n, 1, 2.0, 0.0)),
        encode(key.dtype, &pseudo_random(key.cols as usize, 2, 0.5, 1.0)),
        encode(key.dtype, &pseudo_random(n, 3, 2.0, 0.0)),
    ]
}

macro_rules! tunable {
    ($ty:ident, $dyn:ident) => {
        // Safety: the problem's x, weight and output are the three uploaded buffers,
        // with the lengths the problem describes.
        unsafe impl Tunable for $ty {
            fn tuning_inputs(key: &RmsNormKey, batch: u64) -> Vec<Vec<u8>> {
                tuning_inputs(key, batch)
            }

            fn tuning_problem<'a>(key: &RmsNormKey, batch: u64, at: &'a [u64]) -> NormProblem<'a> {
                NormProblem::tuning(*key, batch, at[0], at[1], at[2])
            }
        }

        #[doc = concat!("The `kernels tune` view of [`", stringify!($ty), "`], on every backend.")]
        pub static $dyn: TunableDyn<$ty> = TunableDyn::new();
    };
}

tunable!(RmsNorm, RMSNORM_TUNABLE);
tunable!(FusedAddRmsNorm, FUSED_ADD_RMSNORM_TUNABLE);
