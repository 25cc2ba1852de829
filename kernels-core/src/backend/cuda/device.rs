//! An open CUDA device ([`CudaDevice`]): its primary context and limits, and its
//! streams (cudarc's).

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute as A;
use cudarc::driver::{CudaContext, CudaStream};

use super::ffi::{self, driver_error, guard};
use crate::DeviceInfo;
use crate::{Error, Result};

/// An open CUDA device: its context (the device's primary context, shared with
/// every other user of it in the process, candle included) and its [`DeviceInfo`].
/// Cheap to clone.
///
/// ```no_run
/// let dev = kernels_core::CudaDevice::open(0)?;
/// println!("{} ({}), {} SMs", dev.info().name, dev.info().compile_arch(), dev.info().sm_count);
/// let stream = dev.new_stream()?;
/// # Ok::<(), kernels_core::Error>(())
/// ```
#[derive(Clone)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    info: Arc<DeviceInfo>,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice").field("info", &self.info).finish()
    }
}

impl CudaDevice {
    /// Number of CUDA devices. No driver or no GPU is an error saying which.
    pub fn count() -> Result<usize> {
        if !ffi::driver_present() {
            return Err(Error::NoDriver);
        }
        let n = guard("cuDeviceGetCount", || {
            CudaContext::device_count().map_err(|e| Error::NoGpu(format!("cuInit/cuDeviceGetCount: {e}")))
        })?;
        if n <= 0 {
            return Err(Error::NoGpu("the driver reports 0 devices".into()));
        }
        Ok(n as usize)
    }

    /// Opens device `ordinal`. Errors (never panics) when there is no driver, no
    /// GPU, the ordinal is out of range, or the GPU is older than sm_80.
    pub fn open(ordinal: usize) -> Result<CudaDevice> {
        let count = CudaDevice::count()?;
        if ordinal >= count {
            return Err(Error::BadOrdinal { ordinal, count });
        }
        let ctx = guard("cuDevicePrimaryCtxRetain", || {
            CudaContext::new(ordinal).map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))
        })?;
        CudaDevice::from_context(ctx)
    }

    /// Wraps a context the engine already holds (candle's `CudaDevice` has one).
    pub fn from_context(ctx: Arc<CudaContext>) -> Result<CudaDevice> {
        let attr = |a: A| -> Result<u32> {
            ctx.attribute(a)
                .map(|v| v.max(0) as u32)
                .map_err(|e| driver_error("cuDeviceGetAttribute", e))
        };
        let name = ctx.name().map_err(|e| driver_error("cuDeviceGetName", e))?;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as i32;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as i32;
        if major < 8 {
            return Err(Error::UnsupportedDevice {
                device: name,
                major,
                minor,
            });
        }
        let info = DeviceInfo {
            ordinal: ctx.ordinal(),
            compute_capability: (major, minor),
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_smem_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            max_smem_per_block_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            smem_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            regs_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            regs_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            warp_size: attr(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
            total_memory: ctx.total_mem().map_err(|e| driver_error("cuDeviceTotalMem", e))? as u64,
            max_grid: (
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ),
            name,
            amd_arch: None,
        };
        Ok(CudaDevice {
            ctx,
            info: Arc::new(info),
        })
    }

    /// What this GPU is and its limits.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The CUDA context (cudarc's), for allocating and copying with cudarc.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The legacy default stream.
    pub fn default_stream(&self) -> Arc<CudaStream> {
        self.ctx.default_stream()
    }

    /// A new non-blocking stream.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx
            .new_stream()
            .map_err(|e| driver_error("cuStreamCreate", e))
    }

    /// Wraps a stream owned by a C++ or Python engine (a `cudaStream_t` /
    /// `CUstream`, as a pointer), so the safe API can launch on it. Dropping the
    /// wrapper does not destroy the stream.
    ///
    /// # Safety
    /// `raw` must be a live stream of this device's context (or null for the
    /// default stream) and must outlive the returned wrapper and its uses.
    pub unsafe fn borrow_stream(&self, raw: *mut c_void) -> Arc<CudaStream> {
        self.ctx
            .wrap_borrowed_stream(raw as cudarc::driver::sys::CUstream)
    }

    /// Whether `stream` is capturing a CUDA graph now.
    pub fn is_capturing(stream: &CudaStream) -> Result<bool> {
        ffi::is_capturing(stream.cu_stream())
    }

    /// Refuses an op on cudarc buffers while `stream` captures a CUDA graph with
    /// cudarc's cross-stream event tracking on (the context has streams of its own and
    /// tracking is enabled): taking a tracked buffer's address makes the stream wait on
    /// the buffer's last write event, recorded outside the capture, which CUDA forbids
    /// in a capture (it invalidates it). The error names `stream`; nothing is enqueued,
    /// so the capture stays valid. Capture with tracking off
    /// (`CudaContext::disable_event_tracking` before the buffers are allocated) or with
    /// the raw-pointer ops. Costs one atomic load where tracking is off.
    pub fn check_capturable(stream: &CudaStream) -> Result<()> {
        if stream.context().is_managing_stream_synchronization() && CudaDevice::is_capturing(stream)? {
            return Err(Error::invalid(
                "stream",
                "captures a CUDA graph while cudarc tracks this context's buffers across streams: \
                 a tracked buffer's address waits on an event recorded outside the capture, which \
                 CUDA does not allow there. Capture with cudarc's event tracking off \
                 (CudaContext::disable_event_tracking before allocating) or use the raw-pointer op",
            ));
        }
        Ok(())
    }

    /// The driver's CUDA version (13.0 on the H200 machines).
    pub fn driver_version() -> Result<(i32, i32)> {
        ffi::driver_version()
    }
}
