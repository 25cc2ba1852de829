//! What a kernel family needs to be launched and tuned on any backend: the
//! [`PlannedKernel`] trait, whose [`PlannedKernel::plans`] turn a config and a problem
//! (raw device addresses) into the [`LaunchPlan`]s (variant, dimensions, arguments) of
//! one call, and the buffer descriptions ([`TuneBuffer`]) tuners use for in-place
//! safety, and the output checks ([`PlannedKernel::check_outputs`] against [`Expected`]
//! outputs) every search and `kernels tables check --served` run.
//!
//! A call is one launch for most families. A family whose call is a fixed sequence of
//! kernels (fused MoE: two grouped GEMMs and a combine) lists their variants in
//! [`PlannedKernel::variants`] and their arguments in [`PlannedKernel::launches`]; the
//! runtime compiles, launches, times and checks the sequence as one call, so a config
//! is tuned on everything it changes.
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

/// The most launches one call of a kernel family makes ([`Launches`]).
pub const MAX_LAUNCHES: usize = 4;

/// The dimensions and arguments of every launch of one call, in launch order
/// ([`PlannedKernel::launches`]). Held inline, up to [`MAX_LAUNCHES`], so planning a
/// call allocates nothing.
///
/// ```
/// use kernels_core::launch::Launches;
/// use kernels_core::{KernelArgs, LaunchDims};
/// let mut l = Launches::one(LaunchDims::linear(8, 128), KernelArgs::new());
/// l.push(LaunchDims::linear(1, 32), KernelArgs::new()).unwrap();
/// assert_eq!(l.len(), 2);
/// assert_eq!(l.get(1).unwrap().0.grid, (1, 1, 1));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Launches {
    // Unused slots stay `None`, so a one-launch call writes one launch's bytes.
    steps: [Option<(LaunchDims, KernelArgs)>; MAX_LAUNCHES],
    len: usize,
}

impl Launches {
    /// No launch yet.
    pub const fn new() -> Launches {
        Launches {
            steps: [const { None }; MAX_LAUNCHES],
            len: 0,
        }
    }

    /// A call of one launch.
    pub fn one(dims: LaunchDims, args: KernelArgs) -> Launches {
        let mut l = Launches::new();
        l.steps[0] = Some((dims, args));
        l.len = 1;
        l
    }

    /// Appends the next launch; an error past [`MAX_LAUNCHES`].
    pub fn push(&mut self, dims: LaunchDims, args: KernelArgs) -> Result<()> {
        let slot = self.steps.get_mut(self.len).ok_or_else(|| {
            crate::Error::invalid(
                "launches",
                format!("a call makes at most {MAX_LAUNCHES} launches"),
            )
        })?;
        *slot = Some((dims, args));
        self.len += 1;
        Ok(())
    }

    /// Every launch's dimensions and arguments, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&LaunchDims, &KernelArgs)> {
        self.steps[..self.len].iter().flatten().map(|(d, a)| (d, a))
    }

    /// Launch `i`'s dimensions and arguments.
    pub fn get(&self, i: usize) -> Option<(&LaunchDims, &KernelArgs)> {
        self.steps.get(i)?.as_ref().map(|(d, a)| (d, a))
    }

    /// How many launches.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for Launches {
    fn default() -> Self {
        Launches::new()
    }
}

/// A kernel family whose launches are planned without a backend: the search space,
/// the variant of a config, the shape and buffers of a problem, and the launch plan.
/// Problems hold raw device addresses, so the same problem type serves CUDA and HIP.
///
/// A call is one launch unless the family overrides [`PlannedKernel::variants`] and
/// [`PlannedKernel::launches`] (then [`PlannedKernel::variant`] and
/// [`PlannedKernel::launch_args`] describe its first launch); the runtime and tuners
/// use those two, so buffers, checks and timings cover the whole call.
///
/// # Safety
/// [`PlannedKernel::buffers`] must list every buffer the planned launches write, with
/// addresses and lengths valid for as long as the problem lives (tuners copy into and
/// zero them), and [`PlannedKernel::launches`] must produce, for each variant of
/// [`PlannedKernel::variants`] in order, arguments that match its entry point and stay
/// within those buffers.
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

    /// The compiled variant of `config` for `key`: entry point, defines and hints (of
    /// the first launch, for a family whose call is several).
    fn variant(device: &DeviceInfo, key: &Self::Key, config: &Self::Config) -> Variant;

    /// The compiled variant of every launch of one call of `config` for `key`, in
    /// launch order (at most [`MAX_LAUNCHES`]). The default is the one
    /// [`PlannedKernel::variant`].
    fn variants(device: &DeviceInfo, key: &Self::Key, config: &Self::Config) -> Vec<Variant> {
        vec![Self::variant(device, key, config)]
    }

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

    /// The dimensions and arguments of every launch of one call of `config` on
    /// `problem`, one per variant of [`PlannedKernel::variants`], in that order. Checks
    /// the whole call before anything launches, so an error (naming the argument)
    /// launches nothing; allocates nothing. The default is the one
    /// [`PlannedKernel::launch_args`].
    fn launches(device: &DeviceInfo, config: &Self::Config, problem: &Self::Problem<'_>) -> Result<Launches> {
        let (dims, args) = Self::launch_args(device, config, problem)?;
        Ok(Launches::one(dims, args))
    }

    /// The CPU reference of a call on `problem` whose buffers held `before` (their bytes,
    /// in [`PlannedKernel::buffers`] order): every buffer's values after one call, one
    /// f32 per element (inputs as they were). `None` where the kernel has none.
    fn reference(problem: &Self::Problem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>>;

    /// Checks a call on `problem` (all its launches): `before` and `got` are every
    /// buffer's bytes before and after it ([`PlannedKernel::buffers`] order), `expected` what another run or the
    /// reference left. The tolerance is the kernel's own, derived from its arithmetic
    /// and the storage type; the error names the first value outside it. Buffers the
    /// kernel only reads are checked unchanged by the caller, and those above
    /// [`crate::tune::UNREAD_LIMIT`] come empty in `got` (and in an `Expected::Run`):
    /// they are not read back per call, so a check reads inputs from `before`.
    fn check_outputs(
        problem: &Self::Problem<'_>,
        before: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> std::result::Result<(), String>;

    /// The first launch of `config` on `problem` on `device`: the variant to compile
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

    /// Every launch of one call of `config` on `problem` on `device`, in order:
    /// [`PlannedKernel::variants`] with [`PlannedKernel::launches`]. For tools and
    /// tests; it builds the variants. An error when the two lists differ in length.
    fn plans(
        device: &DeviceInfo,
        config: &Self::Config,
        problem: &Self::Problem<'_>,
    ) -> Result<Vec<LaunchPlan>> {
        let launches = Self::launches(device, config, problem)?;
        let (key, _) = Self::problem_shape(problem);
        let variants = Self::variants(device, &key, config);
        check_count(Self::SCHEMA.kernel, variants.len(), launches.len())?;
        Ok(variants
            .into_iter()
            .zip(launches.iter())
            .map(|(variant, (dims, args))| LaunchPlan {
                variant,
                dims: *dims,
                args: args.clone(),
            })
            .collect())
    }
}

/// The error of a call whose kernels and planned launches differ in number (a broken
/// [`PlannedKernel`]: its variants and launches disagree).
pub(crate) fn check_count(kernel: &str, kernels: usize, launches: usize) -> Result<()> {
    if kernels != launches {
        return Err(crate::Error::kernel(
            kernel,
            format!("{kernels} compiled variants for {launches} planned launches"),
        ));
    }
    Ok(())
}

/// Digest of what a search for `key` at `batch` on `device` compiles and times: the
/// variants of every config of [`PlannedKernel::search_space`] and of the analytic
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
        // One line per variant, so a one-launch family's digest is that of its variants.
        for v in K::variants(device, key, c) {
            // Writing to a String cannot fail.
            let _ = writeln!(text, "{v}");
        }
    }
    format!("fnv1a64:{:016x}", tuned::fnv1a64(text.as_bytes()))
}
