//! The one timing routine: CUDA events around each run, warm-up first, at least
//! [`MIN_REPS`] timed reps, the median reported; the L2 flushed between reps when the
//! working set would otherwise stay in cache.

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
    /// use kernels_core::FlushL2;
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

/// How to time.
#[derive(Clone, Debug, PartialEq)]
pub struct TimingOptions {
    /// Untimed runs first (module load, clocks ramping, TLB warm-up).
    pub warmup: u32,
    /// Timed runs; at least [`MIN_REPS`].
    pub reps: u32,
    pub flush_l2: FlushL2,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            warmup: 3,
            reps: 25,
            flush_l2: FlushL2::Auto,
        }
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

#[cfg(feature = "cuda")]
pub use cuda::{time_runs, L2Flush};

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::Arc;

    use cudarc::driver::sys::CUevent_flags;
    use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

    use super::{Timing, TimingOptions};
    use crate::ffi::{self, driver_error};
    use crate::{DeviceInfo, Result};

    /// A scratch buffer of twice the L2 size; writing it evicts everything else.
    pub struct L2Flush {
        scratch: CudaSlice<u8>,
    }

    impl L2Flush {
        /// Allocates `2 x L2` bytes on `stream` (120 MiB on an H200).
        pub fn new(stream: &Arc<CudaStream>, info: &DeviceInfo) -> Result<L2Flush> {
            let bytes = (info.l2_bytes.max(1 << 20) * 2) as usize;
            // SAFETY: u8 has no invalid bit patterns; the buffer is only ever memset.
            let scratch = unsafe { stream.alloc::<u8>(bytes) }.map_err(|e| driver_error("cuMemAlloc", e))?;
            Ok(L2Flush { scratch })
        }

        /// Enqueues the flush (a memset of the whole scratch buffer) on `stream`.
        pub fn flush(&self, stream: &CudaStream) -> Result<()> {
            let (ptr, _record) = self.scratch.device_ptr(stream);
            // SAFETY: `ptr` is this buffer's, valid for its whole length.
            unsafe { ffi::zero(ptr, self.scratch.len(), stream.cu_stream()) }
        }
    }

    /// The one timing routine. Runs `prepare` then `run` `warmup` times untimed, then
    /// `reps` times with the L2 flushed (when `flush` is given) after `prepare` and
    /// CUDA events recorded around `run` only, so restoring buffers and flushing stay
    /// outside the timed region. Returns the median (and extremes) in microseconds.
    pub fn time_runs(
        stream: &Arc<CudaStream>,
        opts: &TimingOptions,
        flush: Option<&L2Flush>,
        prepare: &mut dyn FnMut() -> Result<()>,
        run: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Timing> {
        opts.check()?;
        for _ in 0..opts.warmup {
            prepare()?;
            run()?;
        }
        let ctx = stream.context();
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let mut events = Vec::with_capacity(opts.reps as usize);
        for _ in 0..opts.reps {
            prepare()?;
            if let Some(f) = flush {
                f.flush(stream)?;
            }
            let start = ctx
                .new_event(timing)
                .map_err(|e| driver_error("cuEventCreate", e))?;
            let end = ctx
                .new_event(timing)
                .map_err(|e| driver_error("cuEventCreate", e))?;
            start
                .record(stream)
                .map_err(|e| driver_error("cuEventRecord", e))?;
            run()?;
            end.record(stream).map_err(|e| driver_error("cuEventRecord", e))?;
            events.push((start, end));
        }
        stream
            .synchronize()
            .map_err(|e| driver_error("cuStreamSynchronize", e))?;
        let mut us = Vec::with_capacity(events.len());
        for (start, end) in &events {
            let ms = start
                .elapsed_ms(end)
                .map_err(|e| driver_error("cuEventElapsedTime", e))?;
            us.push(ms as f64 * 1000.0);
        }
        Ok(Timing::from_samples(&us, flush.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn samples_summarise_to_median_and_extremes() {
        let t = Timing::from_samples(&[3.0, 1.0, 2.0, 9.0, 4.0], true);
        assert_eq!((t.median_us, t.min_us, t.max_us, t.reps), (3.0, 1.0, 9.0, 5));
        assert!(t.l2_flushed);
        assert!(Timing::from_samples(&[], false).median_us.is_nan());
    }
}
