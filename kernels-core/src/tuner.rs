//! The autotuner: candidates are the pruned search space plus the analytic default;
//! they compile in parallel, then run one at a time under the one timing routine with
//! in-place safety; the pure [`crate::select`] rule picks the winner.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::ffi::{self, driver_error};
use crate::{
    conclude, graph_launches, start_search, time_candidates, time_graph_runs, time_runs, BufferRole,
    KernelSource, L2Flush, Result, Runtime, TimingMethod, Tunable, TuneBuffer, TuneOptions, TuneReport,
    Variant,
};

/// Snapshots of a problem's `Restore` buffers and the list of its `Zero` buffers.
struct Guarded {
    restore: Vec<(TuneBuffer, CudaSlice<u8>)>,
    zero: Vec<TuneBuffer>,
}

impl Guarded {
    fn new(stream: &Arc<CudaStream>, buffers: &[TuneBuffer]) -> Result<Guarded> {
        let mut restore = Vec::new();
        let mut zero = Vec::new();
        for b in buffers {
            match b.role {
                BufferRole::Restore => {
                    // SAFETY: u8 has no invalid bit patterns; the copy below fills it.
                    let snap = unsafe { stream.alloc::<u8>(b.bytes.max(1)) }
                        .map_err(|e| driver_error("cuMemAlloc", e))?;
                    let (dst, record) = snap.device_ptr(stream);
                    // SAFETY: `dst` holds b.bytes; `b.ptr` is valid for b.bytes by the
                    // Tunable contract.
                    unsafe { ffi::copy_dtod(dst, b.ptr, b.bytes, stream.cu_stream()) }?;
                    drop(record);
                    restore.push((*b, snap));
                }
                BufferRole::Zero => zero.push(*b),
                BufferRole::Read | BufferRole::Write => {}
            }
        }
        Ok(Guarded { restore, zero })
    }

    /// Puts every `Restore` buffer back and zeroes every `Zero` buffer (stream-ordered).
    fn reset(&self, stream: &CudaStream) -> Result<()> {
        for (b, snap) in &self.restore {
            let (src, _record) = snap.device_ptr(stream);
            // SAFETY: both hold b.bytes (see `new`).
            unsafe { ffi::copy_dtod(b.ptr, src, b.bytes, stream.cu_stream()) }?;
        }
        for b in &self.zero {
            // SAFETY: `b.ptr` is valid for b.bytes by the Tunable contract.
            unsafe { ffi::zero(b.ptr, b.bytes, stream.cu_stream()) }?;
        }
        Ok(())
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
        let (key, configs, mut report) = start_search::<K>(info, problem, opts.max_candidates);

        match ffi::is_capturing(stream.cu_stream()) {
            Ok(false) => {}
            Ok(true) => {
                report.failure =
                    Some("the stream is capturing a CUDA graph; tuning needs a plain stream".into());
                return report;
            }
            Err(e) => {
                report.failure = Some(e.to_string());
                return report;
            }
        }

        // Compile every candidate in parallel.
        let jobs: Vec<(KernelSource, Variant)> = configs
            .iter()
            .map(|c| (*K::SOURCE, K::variant(info, &key, c)))
            .collect();
        let kernels = self.precompile_kernels(&jobs, opts.compile_threads);

        // Snapshot in-place buffers before anything runs.
        let buffers = K::buffers(problem);
        let guarded = match Guarded::new(stream, &buffers) {
            Ok(g) => g,
            Err(e) => {
                report.failure = Some(format!("could not snapshot the problem's buffers: {e}"));
                return report;
            }
        };
        let working_set: u64 = buffers.iter().map(|b| b.bytes as u64).sum();
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
                    guarded.reset(stream)?;
                    time_graph_runs(stream, &opts.timing, launches, copies, &mut |i| {
                        K::launch(kernel, stream, config, problem_at(i))
                    })
                } else {
                    time_runs(
                        stream,
                        &opts.timing,
                        flush.as_ref(),
                        &mut || guarded.reset(stream),
                        &mut || K::launch(kernel, stream, config, problem),
                    )
                }
            },
        );
        drop(flush);
        // Leave the buffers as one plain run of the winner leaves them.
        let final_run = (|| -> Result<()> {
            guarded.reset(stream)?;
            if let Some((i, kernel)) = &winner {
                K::launch(kernel, stream, &configs[*i], problem)?;
            }
            stream
                .synchronize()
                .map_err(|e| driver_error("cuStreamSynchronize", e))
        })();
        conclude(&mut report, winner.map(|(i, _)| i), final_run);
        report
    }
}
