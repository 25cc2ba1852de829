//! Tuning on AMD GPUs: [`HipRuntime::tune`] searches a [`PlannedKernel`]'s space on a
//! problem with the CUDA tuner's rules (the analytic default first, parallel compile,
//! in-place buffers restored outside the timed region, the L2 flushed for small
//! working sets, [`crate::select`]'s noise threshold), and [`DynHipTunable`] is what
//! `kernels tune --backend hip` drives.

use std::marker::PhantomData;

use tuned::{KernelSchema, StaticKey, TunedKernel};

use super::{time_hip_runs, HipBuffer, HipDevice, HipL2Flush, HipRuntime, HipStream};
use crate::search::backend::{
    candidates_or_error, compile_jobs, parse_key, plain_stream, working_set, Guarded, RecheckPlan, TuneStream,
};
use crate::{
    start_search, time_candidates, tune_record, PlannedKernel, Recheck, Result, TimingMethod, TimingOptions,
    TuneBuffer, TuneOptions, TuneRecord, TuneReport,
};

/// A [`PlannedKernel`] the HIP runtime can tune on a problem it allocates itself
/// (`kernels tune --backend hip`, and the online policy's searches).
///
/// # Safety
/// [`HipTunable::borrow_hip_problem`] must return a problem whose addresses lie in the
/// buffers of `owned`, with the lengths the problem describes.
pub unsafe trait HipTunable: PlannedKernel {
    /// Device buffers of a problem of `key` and `batch`.
    type HipOwned;

    /// Allocates a problem of `key` and `batch` on `device` with deterministic contents
    /// (the CUDA tuner's, so both backends time the same data).
    fn alloc_hip_problem(device: &HipDevice, key: &Self::Key, batch: u64) -> Result<Self::HipOwned>;

    /// Borrows an allocated problem.
    fn borrow_hip_problem(owned: &mut Self::HipOwned) -> Self::Problem<'_>;
}

/// A HIP stream and its device: the stream's part of a search (graph capture,
/// snapshots, restores, zeroing).
struct HipTuneStream<'a> {
    device: &'a HipDevice,
    stream: &'a HipStream,
}

impl TuneStream for HipTuneStream<'_> {
    type Snapshot = HipBuffer<u8>;
    const GRAPHS: &'static str = "HIP";

    fn is_capturing(&self) -> Result<bool> {
        self.stream.is_capturing()
    }

    unsafe fn snapshot(&self, b: &TuneBuffer) -> Result<HipBuffer<u8>> {
        // SAFETY: `b.ptr` is valid for b.bytes (the caller's contract).
        unsafe { HipBuffer::snapshot(self.device, b.ptr, b.bytes, self.stream) }
    }

    unsafe fn restore(&self, b: &TuneBuffer, snap: &HipBuffer<u8>) -> Result<()> {
        // SAFETY: the snapshot holds b.bytes, and `b.ptr` is valid for them.
        unsafe { snap.restore_to(b.ptr, self.stream) }
    }

    unsafe fn zero(&self, b: &TuneBuffer) -> Result<()> {
        // SAFETY: `b.ptr` is valid for b.bytes (the caller's contract).
        unsafe { super::ffi::memset_zero(b.ptr, b.bytes, self.stream.handle()) }
    }

    fn synchronize(&self) -> Result<()> {
        self.stream.synchronize()
    }
}

impl HipRuntime {
    /// Searches for the fastest config of `K` on `problem` on this device, never
    /// panicking; the HIP twin of `Runtime::tune`, with the same report.
    ///
    /// Candidates are the analytic default of the device's gfx target (first) and the
    /// target's pruned search space, fitted to the problem's alignment. They compile in
    /// parallel (`opts.compile_threads`); each is timed with [`time_hip_runs`] (HIP
    /// events, warm-up, median of `opts.timing.reps`, the L2 flushed when the working
    /// set is under twice the L2), with `Restore` buffers restored and `Zero` buffers
    /// zeroed before every run, outside the timed region. [`crate::select`] picks the
    /// winner. Finally the buffers are restored and the winner runs once, so they hold
    /// exactly one plain run's result. A [`TimingMethod::Graph`] search is refused (in
    /// `report.failure`, nothing launched): graphs are CUDA's here.
    pub fn tune<K: PlannedKernel>(
        &self,
        stream: &HipStream,
        problem: &K::Problem<'_>,
        opts: &TuneOptions,
    ) -> TuneReport<K::Config> {
        let info = &self.limits;
        let (key, configs, mut report) = start_search::<K>(info, problem, opts);
        // Graph timing replays CUDA graphs over rotating copies; HIP times single
        // launches only, so a graph-timed search is refused rather than mislabelled.
        if opts.timing.method != TimingMethod::Single {
            report.failure = Some(format!(
                "timing method `{}` is CUDA's (graph replays); HIP tunes with `single`",
                opts.timing.method
            ));
            return report;
        }

        let tune_stream = HipTuneStream {
            device: self.device(),
            stream,
        };
        if !plain_stream(&tune_stream, &mut report) {
            return report;
        }

        let jobs = compile_jobs::<K>(info, &key, &configs);
        let kernels = self.precompile(&jobs, opts.compile_threads);

        let buffers = K::buffers(problem);
        let Some(guarded) = Guarded::new(&tune_stream, &buffers, &mut report) else {
            return report;
        };
        let working_set = working_set(&buffers);
        // Without the flush buffer (out of memory) timing still runs, reported per
        // candidate through Timing::l2_flushed.
        let mut flush = if opts.timing.flush_l2.wanted(working_set, info.l2_bytes) {
            HipL2Flush::new(self.device()).ok()
        } else {
            None
        };

        let winner = time_candidates(
            &mut report,
            &configs,
            &kernels,
            opts.noise_threshold,
            |config, kernel| {
                let (dims, args) = K::launch_args(kernel.info(), config, problem)?;
                time_hip_runs(
                    self.device(),
                    stream,
                    &opts.timing,
                    flush.as_mut(),
                    &mut || guarded.reset(),
                    // SAFETY: the plan follows the kernel's ABI and stays within the
                    // problem's buffers (PlannedKernel contract).
                    &mut || unsafe { kernel.launch(stream, dims, &args) },
                )
            },
        );
        drop(flush);
        // Leave the buffers as one plain run of the winner leaves them.
        guarded.finish(&mut report, winner, |i, kernel| {
            let (dims, args) = K::launch_args(kernel.info(), &configs[i], problem)?;
            // SAFETY: as above.
            unsafe { kernel.launch(stream, dims, &args) }
        });
        report
    }

    /// The tuning record of a finished search on this device, or why there is none.
    pub fn record_of<K: TunedKernel>(&self, report: &TuneReport<K::Config>) -> Result<TuneRecord> {
        tune_record::<K>(report, &self.device().info().name, &self.compiler().id())
    }
}

/// Object-safe view of a [`HipTunable`], so `kernels tune --backend hip` dispatches
/// over kernels by name. Make one with `static X: HipTunableDyn<MyKernel> = HipTunableDyn::new();`.
pub trait DynHipTunable: Sync {
    /// The kernel's table contract.
    fn schema(&self) -> &'static KernelSchema;
    /// Fingerprint of its source.
    fn source_fingerprint(&self) -> &'static str;
    /// The [`crate::candidates_digest`] of a search for `key` at `batch` on `rt`'s
    /// device, for its tuning cache key. A key the kernel cannot parse gets a digest of
    /// the error (the search fails on it anyway).
    fn candidates(&self, rt: &HipRuntime, key: &StaticKey, batch: u64) -> String;
    /// Tunes one (static key, batch) on a problem the kernel allocates. Not persisted
    /// (the caller decides where results go).
    fn search(
        &self,
        rt: &HipRuntime,
        stream: &HipStream,
        key: &StaticKey,
        batch: u64,
        opts: &TuneOptions,
    ) -> Result<TuneRecord>;
    /// Re-measures a committed entry on a problem the kernel allocates, as
    /// `DynTunable::recheck` does on CUDA: the entry's config, the analytic default and
    /// `sample` configs spread evenly over the search space, with one timing routine.
    /// For `kernels tables check --backend hip`. `entry` is a tuned config.
    #[allow(clippy::too_many_arguments)]
    fn recheck(
        &self,
        rt: &HipRuntime,
        stream: &HipStream,
        key: &StaticKey,
        batch: u64,
        entry: &[tuned::Value],
        sample: usize,
        timing: &TimingOptions,
    ) -> Result<Recheck>;
}

/// The [`DynHipTunable`] of a [`HipTunable`].
pub struct HipTunableDyn<K>(PhantomData<fn() -> K>);

impl<K> HipTunableDyn<K> {
    pub const fn new() -> Self {
        HipTunableDyn(PhantomData)
    }
}

impl<K> Default for HipTunableDyn<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: HipTunable> DynHipTunable for HipTunableDyn<K> {
    fn schema(&self) -> &'static KernelSchema {
        K::SCHEMA
    }

    fn source_fingerprint(&self) -> &'static str {
        K::SOURCE_FINGERPRINT
    }

    fn candidates(&self, rt: &HipRuntime, key: &StaticKey, batch: u64) -> String {
        candidates_or_error::<K>(rt.limits(), K::key_from_values(key.values()), batch)
    }

    fn search(
        &self,
        rt: &HipRuntime,
        stream: &HipStream,
        key: &StaticKey,
        batch: u64,
        opts: &TuneOptions,
    ) -> Result<TuneRecord> {
        let k = parse_key::<K>(key)?;
        let mut owned = K::alloc_hip_problem(rt.device(), &k, batch)?;
        let problem = K::borrow_hip_problem(&mut owned);
        let report = rt.tune::<K>(stream, &problem, opts);
        rt.record_of::<K>(&report)
    }

    #[allow(clippy::too_many_arguments)]
    fn recheck(
        &self,
        rt: &HipRuntime,
        stream: &HipStream,
        key: &StaticKey,
        batch: u64,
        entry: &[tuned::Value],
        sample: usize,
        timing: &TimingOptions,
    ) -> Result<Recheck> {
        let info = rt.limits();
        let plan = RecheckPlan::<K>::new(info, key, batch, entry)?;
        let mut owned = K::alloc_hip_problem(rt.device(), &plan.key, batch)?;
        let problem = K::borrow_hip_problem(&mut owned);
        let align = K::alignment(&problem);
        let bytes = working_set(&K::buffers(&problem));
        // The 2 x L2 scratch buffer only where the flush is wanted.
        let mut flush = if timing.flush_l2.wanted(bytes, info.l2_bytes) {
            Some(HipL2Flush::new(rt.device())?)
        } else {
            None
        };
        plan.run(info, align, sample, |k, c| {
            let kernel = rt.kernel(K::SOURCE, &K::variant(info, k, c))?;
            let (dims, args) = K::launch_args(kernel.info(), c, &problem)?;
            time_hip_runs(
                rt.device(),
                stream,
                timing,
                flush.as_mut(),
                &mut || Ok(()),
                // SAFETY: the plan follows the kernel's ABI and stays within the
                // problem's buffers (PlannedKernel contract).
                &mut || unsafe { kernel.launch(stream, dims, &args) },
            )
            .map(|t| t.median_us)
        })
    }
}
