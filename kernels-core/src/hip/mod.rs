//! The AMD backend (feature `rocm`): HIP devices, hipRTC compiles, the module cache,
//! launch and timing. See `docs/amd.md`.
//!
//! Layers, bottom up: `ffi` (private) is the only unsafe code: HIP runtime calls
//! linked through hip-sys, hipRTC loaded at run time, the handle types. Above it:
//!
//! - [`HipDevice`] / [`HipDeviceInfo`]: discovery, name, `gcnArchName` and the arch
//!   (`gfx942`), the [`tuned::Target`], CU count, limits, wavefront size, L2, memory;
//!   [`HipStream`]s and [`HipBuffer`]s (device memory with synchronous copies). With no
//!   AMD GPU every entry point is [`crate::Error::NoHipDevice`].
//! - [`HipCompiler`]: hipRTC compiles a [`crate::KernelSource`] + [`crate::Variant`]
//!   for `--offload-arch=<arch>` into an [`crate::ImageKind::CodeObject`] image.
//! - [`HipRuntime`]: one per device; the module cache ([`hip_module_key`], the same
//!   [`crate::cache_key`] and [`crate::DiskCache`] as CUDA), the in-process memo, and
//!   [`HipKernel`]s launched with `hipModuleLaunchKernel` from [`crate::LaunchDims`] and
//!   [`crate::KernelArgs`].
//! - [`HipEvent`] and [`time_hip_runs`]: events, warm-up, reps, median.
//! - [`HipRuntime::resolve`] / [`HipRuntime::run`]: a [`crate::PlannedKernel`]'s config
//!   resolved under the policy (baked table of the gfx target, analytic default,
//!   online search) and its [`crate::LaunchPlan`] launched ([`HipPrepared`]).
//! - [`HipRuntime::tune`], [`HipTunable`], [`DynHipTunable`]: the autotuner on AMD and
//!   what `kernels tune --backend hip` drives.

mod device;
mod ffi;
mod resolve;
mod rtc;
mod runtime;
mod timing;
mod tuner;

pub use device::{DeviceCopy, HipBuffer, HipDevice, HipDeviceInfo, HipStream};
pub use resolve::HipPrepared;
pub use rtc::HipCompiler;
pub use runtime::{hip_module_key, hip_tuning_key, HipKernel, HipRuntime};
pub use timing::{time_hip_runs, HipEvent, HipL2Flush};
pub use tuner::{DynHipTunable, HipTunable, HipTunableDyn};
