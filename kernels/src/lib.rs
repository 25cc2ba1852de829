//! The facade a serving engine depends on: every kernel family, the tuning model and
//! the runtime, with the target features (`sm80 sm90 gfx90a gfx942 gfx950`) forwarded
//! to each kernel crate so only the enabled targets' tables are baked.
//!
//! Depend on it without default features, with your backend and the targets you ship
//! (`default-features = false, features = ["cuda", "sm90"]`): the defaults add the
//! `kernels` command-line tool (feature `cli`), which an engine does not need.
//!
//! ```
//! use kernels::{resolve_serve, rmsnorm::{RmsNorm, RmsNormKey}, DType, Target};
//! let r = resolve_serve::<RmsNorm>(Target::Sm90, &RmsNormKey { dtype: DType::Bf16, cols: 4096 }, 7);
//! println!("{:?} from {}", r.config, r.source);
//! ```

/// The GPU commands of the `kernels` tool (tune, precompile, info, tables check), a
/// library only for the retune bench (feature `tools`); engines leave it off.
#[cfg(feature = "tools")]
pub mod runtime_cmd;

pub use kernels_core as core;
pub use kernels_gemm as gemm;
pub use kernels_moe as moe;
pub use kernels_rmsnorm as rmsnorm;
pub use kernels_softmax as softmax;
pub use tuned;
pub use tuned::{resolve_serve, DType, Resolved, Source, Target};

/// Every kernel with a table, by name, for tools that handle kernels alike.
pub fn registry() -> [&'static dyn tuned::DynKernel; 5] {
    [
        &kernels_softmax::SOFTMAX,
        &kernels_rmsnorm::RMSNORM,
        &kernels_rmsnorm::FUSED_ADD_RMSNORM,
        &kernels_gemm::GEMM,
        &kernels_moe::MOE,
    ]
}

/// The kernel named `name`, if any.
pub fn kernel(name: &str) -> Option<&'static dyn tuned::DynKernel> {
    registry().into_iter().find(|k| k.schema().kernel == name)
}
