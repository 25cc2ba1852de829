//! What a search is and what it found, whatever the backend: [`TuneOptions`],
//! [`TuneReport`], the candidate list ([`candidate_configs`]), the message when every
//! candidate failed ([`all_failed`]) and the [`TuneRecord`] of a report
//! ([`tune_record`]). The CUDA tuner (`Runtime::tune`) and the HIP tuner
//! (`HipRuntime::tune`) share them, with [`crate::select`] picking the winner.

use std::collections::HashSet;
use std::hash::Hash;

use tuned::TunedKernel;

use crate::{AlignClass, CandidateRecord, Error, Result, Timing, TimingOptions, TuneRecord, NOISE_THRESHOLD};

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
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            timing: TimingOptions::default(),
            noise_threshold: NOISE_THRESHOLD,
            compile_threads: 0,
            max_candidates: 0,
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

/// The candidates of a search: `default` first, then `space` in its order, each
/// `fit` to the problem's alignment, kept when `accepts` it, without duplicates; at
/// most `max` of them (0: all).
///
/// ```
/// let c = kernels_core::candidate_configs(4, [1, 4, 6, 7], |c| c & !1, |c| *c < 7, 0);
/// assert_eq!(c, vec![4, 0, 6]);
/// ```
pub fn candidate_configs<C: Clone + Eq + Hash>(
    default: C,
    space: impl IntoIterator<Item = C>,
    fit: impl Fn(C) -> C,
    accepts: impl Fn(&C) -> bool,
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
    if max > 0 {
        configs.truncate(max);
    }
    configs
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_comes_first_and_duplicates_after_fitting_go() {
        // fit rounds down to even: 5 becomes 4 (the default) and 3 becomes 2 (already seen).
        let c = candidate_configs(4u32, [2, 5, 3, 8, 10], |c| c & !1, |c| *c <= 8, 0);
        assert_eq!(c, vec![4, 2, 8]);
        assert_eq!(candidate_configs(4u32, [2, 8], |c| c, |_| true, 2), vec![4, 2]);
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
