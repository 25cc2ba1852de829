//! Run-time compilation for AMD GPUs with hipRTC, loaded at run time.

use super::ffi;
use crate::{Error, Image, ImageKind, KernelSource, Result, Variant};

/// hipRTC as found on this machine: the library it was loaded from, its version, and
/// the HIP runtime's version (hipRTC reports 9.0 on every ROCm 5 release, so the
/// runtime version is what tells two installations apart; both are in every cache
/// key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipCompiler {
    library: &'static str,
    version: (i32, i32),
    hip_version: (i32, i32, i32),
}

impl HipCompiler {
    /// Loads hipRTC (trying [`HipCompiler::LIBRARIES`] in order) and reads its version.
    /// Needs no GPU. No library is [`Error::NoHipRtc`], naming each one tried.
    pub fn detect() -> Result<HipCompiler> {
        let rtc = ffi::hiprtc()?;
        Ok(HipCompiler {
            library: rtc.library,
            version: rtc.version()?,
            hip_version: ffi::runtime_version()?,
        })
    }

    /// The libraries tried for hipRTC, in order.
    pub const LIBRARIES: &'static [&'static str] = ffi::HIPRTC_LIBRARIES;

    /// A compiler description with given versions (for cache keys without hipRTC).
    pub fn described(version: (i32, i32), hip_version: (i32, i32, i32)) -> HipCompiler {
        HipCompiler {
            library: "(described)",
            version,
            hip_version,
        }
    }

    /// Name and versions as cache keys record them: `hiprtc 9.0 (HIP 5.2.21153)`.
    pub fn id(&self) -> String {
        let (hm, hn, hp) = self.hip_version;
        format!(
            "hiprtc {}.{} (HIP {hm}.{hn}.{hp})",
            self.version.0, self.version.1
        )
    }

    /// hipRTC's (major, minor) version.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The HIP runtime's (major, minor, patch) version.
    pub fn hip_version(&self) -> (i32, i32, i32) {
        self.hip_version
    }

    /// The library hipRTC was loaded from.
    pub fn library(&self) -> &str {
        self.library
    }

    /// The exact options `variant` compiles with for `arch` (`gfx942`): the arch,
    /// C++17, `-O3`, then the defines. A register cap is an NVIDIA hint and is not
    /// passed (hipRTC has no such option); no codegen variable applies to hipRTC.
    pub fn options(&self, variant: &Variant, arch: &str) -> Vec<String> {
        let mut o = vec![
            format!("--offload-arch={arch}"),
            "-std=c++17".to_string(),
            "-O3".to_string(),
        ];
        o.extend(variant.defines().iter().map(|(n, v)| format!("-D{n}={v}")));
        o
    }

    /// Compiles `variant` of `source` for `arch` (`gfx942`) into a code object. The
    /// source's headers (the prelude, where passed as one) resolve `#include "name"`.
    /// A compile error returns hipRTC's log and the variant; an arch the installed
    /// code object manager does not know is refused before hipRTC sees it (some ROCm
    /// releases abort the process instead of reporting it).
    pub fn compile(&self, source: &KernelSource, variant: &Variant, arch: &str) -> Result<Image> {
        variant.validate()?;
        if !arch.starts_with("gfx") || arch.contains(':') || arch.chars().any(|c| !c.is_ascii_alphanumeric())
        {
            return Err(Error::invalid(
                "arch",
                format!("`{arch}` is not a gfx arch without feature flags (like gfx942)"),
            ));
        }
        let rtc = ffi::hiprtc()?;
        let failed = |log: String| Error::HipCompile {
            kernel: source.name.to_string(),
            variant: variant.to_string(),
            arch: arch.to_string(),
            log,
        };
        if let Some(isas) = ffi::comgr_isas() {
            if !isas.iter().any(|i| i == arch) {
                return Err(failed(format!(
                    "this ROCm's code object manager (used by hipRTC from {}) does not know {arch}; it knows: {}",
                    rtc.library,
                    isas.join(" ")
                )));
            }
        }
        let options = self.options(variant, arch);
        match rtc.compile(source.name, &source.text(), source.headers, &options)? {
            Ok(bytes) => Ok(Image {
                kind: ImageKind::CodeObject,
                bytes,
            }),
            Err(log) => Err(failed(log)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_exact_and_ordered() {
        let c = HipCompiler::described((9, 0), (5, 2, 21153));
        let v = Variant::new("k")
            .define("A", 1)
            .define("B", "x")
            .max_registers(64);
        assert_eq!(
            c.options(&v, "gfx942"),
            ["--offload-arch=gfx942", "-std=c++17", "-O3", "-DA=1", "-DB=x"]
        );
        assert_eq!(c.id(), "hiprtc 9.0 (HIP 5.2.21153)");
    }

    #[test]
    fn a_bad_arch_is_refused_by_name() {
        let c = HipCompiler::described((9, 0), (5, 2, 0));
        let src = KernelSource::new("k", "extern \"C\" __global__ void k() {}", "fnv1a64:0");
        for arch in ["sm_90a", "gfx942:sramecc+", "", "gfx 9"] {
            let e = c.compile(&src, &Variant::new("k"), arch).unwrap_err();
            assert!(e.to_string().contains("invalid argument `arch`"), "{arch}: {e}");
        }
    }
}
