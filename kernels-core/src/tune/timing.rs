//! The one timing routine, on every backend: events around each run, warm-up first,
//! at least [`MIN_REPS`] timed reps, the median reported; the L2 flushed between reps
//! when the working set would otherwise stay in cache. Graph timing
//! ([`TimingMethod::Graph`]) is a CUDA capability ([`crate::Backend::time_graph_runs`]).

/// Fewest timed repetitions [`time_runs`] accepts.
pub const MIN_REPS: u32 = 10;

/// When to flush the L2 cache between timed reps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlushL2 {
    /// When the working set is under twice the L2 size: such a problem would be timed
    /// from cache, which a serving engine (that touches other data between calls)
    /// never sees. Larger working sets evict themselves.
    #[default]
    Auto,
    Always,
    Never,
}

impl FlushL2 {
    /// Whether a working set of `working_set` bytes is flushed on a device with
    /// `l2_bytes` of L2.
    ///
    /// ```
    /// use kernels_core::tune::FlushL2;
    /// let l2 = 60 << 20; // H200
    /// assert!(FlushL2::Auto.wanted(100 << 20, l2));
    /// assert!(!FlushL2::Auto.wanted(120 << 20, l2));
    /// ```
    pub fn wanted(self, working_set: u64, l2_bytes: u64) -> bool {
        match self {
            FlushL2::Auto => working_set < l2_bytes.saturating_mul(2),
            FlushL2::Always => true,
            FlushL2::Never => false,
        }
    }
}

/// How a candidate is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimingMethod {
    /// One launch between events, the L2 flushed before it where [`FlushL2`] wants:
    /// the caller's own buffers, nothing else allocated (online tuning).
    #[default]
    Single,
    /// Back-to-back launches replayed from a CUDA graph over rotating copies of the
    /// problem (enough copies that one launch's data is out of L2 when it comes round
    /// again, see [`rotation`]), timed per launch: how engines run these kernels, in
    /// graphs or eagerly on a busy stream, and how the GPU bench measures them.
    /// `kernels tune` uses it; no L2 flush.
    Graph,
}

impl TimingMethod {
    /// `single` or `graph`.
    pub fn name(self) -> &'static str {
        match self {
            TimingMethod::Single => tuned::TIMING_SINGLE,
            TimingMethod::Graph => tuned::TIMING_GRAPH,
        }
    }
}

impl std::fmt::Display for TimingMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TimingMethod {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "single" => Ok(TimingMethod::Single),
            "graph" => Ok(TimingMethod::Graph),
            _ => Err(format!(
                "unknown timing method `{s}`; expected `graph` or `single`"
            )),
        }
    }
}

/// Copies of a problem moving `bytes_per_call` that a graph timing rotates through so
/// that together they span twice the L2 (1 to 64).
pub fn rotation(bytes_per_call: u64, l2_bytes: u64) -> usize {
    (2 * l2_bytes).div_ceil(bytes_per_call.max(1)).clamp(1, 64) as usize
}

/// Launches per captured graph for a call moving `bytes_per_call` over `copies`
/// rotating copies: every copy at least once, at least 3 (so each launch follows
/// another), and about 100 us of traffic at 3 TB/s, up to 20.
pub fn graph_launches(bytes_per_call: u64, copies: usize) -> usize {
    launches_for(bytes_per_call, copies, 3)
}

/// Launches of a call moving `bytes_per_call` for about 100 us of traffic at 3 TB/s,
/// from `least` to 20, and at least `copies`.
fn launches_for(bytes_per_call: u64, copies: usize, least: usize) -> usize {
    let est_us = (bytes_per_call as f64 / 3e6).max(0.5);
    ((100.0 / est_us).ceil() as usize).clamp(least, 20).max(copies)
}

/// Launches per captured graph in a screening pass ([`crate::tune::TuneOptions::finalists`]):
/// as [`graph_launches`] but down to one for calls of 100 us or more, whose replays
/// are long enough to time alone and which dominate a search's device time.
pub fn screen_launches(bytes_per_call: u64, copies: usize) -> usize {
    launches_for(bytes_per_call, copies, 1)
}

/// How to time.
#[derive(Clone, Debug, PartialEq)]
pub struct TimingOptions {
    /// Untimed runs first (module load, clocks ramping, TLB warm-up).
    pub warmup: u32,
    /// Timed runs; at least [`MIN_REPS`].
    pub reps: u32,
    /// [`TimingMethod::Single`] only (graph timing rotates copies instead).
    pub flush_l2: FlushL2,
    /// How the tuner and `kernels tables check` time a candidate. The timing routines
    /// themselves ([`time_runs`], [`crate::Backend::time_graph_runs`]) are one method each.
    pub method: TimingMethod,
    /// Graph timing only, for a screening pass: once [`SCREEN_MIN_REPS`] replays are
    /// timed, stop when the replays timed so far took this many microseconds (see
    /// [`enough_reps`]). `None`: `reps` replays always.
    pub budget_us: Option<f64>,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            warmup: 3,
            reps: 25,
            flush_l2: FlushL2::Auto,
            method: TimingMethod::Single,
            budget_us: None,
        }
    }
}

/// Fewest replays a screening pass with a budget ([`TimingOptions::budget_us`]) times.
pub const SCREEN_MIN_REPS: u32 = 3;

/// Whether a graph timing under `opts` has timed enough replays: `reps` of them, or with
/// a budget at least [`SCREEN_MIN_REPS`] whose replays (`us` per launch each, `launches`
/// launches a replay) add up to the budget. A screening pass only ranks candidates for
/// the finalists' full timing, and a replay of milliseconds (a prefill GEMM of 8192
/// rows by 152064 columns: about 14 ms) varies little from the next (on the H200 a
/// config's median moved by at most 0.5% between tuning runs, docs/tuning.md), while
/// ten of them for each of two hundred candidates is half a minute of a search.
pub fn enough_reps(opts: &TimingOptions, us: &[f64], launches: usize) -> bool {
    let done = us.len() as u32;
    if done >= opts.reps {
        return true;
    }
    match opts.budget_us {
        Some(budget) if done >= SCREEN_MIN_REPS => us.iter().sum::<f64>() * launches as f64 >= budget,
        _ => false,
    }
}

impl TimingOptions {
    /// Checks the options before anything runs: at least [`MIN_REPS`] timed reps (an
    /// error naming `reps`). Every backend's timing routine calls it first.
    pub fn check(&self) -> crate::Result<()> {
        if self.reps < MIN_REPS {
            return Err(crate::Error::invalid(
                "reps",
                format!("{} timed reps; at least {MIN_REPS} are needed", self.reps),
            ));
        }
        Ok(())
    }
}

/// What [`time_runs`] measured, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub reps: u32,
    /// Whether the L2 was flushed before each timed run.
    pub l2_flushed: bool,
}

impl Timing {
    /// The summary of one timed run per entry of `us` (microseconds); the median is
    /// NaN when `us` is empty.
    pub fn from_samples(us: &[f64], l2_flushed: bool) -> Timing {
        Timing {
            median_us: crate::median(us).unwrap_or(f64::NAN),
            min_us: us.iter().copied().fold(f64::INFINITY, f64::min),
            max_us: us.iter().copied().fold(0.0, f64::max),
            reps: us.len() as u32,
            l2_flushed,
        }
    }
}

/// Bytes of the scratch buffer that flushes an L2 of `l2_bytes`: twice the L2, and at
/// least 2 MiB when the device reports no L2 size.
pub(crate) fn l2_flush_bytes(l2_bytes: u64) -> usize {
    (l2_bytes.max(1 << 20) * 2) as usize
}

/// What the event-timed loop ([`time_with_events`]) needs of a backend: an L2 flush
/// (or none), timing events recorded on one stream, a wait for the stream, and the time
/// between two completed events.
pub(crate) trait EventClock {
    /// A timing event.
    type Event;

    /// Enqueues the L2 flush, if the caller asked for one.
    fn flush(&mut self) -> crate::Result<()>;

    /// A new event.
    fn event(&self) -> crate::Result<Self::Event>;

    /// Records `event` on the stream.
    fn record(&self, event: &Self::Event) -> crate::Result<()>;

    /// Waits until everything enqueued on the stream has run.
    fn synchronize(&self) -> crate::Result<()>;

    /// Milliseconds from `start` to `end`, both recorded and past the wait.
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> crate::Result<f32>;
}

/// The timing loop of every backend: checks `opts`, runs `prepare` then `run`
/// `opts.warmup` times untimed, then `opts.reps` times with the flush after `prepare`
/// and events recorded around `run` only; waits for the stream and summarises the
/// reps in microseconds (`l2_flushed` says whether the clock flushes).
pub(crate) fn time_with_events<C: EventClock>(
    clock: &mut C,
    opts: &TimingOptions,
    l2_flushed: bool,
    prepare: &mut dyn FnMut() -> crate::Result<()>,
    run: &mut dyn FnMut() -> crate::Result<()>,
) -> crate::Result<Timing> {
    opts.check()?;
    for _ in 0..opts.warmup {
        prepare()?;
        run()?;
    }
    let mut events = Vec::with_capacity(opts.reps as usize);
    for _ in 0..opts.reps {
        prepare()?;
        clock.flush()?;
        let start = clock.event()?;
        let end = clock.event()?;
        clock.record(&start)?;
        run()?;
        clock.record(&end)?;
        events.push((start, end));
    }
    clock.synchronize()?;
    let mut us = Vec::with_capacity(events.len());
    for (start, end) in &events {
        us.push(clock.elapsed_ms(start, end)? as f64 * 1000.0);
    }
    Ok(Timing::from_samples(&us, l2_flushed))
}

pub use on_backend::{time_runs, L2Flush};

mod on_backend {
    use super::{l2_flush_bytes, time_with_events, EventClock, Timing, TimingOptions};
    use crate::{Backend, DeviceInfo, Result};

    /// A scratch buffer of twice the L2 size; zeroing it evicts everything else.
    pub struct L2Flush<B: Backend> {
        scratch: B::Buffer,
        bytes: usize,
    }

    impl<B: Backend> L2Flush<B> {
        /// Allocates `2 x L2` bytes (at least 2 MiB) on `stream`'s device (120 MiB on an
        /// H200).
        pub fn new(stream: &B::Stream, info: &DeviceInfo) -> Result<L2Flush<B>> {
            let bytes = l2_flush_bytes(info.l2_bytes);
            Ok(L2Flush {
                scratch: B::alloc(stream, bytes)?,
                bytes,
            })
        }

        /// Enqueues the flush (a memset of the whole scratch buffer) on `stream`.
        pub fn flush(&self, stream: &B::Stream) -> Result<()> {
            // SAFETY: the scratch buffer is this device's and holds `bytes`.
            unsafe { B::zero(stream, B::address(&self.scratch), self.bytes) }
        }
    }

    /// The one timing routine. Runs `prepare` then `run` `opts.warmup` times untimed,
    /// then `opts.reps` times with the L2 flushed (when `flush` is given) after
    /// `prepare` and events recorded around `run` only, so restoring buffers and
    /// flushing stay outside the timed region. Returns the median (and extremes) in
    /// microseconds.
    pub fn time_runs<B: Backend>(
        stream: &B::Stream,
        opts: &TimingOptions,
        flush: Option<&L2Flush<B>>,
        prepare: &mut dyn FnMut() -> Result<()>,
        run: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Timing> {
        let mut clock = Clock::<B> { stream, flush };
        time_with_events(&mut clock, opts, flush.is_some(), prepare, run)
    }

    /// A backend's events on one stream, with an optional L2 flush.
    struct Clock<'a, B: Backend> {
        stream: &'a B::Stream,
        flush: Option<&'a L2Flush<B>>,
    }

    impl<B: Backend> EventClock for Clock<'_, B> {
        type Event = B::Event;

        fn flush(&mut self) -> Result<()> {
            match self.flush {
                Some(f) => f.flush(self.stream),
                None => Ok(()),
            }
        }

        fn event(&self) -> Result<B::Event> {
            B::event(self.stream)
        }

        fn record(&self, event: &B::Event) -> Result<()> {
            B::record(event, self.stream)
        }

        fn synchronize(&self) -> Result<()> {
            B::synchronize(self.stream)
        }

        fn elapsed_ms(&self, start: &B::Event, end: &B::Event) -> Result<f32> {
            B::elapsed_ms(start, end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_screening_budget_stops_long_replays_early_and_short_ones_at_reps() {
        let opts = TimingOptions {
            reps: 10,
            budget_us: Some(10_000.0),
            ..TimingOptions::default()
        };
        let reps = |us_per_launch: f64, launches: usize| {
            let mut us = Vec::new();
            while !enough_reps(&opts, &us, launches) {
                us.push(us_per_launch);
            }
            us.len()
        };
        // Replays of 14 ms (one launch each): the fewest; of 1.5 ms: until 10 ms;
        // short ones (20 launches of 10 us): all 10.
        assert_eq!(reps(14_000.0, 1), SCREEN_MIN_REPS as usize);
        assert_eq!(reps(1_500.0, 1), 7);
        assert_eq!(reps(10.0, 20), 10);
        // A replay of 20 launches of 400 us is 8 ms a replay.
        assert_eq!(reps(400.0, 20), SCREEN_MIN_REPS as usize);
        // Without a budget, always `reps`.
        let plain = TimingOptions {
            budget_us: None,
            ..opts.clone()
        };
        assert!(!enough_reps(&plain, &[14_000.0; 9], 1));
        assert!(enough_reps(&plain, &[14_000.0; 10], 1));
    }

    #[test]
    fn too_few_reps_is_an_error_naming_reps() {
        let opts = TimingOptions {
            reps: MIN_REPS - 1,
            ..TimingOptions::default()
        };
        let e = opts.check().unwrap_err().to_string();
        assert!(e.contains("`reps`"), "{e}");
        assert!(TimingOptions::default().check().is_ok());
    }

    #[test]
    fn timing_methods_parse_and_graph_sizes_are_bounded() {
        assert_eq!("graph".parse::<TimingMethod>(), Ok(TimingMethod::Graph));
        assert_eq!("single".parse::<TimingMethod>(), Ok(TimingMethod::Single));
        let e = "graphs".parse::<TimingMethod>().unwrap_err();
        assert!(e.contains("`graphs`") && e.contains("graph"), "{e}");
        assert_eq!(TimingMethod::default(), TimingMethod::Single);
        // 60 MiB of L2: a 1 MiB call rotates over 120 copies -> capped at 64; a call
        // larger than twice the L2 needs no copy but itself.
        let l2 = 60 << 20;
        assert_eq!(rotation(1 << 20, l2), 64);
        assert_eq!(rotation(16 << 20, l2), 8);
        assert_eq!(rotation(64 << 20, l2), 2);
        assert_eq!(rotation(512 << 20, l2), 1);
        assert_eq!(rotation(0, l2), 64);
        // Every copy at least once; small calls 20 launches, long ones at least 3.
        assert_eq!(graph_launches(1 << 10, 1), 20);
        assert_eq!(graph_launches(1 << 10, 64), 64);
        assert_eq!(graph_launches(512 << 20, 1), 3);
        assert_eq!(graph_launches(48 << 20, 2), 6); // 16.8 us each: 6 make ~100 us
        let mid = graph_launches(8 << 20, 1);
        assert!((3..=20).contains(&mid), "{mid}");
    }

    /// A clock whose events are sequence numbers, a millisecond apart, logging calls.
    #[derive(Default)]
    struct LogClock {
        next: std::cell::Cell<u32>,
        log: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
    }

    impl EventClock for LogClock {
        type Event = u32;
        fn flush(&mut self) -> crate::Result<()> {
            self.log.borrow_mut().push("flush".into());
            Ok(())
        }
        fn event(&self) -> crate::Result<u32> {
            self.next.set(self.next.get() + 1);
            Ok(self.next.get())
        }
        fn record(&self, event: &u32) -> crate::Result<()> {
            self.log.borrow_mut().push(format!("record {event}"));
            Ok(())
        }
        fn synchronize(&self) -> crate::Result<()> {
            self.log.borrow_mut().push("sync".into());
            Ok(())
        }
        fn elapsed_ms(&self, start: &u32, end: &u32) -> crate::Result<f32> {
            Ok((end - start) as f32)
        }
    }

    #[test]
    fn the_event_loop_warms_up_then_times_each_run_between_its_own_events() {
        let mut clock = LogClock::default();
        let log = clock.log.clone();
        let opts = TimingOptions {
            warmup: 1,
            reps: MIN_REPS,
            ..TimingOptions::default()
        };
        let t = time_with_events(
            &mut clock,
            &opts,
            true,
            &mut || {
                log.borrow_mut().push("prepare".into());
                Ok(())
            },
            &mut || {
                log.borrow_mut().push("run".into());
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((t.median_us, t.reps, t.l2_flushed), (1000.0, MIN_REPS, true));
        let log = log.borrow();
        assert_eq!(
            log[..8],
            ["prepare", "run", "prepare", "flush", "record 1", "run", "record 2", "prepare"]
        );
        assert_eq!(log.last().map(String::as_str), Some("sync"));
        assert_eq!(log.len(), 2 + 5 * MIN_REPS as usize + 1);

        let opts = TimingOptions {
            reps: MIN_REPS - 1,
            ..TimingOptions::default()
        };
        let e = time_with_events(&mut clock, &opts, false, &mut || Ok(()), &mut || Ok(()));
        assert!(e.unwrap_err().to_string().contains("`reps`"));
    }

    #[test]
    fn the_flush_buffer_is_twice_the_l2_and_at_least_2_mib() {
        assert_eq!(l2_flush_bytes(60 << 20), 120 << 20);
        assert_eq!(l2_flush_bytes(0), 2 << 20);
    }

    #[test]
    fn samples_summarise_to_median_and_extremes() {
        let t = Timing::from_samples(&[3.0, 1.0, 2.0, 9.0, 4.0], true);
        assert_eq!((t.median_us, t.min_us, t.max_us, t.reps), (3.0, 1.0, 9.0, 5));
        assert!(t.l2_flushed);
        assert!(Timing::from_samples(&[], false).median_us.is_nan());
    }
}
