//! Tuning: what a search is and how it picks ([`TuneOptions`], [`select`] and its noise
//! rule), how kernels are timed ([`time_runs`], graph timing, L2 flushing), the
//! records a search leaves ([`TuneRecord`]), and `kernels tune`'s resumable driver
//! that writes committed tables ([`tune_table`]), which can carry searches across a
//! source change that leaves their machine code as it was ([`carries`]). The tuner
//! itself is [`crate::Runtime::tune`]; a serving engine needs nothing from this module.

mod carry;
mod check;
pub(crate) mod search;
mod select;
mod table;
mod timing;
mod tunable;
mod tuner;

pub use carry::{carries, CodeCounts, CompileFn, OldSource, SameCode};
pub(crate) use check::OutputCheck;
pub use check::{verify, verify_each, UNREAD_LIMIT, WRONG_OUTPUT};
pub use search::{
    all_failed, cached_config, candidate_configs, conclude, prefer_after_default, recheck_configs,
    start_search, time_candidates, time_screened, tune_record, CandidateReport, Recheck, TuneOptions,
    TuneReport, SCREENED_OUT, SCREEN_BUDGET_US, SCREEN_REPS,
};
pub use select::{median, noise_margin, select, Measured, LONG_KERNEL_US, NOISE_THRESHOLD};
pub use table::{
    parse_shapes, today, tune_table, CandidateRecord, Progress, SearchPhases, TableJob, TableOutcome,
    TuneRecord,
};
pub use timing::{
    enough_reps, graph_launches, rotation, screen_launches, time_runs, FlushL2, L2Flush, Timing,
    TimingMethod, TimingOptions, MIN_REPS, SCREEN_MIN_REPS,
};
pub use tunable::{DynTunable, Tunable, TunableDyn};
