//! What a kernel family needs to be launched and tuned on any backend: the
//! [`PlannedKernel`] trait, whose [`PlannedKernel::plan`] turns a config and a problem
//! (raw device addresses) into a [`LaunchPlan`] (variant, dimensions, arguments), and
//! the buffer descriptions ([`TuneBuffer`]) tuners use for in-place safety, and the
//! output checks ([`PlannedKernel::check_outputs`] against [`Expected`] outputs) every
//! search and `kernels tables check --served` run.
//!
//! Every backend (CUDA, HIP, the mock) launches the same plan, so a config and a
//! problem give byte-identical arguments and the same dimensions on each.

use std::fmt::Debug;
use std::hash::Hash;

use tuned::TunedKernel;

use crate::{AlignClass, DeviceInfo, KernelArgs, KernelSource, LaunchDims, Result, Variant};

/// What the tuner does with a buffer between runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferRole {
    /// Only read. Left alone.
    Read,
    /// Only written, fully, by every run. Left alone.
    Write,
    /// Read and written in place (fused_add_rmsnorm's `x` and `residual`): snapshotted
    /// before tuning and restored before every run, outside the timed region.
    Restore,
    /// Accumulated into by the kernel (split-K partial sums, atomic counters), which the
    /// op zeroes before launching: zeroed before every run, outside the timed region.
    Zero,
}

/// One device buffer of a problem, as the tuner sees it: raw address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TuneBuffer {
    /// The kernel's name for it (`x`, `residual`), for reports.
    pub name: &'static str,
    /// Device address.
    pub ptr: u64,
    /// Length in bytes.
    pub bytes: usize,
    pub role: BufferRole,
}

/// What a run's buffers are compared with by [`PlannedKernel::check_outputs`].
#[derive(Clone, Copy, Debug)]
pub enum Expected<'a> {
    /// Another run of the kernel on the same problem: every buffer's bytes after it (a
    /// search compares each candidate with the analytic default's run). It carries the
    /// kernel's own error, so the bound is that of two runs.
    Run(&'a [Vec<u8>]),
    /// The CPU reference ([`PlannedKernel::reference`]): every buffer's values after one
    /// run, one f32 per element, not rounded to the storage type.
    Reference(&'a [Vec<f32>]),
}

/// Everything one launch needs, whatever the backend: the compiled variant to launch,
/// its grid, block and dynamic shared memory, and its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    pub variant: Variant,
    pub dims: LaunchDims,
    pub args: KernelArgs,
}

/// A kernel family whose launches are planned without a backend: the search space,
/// the variant of a config, the shape and buffers of a problem, and the launch plan.
/// Problems hold raw device addresses, so the same problem type serves CUDA and HIP.
///
/// # Safety
/// [`PlannedKernel::buffers`] must list every buffer the planned launch writes, with
/// addresses and lengths valid for as long as the problem lives (tuners copy into and
/// zero them), and [`PlannedKernel::plan`] must produce arguments that match the
/// variant's entry point and stay within those buffers.
pub unsafe trait PlannedKernel:
    TunedKernel<
    Key: Clone + Eq + Hash + Debug + Send + Sync + 'static,
    Config: Eq + Hash + Debug + Send + Sync + 'static,
>
{
    /// The arguments of one call, as device addresses borrowed for `'a`.
    type Problem<'a>;

    /// The device source every variant compiles from.
    const SOURCE: &'static KernelSource;

    /// The search space for `key` and `batch` on `device` (its tuning target and
    /// limits). The analytic default is added by tuners whether or not it is listed.
    fn search_space(device: &DeviceInfo, key: &Self::Key, batch: u64) -> Vec<Self::Config>;

    /// The compiled variant of `config` for `key`: entry point, defines and hints.
    fn variant(device: &DeviceInfo, key: &Self::Key, config: &Self::Config) -> Variant;

    /// The static key and batch of a problem.
    fn problem_shape(problem: &Self::Problem<'_>) -> (Self::Key, u64);

    /// Every device buffer of the problem with its role.
    fn buffers(problem: &Self::Problem<'_>) -> Vec<TuneBuffer>;

    /// The pointer/stride alignment class of a problem. The default computes it from
    /// [`PlannedKernel::buffers`].
    fn alignment(problem: &Self::Problem<'_>) -> AlignClass {
        AlignClass::of(Self::buffers(problem).iter().map(|b| b.ptr))
    }

    /// The config adjusted to what a problem's alignment allows. The default keeps it.
    fn fit_alignment(
        _device: &DeviceInfo,
        _key: &Self::Key,
        config: Self::Config,
        _align: AlignClass,
    ) -> Self::Config {
        config
    }

    /// The dimensions and arguments of a launch of `config` on `problem` on `device`.
    /// Checks what the config needs of the problem (alignment, sizes) and returns an
    /// error naming the argument instead. Launchers call it with the loaded variant's
    /// config on every launch, so it allocates nothing; they validate the dimensions
    /// against the device.
    fn launch_args(
        device: &DeviceInfo,
        config: &Self::Config,
        problem: &Self::Problem<'_>,
    ) -> Result<(LaunchDims, KernelArgs)>;

    /// The CPU reference of a run on `problem` whose buffers held `before` (their bytes,
    /// in [`PlannedKernel::buffers`] order): every buffer's values after one run, one
    /// f32 per element (inputs as they were). `None` where the kernel has none.
    fn reference(problem: &Self::Problem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>>;

    /// Checks a run on `problem`: `before` and `got` are every buffer's bytes before and
    /// after it ([`PlannedKernel::buffers`] order), `expected` what another run or the
    /// reference left. The tolerance is the kernel's own, derived from its arithmetic
    /// and the storage type; the error names the first value outside it. Buffers the
    /// kernel only reads are checked unchanged by the caller.
    fn check_outputs(
        problem: &Self::Problem<'_>,
        before: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> std::result::Result<(), String>;

    /// The whole launch of `config` on `problem` on `device`: the variant to compile
    /// and [`PlannedKernel::launch_args`]. For tools and tests; it builds the variant.
    fn plan(device: &DeviceInfo, config: &Self::Config, problem: &Self::Problem<'_>) -> Result<LaunchPlan> {
        let (dims, args) = Self::launch_args(device, config, problem)?;
        let (key, _) = Self::problem_shape(problem);
        Ok(LaunchPlan {
            variant: Self::variant(device, &key, config),
            dims,
            args,
        })
    }
}

/// Digest of what a search for `key` at `batch` on `device` compiles and times: the
/// variant of every config of [`PlannedKernel::search_space`] and of the analytic
/// default, in order (`fnv1a64:` and 16 hex digits). It is part of every tuning cache
/// key ([`crate::CacheKeyParts::candidates`]), so a stored result is a miss once the
/// search space or the host's derivation of a config's defines changes (the source
/// fingerprint covers only the device code).
pub fn candidates_digest<K: PlannedKernel>(device: &DeviceInfo, key: &K::Key, batch: u64) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let default = K::analytic_default(device.tuning_target(), key, batch);
    for c in K::search_space(device, key, batch)
        .iter()
        .chain(std::iter::once(&default))
    {
        // Writing to a String cannot fail.
        let _ = writeln!(text, "{}", K::variant(device, key, c));
    }
    format!("fnv1a64:{:016x}", tuned::fnv1a64(text.as_bytes()))
}
