//! What the Python package needs for arrays of other libraries
//! (`__cuda_array_interface__`, which carries neither a device ordinal nor a stream the
//! consumer can launch on): the device an address belongs to, and a stream that waits
//! for another before a launch.

use std::ffi::c_void;

use kernels::core::cudarc::driver::{result as drv, sys as dsys};
use kernels::core::{CudaDevice, Error, Result};

use super::{ordinal, runtime, KeepCurrentContext};

fn driver(call: &'static str) -> impl Fn(drv::DriverError) -> Error {
    move |e| Error::Driver {
        call,
        message: e.to_string(),
    }
}

/// The ordinal of the device whose memory `ptr` points into; an address the driver
/// does not know is an error naming `name`.
pub fn pointer_device(name: &str, ptr: u64) -> Result<i32> {
    if ptr == 0 {
        return Err(Error::invalid(name, "is a null device pointer"));
    }
    // Loads the driver (cuInit) or says why it cannot.
    CudaDevice::count()?;
    let mut device: i32 = -1;
    // SAFETY: writes one int through a valid pointer; the driver is initialised above.
    let r = unsafe {
        dsys::cuPointerGetAttribute(
            (&mut device as *mut i32).cast(),
            dsys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    match r.result() {
        Ok(()) if device >= 0 => Ok(device),
        _ => Err(Error::invalid(
            name,
            format!("address {ptr:#x} is not device memory the CUDA driver knows"),
        )),
    }
}

/// Makes `waiter` wait, on the device, for the work enqueued so far on each of
/// `producers` (an event recorded on each): the CUDA array interface's rule for an
/// array whose producer stream differs from the launch stream. Nothing blocks the host.
///
/// # Safety
/// `waiter` and every producer must be null (the legacy default stream),
/// `CU_STREAM_PER_THREAD` or live streams of device `device`'s primary context.
pub unsafe fn stream_wait(device: i32, waiter: *mut c_void, producers: &[u64]) -> Result<()> {
    let rt = runtime(ordinal(device)?)?;
    let _keep = KeepCurrentContext::new();
    rt.device()
        .context()
        .bind_to_thread()
        .map_err(driver("cuCtxSetCurrent"))?;
    for &producer in producers {
        let event = drv::event::create(dsys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(driver("cuEventCreate"))?;
        // SAFETY: the caller's promise on the streams; the event is ours and destroyed
        // once the wait is enqueued (the driver keeps it until the wait completes).
        let r = unsafe {
            drv::event::record(event, producer as dsys::CUstream)
                .map_err(driver("cuEventRecord"))
                .and_then(|()| {
                    drv::stream::wait_event(
                        waiter as dsys::CUstream,
                        event,
                        dsys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                    .map_err(driver("cuStreamWaitEvent"))
                })
        };
        // SAFETY: created above, not used after this.
        let destroyed = unsafe { drv::event::destroy(event) }.map_err(driver("cuEventDestroy"));
        r.and(destroyed)?;
    }
    Ok(())
}
