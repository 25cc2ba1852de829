//! The [`Tunable`] trait a kernel family implements to be resolved and tuned by the
//! runtime on any backend, and [`DynTunable`], its object-safe form for tools
//! (`kernels tune`, `kernels tables check`).

use std::marker::PhantomData;

use tuned::{KernelSchema, StaticKey, Value};

use super::search::backend::{candidates_or_error, parse_key, working_set, RecheckPlan};
use crate::backend::Owned;
use crate::runtime::launch;
use crate::{
    Backend, DeviceInfo, Error, KernelSource, L2Flush, PlannedKernel, Recheck, Result, Runtime, TimingMethod,
    TimingOptions, TuneOptions, TuneRecord, Variant,
};

/// A kernel family the runtime can resolve and tune on every backend: a
/// [`PlannedKernel`] (key, config, schema, analytic default and tables through
/// [`tuned::TunedKernel`]; search space, variants, problems, buffers and launch plans)
/// plus the problems the tuner makes itself, as host images it uploads and the
/// problem over their device addresses. Nothing in it names a backend.
///
/// The tuner makes repeated runs safe through [`PlannedKernel::buffers`]: `Restore`
/// buffers are snapshotted and put back, and `Zero` buffers zeroed, before every run
/// and outside the timed region; after tuning the caller's buffers hold exactly what
/// one plain run of the chosen config gives.
///
/// # Safety
/// As for [`PlannedKernel`]; [`Tunable::tuning_problem`] must describe buffers that lie
/// within the uploaded [`Tunable::tuning_inputs`] at the addresses given.
///
/// # Example
///
/// ```ignore
/// unsafe impl Tunable for Scale {
///     fn tuning_inputs(_: &ScaleKey, n: u64) -> Vec<Vec<u8>> {
///         vec![kernels_core::launch::encode(DType::F32, &kernels_core::launch::pseudo_random(n as usize, 1, 1.0, 0.0))]
///     }
///     fn tuning_problem<'a>(_: &ScaleKey, n: u64, at: &'a [u64]) -> ScaleProblem<'a> {
///         ScaleProblem { x: at[0], n: n as u32, a: 2.0, _buf: PhantomData }
///     }
/// }
/// ```
pub unsafe trait Tunable: PlannedKernel {
    /// The contents of each buffer of a problem of `key` and `batch` the tuner makes
    /// itself (offline tuning, online resolution without a caller's problem), as host
    /// bytes: deterministic, so every backend and run times the same data.
    fn tuning_inputs(key: &Self::Key, batch: u64) -> Vec<Vec<u8>>;

    /// The problem over those buffers, uploaded to device addresses `at` (in the order
    /// [`Tunable::tuning_inputs`] lists them).
    fn tuning_problem<'a>(key: &Self::Key, batch: u64, at: &'a [u64]) -> Self::Problem<'a>;

    /// The batch at which `kernels tables check --served` runs a config served at
    /// `batch` against the CPU reference: rows (tokens) are independent, so a smaller
    /// batch runs the same compiled variant and keeps the reference to seconds. By
    /// default the largest batch up to `batch` whose inputs stay within 16 MiB (at least
    /// 1); kernels whose reference cost is not their inputs' size (GEMM, MoE: weights of
    /// gigabytes read once per row) say their own.
    fn check_batch(key: &Self::Key, batch: u64) -> u64 {
        const MAX_INPUT_BYTES: usize = 16 << 20;
        let row_bytes: usize = Self::tuning_inputs(key, 1).iter().map(Vec::len).sum();
        batch.min((MAX_INPUT_BYTES / row_bytes.max(1)).max(1) as u64)
    }
}

/// Object-safe view of a [`Tunable`] on backend `B`, so tools dispatch over a registry
/// of kernels by name. Make one with `static X: TunableDyn<MyKernel> = TunableDyn::new();`;
/// it is a `DynTunable<B>` for every backend.
pub trait DynTunable<B: Backend>: Sync {
    /// The kernel's table contract.
    fn schema(&self) -> &'static KernelSchema;
    /// Fingerprint of its source.
    fn source_fingerprint(&self) -> &'static str;
    /// Its device source.
    fn source(&self) -> &'static KernelSource;
    /// The compiled variants of one call of the config with values `config` for `key`
    /// on `device` ([`PlannedKernel::variants`]); an error where the key or the config
    /// does not parse.
    fn variants_of(&self, device: &DeviceInfo, key: &StaticKey, config: &[Value]) -> Result<Vec<Variant>>;
    /// The candidates, as config values, of the search `kernels tune` runs for `key` at
    /// `batch` on `device` with `prefer` as the table's entry ([`super::candidate_configs`]
    /// on 16-byte aligned buffers: the analytic default, then the space).
    fn candidate_values(
        &self,
        device: &DeviceInfo,
        key: &StaticKey,
        batch: u64,
        prefer: Option<&[Value]>,
    ) -> Result<Vec<Vec<Value>>>;
    /// The [`crate::candidates_digest`] of a search for `key` at `batch` on `device`,
    /// for its tuning cache key. A key the kernel cannot parse gets a digest of the
    /// error (the search fails on it anyway).
    fn candidates(&self, device: &DeviceInfo, key: &StaticKey, batch: u64) -> String;
    /// Tunes one (static key, batch) on a problem the kernel allocates. Not persisted
    /// (the caller decides where results go).
    fn search(
        &self,
        rt: &Runtime<B>,
        stream: &B::Stream,
        key: &StaticKey,
        batch: u64,
        opts: &TuneOptions,
    ) -> Result<TuneRecord>;
    /// Resolves each shape under the runtime's policy and compiles the variants in
    /// parallel (filling the module cache). One result per shape.
    fn precompile(
        &self,
        rt: &Runtime<B>,
        stream: &B::Stream,
        shapes: &[(StaticKey, u64)],
    ) -> Vec<Result<tuned::Source>>;
    /// Re-measures a committed entry on a problem the kernel allocates: the entry's
    /// config, the analytic default and `sample` configs spread evenly over the search
    /// space (a quick search), all with the same timing routine. For `kernels tables
    /// check` on a GPU. `entry` is a tuned config; the caller skips default markers.
    #[allow(clippy::too_many_arguments)]
    fn recheck(
        &self,
        rt: &Runtime<B>,
        stream: &B::Stream,
        key: &StaticKey,
        batch: u64,
        entry: &[tuned::Value],
        sample: usize,
        timing: &TimingOptions,
    ) -> Result<Recheck>;
}

/// The [`DynTunable`] of a [`Tunable`], for every backend.
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

/// Problems of one shape the tuner allocates: one, or for graph timing as many as
/// [`crate::rotation`] asks for (the first decides the bytes per call).
pub(crate) fn alloc_copies<B: Backend, K: Tunable>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    key: &K::Key,
    batch: u64,
    timing: &TimingOptions,
) -> Result<Vec<Owned<B>>> {
    let inputs = K::tuning_inputs(key, batch);
    let first = Owned::<B>::upload(stream, &inputs)?;
    let bytes = working_set(&K::buffers(&K::tuning_problem(key, batch, first.addresses())));
    let copies = match timing.method {
        TimingMethod::Single => 1,
        TimingMethod::Graph => crate::rotation(bytes, rt.info().l2_bytes),
    };
    // The copies on the device: uploading each again sent the inputs over the bus as
    // many times (up to 64 copies, or twice a gigabyte of weights).
    let mut all = vec![first];
    for _ in 1..copies {
        let copy = all[0].duplicate(stream)?;
        all.push(copy);
    }
    Ok(all)
}

impl<B: Backend, K: Tunable> DynTunable<B> for TunableDyn<K> {
    fn schema(&self) -> &'static KernelSchema {
        K::SCHEMA
    }

    fn source_fingerprint(&self) -> &'static str {
        K::SOURCE_FINGERPRINT
    }

    fn source(&self) -> &'static KernelSource {
        K::SOURCE
    }

    fn variants_of(&self, device: &DeviceInfo, key: &StaticKey, config: &[Value]) -> Result<Vec<Variant>> {
        let k = parse_key::<K>(key)?;
        let c = K::config_from_values(config).map_err(|e| Error::kernel(K::SCHEMA.kernel, e))?;
        Ok(K::variants(device, &k, &c))
    }

    fn candidate_values(
        &self,
        device: &DeviceInfo,
        key: &StaticKey,
        batch: u64,
        prefer: Option<&[Value]>,
    ) -> Result<Vec<Vec<Value>>> {
        let k = parse_key::<K>(key)?;
        let target = device.tuning_target();
        let align = crate::cache::AlignClass::A16;
        let default = K::fit_alignment(device, &k, K::analytic_default(target, &k, batch), align);
        let configs = super::candidate_configs(
            default,
            K::search_space(device, &k, batch),
            |c| K::fit_alignment(device, &k, c, align),
            |c| K::accepts(target, &k, batch, c),
            |c| prefer.is_some_and(|v| K::config_values(c) == v),
            0,
        );
        Ok(configs.iter().map(K::config_values).collect())
    }

    fn candidates(&self, device: &DeviceInfo, key: &StaticKey, batch: u64) -> String {
        candidates_or_error::<K>(device, parse_key::<K>(key), batch)
    }

    fn search(
        &self,
        rt: &Runtime<B>,
        stream: &B::Stream,
        key: &StaticKey,
        batch: u64,
        opts: &TuneOptions,
    ) -> Result<TuneRecord> {
        let k = parse_key::<K>(key)?;
        let started = std::time::Instant::now();
        let owned = alloc_copies::<B, K>(rt, stream, &k, batch, &opts.timing)?;
        let problems: Vec<K::Problem<'_>> = owned
            .iter()
            .map(|o| K::tuning_problem(&k, batch, o.addresses()))
            .collect();
        let inputs = started.elapsed().as_secs_f64();
        let mut report = rt.tune_rotating::<K>(stream, &problems[0], &problems[1..], opts);
        report.phases.inputs = inputs;
        rt.record_of::<K>(&report)
    }

    #[allow(clippy::too_many_arguments)]
    fn recheck(
        &self,
        rt: &Runtime<B>,
        stream: &B::Stream,
        key: &StaticKey,
        batch: u64,
        entry: &[tuned::Value],
        sample: usize,
        timing: &TimingOptions,
    ) -> Result<Recheck> {
        let info = rt.info();
        let plan = RecheckPlan::<K>::new(info, key, batch, entry)?;
        let graph = timing.method == TimingMethod::Graph;
        if graph && !B::GRAPH_TIMING {
            return Err(crate::backend::no_graph_timing::<B>());
        }
        let owned = alloc_copies::<B, K>(rt, stream, &plan.key, batch, timing)?;
        let problems: Vec<K::Problem<'_>> = owned
            .iter()
            .map(|o| K::tuning_problem(&plan.key, batch, o.addresses()))
            .collect();
        let problem = &problems[0];
        let align = K::alignment(problem);
        let bytes = working_set(&K::buffers(problem));
        let launches = crate::graph_launches(bytes, problems.len());
        // The 2 x L2 scratch buffer only where the flush is wanted.
        let flush = if !graph && timing.flush_l2.wanted(bytes, info.l2_bytes) {
            Some(L2Flush::<B>::new(stream, info)?)
        } else {
            None
        };
        let flush = flush.as_ref();
        plan.run(info, align, sample, |k, c| {
            let kernel = rt.kernels::<K>(stream, k, c)?;
            if graph {
                return B::time_graph_runs(stream, timing, launches, problems.len(), &mut |i| {
                    launch::<B, K>(&kernel, stream, c, &problems[i])
                })
                .map(|t| t.median_us);
            }
            crate::time_runs::<B>(stream, timing, flush, &mut || Ok(()), &mut || {
                launch::<B, K>(&kernel, stream, c, problem)
            })
            .map(|t| t.median_us)
        })
    }

    fn precompile(
        &self,
        rt: &Runtime<B>,
        stream: &B::Stream,
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
