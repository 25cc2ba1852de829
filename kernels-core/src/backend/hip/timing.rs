//! HIP timing events, which the one timing routine ([`crate::time_runs`]) records.

use super::ffi::{self, EventHandle};
use super::{HipDevice, HipStream};
use crate::Result;

/// A HIP event (timing enabled), destroyed on drop.
#[derive(Debug)]
pub struct HipEvent {
    handle: EventHandle,
}

impl HipEvent {
    /// A new event on `device`.
    pub fn new(device: &HipDevice) -> Result<HipEvent> {
        HipEvent::on(device.info().ordinal)
    }

    /// A new event on device `ordinal`.
    pub(crate) fn on(ordinal: usize) -> Result<HipEvent> {
        ffi::set_device(ordinal)?;
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
