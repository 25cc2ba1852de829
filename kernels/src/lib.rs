//! The facade a serving engine depends on: every kernel family, the tuning model and
//! the runtime, with the target features (`sm80 sm90 gfx90a gfx942 gfx950`) forwarded
//! to each kernel crate so only the enabled targets' tables are baked.
//!
//! Depend on it without default features, with your backend and the targets you ship
//! (`default-features = false, features = ["cuda", "sm90"]`): the defaults add the
//! `kernels` command-line tool (feature `cli`), which an engine does not need.
//!
//! What an engine uses:
//!
//! - **runtime**: [`core::Runtime`] (one per GPU, `Runtime::shared(ordinal)`), its
//!   streams, and `Runtime::warm` to resolve and compile a model's shapes at start-up;
//!   [`core::RuntimeOptions`] and [`core::Policy`] (serve, online, default-only);
//!   on AMD (feature `rocm`) `core::HipRuntime` and its counterparts;
//! - **ops per family**, on cudarc buffers or raw pointers: [`softmax::ops`]
//!   (`softmax`, `log_softmax`) and [`rmsnorm::ops`] (`rmsnorm`, `fused_add_rmsnorm`);
//!   on AMD `softmax::hip` and `rmsnorm::hip`;
//! - **problems**, a shape checked once and launched many times:
//!   [`softmax::ops::SoftmaxProblem`], [`rmsnorm::ops::NormProblem`], with
//!   [`core::Rows`] for a row-major shape;
//! - **keys and resolved configs**: each family's key ([`softmax::SoftmaxKey`],
//!   [`rmsnorm::RmsNormKey`], [`gemm::GemmKey`], [`moe::MoeKey`]) and config (which
//!   prints as `threads=256 vec=2 ...`, as `kernels plan` does); [`resolve_serve`] and
//!   [`tuned::PreparedKey`] resolve one GPU-free as the serving path does, and every op
//!   returns the [`Resolved`] config it ran with and its [`Source`];
//! - **errors**: [`core::Error`] (every op's, naming the bad argument) and
//!   [`core::Result`];
//! - **targets and element types**: [`Target`], [`DType`], and [`half`]'s [`bf16`] and
//!   [`f16`](struct@f16), the types the ops are generic over (with `f32`).
//!
//! For tools that handle every kernel alike, by name: [`registry`] and [`kernel`].
//! The GPU commands behind the CLI (`runtime_cmd`) are a library only with the `tools`
//! feature, for the retune bench; engines leave it off.
//!
//! ```
//! use kernels::{resolve_serve, rmsnorm::{RmsNorm, RmsNormKey}, DType, Target};
//! let r = resolve_serve::<RmsNorm>(Target::Sm90, &RmsNormKey { dtype: DType::Bf16, cols: 4096 }, 7);
//! println!("{} from {}", r.config, r.source);
//! ```

#[cfg(feature = "tools")]
pub mod runtime_cmd;

pub use kernels_core as core;
pub use kernels_core::half;
pub use kernels_core::half::{bf16, f16};
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
