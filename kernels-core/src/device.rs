//! Devices: what a GPU is ([`DeviceInfo`], plain data usable without a GPU) and an
//! open CUDA device ([`Device`]).

use tuned::Target;

/// What the runtime needs to know about a GPU: identity, arch and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    /// Name as the driver reports it (`NVIDIA H200`).
    pub name: String,
    /// CUDA compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    pub max_threads_per_block: u32,
    /// Shared memory a block gets without opting in (48 KiB).
    pub max_smem_per_block: u32,
    /// Shared memory a block can opt in to (227 KiB on Hopper).
    pub max_smem_per_block_optin: u32,
    pub smem_per_sm: u32,
    pub regs_per_sm: u32,
    pub regs_per_block: u32,
    /// L2 cache size in bytes (60 MiB on H200).
    pub l2_bytes: u64,
    pub warp_size: u32,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Largest grid, per dimension.
    pub max_grid: (u32, u32, u32),
    /// The AMD arch (`gfx942`) of a device opened through HIP
    /// (`HipDeviceInfo::launch_limits`); `None` for CUDA devices, whose arch is
    /// `compute_capability`.
    pub amd_arch: Option<String>,
}

impl DeviceInfo {
    /// The target whose tables this device uses, when one matches its arch exactly.
    pub fn target(&self) -> Option<Target> {
        if let Some(arch) = &self.amd_arch {
            return arch
                .parse()
                .ok()
                .filter(|t: &Target| t.vendor() == tuned::Vendor::Amd);
        }
        let (major, minor) = self.compute_capability;
        Target::from_compute_capability(major, minor).ok()
    }

    /// The target for analytic defaults and search spaces: the exact target, else the
    /// newest older one (an sm_89 part is treated as sm80, an sm_100 part as sm90). An
    /// AMD arch without tables of its own is treated as gfx942 (CDNA 3).
    pub fn tuning_target(&self) -> Target {
        if self.amd_arch.is_some() {
            return self.target().unwrap_or(Target::Gfx942);
        }
        self.target().unwrap_or(if self.compute_capability >= (9, 0) {
            Target::Sm90
        } else {
            Target::Sm80
        })
    }

    /// A representative device of `target` (H200 for sm90, A100 for sm80; for AMD
    /// targets the part `AmdNominal::of` names, described as a HIP device's launch
    /// limits describe it: compute units as SMs, LDS as shared memory, no compute
    /// capability, the gfx arch), for GPU-free work that needs limits: listing the
    /// variants a lookup can return, compile checks in CI, tuning keys.
    pub fn nominal(target: Target) -> Option<DeviceInfo> {
        if let Some(amd) = AmdNominal::of(target) {
            return Some(DeviceInfo {
                ordinal: 0,
                name: amd.name.into(),
                compute_capability: (0, 0),
                sm_count: amd.cus,
                max_threads_per_block: 1024,
                max_smem_per_block: amd.lds,
                max_smem_per_block_optin: amd.lds,
                smem_per_sm: amd.lds,
                regs_per_sm: 0,
                regs_per_block: AMD_REGS_PER_BLOCK,
                l2_bytes: amd.l2,
                warp_size: 64,
                total_memory: amd.mem,
                max_grid: AMD_MAX_GRID,
                amd_arch: Some(target.name().to_string()),
            });
        }
        let (name, cc, sms, optin, smem_sm, l2, mem) = match target {
            Target::Sm90 => (
                "NVIDIA H200 (nominal)",
                (9, 0),
                132,
                227 << 10,
                228 << 10,
                60u64 << 20,
                141u64 << 30,
            ),
            Target::Sm80 => (
                "NVIDIA A100 (nominal)",
                (8, 0),
                108,
                163 << 10,
                164 << 10,
                40 << 20,
                80 << 30,
            ),
            _ => return None,
        };
        Some(DeviceInfo {
            ordinal: 0,
            name: name.into(),
            compute_capability: cc,
            sm_count: sms,
            max_threads_per_block: 1024,
            max_smem_per_block: 48 << 10,
            max_smem_per_block_optin: optin,
            smem_per_sm: smem_sm,
            regs_per_sm: 65536,
            regs_per_block: 65536,
            l2_bytes: l2,
            warp_size: 32,
            total_memory: mem,
            max_grid: (i32::MAX as u32, 65535, 65535),
            amd_arch: None,
        })
    }

    /// The arch the compiler targets: an AMD device's arch (`gfx942`, for hipRTC); else
    /// the arch NVRTC compiles for: the target's (`sm_90a` on Hopper, so Hopper-only
    /// instructions are available), else `sm_<major><minor>` of the device itself.
    pub fn compile_arch(&self) -> String {
        if let Some(arch) = &self.amd_arch {
            return arch.clone();
        }
        match self.target() {
            Some(t) => t.compile_arch().to_string(),
            None => {
                let (major, minor) = self.compute_capability;
                format!("sm_{major}{minor}")
            }
        }
    }
}

#[cfg(feature = "cuda")]
pub use cuda::Device;

#[cfg(feature = "cuda")]
mod cuda {
    use std::ffi::c_void;
    use std::fmt;
    use std::sync::Arc;

    use cudarc::driver::sys::CUdevice_attribute as A;
    use cudarc::driver::{CudaContext, CudaStream};

    use super::DeviceInfo;
    use crate::ffi::{self, driver_error, guard};
    use crate::{Error, Result};

    /// An open CUDA device: its context (the device's primary context, shared with
    /// every other user of it in the process, candle included) and its [`DeviceInfo`].
    /// Cheap to clone.
    ///
    /// ```no_run
    /// let dev = kernels_core::Device::open(0)?;
    /// println!("{} ({}), {} SMs", dev.info().name, dev.info().compile_arch(), dev.info().sm_count);
    /// let stream = dev.new_stream()?;
    /// # Ok::<(), kernels_core::Error>(())
    /// ```
    #[derive(Clone)]
    pub struct Device {
        ctx: Arc<CudaContext>,
        info: Arc<DeviceInfo>,
    }

    impl fmt::Debug for Device {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("Device").field("info", &self.info).finish()
        }
    }

    impl Device {
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
        pub fn open(ordinal: usize) -> Result<Device> {
            let count = Device::count()?;
            if ordinal >= count {
                return Err(Error::BadOrdinal { ordinal, count });
            }
            let ctx = guard("cuDevicePrimaryCtxRetain", || {
                CudaContext::new(ordinal).map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))
            })?;
            Device::from_context(ctx)
        }

        /// Wraps a context the engine already holds (candle's `CudaDevice` has one).
        pub fn from_context(ctx: Arc<CudaContext>) -> Result<Device> {
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
            Ok(Device {
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

        /// The driver's CUDA version (13.0 on the H200 machines).
        pub fn driver_version() -> Result<(i32, i32)> {
            ffi::driver_version()
        }
    }
}

/// Registers per workgroup a HIP device reports (512 VGPRs of 64 lanes).
pub(crate) const AMD_REGS_PER_BLOCK: u32 = 512 * 64;
/// The grid limit a HIP device reports in each dimension.
pub(crate) const AMD_MAX_GRID: (u32, u32, u32) = (i32::MAX as u32, i32::MAX as u32, i32::MAX as u32);

/// A representative AMD part per gfx target, from the vendor's published
/// specifications: what [`DeviceInfo::nominal`] and the HIP backend's nominal device
/// describe.
pub(crate) struct AmdNominal {
    pub(crate) name: &'static str,
    /// `gcnArchName` as HIP reports it (arch and features); read by the HIP backend.
    #[cfg_attr(not(feature = "rocm"), allow(dead_code))]
    pub(crate) gcn_arch_name: &'static str,
    pub(crate) cus: u32,
    /// LDS bytes per workgroup, which is also per compute unit on these parts (64 KiB
    /// on CDNA 2-3).
    pub(crate) lds: u32,
    pub(crate) l2: u64,
    pub(crate) mem: u64,
}

impl AmdNominal {
    /// MI250X for gfx90a, MI300X for gfx942, MI355X for gfx950; `None` for NVIDIA
    /// targets.
    pub(crate) fn of(target: Target) -> Option<AmdNominal> {
        let (name, gcn_arch_name, cus, lds, l2, mem) = match target {
            Target::Gfx90a => (
                "AMD Instinct MI250X (nominal)",
                "gfx90a:sramecc+:xnack-",
                110,
                64 << 10,
                8u64 << 20,
                64u64 << 30,
            ),
            Target::Gfx942 => (
                "AMD Instinct MI300X (nominal)",
                "gfx942:sramecc+:xnack-",
                304,
                64 << 10,
                4 << 20,
                192 << 30,
            ),
            Target::Gfx950 => (
                "AMD Instinct MI355X (nominal)",
                "gfx950:sramecc+:xnack-",
                256,
                160 << 10,
                4 << 20,
                288 << 30,
            ),
            _ => return None,
        };
        Some(AmdNominal {
            name,
            gcn_arch_name,
            cus,
            lds,
            l2,
            mem,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn h200() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_threads_per_block: 1024,
            max_smem_per_block: 48 << 10,
            max_smem_per_block_optin: 227 << 10,
            smem_per_sm: 228 << 10,
            regs_per_sm: 65536,
            regs_per_block: 65536,
            l2_bytes: 60 << 20,
            warp_size: 32,
            total_memory: 141 << 30,
            max_grid: (i32::MAX as u32, 65535, 65535),
            amd_arch: None,
        }
    }

    #[test]
    fn arch_and_targets() {
        let d = h200();
        assert_eq!(d.target(), Some(Target::Sm90));
        assert_eq!(d.compile_arch(), "sm_90a");
        let ada = DeviceInfo {
            compute_capability: (8, 9),
            ..h200()
        };
        assert_eq!(ada.target(), None);
        assert_eq!(ada.tuning_target(), Target::Sm80);
        assert_eq!(ada.compile_arch(), "sm_89");
        let blackwell = DeviceInfo {
            compute_capability: (10, 0),
            ..h200()
        };
        assert_eq!(blackwell.tuning_target(), Target::Sm90);
        assert_eq!(blackwell.compile_arch(), "sm_100");
    }

    /// An AMD device's description (from HIP) takes its tables, spaces and defaults
    /// from its gfx arch, never from the unused compute capability.
    #[test]
    fn an_amd_arch_picks_the_gfx_target() {
        let mi300 = DeviceInfo {
            compute_capability: (0, 0),
            amd_arch: Some("gfx942".into()),
            ..h200()
        };
        assert_eq!(mi300.target(), Some(Target::Gfx942));
        assert_eq!(mi300.tuning_target(), Target::Gfx942);
        assert_eq!(mi300.compile_arch(), "gfx942");
        let mi250 = DeviceInfo {
            amd_arch: Some("gfx90a".into()),
            ..mi300.clone()
        };
        assert_eq!(mi250.tuning_target(), Target::Gfx90a);
        // An arch without tables: no target, CDNA 3's spaces and defaults.
        let rdna = DeviceInfo {
            amd_arch: Some("gfx1100".into()),
            ..mi300.clone()
        };
        assert_eq!((rdna.target(), rdna.tuning_target()), (None, Target::Gfx942));
        assert_eq!(rdna.compile_arch(), "gfx1100");
        // An NVIDIA arch name in the AMD field is not an AMD target.
        let odd = DeviceInfo {
            amd_arch: Some("sm90".into()),
            ..mi300
        };
        assert_eq!(odd.target(), None);
    }
}
