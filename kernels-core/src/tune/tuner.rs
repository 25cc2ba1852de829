//! The autotuner, on every backend: candidates are the pruned search space plus the
//! analytic default; they compile in parallel, then run one at a time: each once to
//! check its output against the default's, then under the one timing routine with
//! in-place safety; the pure [`crate::select`] rule picks the winner.

use super::search::backend::{plain_stream, working_set, Guarded};
use super::OutputCheck;
use crate::runtime::launch;
use crate::{
    graph_launches, start_search, time_runs, time_screened, Backend, Error, L2Flush, PlannedKernel, Runtime,
    TimingMethod, TuneOptions, TuneReport,
};

impl<B: Backend> Runtime<B> {
    /// Searches for the fastest config of `K` on `problem`, never panicking.
    ///
    /// Candidates are the analytic default (always, first) and the pruned search
    /// space, fitted to the problem's alignment. They compile in parallel; each that
    /// compiled is timed with [`time_runs`] (warm-up, median of at least 10 reps, L2
    /// flushed when the working set is under twice the L2) or, with
    /// [`TimingMethod::Graph`] on a backend that has it, with graph replays; `Restore`
    /// buffers are restored and `Zero` buffers zeroed before every run, outside the
    /// timed region. Before it is timed, each candidate runs once from the buffers as
    /// they were before the search and its output is compared with the analytic
    /// default's ([`crate::PlannedKernel::check_outputs`]); a candidate outside the
    /// tolerance is recorded as wrong ([`crate::tune::WRONG_OUTPUT`]) and never timed,
    /// and where the default does not run no other candidate is timed, since none can
    /// be checked. Read-only buffers above [`crate::tune::UNREAD_LIMIT`] are compared
    /// once after the search instead of after each check; if one changed, no candidate
    /// is trusted and the search fails. With [`TuneOptions::finalists`] the search
    /// screens first ([`crate::tune::time_screened`]). Failures are recorded and skipped. [`crate::select`] picks the
    /// winner (a candidate must beat the incumbent by more than the noise threshold).
    /// Finally the buffers are restored and the winner runs once, so they hold exactly
    /// one plain run's result. When every candidate fails, the report names the
    /// analytic default, says why, and the buffers are restored to their contents from
    /// before the search.
    pub fn tune<K: PlannedKernel>(
        &self,
        stream: &B::Stream,
        problem: &K::Problem<'_>,
        opts: &TuneOptions,
    ) -> TuneReport<K::Config> {
        self.tune_rotating::<K>(stream, problem, &[], opts)
    }

    /// [`Runtime::tune`] with more problems of the same shape for
    /// [`TimingMethod::Graph`] timing to rotate through (`problem` first, then
    /// `rotation`; see [`crate::rotation`]). The rotation problems are scratch: they
    /// are written but not restored. With [`TimingMethod::Single`] they are unused.
    pub fn tune_rotating<'p, K: PlannedKernel>(
        &self,
        stream: &B::Stream,
        problem: &K::Problem<'p>,
        rotation: &[K::Problem<'p>],
        opts: &TuneOptions,
    ) -> TuneReport<K::Config> {
        let info = self.info();
        let (key, configs, mut report) = start_search::<K>(info, problem, opts);
        let graph = opts.timing.method == TimingMethod::Graph;
        if graph && !B::GRAPH_TIMING {
            report.failure = Some(crate::backend::no_graph_timing::<B>().to_string());
            return report;
        }
        if !plain_stream::<B, _>(stream, &mut report) {
            return report;
        }

        // Compile every candidate's kernels in parallel.
        // Seconds since the last lap (the phases of `report.phases`).
        let mut since = std::time::Instant::now();
        let mut lap = || {
            let s = since.elapsed().as_secs_f64();
            since = std::time::Instant::now();
            s
        };
        let kernels: Vec<_> = self
            .precompile_calls::<K>(&key, &configs, opts.compile_threads)
            .into_iter()
            .map(|r| r.map(|k| (k, ())))
            .collect();
        report.phases.compile = lap();

        // Snapshot in-place buffers, and every buffer for the output checks, before
        // anything runs.
        let buffers = K::buffers(problem);
        let Some(guarded) = Guarded::<B>::new(stream, &buffers, &mut report) else {
            return report;
        };
        let mut check = match OutputCheck::<B>::new(stream, &buffers) {
            Ok(c) => c,
            Err(e) => {
                report.failure = Some(format!("could not read the problem's buffers back: {e}"));
                return report;
            }
        };
        let working_set = working_set(&buffers);
        // Without the flush buffer (out of memory) timing still runs, reported per
        // candidate through Timing::l2_flushed.
        let flush = if !graph && opts.timing.flush_l2.wanted(working_set, info.l2_bytes) {
            L2Flush::<B>::new(stream, info).ok()
        } else {
            None
        };
        report.phases.setup = lap();
        let copies = 1 + rotation.len();
        let launches = graph_launches(working_set, copies);
        let quick_launches = crate::screen_launches(working_set, copies);
        let problem_at = |i: usize| if i == 0 { problem } else { &rotation[i - 1] };

        // The preferred config (the table's entry), when present, sits right after the
        // default and is timed in full like it.
        let preferred = opts
            .prefer
            .as_ref()
            .is_some_and(|v| configs.get(1).is_some_and(|c| K::config_values(c) == *v));
        let quick_opts = crate::TimingOptions {
            warmup: 1,
            reps: crate::tune::SCREEN_REPS,
            budget_us: Some(crate::tune::SCREEN_BUDGET_US),
            ..opts.timing.clone()
        };
        let time = |timing: &crate::TimingOptions, launches: usize, kernel: &_, config: &_| {
            if graph {
                guarded.reset()?;
                B::time_graph_runs(stream, timing, launches, copies, &mut |i| {
                    launch::<B, K>(kernel, stream, config, problem_at(i))
                })
            } else {
                time_runs::<B>(
                    stream,
                    timing,
                    flush.as_ref(),
                    &mut || guarded.reset(),
                    &mut || launch::<B, K>(kernel, stream, config, problem),
                )
            }
        };
        let (screen_s, full_s) = (std::cell::Cell::new(0.0), std::cell::Cell::new(0.0));
        let timed = |at: &std::cell::Cell<f64>, started: std::time::Instant| {
            at.set(at.get() + started.elapsed().as_secs_f64());
        };
        let winner = time_screened(
            &mut report,
            &configs,
            &kernels,
            opts.noise_threshold,
            1 + usize::from(preferred),
            opts.finalists,
            |_, config, kernel| {
                let started = std::time::Instant::now();
                let t = time(&quick_opts, quick_launches, kernel, config);
                timed(&screen_s, started);
                t
            },
            |index, config, kernel| {
                let started = std::time::Instant::now();
                let t = (|| {
                    check.ready(index).map_err(Error::Output)?;
                    guarded.reset()?;
                    check.restore_written()?;
                    launch::<B, K>(kernel, stream, config, problem)?;
                    check.check::<K>(index, problem).map_err(Error::Output)?;
                    time(&opts.timing, launches, kernel, config)
                })();
                timed(&full_s, started);
                t
            },
        );
        report.phases.screen = screen_s.get();
        report.phases.full = full_s.get();
        lap(); // the timings, counted by the closures above
        drop(flush);
        // A large input a candidate wrote into fails the whole search.
        let winner = match check.verify_unread() {
            Ok(()) => winner,
            Err(e) => {
                report.chosen_index = None;
                for c in &mut report.candidates {
                    c.outcome = Err(format!("not trusted: {e}"));
                }
                None
            }
        };
        // Leave the buffers as one plain run of the winner leaves them.
        guarded.finish(&mut report, winner, |i, kernel| {
            launch::<B, K>(kernel, stream, &configs[i], problem)
        });
        report.phases.finish = lap();
        report
    }
}
