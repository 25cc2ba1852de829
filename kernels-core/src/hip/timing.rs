//! Timing on AMD GPUs: HIP events around each run, with the options and result type of
//! the CUDA timing routine ([`TimingOptions`], [`Timing`]).

use super::ffi::{self, EventHandle};
use super::{HipBuffer, HipDevice, HipStream};
use crate::timing::{l2_flush_bytes, time_with_events, EventClock};
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
        let bytes = l2_flush_bytes(device.info().l2_bytes);
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
    flush: Option<&mut HipL2Flush>,
    prepare: &mut dyn FnMut() -> Result<()>,
    run: &mut dyn FnMut() -> Result<()>,
) -> Result<Timing> {
    let l2_flushed = flush.is_some();
    let mut clock = HipClock {
        device,
        stream,
        flush,
    };
    time_with_events(&mut clock, opts, l2_flushed, prepare, run)
}

/// HIP events on one stream, with an optional L2 flush: what [`time_hip_runs`] times
/// with.
struct HipClock<'a, 'f> {
    device: &'a HipDevice,
    stream: &'a HipStream,
    flush: Option<&'f mut HipL2Flush>,
}

impl EventClock for HipClock<'_, '_> {
    type Event = HipEvent;

    fn flush(&mut self) -> Result<()> {
        match self.flush.as_deref_mut() {
            Some(f) => f.flush(self.stream),
            None => Ok(()),
        }
    }

    fn event(&self) -> Result<HipEvent> {
        HipEvent::new(self.device)
    }

    fn record(&self, event: &HipEvent) -> Result<()> {
        event.record(self.stream)
    }

    fn synchronize(&self) -> Result<()> {
        self.stream.synchronize()
    }

    fn elapsed_ms(&self, start: &HipEvent, end: &HipEvent) -> Result<f32> {
        end.synchronize()?;
        start.elapsed_ms(end)
    }
}
