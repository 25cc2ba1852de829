//! What a search is and what it found, whatever the backend: [`TuneOptions`],
//! [`TuneReport`], the candidate list ([`candidate_configs`]), the candidate loop
//! ([`time_candidates`], with [`crate::select`] picking the winner), the message when
//! every candidate failed ([`all_failed`]), the [`TuneRecord`] of a report
//! ([`tune_record`]) and the resolution's disk-cache step ([`cached_config`]), which
//! the tuner (`Runtime::tune`) uses on every backend.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

use tuned::{Target, TunedKernel};

use crate::{
    select, AlignClass, CacheKey, CandidateRecord, DiskCache, Error, Lookup, Measured, Result, Section,
    Timing, TimingOptions, TuneRecord, NOISE_THRESHOLD,
};

/// How to search.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneOptions {
    pub timing: TimingOptions,
    /// See [`NOISE_THRESHOLD`].
    pub noise_threshold: f64,
    /// Compile threads (0: one per core).
    pub compile_threads: usize,
    /// Benchmark at most this many candidates, the default first (0: all).
    pub max_candidates: usize,
    /// Screen first: with `finalists` above 0 and more candidates than the finalists
    /// plus the default and the preferred config, every other candidate gets a quick
    /// unchecked timing ([`SCREEN_REPS`] reps), and only the fastest of them, in that
    /// order, are checked and timed in full until `finalists` have passed the check
    /// ([`time_screened`]). 0: every candidate is checked and timed in full.
    pub finalists: usize,
    /// A config to try right after the analytic default (values in the kernel's
    /// parameter order, as tables store them): `kernels tune` passes the table's
    /// current entry. [`crate::select`] takes candidates in order, so this config
    /// becomes the incumbent when it beats the default by the noise margin, and stays
    /// unless another candidate beats it by the margin, so noise does not pick among
    /// configs within the margin of it. Ignored when it is not among the candidates.
    pub prefer: Option<Vec<tuned::Value>>,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            timing: TimingOptions::default(),
            noise_threshold: NOISE_THRESHOLD,
            compile_threads: 0,
            max_candidates: 0,
            finalists: 0,
            prefer: None,
        }
    }
}

/// One candidate's result.
#[derive(Clone, Debug)]
pub struct CandidateReport<C> {
    pub config: C,
    /// The timing, or why it failed to compile or run.
    pub outcome: std::result::Result<Timing, String>,
}

/// Everything a search found: every candidate's time (index 0 is the analytic
/// default), the choice, and what went wrong.
#[derive(Clone, Debug)]
pub struct TuneReport<C> {
    pub kernel: &'static str,
    /// Canonical static key.
    pub static_key: String,
    pub batch: u64,
    pub alignment: AlignClass,
    /// The winner, or the analytic default when every candidate failed.
    pub chosen: C,
    /// Index of the winner in `candidates`; `None` when every candidate failed.
    pub chosen_index: Option<usize>,
    pub candidates: Vec<CandidateReport<C>>,
    /// Why the search could not pick a config (the analytic default is then reported).
    pub failure: Option<String>,
    /// The plain run of the chosen config that leaves the caller's buffers holding
    /// one run's result; an error when it did not run (then the buffers hold their
    /// contents from before the search).
    pub final_run: std::result::Result<(), String>,
    /// Where the search's time went (the tuner's phases; `inputs` is its caller's).
    pub phases: crate::tune::SearchPhases,
}

impl<C> TuneReport<C> {
    /// The winner's median, microseconds.
    pub fn chosen_us(&self) -> Option<f64> {
        let i = self.chosen_index?;
        self.candidates.get(i)?.outcome.as_ref().ok().map(|t| t.median_us)
    }

    /// The analytic default's median, microseconds (`None` if it failed).
    pub fn default_us(&self) -> Option<f64> {
        self.candidates
            .first()?
            .outcome
            .as_ref()
            .ok()
            .map(|t| t.median_us)
    }
}

/// What a re-measure of a committed table entry found (`kernels tables check` on a
/// GPU, through `DynTunable::recheck`), in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Recheck {
    pub entry_us: f64,
    pub default_us: f64,
    /// The fastest sampled config and its time (the entry itself when nothing beat it).
    pub best: Vec<tuned::Value>,
    pub best_us: f64,
}

/// The start of a search on `problem` on `device`, whatever the backend: the problem's
/// key, the candidates ([`candidate_configs`]: the analytic default first, the space
/// fitted to the problem's alignment) and a report naming the default as chosen, with
/// every candidate not run yet.
pub fn start_search<K: crate::PlannedKernel>(
    device: &crate::DeviceInfo,
    problem: &K::Problem<'_>,
    opts: &TuneOptions,
) -> (K::Key, Vec<K::Config>, TuneReport<K::Config>) {
    let target = device.tuning_target();
    let (key, batch) = K::problem_shape(problem);
    let static_key = canonical_key::<K>(&key);
    let align = K::alignment(problem);
    let default = K::fit_alignment(device, &key, K::analytic_default(target, &key, batch), align);
    let configs = candidate_configs(
        default.clone(),
        K::search_space(device, &key, batch),
        |c| K::fit_alignment(device, &key, c, align),
        |c| K::accepts(target, &key, batch, c),
        |c| opts.prefer.as_ref().is_some_and(|v| K::config_values(c) == *v),
        opts.max_candidates,
    );
    let report = TuneReport {
        kernel: K::SCHEMA.kernel,
        static_key,
        batch,
        alignment: align,
        chosen: default,
        chosen_index: None,
        candidates: configs
            .iter()
            .map(|c| CandidateReport {
                config: c.clone(),
                outcome: Err("not run".into()),
            })
            .collect(),
        failure: None,
        final_run: Err("not run".into()),
        phases: Default::default(),
    };
    (key, configs, report)
}

/// The canonical text of `key` (the static key of tables, reports and tuning cache
/// keys).
pub(crate) fn canonical_key<K: TunedKernel>(key: &K::Key) -> String {
    let mut text = String::new();
    let _ = tuned::write_canonical(K::SCHEMA, K::key_values(key).as_slice(), &mut text);
    text
}

/// The comparison behind a recheck, whatever the backend: `time` the committed `entry`,
/// the analytic `default` (timed once when it is the entry) and `sample` configs spread
/// evenly over `space`; the fastest config found, the entry unless a sampled one beat
/// it. A sampled config that fails to time is skipped (it is no better than the entry);
/// the entry or the default failing is the error.
pub fn recheck_configs<C: Clone + PartialEq>(
    entry: &C,
    default: &C,
    space: Vec<C>,
    sample: usize,
    mut time: impl FnMut(&C) -> Result<f64>,
) -> Result<(f64, f64, C, f64)> {
    let step = (space.len() / sample.max(1)).max(1);
    let entry_us = time(entry)?;
    let default_us = if default == entry {
        entry_us
    } else {
        time(default)?
    };
    let (mut best, mut best_us) = (entry.clone(), entry_us);
    for c in space.into_iter().step_by(step).take(sample) {
        if let Ok(us) = time(&c) {
            if us < best_us {
                (best, best_us) = (c, us);
            }
        }
    }
    Ok((entry_us, default_us, best, best_us))
}

/// The candidates of a search: `default` first, then `space` in its order, each
/// `fit` to the problem's alignment, kept when `accepts` it, without duplicates; the
/// first that `preferred` picks moved right after the default ([`prefer_after_default`],
/// [`TuneOptions::prefer`]); at most `max` of them (0: all).
///
/// ```
/// let c = kernels_core::tune::candidate_configs(4, [1, 4, 6, 7], |c| c & !1, |c| *c < 7, |_| false, 0);
/// assert_eq!(c, vec![4, 0, 6]);
/// ```
pub fn candidate_configs<C: Clone + Eq + Hash>(
    default: C,
    space: impl IntoIterator<Item = C>,
    fit: impl Fn(C) -> C,
    accepts: impl Fn(&C) -> bool,
    preferred: impl Fn(&C) -> bool,
    max: usize,
) -> Vec<C> {
    let mut configs = vec![default.clone()];
    let mut seen: HashSet<C> = HashSet::from([default]);
    for c in space {
        let c = fit(c);
        if accepts(&c) && seen.insert(c.clone()) {
            configs.push(c);
        }
    }
    prefer_after_default(&mut configs, preferred);
    if max > 0 {
        configs.truncate(max);
    }
    configs
}

/// Moves the first of `configs` after the default (index 0) that `preferred` picks to
/// index 1, keeping the others in order: the incumbent after the default
/// ([`TuneOptions::prefer`]). The default itself is never moved.
///
/// ```
/// let mut c = vec![4, 0, 6, 2];
/// kernels_core::tune::prefer_after_default(&mut c, |c| *c == 6);
/// assert_eq!(c, vec![4, 6, 0, 2]);
/// ```
pub fn prefer_after_default<C>(configs: &mut [C], preferred: impl Fn(&C) -> bool) {
    if let Some(i) = configs.iter().skip(1).position(preferred) {
        configs[1..=i + 1].rotate_right(1);
    }
}

/// The failure of a search in which no candidate ran: how many, and the first errors.
pub fn all_failed<C>(candidates: &[CandidateReport<C>]) -> String {
    let reasons: Vec<String> = candidates
        .iter()
        .filter_map(|c| c.outcome.as_ref().err())
        .take(3)
        .cloned()
        .collect();
    format!(
        "all {} candidates failed; using the analytic default. First errors: {}",
        candidates.len(),
        reasons.join(" | ")
    )
}

/// The candidate loop of a search, whatever the backend: times each candidate whose
/// kernel compiled and loaded (`time(index, config, kernel)`, which also checks the
/// candidate's output before timing it; a failed load, run or check becomes the
/// candidate's error), records every outcome in `report.candidates`, and picks the
/// winner with [`select`]: the default (index 0) unless another is faster by more than
/// `noise`. `configs` and `kernels` are parallel to `report.candidates`. Returns the
/// winner's index and kernel (`None` when every candidate failed).
pub fn time_candidates<C, Kn: Clone, O>(
    report: &mut TuneReport<C>,
    configs: &[C],
    kernels: &[Result<(Kn, O)>],
    noise: f64,
    mut time: impl FnMut(usize, &C, &Kn) -> Result<Timing>,
) -> Option<(usize, Kn)> {
    let mut measured = Vec::with_capacity(configs.len());
    for (i, (config, kernel)) in configs.iter().zip(kernels).enumerate() {
        let outcome = match kernel {
            Err(e) => Err(e.to_string()),
            Ok((kernel, _)) => time(i, config, kernel).map_err(|e| e.to_string()),
        };
        measured.push(match &outcome {
            Ok(t) => Measured::Time(t.median_us),
            Err(e) => Measured::Failed(e.clone()),
        });
        report.candidates[i].outcome = outcome;
    }
    report.chosen_index = select(&measured, 0, noise);
    report
        .chosen_index
        .and_then(|i| kernels[i].as_ref().ok().map(|(k, _)| (i, k.clone())))
}

/// Timed reps of a screening pass ([`TuneOptions::finalists`]): the minimum, or under
/// graph timing fewer (down to [`crate::tune::SCREEN_MIN_REPS`]) once the replays took
/// [`SCREEN_BUDGET_US`] ([`crate::tune::enough_reps`]).
pub const SCREEN_REPS: u32 = crate::MIN_REPS;

/// The device time after which a screening pass's graph timing stops adding replays:
/// 10 ms, so replays of over 1 ms get fewer than [`SCREEN_REPS`], and of 3.4 ms or more
/// [`crate::tune::SCREEN_MIN_REPS`].
pub const SCREEN_BUDGET_US: f64 = 10_000.0;

/// What the outcome of a candidate left out by screening starts with.
pub const SCREENED_OUT: &str = "screened out: ";

/// [`time_candidates`] with a screening pass, for spaces too large to check and time
/// every candidate in full (large GEMMs, where one output check reads back and
/// compares gigabytes). The first `always` candidates (the analytic default, then the
/// preferred config) are timed in `full` (which checks the output first); every other
/// one is timed by `quick` (no check, fewer reps); then, fastest first, candidates are
/// timed in `full` until `finalists` have passed, and the rest are recorded as
/// [`SCREENED_OUT`] with their quick time. A wrong candidate is thus never chosen,
/// however fast it screened. [`crate::select`] then picks among the full timings, in
/// candidate order, as without screening. With `finalists` 0, or no more candidates
/// than `always + finalists`, it is [`time_candidates`] with `full`.
///
/// ```
/// use kernels_core::tune::{time_screened, CandidateReport, TuneReport, NOISE_THRESHOLD};
/// use kernels_core::{cache::AlignClass, tune::Timing};
/// let configs = [10.0, 9.0, 5.0, 3.0, 7.0];
/// let t = |us: f64| Ok(Timing { median_us: us, min_us: us, max_us: us, reps: 10, l2_flushed: false });
/// let mut report = TuneReport {
///     kernel: "k", static_key: String::new(), batch: 1, alignment: AlignClass::A16, chosen: 10.0,
///     chosen_index: None, failure: None, final_run: Err("not run".into()), phases: Default::default(),
///     candidates: configs.iter().map(|&c| CandidateReport { config: c, outcome: Err("not run".into()) }).collect(),
/// };
/// let kernels: Vec<kernels_core::Result<(f64, ())>> = configs.iter().map(|&c| Ok((c, ()))).collect();
/// // The candidate timed 3.0 is wrong: its full run fails the check, so 5.0 wins.
/// let full = |_: usize, c: &f64, _: &f64| if *c == 3.0 { Err(kernels_core::Error::Output("wrong".into())) } else { t(*c) };
/// let won = time_screened(&mut report, &configs, &kernels, NOISE_THRESHOLD, 1, 1, |_, c, _| t(*c), full);
/// assert_eq!(won.map(|(i, _)| i), Some(2));
/// assert!(report.candidates[1].outcome.as_ref().unwrap_err().starts_with("screened out: "));
/// ```
#[allow(clippy::too_many_arguments)]
pub fn time_screened<C, Kn: Clone, O>(
    report: &mut TuneReport<C>,
    configs: &[C],
    kernels: &[Result<(Kn, O)>],
    noise: f64,
    always: usize,
    finalists: usize,
    mut quick: impl FnMut(usize, &C, &Kn) -> Result<Timing>,
    mut full: impl FnMut(usize, &C, &Kn) -> Result<Timing>,
) -> Option<(usize, Kn)> {
    if finalists == 0 || configs.len() <= always + finalists {
        return time_candidates(report, configs, kernels, noise, full);
    }
    let run = |i: usize, timer: &mut dyn FnMut(usize, &C, &Kn) -> Result<Timing>| match &kernels[i] {
        Err(e) => Err(e.to_string()),
        Ok((kernel, _)) => timer(i, &configs[i], kernel).map_err(|e| e.to_string()),
    };
    let mut measured: Vec<Measured> = vec![Measured::Failed("not run".into()); configs.len()];
    for (i, slot) in measured.iter_mut().enumerate().take(always) {
        let outcome = run(i, &mut full);
        *slot = outcome
            .as_ref()
            .map_or_else(|e| Measured::Failed(e.clone()), |t| Measured::Time(t.median_us));
        report.candidates[i].outcome = outcome;
    }
    let mut screened = Vec::new();
    for i in always..configs.len() {
        match run(i, &mut quick) {
            Ok(t) => screened.push((i, t.median_us)),
            Err(e) => report.candidates[i].outcome = Err(e),
        }
    }
    screened.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut passed = 0;
    for (i, quick_us) in screened {
        if passed == finalists {
            report.candidates[i].outcome = Err(format!(
                "{SCREENED_OUT}{quick_us:.3} us in the quick pass, behind the {finalists} finalists"
            ));
            continue;
        }
        let outcome = run(i, &mut full);
        if let Ok(t) = &outcome {
            passed += 1;
            measured[i] = Measured::Time(t.median_us);
        }
        report.candidates[i].outcome = outcome;
    }
    report.chosen_index = select(&measured, 0, noise);
    report
        .chosen_index
        .and_then(|i| kernels[i].as_ref().ok().map(|(k, _)| (i, k.clone())))
}

/// The resolution's disk-cache step, whatever the backend: the config of the tuning
/// record stored under `key`, if the file is intact, decodes, and `K::accepts` it for
/// (`target`, `k`, `batch`). A corrupt file or a record that does not decode or is
/// refused counts in `corrupt` and is a miss (the next search replaces it).
pub fn cached_config<K: TunedKernel>(
    cache: &DiskCache,
    key: &CacheKey,
    target: Target,
    k: &K::Key,
    batch: u64,
    corrupt: &AtomicU64,
) -> Option<K::Config> {
    let config = match cache.load(Section::Tuning, key) {
        Lookup::Hit(e) => std::str::from_utf8(&e.payload)
            .ok()
            .and_then(|t| TuneRecord::from_json(t).ok())
            .and_then(|r| K::config_from_values(&r.config).ok())
            .filter(|c| K::accepts(target, k, batch, c)),
        Lookup::Corrupt { .. } => None,
        Lookup::Miss => return None,
    };
    if config.is_none() {
        corrupt.fetch_add(1, Ordering::Relaxed);
    }
    config
}

/// Records the end of a search in `report`: the winner (`winner`, an index into
/// `report.candidates`) and how its final plain run went, or, with no winner, why the
/// search failed and whether the buffers were restored (`final_run` is then the
/// restore's result).
pub fn conclude<C: Clone>(report: &mut TuneReport<C>, winner: Option<usize>, final_run: Result<()>) {
    match (
        winner.and_then(|i| report.candidates.get(i).map(|c| c.config.clone())),
        final_run,
    ) {
        (Some(config), run) => {
            report.chosen = config;
            report.final_run = run.map_err(|e| e.to_string());
        }
        (None, reset) => {
            report.failure = Some(all_failed(&report.candidates));
            report.final_run = Err(match reset {
                Ok(()) => "not run: every candidate failed (buffers restored)".into(),
                Err(e) => format!("not run, and restoring the buffers failed: {e}"),
            });
        }
    }
}

/// The tuning record of a finished search on `device` compiled by `compiler` (the
/// names a table's provenance carries), or why there is none.
pub fn tune_record<K: TunedKernel>(
    report: &TuneReport<K::Config>,
    device: &str,
    compiler: &str,
) -> Result<TuneRecord> {
    let (Some(us), Some(_)) = (report.chosen_us(), report.chosen_index) else {
        return Err(Error::Tune {
            kernel: K::SCHEMA.kernel.to_string(),
            key: report.static_key.clone(),
            batch: report.batch,
            reason: report
                .failure
                .clone()
                .unwrap_or_else(|| "no candidate ran".into()),
        });
    };
    Ok(TuneRecord {
        config: K::config_values(&report.chosen),
        us,
        default_us: report.default_us(),
        device: device.to_string(),
        compiler: compiler.to_string(),
        tuned_at: crate::today(),
        candidates: report
            .candidates
            .iter()
            .map(|c| CandidateRecord {
                config: K::config_values(&c.config),
                outcome: c.outcome.as_ref().map(|t| t.median_us).map_err(Clone::clone),
            })
            .collect(),
        phases: report.phases,
    })
}

/// What the tuner and rechecks share beyond the public search API: the refusal of a
/// capturing stream, the in-place safety of repeated runs ([`backend::Guarded`]), the
/// final run, and the configs of a recheck.
pub(crate) mod backend {
    use tuned::StaticKey;

    use super::{conclude, recheck_configs, Recheck, TuneReport};
    use crate::{Backend, BufferRole, DeviceInfo, Error, PlannedKernel, Result, TuneBuffer};

    /// Whether a search may run on `stream`: one that is capturing a graph, or that
    /// cannot say, is refused, with the reason in `report.failure`.
    pub(crate) fn plain_stream<B: Backend, C>(stream: &B::Stream, report: &mut TuneReport<C>) -> bool {
        match B::is_capturing(stream) {
            Ok(false) => true,
            Ok(true) => {
                report.failure = Some(format!(
                    "the stream is capturing a {} graph; tuning needs a plain stream",
                    B::NAME
                ));
                false
            }
            Err(e) => {
                report.failure = Some(e.to_string());
                false
            }
        }
    }

    /// The bytes a problem's buffers hold together.
    pub(crate) fn working_set(buffers: &[TuneBuffer]) -> u64 {
        buffers.iter().map(|b| b.bytes as u64).sum()
    }

    /// Snapshots of a problem's `Restore` buffers and the list of its `Zero` buffers, on
    /// one stream.
    pub(crate) struct Guarded<'s, B: Backend> {
        stream: &'s B::Stream,
        restore: Vec<(TuneBuffer, B::Buffer)>,
        zero: Vec<TuneBuffer>,
    }

    impl<'s, B: Backend> Guarded<'s, B> {
        /// Snapshots `buffers` (a [`PlannedKernel::buffers`] list) on `stream`; a
        /// failure is recorded in `report.failure` and the search cannot go on.
        pub(crate) fn new<C>(
            stream: &'s B::Stream,
            buffers: &[TuneBuffer],
            report: &mut TuneReport<C>,
        ) -> Option<Self> {
            let mut restore = Vec::new();
            let mut zero = Vec::new();
            for b in buffers {
                match b.role {
                    BufferRole::Restore => match snapshot::<B>(stream, b) {
                        Ok(snap) => restore.push((*b, snap)),
                        Err(e) => {
                            report.failure = Some(format!("could not snapshot the problem's buffers: {e}"));
                            return None;
                        }
                    },
                    BufferRole::Zero => zero.push(*b),
                    BufferRole::Read | BufferRole::Write => {}
                }
            }
            Some(Guarded {
                stream,
                restore,
                zero,
            })
        }

        /// Puts every `Restore` buffer back and zeroes every `Zero` buffer (stream-ordered).
        pub(crate) fn reset(&self) -> Result<()> {
            for (b, snap) in &self.restore {
                // SAFETY: the snapshot was taken of `b` and holds b.bytes; `b.ptr` is
                // valid for them by the PlannedKernel contract.
                unsafe { B::copy(self.stream, b.ptr, B::address(snap), b.bytes) }?;
            }
            for b in &self.zero {
                // SAFETY: `b.ptr` is valid for b.bytes by the PlannedKernel contract.
                unsafe { B::zero(self.stream, b.ptr, b.bytes) }?;
            }
            Ok(())
        }

        /// Ends a search: leaves the buffers as one plain run of the winner leaves them
        /// (reset, then `launch(index, kernel)` of the winner, then a wait for the
        /// stream; with no winner, only the reset) and records the outcome with
        /// [`conclude`].
        pub(crate) fn finish<C: Clone, Kn>(
            &self,
            report: &mut TuneReport<C>,
            winner: Option<(usize, Kn)>,
            launch: impl FnOnce(usize, &Kn) -> Result<()>,
        ) {
            let final_run = (|| -> Result<()> {
                self.reset()?;
                if let Some((i, kernel)) = &winner {
                    launch(*i, kernel)?;
                }
                B::synchronize(self.stream)
            })();
            conclude(report, winner.map(|(i, _)| i), final_run);
        }
    }

    /// A stream-ordered device copy of `b`'s contents.
    pub(crate) fn snapshot<B: Backend>(stream: &B::Stream, b: &TuneBuffer) -> Result<B::Buffer> {
        // SAFETY: `b.ptr` is valid for b.bytes by the PlannedKernel contract.
        unsafe { crate::backend::device_copy::<B>(stream, b.ptr, b.bytes) }
    }

    /// The configs a recheck of a committed entry compares: the entry, the analytic
    /// default and the search space of the key on a device.
    pub(crate) struct RecheckPlan<K: PlannedKernel> {
        /// The parsed static key.
        pub(crate) key: K::Key,
        entry: K::Config,
        default: K::Config,
        space: Vec<K::Config>,
    }

    impl<K: PlannedKernel> RecheckPlan<K> {
        /// Parses `key` and the tuned config `entry` (an error naming the kernel), and
        /// takes the analytic default and the search space at `batch` on `device`.
        pub(crate) fn new(
            device: &DeviceInfo,
            key: &StaticKey,
            batch: u64,
            entry: &[tuned::Value],
        ) -> Result<Self> {
            let key = parse_key::<K>(key)?;
            let entry = K::config_from_values(entry).map_err(|e| Error::kernel(K::SCHEMA.kernel, e))?;
            let default = K::analytic_default(device.tuning_target(), &key, batch);
            let space = K::search_space(device, &key, batch);
            Ok(RecheckPlan {
                key,
                entry,
                default,
                space,
            })
        }

        /// Times the plan with [`recheck_configs`]: `time(key, config)` gets each config
        /// fitted to alignment `align` on `device`; the best config is reported as sampled.
        pub(crate) fn run(
            self,
            device: &DeviceInfo,
            align: crate::AlignClass,
            sample: usize,
            mut time: impl FnMut(&K::Key, &K::Config) -> Result<f64>,
        ) -> Result<Recheck> {
            let RecheckPlan {
                key,
                entry,
                default,
                space,
            } = self;
            let (entry_us, default_us, best, best_us) =
                recheck_configs(&entry, &default, space, sample, |c| {
                    time(&key, &K::fit_alignment(device, &key, c.clone(), align))
                })?;
            Ok(Recheck {
                entry_us,
                default_us,
                best: K::config_values(&best),
                best_us,
            })
        }
    }

    /// Parses a static key of `K` (an error naming the kernel).
    pub(crate) fn parse_key<K: PlannedKernel>(key: &StaticKey) -> Result<K::Key> {
        K::key_from_values(key.values()).map_err(|e| Error::kernel(K::SCHEMA.kernel, e))
    }

    /// The [`crate::candidates_digest`] of a search for `key` at `batch` on `device`, or,
    /// for a key that did not parse, a digest of the error (`invalid key: ...`).
    pub(crate) fn candidates_or_error<K: PlannedKernel>(
        device: &DeviceInfo,
        key: std::result::Result<K::Key, impl std::fmt::Display>,
        batch: u64,
    ) -> String {
        match key {
            Ok(k) => crate::candidates_digest::<K>(device, &k, batch),
            Err(e) => format!("invalid key: {e}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod dummy {
    /// A kernel for the crate's unit tests: keyed by a column count, its configs a
    /// thread count (256 by default, accepted up to 1024). Nothing launches it.
    pub(crate) struct Dummy;
    pub(crate) static DUMMY: tuned::KernelSchema = tuned::KernelSchema {
        kernel: "k",
        key: &[tuned::Field::int("cols")],
        params: &[tuned::Field::int("threads")],
    };
    impl tuned::TunedKernel for Dummy {
        type Key = u32;
        type Config = u32;
        const SCHEMA: &'static tuned::KernelSchema = &DUMMY;
        const SOURCE_FINGERPRINT: &'static str = "fnv1a64:0";
        fn key_values(k: &u32) -> tuned::KeyValues {
            tuned::KeyValues::new().push(*k as i64)
        }
        fn key_from_values(_: &[tuned::Value]) -> std::result::Result<u32, String> {
            Ok(0)
        }
        fn config_from_values(v: &[tuned::Value]) -> std::result::Result<u32, String> {
            match v {
                [tuned::Value::Int(t)] => Ok(*t as u32),
                _ => Err("not a thread count".into()),
            }
        }
        fn config_values(c: &u32) -> Vec<tuned::Value> {
            vec![tuned::Value::Int(*c as i64)]
        }
        fn analytic_default(_: tuned::Target, _: &u32, _: u64) -> u32 {
            256
        }
        fn baked_table(_: tuned::Target) -> Option<&'static tuned::BakedTable> {
            None
        }
        fn accepts(_: tuned::Target, _: &u32, _: u64, c: &u32) -> bool {
            *c <= 1024
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dummy::Dummy;

    #[test]
    fn recheck_times_entry_default_and_an_even_sample() {
        // Configs are numbers; a config's time is its value, 7 fails to time.
        let mut timed = Vec::new();
        let mut time = |c: &u32| {
            timed.push(*c);
            if *c == 7 {
                Err(Error::invalid("config", "fails"))
            } else {
                Ok(*c as f64)
            }
        };
        let space: Vec<u32> = (1..=12).rev().collect(); // 12, 11, ..., 1
        let (entry_us, default_us, best, best_us) = recheck_configs(&9, &10, space, 4, &mut time).unwrap();
        assert_eq!((entry_us, default_us), (9.0, 10.0));
        // Every third config of the space: 12, 9, 6, 3; 3 is the fastest.
        assert_eq!(timed, vec![9, 10, 12, 9, 6, 3]);
        assert_eq!((best, best_us), (3, 3.0));

        // The default is the entry: timed once; a failing sampled config is skipped;
        // nothing beats the entry, which stays the best.
        let mut n = 0;
        let r = recheck_configs(&1, &1, vec![7, 5], 2, |c: &u32| {
            n += 1;
            if *c == 7 {
                Err(Error::invalid("config", "fails"))
            } else {
                Ok(*c as f64)
            }
        })
        .unwrap();
        assert_eq!(r, (1.0, 1.0, 1, 1.0));
        assert_eq!(n, 3);

        // The entry failing is the error.
        let e = recheck_configs(&7, &1, vec![], 4, |c: &u32| {
            if *c == 7 {
                Err(Error::invalid("config", "fails"))
            } else {
                Ok(1.0)
            }
        });
        assert!(e.is_err());
    }

    use super::*;

    fn report(outcomes: &[std::result::Result<f64, &str>]) -> TuneReport<u32> {
        TuneReport {
            kernel: "k",
            static_key: "bf16,4096".into(),
            batch: 8,
            alignment: AlignClass::A16,
            chosen: 0,
            chosen_index: None,
            candidates: outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| CandidateReport {
                    config: i as u32 * 10,
                    outcome: o
                        .map(|us| Timing::from_samples(&[us], true))
                        .map_err(str::to_string),
                })
                .collect(),
            failure: None,
            final_run: Err("not run".into()),
            phases: Default::default(),
        }
    }

    #[test]
    fn a_concluded_search_names_the_winner_or_why_there_is_none() {
        let mut r = report(&[Ok(10.0), Ok(5.0)]);
        r.chosen_index = Some(1);
        conclude(&mut r, Some(1), Ok(()));
        assert_eq!(
            (r.chosen, r.final_run.clone(), r.failure.clone()),
            (10, Ok(()), None)
        );
        assert_eq!((r.chosen_us(), r.default_us()), (Some(5.0), Some(10.0)));
        let rec = tune_record::<Dummy>(&r, "AMD Instinct MI300X", "hiprtc 6.2").unwrap();
        assert_eq!(
            (rec.us, rec.default_us, rec.device.as_str()),
            (5.0, Some(10.0), "AMD Instinct MI300X")
        );
        assert_eq!(rec.config, vec![tuned::Value::Int(10)]);
        assert_eq!(rec.candidates.len(), 2);

        let mut r = report(&[Err("compile"), Err("launch")]);
        conclude(&mut r, None, Ok(()));
        assert_eq!(r.chosen, 0, "the analytic default stays chosen");
        assert!(r.failure.as_deref().unwrap().contains("compile | launch"));
        assert!(r.final_run.as_ref().unwrap_err().contains("buffers restored"));
        let e = tune_record::<Dummy>(&r, "d", "c").unwrap_err().to_string();
        assert!(e.contains("all 2 candidates failed"), "{e}");
    }

    #[test]
    fn the_default_comes_first_and_duplicates_after_fitting_go() {
        // fit rounds down to even: 5 becomes 4 (the default) and 3 becomes 2 (already seen).
        let c = candidate_configs(4u32, [2, 5, 3, 8, 10], |c| c & !1, |c| *c <= 8, |_| false, 0);
        assert_eq!(c, vec![4, 2, 8]);
        assert_eq!(
            candidate_configs(4u32, [2, 8], |c| c, |_| true, |_| false, 2),
            vec![4, 2]
        );
    }

    #[test]
    fn the_preferred_config_moves_right_after_the_default_and_nothing_else_moves() {
        let mut c = vec![4u32, 2, 8, 6, 8];
        prefer_after_default(&mut c, |c| *c == 8);
        assert_eq!(
            c,
            vec![4, 8, 2, 6, 8],
            "the first match moves, the rest keep their order"
        );
        let mut c = vec![4u32, 2, 8];
        prefer_after_default(&mut c, |c| *c == 2);
        assert_eq!(c, vec![4, 2, 8], "already there");
        prefer_after_default(&mut c, |c| *c == 4);
        assert_eq!(c, vec![4, 2, 8], "the default is never moved");
        prefer_after_default(&mut c, |c| *c == 7);
        assert_eq!(c, vec![4, 2, 8], "not a candidate: ignored");
        let mut one = vec![4u32];
        prefer_after_default(&mut one, |_| true);
        assert_eq!(one, vec![4]);
    }

    #[test]
    fn a_preferred_config_keeps_near_ties_and_loses_to_a_clear_win() {
        // Configs 0 (the default), 1, 2 with these times; config 2 is the previous
        // table's entry. Times by config, whatever the order they are tried in.
        let run = |times: [f64; 3], prefer: Option<u32>| {
            let mut order = vec![0u32, 1, 2];
            if let Some(p) = prefer {
                prefer_after_default(&mut order, |c| *c == p);
            }
            let measured: Vec<Measured> = order.iter().map(|&c| Measured::Time(times[c as usize])).collect();
            select(&measured, 0, NOISE_THRESHOLD).map(|i| order[i])
        };
        // 1 and 2 both beat the default; 1% apart is a near-tie (a 2% margin below 10 us).
        let near = [5.0, 4.00, 4.04];
        assert_eq!(
            run(near, None),
            Some(1),
            "without a preference the earlier candidate wins"
        );
        assert_eq!(run(near, Some(2)), Some(2), "the previous entry keeps a near-tie");
        // 1 is clearly faster than the previous entry: it wins either way.
        let clear = [5.0, 3.5, 4.04];
        assert_eq!(run(clear, Some(2)), Some(1));
        // The previous entry no longer beats the default by the margin: the default
        // stays the incumbent and the others race it as before.
        let stale = [5.0, 4.0, 4.95];
        assert_eq!(run(stale, Some(2)), Some(1));
        let none_better = [5.0, 4.95, 4.96];
        assert_eq!(run(none_better, Some(2)), Some(0));
    }

    #[test]
    fn the_candidate_loop_records_every_outcome_and_picks_by_the_noise_rule() {
        let fail = |what: &str| Err(Error::invalid("candidate", what));
        // Candidate 1 did not compile; 3 fails when run; 2 is the fastest.
        let kernels: Vec<Result<(&str, ())>> =
            vec![Ok(("k0", ())), fail("compile"), Ok(("k2", ())), Ok(("k3", ()))];
        let configs = [0u32, 10, 20, 30];
        let mut r = report(&[Err("not run"); 4]);
        let mut ran = Vec::new();
        let winner = time_candidates(&mut r, &configs, &kernels, 0.02, |_, c, k| {
            ran.push((*c, *k));
            match *k {
                "k0" => Ok(Timing::from_samples(&[10.0], true)),
                "k2" => Ok(Timing::from_samples(&[5.0], true)),
                _ => Err(Error::invalid("launch", "fails")),
            }
        });
        assert_eq!(
            ran,
            vec![(0, "k0"), (20, "k2"), (30, "k3")],
            "only loaded kernels run"
        );
        assert_eq!(winner, Some((2, "k2")));
        assert_eq!(r.chosen_index, Some(2));
        let outcomes: Vec<_> = r
            .candidates
            .iter()
            .map(|c| c.outcome.as_ref().map(|t| t.median_us))
            .collect();
        assert_eq!(outcomes[0], Ok(10.0));
        assert!(outcomes[1].as_ref().unwrap_err().contains("compile"));
        assert_eq!(outcomes[2], Ok(5.0));
        assert!(outcomes[3].as_ref().unwrap_err().contains("fails"));

        // Within the noise threshold the default (index 0) stays.
        let mut r = report(&[Err("not run"); 2]);
        let kernels: Vec<Result<(&str, ())>> = vec![Ok(("a", ())), Ok(("b", ()))];
        let us = |k: &str| if k == "a" { 10.0 } else { 9.9 };
        let w = time_candidates(&mut r, &[0, 10], &kernels, 0.02, |_, _, k| {
            Ok(Timing::from_samples(&[us(k)], true))
        });
        assert_eq!(w, Some((0, "a")));

        // Nothing ran: no winner.
        let mut r = report(&[Err("not run"); 2]);
        let kernels: Vec<Result<(&str, ())>> = vec![fail("compile"), fail("compile")];
        assert_eq!(
            time_candidates(&mut r, &[0, 10], &kernels, 0.02, |_, _, _| unreachable!()),
            None
        );
        assert_eq!(r.chosen_index, None);
    }

    #[test]
    fn the_disk_cache_step_trusts_only_intact_decodable_accepted_records() {
        let dir = std::env::temp_dir().join(format!("kernels-core-cached-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = DiskCache::at(&dir);
        let key = |batch: u64| {
            crate::cache_key(&crate::testing::tuning_key_parts(
                "k",
                "fnv1a64:0",
                "cols=4096",
                batch,
            ))
        };
        let record = |threads: i64| TuneRecord {
            config: vec![tuned::Value::Int(threads)],
            us: 1.0,
            default_us: Some(1.0),
            device: "NVIDIA H200".into(),
            compiler: "nvrtc 13.0".into(),
            tuned_at: "2026-11-30".into(),
            candidates: Vec::new(),
            phases: Default::default(),
        };
        let corrupt = AtomicU64::new(0);
        let get = |batch| cached_config::<Dummy>(&cache, &key(batch), Target::Sm90, &4096, batch, &corrupt);
        let count = || corrupt.load(Ordering::Relaxed);

        assert_eq!(get(1), None, "a miss");
        assert_eq!(count(), 0, "a miss is not corrupt");

        cache
            .store(Section::Tuning, &key(1), "tune", record(512).to_json().as_bytes())
            .unwrap();
        assert_eq!((get(1), count()), (Some(512), 0));

        // A record of a config the space refuses, one that does not decode, and
        // a payload that is not a record: each a miss, counted.
        cache
            .store(
                Section::Tuning,
                &key(2),
                "tune",
                record(2048).to_json().as_bytes(),
            )
            .unwrap();
        assert_eq!((get(2), count()), (None, 1));
        let mut odd = record(512);
        odd.config.push(tuned::Value::Int(1));
        cache
            .store(Section::Tuning, &key(3), "tune", odd.to_json().as_bytes())
            .unwrap();
        assert_eq!((get(3), count()), (None, 2));
        cache
            .store(Section::Tuning, &key(4), "tune", b"{not json")
            .unwrap();
        assert_eq!((get(4), count()), (None, 3));

        // A file changed on disk fails its checksum.
        let files: Vec<_> = std::fs::read_dir(dir.join("v1").join("tuning"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        for f in &files {
            let mut bytes = std::fs::read(f).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x55;
            std::fs::write(f, bytes).unwrap();
        }
        assert_eq!((get(1), count()), (None, 4));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_search_refuses_capture_guards_in_place_buffers_and_ends_with_one_run() {
        use crate::{Backend, BufferRole, Mock, MockStream, TuneBuffer};
        let s = MockStream::default();
        s.capturing.set(true);
        let mut r = report(&[Err("not run")]);
        assert!(!backend::plain_stream::<Mock, _>(&s, &mut r));
        assert_eq!(
            r.failure.as_deref(),
            Some("the stream is capturing a mock graph; tuning needs a plain stream")
        );
        s.capturing.set(false);
        let mut r = report(&[Err("not run")]);
        assert!(backend::plain_stream::<Mock, _>(&s, &mut r));
        assert_eq!(r.failure, None);

        // Four host buffers of 64 bytes standing in for device memory.
        let mem: Vec<_> = (1..=4u8).map(|i| Mock::upload(&s, &[i; 64]).unwrap()).collect();
        let buffer = |i: usize, role: BufferRole| TuneBuffer {
            name: "b",
            ptr: Mock::address(&mem[i]),
            bytes: 64,
            role,
        };
        let buffers = [
            buffer(0, BufferRole::Read),
            buffer(1, BufferRole::Restore),
            buffer(2, BufferRole::Zero),
            buffer(3, BufferRole::Write),
        ];
        assert_eq!(backend::working_set(&buffers), 256);
        let bytes =
            |i: usize| unsafe { std::slice::from_raw_parts(buffers[i].ptr as *const u8, 64).to_vec() };

        let mut r = report(&[Ok(1.0), Ok(2.0)]);
        let guarded = backend::Guarded::<Mock>::new(&s, &buffers, &mut r).unwrap();
        // A run writes over the in-place buffer; a reset puts it back and zeroes the
        // accumulated one; the others are left alone.
        unsafe { Mock::zero(&s, buffers[1].ptr, 64).unwrap() };
        guarded.reset().unwrap();
        assert_eq!(
            (bytes(0), bytes(1), bytes(2), bytes(3)),
            (vec![1; 64], vec![2; 64], vec![0; 64], vec![4; 64])
        );
        s.log.borrow_mut().clear();
        guarded.finish(&mut r, Some((1, "k1")), |i, k| {
            s.log.borrow_mut().push(format!("launch {i} {k}"));
            Ok(())
        });
        assert_eq!(*s.log.borrow(), ["copy", "zero", "launch 1 k1", "sync"]);
        assert_eq!((r.chosen, r.final_run), (10, Ok(())));
    }

    #[test]
    fn the_failure_names_the_count_and_first_errors() {
        let failed = |e: &str| CandidateReport {
            config: 0u32,
            outcome: Err(e.to_string()),
        };
        let m = all_failed(&[failed("a"), failed("b"), failed("c"), failed("d")]);
        assert!(m.starts_with("all 4 candidates failed"), "{m}");
        assert!(m.ends_with("a | b | c"), "{m}");
    }
}
