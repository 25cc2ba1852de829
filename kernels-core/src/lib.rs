//! The GPU runtime under every kernel family: devices, run-time compilation with a
//! persistent module cache, launch, timing, the [`Tunable`] trait, the autotuner and
//! the resolution policies.
//!
//! Layers, bottom up (as in cudarc): a small unsafe FFI edge (`ffi`, private) over
//! cudarc's driver and NVRTC bindings; safe types above it.
//!
//! - [`Device`] / [`DeviceInfo`]: open a GPU by ordinal (a clear error, never a panic,
//!   where there is no driver or GPU); name, arch, SM count, limits, L2; streams.
//! - [`Compiler`], [`KernelSource`], [`Variant`]: NVRTC compiles embedded,
//!   self-contained sources with `-D` defines, the arch (`sm_90a` on Hopper), C++17 and
//!   register hints; a failure returns the log and the variant.
//! - [`cache_key`], [`DiskCache`]: the one cache key and the checked, atomic on-disk
//!   cache (`KERNELS_CACHE_DIR`) for modules and online tuning results.
//! - [`Runtime`]: one per device; the in-process memo, parallel
//!   [`Runtime::precompile`] / [`Runtime::warm`], [`Runtime::resolve`] and
//!   [`Runtime::run`] under a [`Policy`] (`KERNELS_TUNING=serve|online|default`), and
//!   [`Runtime::tune`], the autotuner.
//! - [`Kernel`]: launch with cudarc buffers ([`Kernel::builder`]) or raw pointers and a
//!   raw stream ([`Kernel::launch_raw`]).
//! - [`PlannedKernel`]: a kernel family's backend-neutral launch ([`LaunchPlan`]: variant,
//!   [`LaunchDims`], [`KernelArgs`] from a config and a problem of raw device addresses),
//!   which the CUDA [`Tunable`] and the HIP `HipTunable` both launch.
//! - [`time_runs`]: the one timing routine. [`select`]: the one selection rule;
//!   [`start_search`] (candidates and report), [`recheck_configs`] and [`TuneReport`] are
//!   shared by both backends' tuners.
//! - [`tune_table`]: `kernels tune`'s resumable driver writing committed tables.
//! - With the `rocm` feature, the AMD backend: `HipDevice`, `HipCompiler` (hipRTC),
//!   `HipRuntime` (the same module cache and key; resolution under the policy, launches
//!   of a `PlannedKernel`, and the autotuner `HipRuntime::tune`), `HipKernel`,
//!   `time_hip_runs` (docs/amd.md).
//!
//! A kernel family implements [`Tunable`] (on top of `tuned::TunedKernel`); an op
//! then calls [`Runtime::run`]:
//!
//! ```ignore
//! let rt = kernels_core::Runtime::shared(0)?;
//! let used = rt.run::<FusedAddRmsNorm>(&stream, &problem)?; // resolve, compile once, launch
//! println!("{:?} from {}", used.resolved.config, used.resolved.source);
//! ```
//!
//! Everything except the CUDA runtime itself (cache keys, the disk cache, selection,
//! policies, shape files and table writing) works and is tested without a GPU.

mod args;
mod backend;
mod cache;
mod cache_key;
mod compile;
mod counters;
mod device;
mod element;
mod error;
/// What the kernel crates keyed by element type and row length share.
pub mod kernel_crate;
mod plan;
mod policy;
mod precompile;
mod runtime;
mod search;
mod select;
mod shape;
pub mod testing;
mod timing;
mod tunable;
mod tune_table;
mod tuner;
mod variant;

pub use args::{KernelArgs, LaunchDims, MAX_CLUSTER, MAX_KERNEL_ARGS, MAX_PORTABLE_CLUSTER};
pub use backend::mock::{Mock, MockBuffer, MockCompiler, MockDevice, MockKernel, MockStream};
pub use backend::{Backend, LoadedKernel};
pub use cache::{default_cache_dir, CacheEntry, DiskCache, Lookup, Section, CACHE_DIR_ENV};
pub use cache_key::{
    cache_key, codegen_env, AlignClass, CacheKey, CacheKeyParts, Component, CODEGEN_ENV_VARS,
    PDL_TUNING_VARIANT,
};
pub use compile::{Compiler, Image, ImageKind};
pub use counters::{ModuleOrigin, Stats};
pub use device::DeviceInfo;
pub use element::{decode, encode, pseudo_random};
pub use error::{Error, Result};
pub use plan::{candidates_digest, BufferRole, LaunchPlan, PlannedKernel, TuneBuffer};
pub use policy::{
    parse_pdl, pdl_from_env, resolve_in_order, Outcome, Policy, ResolutionSteps, Step, PDL_ENV, TUNING_ENV,
};
pub use runtime::{launch, Prepared, Runtime, RuntimeOptions, CRATE_VERSION};
pub use search::{
    all_failed, cached_config, candidate_configs, conclude, prefer_after_default, recheck_configs,
    start_search, time_candidates, tune_record, CandidateReport, Recheck, TuneOptions, TuneReport,
};
pub use select::{median, noise_margin, select, Measured, LONG_KERNEL_US, NOISE_THRESHOLD};
pub use shape::{check_disjoint, check_eps, dtype_define, widest_vector, Rows};
pub use timing::{
    graph_launches, rotation, time_runs, FlushL2, L2Flush, Timing, TimingMethod, TimingOptions, MIN_REPS,
};
pub use tunable::{DynTunable, Tunable, TunableDyn};
pub use tune_table::{
    parse_shapes, today, tune_table, CandidateRecord, Progress, TableJob, TableOutcome, TuneRecord,
};
pub use variant::{KernelSource, Variant};

#[cfg(feature = "cuda")]
pub use backend::cuda::{time_graph_runs, Cuda, CudaDevice, CudaKernel, GraphTimer, Launch, RawStream};
#[cfg(feature = "cuda")]
pub use element::{alloc_random, Element};

#[cfg(feature = "rocm")]
pub use backend::hip::{
    DeviceCopy, Hip, HipBuffer, HipCompiler, HipDevice, HipDeviceInfo, HipEvent, HipKernel, HipStream,
};

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
