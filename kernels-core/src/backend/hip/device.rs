//! AMD devices: discovery ([`HipDevice::count`], [`HipDevice::open`]), what a device is
//! ([`HipDeviceInfo`]), streams ([`HipStream`]) and device memory ([`HipBuffer`]).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use tuned::{Target, Vendor};

use super::ffi::{self, StreamHandle};
use crate::{DeviceInfo, Error, Result};

/// What the runtime knows about an AMD GPU: identity, arch and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipDeviceInfo {
    pub ordinal: usize,
    /// Name as the runtime reports it (`AMD Instinct MI300X`).
    pub name: String,
    /// The full `gcnArchName`, feature flags included (`gfx942:sramecc+:xnack-`).
    pub gcn_arch_name: String,
    /// Compute units.
    pub cu_count: u32,
    pub max_threads_per_block: u32,
    /// LDS a workgroup may use, bytes (64 KiB on gfx90a and gfx942).
    pub max_lds_per_block: u32,
    /// LDS per compute unit, bytes.
    pub lds_per_cu: u32,
    pub regs_per_block: u32,
    /// 0 where the runtime does not report it.
    pub regs_per_cu: u32,
    /// L2 cache size in bytes.
    pub l2_bytes: u64,
    /// Wavefront size: 64 on CDNA.
    pub warp_size: u32,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Largest grid, per dimension.
    pub max_grid: (u32, u32, u32),
    /// The HIP runtime's version (major, minor, patch).
    pub hip_version: (i32, i32, i32),
}

impl HipDeviceInfo {
    /// The arch: `gcnArchName` up to the first `:` (`gfx942`), what hipRTC compiles for.
    ///
    /// ```
    /// # let info = kernels_core::backend::hip::HipDeviceInfo::nominal(tuned::Target::Gfx942).unwrap();
    /// assert_eq!(info.gcn_arch_name, "gfx942:sramecc+:xnack-");
    /// assert_eq!(info.arch(), "gfx942");
    /// ```
    pub fn arch(&self) -> &str {
        arch_of(&self.gcn_arch_name)
    }

    /// The target whose tables this device uses (gfx90a, gfx942, gfx950), when its arch
    /// is one of them.
    pub fn target(&self) -> Option<Target> {
        self.arch()
            .parse()
            .ok()
            .filter(|t: &Target| t.vendor() == Vendor::Amd)
    }

    /// The backend-neutral description search spaces, variants, launch plans and
    /// [`crate::LaunchDims::validate`] take: compute units as `sm_count`, LDS as shared
    /// memory (no opt-in beyond it on AMD), `compute_capability` (0, 0), which AMD
    /// devices do not have, and the arch as `amd_arch`, so its `target()` and
    /// `tuning_target()` are the gfx target.
    pub fn launch_limits(&self) -> DeviceInfo {
        DeviceInfo {
            ordinal: self.ordinal,
            name: self.name.clone(),
            compute_capability: (0, 0),
            sm_count: self.cu_count,
            max_threads_per_block: self.max_threads_per_block,
            max_smem_per_block: self.max_lds_per_block,
            max_smem_per_block_optin: self.max_lds_per_block,
            smem_per_sm: self.lds_per_cu,
            regs_per_sm: self.regs_per_cu,
            regs_per_block: self.regs_per_block,
            l2_bytes: self.l2_bytes,
            warp_size: self.warp_size,
            total_memory: self.total_memory,
            max_grid: self.max_grid,
            amd_arch: Some(self.arch().to_string()),
        }
    }

    /// A representative device of an AMD `target` (MI250X for gfx90a, MI300X for
    /// gfx942, MI355X for gfx950), for GPU-free work that needs limits (cache keys in
    /// tests, launch checks). `None` for NVIDIA targets. Figures are the vendor's
    /// published specifications.
    pub fn nominal(target: Target) -> Option<HipDeviceInfo> {
        let amd = crate::backend::AmdNominal::of(target)?;
        Some(HipDeviceInfo {
            ordinal: 0,
            name: amd.name.into(),
            gcn_arch_name: amd.gcn_arch_name.into(),
            cu_count: amd.cus,
            max_threads_per_block: 1024,
            max_lds_per_block: amd.lds,
            lds_per_cu: amd.lds,
            regs_per_block: crate::backend::AMD_REGS_PER_BLOCK,
            regs_per_cu: 0,
            l2_bytes: amd.l2,
            warp_size: 64,
            total_memory: amd.mem,
            max_grid: crate::backend::AMD_MAX_GRID,
            hip_version: (0, 0, 0),
        })
    }
}

/// `gcnArchName` up to the first `:`.
pub(crate) fn arch_of(gcn_arch_name: &str) -> &str {
    gcn_arch_name.split(':').next().unwrap_or(gcn_arch_name)
}

/// An open AMD GPU: its ordinal and [`HipDeviceInfo`]. Cheap to clone. HIP keeps a
/// current device per thread; every call this backend makes selects the device first.
///
/// ```no_run
/// let dev = kernels_core::HipDevice::open(0)?;
/// println!("{} ({}), {} CUs", dev.info().name, dev.info().arch(), dev.info().cu_count);
/// # Ok::<(), kernels_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct HipDevice {
    info: Arc<HipDeviceInfo>,
    /// `info`'s [`HipDeviceInfo::launch_limits`], computed once.
    limits: Arc<DeviceInfo>,
}

impl HipDevice {
    /// Number of HIP devices. None (or a runtime that reports an error, as on a
    /// machine with the library but no AMD GPU) is [`Error::NoHipDevice`].
    pub fn count() -> Result<usize> {
        ffi::device_count()
    }

    /// Opens device `ordinal`: reads its name, `gcnArchName` and limits. Errors (never
    /// panics) when there is no device or the ordinal is out of range.
    pub fn open(ordinal: usize) -> Result<HipDevice> {
        let count = HipDevice::count()?;
        if ordinal >= count {
            return Err(Error::invalid(
                "ordinal",
                format!("device ordinal {ordinal} is out of range: {count} HIP device(s) found"),
            ));
        }
        ffi::set_device(ordinal)?;
        let dev = ffi::device_handle(ordinal)?;
        let hip_version = ffi::runtime_version()?;
        let attr = |a| ffi::attribute(dev, a).map(|v| v.max(0) as u32);
        // Optional attributes: 0 where this runtime does not report them.
        let optional = |a| ffi::attribute(dev, a).map(|v| v.max(0) as u32).unwrap_or(0);
        let max_lds_per_block = attr(ffi::ATTR_MAX_SHARED_MEMORY_PER_BLOCK)?;
        let lds_per_cu = match optional(ffi::ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) {
            0 => max_lds_per_block,
            n => n,
        };
        let info = HipDeviceInfo {
            ordinal,
            name: ffi::device_name(dev)?,
            gcn_arch_name: ffi::gcn_arch_name(dev, ordinal, hip_version.0)?,
            cu_count: attr(ffi::ATTR_MULTIPROCESSOR_COUNT)?,
            max_threads_per_block: attr(ffi::ATTR_MAX_THREADS_PER_BLOCK)?,
            max_lds_per_block,
            lds_per_cu,
            regs_per_block: optional(ffi::ATTR_MAX_REGISTERS_PER_BLOCK),
            regs_per_cu: optional(ffi::ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR),
            l2_bytes: attr(ffi::ATTR_L2_CACHE_SIZE)? as u64,
            warp_size: attr(ffi::ATTR_WARP_SIZE)?,
            total_memory: ffi::total_memory(dev)?,
            max_grid: (
                attr(ffi::ATTR_MAX_GRID_DIM_X)?,
                attr(ffi::ATTR_MAX_GRID_DIM_Y)?,
                attr(ffi::ATTR_MAX_GRID_DIM_Z)?,
            ),
            hip_version,
        };
        Ok(HipDevice {
            limits: Arc::new(info.launch_limits()),
            info: Arc::new(info),
        })
    }

    /// What this GPU is and its limits.
    pub fn info(&self) -> &HipDeviceInfo {
        &self.info
    }

    /// The device as search spaces, variants and launch plans see it
    /// ([`HipDeviceInfo::launch_limits`]).
    pub fn limits(&self) -> &DeviceInfo {
        &self.limits
    }

    /// Makes this device the calling thread's current HIP device.
    pub fn select(&self) -> Result<()> {
        ffi::set_device(self.info.ordinal)
    }

    /// A new non-blocking stream on this device.
    pub fn new_stream(&self) -> Result<HipStream> {
        self.select()?;
        Ok(HipStream {
            handle: ffi::stream_create()?,
            ordinal: self.info.ordinal,
            owned: true,
        })
    }

    /// A stream an engine already holds (its `hipStream_t`; null is the default
    /// stream), for launching on it. It is not destroyed when the `HipStream` drops.
    ///
    /// # Safety
    /// `raw` must be null or a live stream of this device, and stay alive while the
    /// returned `HipStream` is used.
    pub unsafe fn borrow_stream(&self, raw: *mut std::ffi::c_void) -> HipStream {
        HipStream {
            handle: StreamHandle(raw as _),
            ordinal: self.info.ordinal,
            owned: false,
        }
    }

    /// `len` elements of device memory, zeroed.
    pub fn alloc_zeros<T: DeviceCopy>(&self, len: usize) -> Result<HipBuffer<T>> {
        self.from_host(&vec![T::default(); len])
    }

    /// Device memory holding a copy of `host`.
    pub fn from_host<T: DeviceCopy>(&self, host: &[T]) -> Result<HipBuffer<T>> {
        self.select()?;
        let bytes = std::mem::size_of_val(host);
        let ptr = ffi::malloc(bytes)?;
        let buf = HipBuffer {
            ptr,
            len: host.len(),
            ordinal: self.info.ordinal,
            _t: PhantomData,
        };
        // SAFETY: `ptr` was just allocated with `bytes` bytes.
        unsafe { ffi::copy_to_device(ptr, as_bytes(host)) }?;
        Ok(buf)
    }
}

/// A stream of one device: one it created (destroyed on drop) or one an engine lent it
/// ([`HipDevice::borrow_stream`]).
pub struct HipStream {
    handle: StreamHandle,
    ordinal: usize,
    owned: bool,
}

impl fmt::Debug for HipStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipStream")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

impl HipStream {
    /// Waits until everything enqueued on the stream has run.
    pub fn synchronize(&self) -> Result<()> {
        ffi::stream_synchronize(self.handle)
    }

    /// The device ordinal the stream belongs to.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Whether the stream is capturing a HIP graph now.
    pub fn is_capturing(&self) -> Result<bool> {
        ffi::stream_is_capturing(self.handle)
    }

    /// The raw `hipStream_t`, for engines that pass it on.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.handle.0 as *mut std::ffi::c_void
    }

    pub(crate) fn handle(&self) -> StreamHandle {
        self.handle
    }
}

impl Drop for HipStream {
    fn drop(&mut self) {
        if self.owned {
            ffi::stream_destroy(self.handle);
        }
    }
}

/// Plain values that can be copied to and from device memory byte for byte.
pub trait DeviceCopy: Copy + Default + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! device_copy {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl DeviceCopy for $t {}
    )*};
}
device_copy!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    f32,
    f64,
    half::f16,
    half::bf16
);

fn as_bytes<T: DeviceCopy>(v: &[T]) -> &[u8] {
    // Every DeviceCopy type is a plain number with no padding, so its bytes are
    // initialised; the copy goes through the FFI layer's byte view below.
    ffi::bytes_of(v)
}

/// Device memory of `len` elements of `T`, freed on drop. Copies are synchronous (for
/// tests and tools; serving engines bring their own memory and pass pointers).
pub struct HipBuffer<T: DeviceCopy> {
    ptr: u64,
    len: usize,
    ordinal: usize,
    _t: PhantomData<T>,
}

impl<T: DeviceCopy> fmt::Debug for HipBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl<T: DeviceCopy> HipBuffer<T> {
    /// The device address, for [`crate::KernelArgs::ptr`].
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Copies the buffer to a new host vector (waits for work on the null stream;
    /// synchronize other streams first).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut out = vec![T::default(); self.len];
        self.copy_to(&mut out)?;
        Ok(out)
    }

    /// Copies the buffer into `host`, which must have the buffer's length.
    pub fn copy_to(&self, host: &mut [T]) -> Result<()> {
        if host.len() != self.len {
            return Err(Error::invalid(
                "host",
                format!("has {} elements; the buffer has {}", host.len(), self.len),
            ));
        }
        ffi::set_device(self.ordinal)?;
        // SAFETY: the buffer is valid for `len` elements, the length checked above.
        unsafe { ffi::copy_to_host(ffi::bytes_of_mut(host), self.ptr) }
    }

    /// Overwrites the buffer with `host`, which must have the buffer's length.
    pub fn copy_from(&mut self, host: &[T]) -> Result<()> {
        if host.len() != self.len {
            return Err(Error::invalid(
                "host",
                format!("has {} elements; the buffer has {}", host.len(), self.len),
            ));
        }
        ffi::set_device(self.ordinal)?;
        // SAFETY: the buffer is valid for `len` elements, the length checked above.
        unsafe { ffi::copy_to_device(self.ptr, as_bytes(host)) }
    }

    /// Zeroes the buffer on `stream` (enqueued; the buffer must outlive the memset).
    pub fn zero_async(&mut self, stream: &HipStream) -> Result<()> {
        // SAFETY: the buffer is valid for `bytes()` bytes while `self` lives, and the
        // caller keeps it alive until the stream has run the memset.
        unsafe { ffi::memset_zero(self.ptr, self.bytes(), stream.handle()) }
    }
}

impl HipBuffer<u8> {
    /// `bytes` of uninitialised memory on device `ordinal`.
    pub(crate) fn alloc_on(ordinal: usize, bytes: usize) -> Result<Self> {
        ffi::set_device(ordinal)?;
        Ok(HipBuffer {
            ptr: ffi::malloc(bytes.max(1))?,
            len: bytes,
            ordinal,
            _t: PhantomData,
        })
    }

    /// A copy of `host` on device `ordinal`.
    pub(crate) fn upload_on(ordinal: usize, host: &[u8]) -> Result<Self> {
        let buf = HipBuffer::alloc_on(ordinal, host.len())?;
        // SAFETY: the buffer holds host.len() bytes.
        unsafe { ffi::copy_to_device(buf.ptr, host) }?;
        Ok(buf)
    }
}

impl<T: DeviceCopy> Drop for HipBuffer<T> {
    fn drop(&mut self) {
        if ffi::set_device(self.ordinal).is_ok() {
            ffi::free(self.ptr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_and_target_from_gcn_arch_name() {
        let mut info = HipDeviceInfo::nominal(Target::Gfx942).unwrap();
        assert_eq!(info.arch(), "gfx942");
        assert_eq!(info.target(), Some(Target::Gfx942));
        info.gcn_arch_name = "gfx90a".into();
        assert_eq!(info.target(), Some(Target::Gfx90a));
        info.gcn_arch_name = "gfx1100".into();
        assert_eq!((info.arch(), info.target()), ("gfx1100", None));
        assert!(HipDeviceInfo::nominal(Target::Sm90).is_none());
    }

    #[test]
    fn launch_limits_reject_more_lds_than_a_workgroup_has() {
        let limits = HipDeviceInfo::nominal(Target::Gfx942).unwrap().launch_limits();
        assert_eq!(limits.target(), Some(Target::Gfx942));
        assert_eq!(limits.tuning_target(), Target::Gfx942);
        assert_eq!(limits.compile_arch(), "gfx942");
        let ok = crate::LaunchDims::linear(4, 256).with_smem(64 << 10);
        assert!(ok.validate(&limits).is_ok());
        let e = ok.with_smem((64 << 10) + 1).validate(&limits).unwrap_err();
        assert!(e.to_string().contains("smem_bytes"), "{e}");
    }

    /// GPU-free code describes an AMD target through `DeviceInfo::nominal` (variants,
    /// tuning keys); it is exactly what a HIP device of that part reports as limits.
    #[test]
    fn the_backend_neutral_nominal_is_the_hip_nominal_s_launch_limits() {
        for target in [Target::Gfx90a, Target::Gfx942, Target::Gfx950] {
            let hip = HipDeviceInfo::nominal(target).unwrap();
            assert_eq!(DeviceInfo::nominal(target), Some(hip.launch_limits()), "{target}");
            assert_eq!(DeviceInfo::nominal(target).unwrap().tuning_target(), target);
        }
        assert!(HipDeviceInfo::nominal(Target::Sm90).is_none());
    }
}
