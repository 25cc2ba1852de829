//! The GPU runtime under every kernel family: one backend abstraction, run-time
//! compilation with a persistent module cache, launch, the resolution policies and the
//! autotuner.
//!
//! What an engine uses (the crate root):
//!
//! - [`Runtime`] ([`CudaRuntime`], `HipRuntime`): one per device; resolves a config
//!   under a [`Policy`] (`KERNELS_TUNING=serve|online|default`), compiles each variant
//!   once (memo, then the disk cache), launches; [`Runtime::warm`] and
//!   [`Runtime::precompile`] do the compiling ahead of serving; [`Runtime::stats`].
//! - The backends: [`Backend`], implemented by [`Cuda`] (feature `cuda`), `Hip`
//!   (feature `rocm`) and [`Mock`] (host memory, simulated clock; tests).
//! - [`Error`] / [`Result`]: every failure, with the argument it names; [`DeviceInfo`].
//! - [`DiskCache`]: the module and tuning cache (`KERNELS_CACHE_DIR`).
//!
//! The ops themselves live in the kernel crates (`kernels_softmax::ops`, ...).
//!
//! What a kernel family is built from: [`Tunable`] (on top of `tuned::TunedKernel`),
//! [`PlannedKernel`] and [`LaunchPlan`], [`launch()`] (module [`mod@launch`]: variants,
//! dimensions, arguments, row shapes) and [`kernel_crate`].
//!
//! Tooling, apart from the serving surface: [`tune`] (the search, timing, tuning
//! records, `kernels tune`'s table driver), [`cache`] (the cache key and the disk cache's
//! entries), [`testing`] (GPU-test helpers).
//!
//! ```ignore
//! let rt = kernels_core::CudaRuntime::shared(0)?;
//! let used = rt.run::<FusedAddRmsNorm>(&stream, &problem)?; // resolve, compile once, launch
//! println!("{:?} from {}", used.resolved.config, used.resolved.source);
//! ```
//!
//! Everything except the GPU calls themselves (cache keys, the disk cache, selection,
//! policies, shape files and table writing, the runtime on the mock backend) works and
//! is tested without a GPU.

pub mod backend;
pub mod cache;
mod error;
/// What the kernel crates keyed by element type and row length share.
pub mod kernel_crate;
pub mod launch;
mod runtime;
pub mod testing;
pub mod tune;

pub use backend::mock::Mock;
pub use backend::{Backend, Compiler, DeviceInfo, Image, ImageKind, LoadedKernel};
pub use cache::{DiskCache, CACHE_DIR_ENV};
pub use error::{Error, Result};
pub use launch::{
    check_disjoint, check_eps, dtype_define, widest_vector, BufferRole, Expected, KernelArgs, KernelSource,
    LaunchDims, LaunchPlan, Launches, PlannedKernel, Rows, TuneBuffer, Variant,
};
pub use runtime::{
    launch, launch_planned, parse_pdl, pdl_from_env, CallKernels, ModuleOrigin, Policy, Prepared, Runtime,
    RuntimeOptions, Stats, CRATE_VERSION, PDL_ENV, TUNING_ENV,
};
pub use tune::{DynTunable, Tunable, TunableDyn};

// Crate-internal short paths to every module's items (the public paths are above).
#[cfg(feature = "cuda")]
#[allow(unused_imports)]
pub(crate) use backend::cuda::*;
#[cfg(feature = "rocm")]
#[allow(unused_imports)]
pub(crate) use backend::hip::*;
#[allow(unused_imports)]
pub(crate) use backend::mock::*;
#[allow(unused_imports)]
pub(crate) use cache::*;
#[allow(unused_imports)]
pub(crate) use launch::*;
#[allow(unused_imports)]
pub(crate) use runtime::*;
#[allow(unused_imports)]
pub(crate) use tune::*;

#[cfg(feature = "cuda")]
pub use backend::cuda::{Cuda, CudaDevice};
#[cfg(feature = "rocm")]
pub use backend::hip::{Hip, HipDevice};

/// The runtime on CUDA.
#[cfg(feature = "cuda")]
pub type CudaRuntime = Runtime<Cuda>;
/// The runtime on HIP.
#[cfg(feature = "rocm")]
pub type HipRuntime = Runtime<Hip>;

/// cudarc, re-exported so kernel crates name the same version.
#[cfg(feature = "cuda")]
pub use cudarc;
/// half, re-exported: its `bf16` and `f16` are element types of the ops.
pub use half;
/// The tuning model, re-exported.
pub use tuned;

/// The shared device prelude (crate `kernels-prelude`): bf16/fp16 storage types,
/// conversions and vector loads for self-contained kernel sources. A kernel family
/// compiles its source after it, `KernelSource::new(..).with_preamble(&[PRELUDE])`; a
/// source that includes it instead passes it as a header,
/// `.with_headers(&[("prelude.cuh", PRELUDE)])`.
pub use kernels_prelude::PRELUDE;
