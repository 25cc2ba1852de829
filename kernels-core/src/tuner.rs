//! The autotuner: candidates are the pruned search space plus the analytic default;
//! they compile in parallel, then run one at a time under the one timing routine with
//! in-place safety; the pure [`crate::select`] rule picks the winner.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::ffi::{self, driver_error};
use crate::search::backend::{compile_jobs, plain_stream, working_set, Guarded, TuneStream};
use crate::{
    graph_launches, start_search, time_candidates, time_graph_runs, time_runs, L2Flush, Result, Runtime,
    TimingMethod, Tunable, TuneBuffer, TuneOptions, TuneReport,
};

/// The CUDA stream's part of a search: graph capture, snapshots, restores, zeroing.
impl TuneStream for Arc<CudaStream> {
    type Snapshot = CudaSlice<u8>;
    const GRAPHS: &'static str = "CUDA";

    fn is_capturing(&self) -> Result<bool> {
        ffi::is_capturing(self.cu_stream())
    }

    unsafe fn snapshot(&self, b: &TuneBuffer) -> Result<CudaSlice<u8>> {
        // SAFETY: u8 has no invalid bit patterns; the copy below fills it.
        let snap = unsafe { self.alloc::<u8>(b.bytes.max(1)) }.map_err(|e| driver_error("cuMemAlloc", e))?;
        let (dst, record) = snap.device_ptr(self);
        // SAFETY: `dst` holds b.bytes; `b.ptr` is valid for b.bytes (the caller's
        // contract).
        unsafe { ffi::copy_dtod(dst, b.ptr, b.bytes, self.cu_stream()) }?;
        drop(record);
        Ok(snap)
    }

    unsafe fn restore(&self, b: &TuneBuffer, snap: &CudaSlice<u8>) -> Result<()> {
        let (src, _record) = snap.device_ptr(self);
        // SAFETY: both hold b.bytes (the snapshot was taken of `b`).
        unsafe { ffi::copy_dtod(b.ptr, src, b.bytes, self.cu_stream()) }
    }

    unsafe fn zero(&self, b: &TuneBuffer) -> Result<()> {
        // SAFETY: `b.ptr` is valid for b.bytes (the caller's contract).
        unsafe { ffi::zero(b.ptr, b.bytes, self.cu_stream()) }
    }

    fn synchronize(&self) -> Result<()> {
        CudaStream::synchronize(self).map_err(|e| driver_error("cuStreamSynchronize", e))
    }
}

impl Runtime {
    /// Searches for the fastest config of `K` on `problem`, never panicking.
    ///
    /// Candidates are the analytic default (always, first) and the pruned search
    /// space. They compile in parallel; each that compiled is timed with
    /// [`time_runs`] (warm-up, median of at least 10 reps, L2 flushed when the working
    /// set is under twice the L2), with `Restore` buffers restored and `Zero` buffers
    /// zeroed before every run, outside the timed region. Failures are recorded and
    /// skipped. [`crate::select`] picks the winner (a candidate must beat the incumbent
    /// by more than the noise threshold). Finally the buffers are restored and the
    /// winner runs once, so they hold exactly one plain run's result. When every
    /// candidate fails, the report names the analytic default, says why, and the
    /// buffers are restored to their contents from before the search.
    pub fn tune<K: Tunable>(
        &self,
        stream: &Arc<CudaStream>,
        problem: &K::Problem<'_>,
        opts: &TuneOptions,
    ) -> TuneReport<K::Config> {
        self.tune_rotating::<K>(stream, problem, &[], opts)
    }

    /// [`Runtime::tune`] with more problems of the same shape for
    /// [`TimingMethod::Graph`] timing to rotate through (`problem` first, then
    /// `rotation`; see [`crate::rotation`]). The rotation problems are scratch: they
    /// are written but not restored. With [`TimingMethod::Single`] they are unused.
    pub fn tune_rotating<'p, K: Tunable>(
        &self,
        stream: &Arc<CudaStream>,
        problem: &K::Problem<'p>,
        rotation: &[K::Problem<'p>],
        opts: &TuneOptions,
    ) -> TuneReport<K::Config> {
        let info = self.device().info();
        let (key, configs, mut report) = start_search::<K>(info, problem, opts);

        if !plain_stream(stream, &mut report) {
            return report;
        }

        // Compile every candidate in parallel.
        let jobs = compile_jobs::<K>(info, &key, &configs);
        let kernels = self.precompile_kernels(&jobs, opts.compile_threads);

        // Snapshot in-place buffers before anything runs.
        let buffers = K::buffers(problem);
        let Some(guarded) = Guarded::new(stream, &buffers, &mut report) else {
            return report;
        };
        let working_set = working_set(&buffers);
        // Without the flush buffer (out of memory) timing still runs, reported per
        // candidate through Timing::l2_flushed.
        let graph = opts.timing.method == TimingMethod::Graph;
        let flush = if !graph && opts.timing.flush_l2.wanted(working_set, info.l2_bytes) {
            L2Flush::new(stream, info).ok()
        } else {
            None
        };
        let copies = 1 + rotation.len();
        let launches = graph_launches(working_set, copies);
        let problem_at = |i: usize| if i == 0 { problem } else { &rotation[i - 1] };

        let winner = time_candidates(
            &mut report,
            &configs,
            &kernels,
            opts.noise_threshold,
            |config, kernel| {
                if graph {
                    guarded.reset()?;
                    time_graph_runs(stream, &opts.timing, launches, copies, &mut |i| {
                        K::launch(kernel, stream, config, problem_at(i))
                    })
                } else {
                    time_runs(
                        stream,
                        &opts.timing,
                        flush.as_ref(),
                        &mut || guarded.reset(),
                        &mut || K::launch(kernel, stream, config, problem),
                    )
                }
            },
        );
        drop(flush);
        // Leave the buffers as one plain run of the winner leaves them.
        guarded.finish(&mut report, winner, |i, kernel| {
            K::launch(kernel, stream, &configs[i], problem)
        });
        report
    }
}
