//! Run-time compilation with NVRTC.

use crate::Variant;
#[cfg(feature = "cuda")]
use crate::{Error, KernelSource, Result};

/// What a compiled image holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// Machine code for one arch (what NVRTC gives for `sm_XX`), loaded with no JIT.
    Cubin,
    /// NUL-terminated PTX, JIT-compiled by the driver at load (fallback only).
    Ptx,
    /// An AMD code object (an ELF `.hsaco` for one gfx arch), what hipRTC gives.
    CodeObject,
}

impl ImageKind {
    /// The name stored in cache files.
    pub const fn name(self) -> &'static str {
        match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
            ImageKind::CodeObject => "hsaco",
        }
    }

    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<ImageKind> {
        match name {
            "cubin" => Some(ImageKind::Cubin),
            "ptx" => Some(ImageKind::Ptx),
            "hsaco" => Some(ImageKind::CodeObject),
            _ => None,
        }
    }
}

/// A compiled module image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub kind: ImageKind,
    pub bytes: Vec<u8>,
}

/// NVRTC as found on this machine: its version and the codegen environment captured
/// when it was detected (both are part of every cache key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiler {
    version: (i32, i32),
    codegen_env: Vec<(String, String)>,
}

impl Compiler {
    /// Finds NVRTC and reads the codegen environment ([`crate::CODEGEN_ENV_VARS`]).
    /// No NVRTC library is [`Error::NoNvrtc`].
    #[cfg(feature = "cuda")]
    pub fn detect() -> Result<Compiler> {
        Ok(Compiler {
            version: crate::backend::cuda::ffi::nvrtc_version()?,
            codegen_env: crate::codegen_env(),
        })
    }

    /// A compiler description with a given version and environment (for tools and
    /// tests that compute cache keys without NVRTC).
    pub fn described(version: (i32, i32), codegen_env: Vec<(String, String)>) -> Compiler {
        Compiler { version, codegen_env }
    }

    /// Name and version as tables and cache keys record it: `nvrtc 13.0`.
    pub fn id(&self) -> String {
        format!("nvrtc {}.{}", self.version.0, self.version.1)
    }

    /// NVRTC's (major, minor) version.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The codegen variables that were set, as (name, value).
    pub fn codegen_env(&self) -> &[(String, String)] {
        &self.codegen_env
    }

    /// The exact options `variant` compiles with on `arch`.
    pub fn options(&self, variant: &Variant, arch: &str) -> Vec<String> {
        variant.nvrtc_options(arch, &self.codegen_env)
    }

    /// Compiles `variant` of `source` for `arch` (CUBIN; PTX only where NVRTC gives no
    /// CUBIN). A compile error returns NVRTC's log and the variant that failed.
    /// Thread-safe: many variants compile in parallel.
    #[cfg(feature = "cuda")]
    pub fn compile(&self, source: &KernelSource, variant: &Variant, arch: &str) -> Result<Image> {
        variant.validate()?;
        let options = self.options(variant, arch);
        match crate::backend::cuda::ffi::nvrtc_compile(source.name, &source.text(), source.headers, &options)?
        {
            Ok((kind, bytes)) => Ok(Image { kind, bytes }),
            Err(log) => Err(Error::Compile {
                kernel: source.name.to_string(),
                variant: variant.to_string(),
                arch: arch.to_string(),
                log,
            }),
        }
    }
}
