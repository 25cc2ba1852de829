//! The [`Tunable`] trait a kernel family implements to be compiled, launched and tuned
//! by the runtime, and [`DynTunable`], its object-safe form for tools (`kernels tune`).

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use tuned::{KernelSchema, StaticKey};

use crate::search::backend::{candidates_or_error, parse_key, working_set, RecheckPlan};
use crate::{Error, Kernel, PlannedKernel, RawStream, Recheck, Result, Runtime, TuneOptions, TuneRecord};

/// A kernel family the CUDA runtime can compile, launch and tune: a [`PlannedKernel`]
/// (key, config, schema, analytic default and tables through [`tuned::TunedKernel`]; search
/// space, variants, problems, buffers and launch plans without a backend) plus what
/// the CUDA tuner needs of its own: problems it allocates ([`Tunable::alloc_problem`])
/// and the launch on a CUDA stream.
///
/// The tuner makes repeated runs safe through [`PlannedKernel::buffers`]: `Restore`
/// buffers are snapshotted and put back, and `Zero` buffers zeroed, before every run
/// and outside the timed region; after tuning the caller's buffers hold exactly what
/// one plain run of the chosen config gives.
///
/// # Safety
/// As for [`PlannedKernel`]; an overriding [`Tunable::launch`] must also stay within
/// the buffers [`PlannedKernel::buffers`] lists.
///
/// # Example
///
/// ```ignore
/// static SOURCE: KernelSource = KernelSource::new("scale", include_str!("../cuda/scale.cu"), SOURCE_FINGERPRINT);
///
/// // Raw device addresses, so the same problem serves CUDA and HIP.
/// pub struct ScaleProblem<'a> { x: u64, n: u32, a: f32, _buf: PhantomData<&'a mut [f32]> }
///
/// unsafe impl PlannedKernel for Scale {
///     type Problem<'a> = ScaleProblem<'a>;
///     const SOURCE: &'static KernelSource = &SOURCE;
///
///     fn search_space(_: &DeviceInfo, _: &ScaleKey, _: u64) -> Vec<ScaleConfig> {
///         [64, 128, 256, 512].map(|threads| ScaleConfig { threads }).to_vec()
///     }
///     fn variant(_: &DeviceInfo, _: &ScaleKey, c: &ScaleConfig) -> Variant {
///         Variant::new("scale").define("THREADS", c.threads)
///     }
///     fn problem_shape(p: &ScaleProblem<'_>) -> (ScaleKey, u64) { (ScaleKey, p.n as u64) }
///     fn buffers(p: &ScaleProblem<'_>) -> Vec<TuneBuffer> {
///         vec![TuneBuffer { name: "x", ptr: p.x, bytes: p.n as usize * 4, role: BufferRole::Restore }]
///     }
///     fn launch_args(_: &DeviceInfo, c: &ScaleConfig, p: &ScaleProblem<'_>) -> Result<(LaunchDims, KernelArgs)> {
///         let mut args = KernelArgs::new();
///         args.ptr(p.x).f32(p.a).u32(p.n);
///         Ok((LaunchDims::linear(p.n.div_ceil(c.threads), c.threads), args))
///     }
/// }
///
/// unsafe impl Tunable for Scale {
///     type Owned = (CudaSlice<f32>, f32);
///     fn alloc_problem(stream: &Arc<CudaStream>, _: &ScaleKey, batch: u64) -> Result<(CudaSlice<f32>, f32)> { ... }
///     fn borrow_problem(o: &mut (CudaSlice<f32>, f32)) -> ScaleProblem<'_> { ... }
/// }
/// ```
pub unsafe trait Tunable: PlannedKernel {
    /// A problem the tuner allocates itself (offline tuning, online resolution without
    /// a caller's problem).
    type Owned;

    /// Launches `kernel` (compiled from [`PlannedKernel::variant`] of `config`) on
    /// `problem`: by default the plan's [`PlannedKernel::launch_args`] (which checks
    /// what the config needs of the problem and names the argument otherwise) through
    /// [`Kernel::launch_raw`].
    fn launch(
        kernel: &Kernel,
        stream: &Arc<CudaStream>,
        config: &Self::Config,
        problem: &Self::Problem<'_>,
    ) -> Result<()> {
        let (dims, args) = Self::launch_args(kernel.info(), config, problem)?;
        // SAFETY: the PlannedKernel contract: the plan matches the variant's entry
        // point and stays within the problem's buffers.
        unsafe { kernel.launch_raw(RawStream::of(stream), dims, &args) }
    }

    /// Allocates a problem of `key` and `batch` with deterministic contents.
    fn alloc_problem(stream: &Arc<CudaStream>, key: &Self::Key, batch: u64) -> Result<Self::Owned>;

    /// Borrows an allocated problem.
    fn borrow_problem(owned: &mut Self::Owned) -> Self::Problem<'_>;
}

/// Object-safe view of a [`Tunable`], so `kernels tune` dispatches over a registry of
/// kernels by name. Make one with `static X: TunableDyn<MyKernel> = TunableDyn::new();`.
pub trait DynTunable: Sync {
    /// The kernel's table contract.
    fn schema(&self) -> &'static KernelSchema;
    /// Fingerprint of its source.
    fn source_fingerprint(&self) -> &'static str;
    /// The [`crate::candidates_digest`] of a search for `key` at `batch` on `device`,
    /// for its tuning cache key. A key the kernel cannot parse gets a digest of the
    /// error (the search fails on it anyway).
    fn candidates(&self, device: &crate::DeviceInfo, key: &StaticKey, batch: u64) -> String;
    /// Tunes one (static key, batch) on a problem the kernel allocates. Not persisted
    /// (the caller decides where results go).
    fn search(
        &self,
        rt: &Runtime,
        stream: &Arc<CudaStream>,
        key: &StaticKey,
        batch: u64,
        opts: &TuneOptions,
    ) -> Result<TuneRecord>;
    /// Resolves each shape under the runtime's policy and compiles the variants in
    /// parallel (filling the module cache). One result per shape.
    fn precompile(
        &self,
        rt: &Runtime,
        stream: &Arc<CudaStream>,
        shapes: &[(StaticKey, u64)],
    ) -> Vec<Result<tuned::Source>>;
    /// Re-measures a committed entry on a problem the kernel allocates: the entry's
    /// config, the analytic default and `sample` configs spread evenly over the search
    /// space (a quick search), all with the same timing routine. For `kernels tables
    /// check` on a GPU. `entry` is a tuned config; the caller skips default markers.
    #[allow(clippy::too_many_arguments)]
    fn recheck(
        &self,
        rt: &Runtime,
        stream: &Arc<CudaStream>,
        key: &StaticKey,
        batch: u64,
        entry: &[tuned::Value],
        sample: usize,
        timing: &crate::TimingOptions,
    ) -> Result<Recheck>;
}

/// The [`DynTunable`] of a [`Tunable`].
pub struct TunableDyn<K>(PhantomData<fn() -> K>);

impl<K> TunableDyn<K> {
    pub const fn new() -> Self {
        TunableDyn(PhantomData)
    }
}

impl<K> Default for TunableDyn<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Tunable> TunableDyn<K> {
    /// One problem of the shape, or for graph timing as many as [`crate::rotation`]
    /// asks for (the first decides the bytes per call).
    fn alloc_copies(
        rt: &Runtime,
        stream: &Arc<CudaStream>,
        key: &K::Key,
        batch: u64,
        timing: &crate::TimingOptions,
    ) -> Result<Vec<K::Owned>> {
        let mut first = K::alloc_problem(stream, key, batch)?;
        let bytes = working_set(&K::buffers(&K::borrow_problem(&mut first)));
        let copies = match timing.method {
            crate::TimingMethod::Single => 1,
            crate::TimingMethod::Graph => crate::rotation(bytes, rt.device().info().l2_bytes),
        };
        let mut all = vec![first];
        for _ in 1..copies {
            all.push(K::alloc_problem(stream, key, batch)?);
        }
        Ok(all)
    }
}

impl<K: Tunable> DynTunable for TunableDyn<K> {
    fn schema(&self) -> &'static KernelSchema {
        K::SCHEMA
    }

    fn source_fingerprint(&self) -> &'static str {
        K::SOURCE_FINGERPRINT
    }

    fn candidates(&self, device: &crate::DeviceInfo, key: &StaticKey, batch: u64) -> String {
        candidates_or_error::<K>(device, parse_key::<K>(key), batch)
    }

    fn search(
        &self,
        rt: &Runtime,
        stream: &Arc<CudaStream>,
        key: &StaticKey,
        batch: u64,
        opts: &TuneOptions,
    ) -> Result<TuneRecord> {
        let k = parse_key::<K>(key)?;
        let mut owned = Self::alloc_copies(rt, stream, &k, batch, &opts.timing)?;
        let problems: Vec<K::Problem<'_>> = owned.iter_mut().map(K::borrow_problem).collect();
        let report = rt.tune_rotating::<K>(stream, &problems[0], &problems[1..], opts);
        rt.record_of::<K>(&report)
    }

    #[allow(clippy::too_many_arguments)]
    fn recheck(
        &self,
        rt: &Runtime,
        stream: &Arc<CudaStream>,
        key: &StaticKey,
        batch: u64,
        entry: &[tuned::Value],
        sample: usize,
        timing: &crate::TimingOptions,
    ) -> Result<Recheck> {
        let info = rt.device().info();
        let plan = RecheckPlan::<K>::new(info, key, batch, entry)?;
        let mut owned = Self::alloc_copies(rt, stream, &plan.key, batch, timing)?;
        let problems: Vec<K::Problem<'_>> = owned.iter_mut().map(K::borrow_problem).collect();
        let problem = &problems[0];
        let align = K::alignment(problem);
        let bytes = working_set(&K::buffers(problem));
        let graph = timing.method == crate::TimingMethod::Graph;
        let launches = crate::graph_launches(bytes, problems.len());
        // The 2 x L2 scratch buffer only where the flush is wanted.
        let flush = if !graph && timing.flush_l2.wanted(bytes, info.l2_bytes) {
            Some(crate::L2Flush::new(stream, info)?)
        } else {
            None
        };
        let flush = flush.as_ref();
        plan.run(info, align, sample, |k, c| {
            let kernel = rt.kernel(stream, K::SOURCE, &K::variant(info, k, c))?;
            if graph {
                return crate::time_graph_runs(stream, timing, launches, problems.len(), &mut |i| {
                    K::launch(&kernel, stream, c, &problems[i])
                })
                .map(|t| t.median_us);
            }
            crate::time_runs(stream, timing, flush, &mut || Ok(()), &mut || {
                K::launch(&kernel, stream, c, problem)
            })
            .map(|t| t.median_us)
        })
    }

    fn precompile(
        &self,
        rt: &Runtime,
        stream: &Arc<CudaStream>,
        shapes: &[(StaticKey, u64)],
    ) -> Vec<Result<tuned::Source>> {
        let keys: Vec<Result<(K::Key, u64)>> =
            shapes.iter().map(|(k, b)| Ok((parse_key::<K>(k)?, *b))).collect();
        let valid: Vec<(K::Key, u64)> = keys.iter().filter_map(|k| k.as_ref().ok().cloned()).collect();
        let mut warmed = rt.warm::<K>(stream, &valid).into_iter();
        keys.into_iter()
            .map(|k| match k {
                Err(e) => Err(e),
                Ok(_) => warmed
                    .next()
                    .unwrap_or_else(|| Err(Error::kernel(K::SCHEMA.kernel, "not warmed")))
                    .map(|p| p.resolved.source),
            })
            .collect()
    }
}
