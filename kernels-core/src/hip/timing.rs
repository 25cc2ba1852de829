//! Timing on AMD GPUs: HIP events around each run, with the options and result type of
//! the CUDA timing routine ([`TimingOptions`], [`Timing`]).

use super::ffi::{self, EventHandle};
use super::{HipBuffer, HipDevice, HipStream};
use crate::{Result, Timing, TimingOptions};

/// A HIP event (timing enabled), destroyed on drop.
#[derive(Debug)]
pub struct HipEvent {
    handle: EventHandle,
}

impl HipEvent {
    /// A new event on `device`.
    pub fn new(device: &HipDevice) -> Result<HipEvent> {
        device.select()?;
        Ok(HipEvent {
            handle: ffi::event_create()?,
        })
    }

    /// Records the event on `stream`.
    pub fn record(&self, stream: &HipStream) -> Result<()> {
        ffi::event_record(&self.handle, stream.handle())
    }

    /// Waits until the event has happened.
    pub fn synchronize(&self) -> Result<()> {
        ffi::event_synchronize(&self.handle)
    }

    /// Milliseconds from `self` to `end`, both recorded and completed.
    pub fn elapsed_ms(&self, end: &HipEvent) -> Result<f32> {
        ffi::event_elapsed_ms(&self.handle, &end.handle)
    }
}

/// A scratch buffer of twice the L2 size; zeroing it evicts everything else.
#[derive(Debug)]
pub struct HipL2Flush {
    scratch: HipBuffer<u8>,
}

impl HipL2Flush {
    /// Allocates `2 x L2` bytes (at least 2 MiB) on `device`.
    pub fn new(device: &HipDevice) -> Result<HipL2Flush> {
        let bytes = (device.info().l2_bytes.max(1 << 20) * 2) as usize;
        Ok(HipL2Flush {
            scratch: device.alloc_zeros::<u8>(bytes)?,
        })
    }

    /// Enqueues the flush on `stream`.
    pub fn flush(&mut self, stream: &HipStream) -> Result<()> {
        self.scratch.zero_async(stream)
    }
}

/// Times `run` on `stream` like the CUDA routine does: `prepare` then `run` `warmup`
/// times untimed, then `reps` (at least [`crate::MIN_REPS`]) times with the L2 flushed (when
/// `flush` is given) after `prepare` and HIP events recorded around `run` only.
/// Returns the median (and extremes) in microseconds. `opts.flush_l2` is the caller's
/// decision here: pass a [`HipL2Flush`] when [`crate::FlushL2::wanted`] says so.
pub fn time_hip_runs(
    device: &HipDevice,
    stream: &HipStream,
    opts: &TimingOptions,
    mut flush: Option<&mut HipL2Flush>,
    prepare: &mut dyn FnMut() -> Result<()>,
    run: &mut dyn FnMut() -> Result<()>,
) -> Result<Timing> {
    opts.check()?;
    for _ in 0..opts.warmup {
        prepare()?;
        run()?;
    }
    let l2_flushed = flush.is_some();
    let mut events = Vec::with_capacity(opts.reps as usize);
    for _ in 0..opts.reps {
        prepare()?;
        if let Some(f) = flush.as_deref_mut() {
            f.flush(stream)?;
        }
        let start = HipEvent::new(device)?;
        let end = HipEvent::new(device)?;
        start.record(stream)?;
        run()?;
        end.record(stream)?;
        events.push((start, end));
    }
    stream.synchronize()?;
    let mut us = Vec::with_capacity(events.len());
    for (start, end) in &events {
        end.synchronize()?;
        us.push(start.elapsed_ms(end)? as f64 * 1000.0);
    }
    Ok(Timing::from_samples(&us, l2_flushed))
}
