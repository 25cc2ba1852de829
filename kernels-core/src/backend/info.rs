//! What a GPU is ([`DeviceInfo`]): plain data, usable without a GPU, that search
//! spaces, variants, launch plans and cache keys read, whatever the backend.

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
