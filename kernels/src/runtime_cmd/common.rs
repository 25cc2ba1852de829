//! What the GPU commands share: the backend choice, the result type, the runtime
//! failure macro, shape files, and each backend's tunable kernels and runtime.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[cfg(any(feature = "cuda", feature = "rocm"))]
use tuned::StaticKey;

/// The folder of `kernel`'s committed tables (`<kernel>/<target>.json` below it):
/// `$TUNED_TABLES_DIR`, else the `tables` folder of the crate that bakes them, in the
/// source tree this binary was built from. `None` for a kernel no crate bakes.
pub fn tables_dir(kernel: &str) -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TUNED_TABLES_DIR") {
        return Some(PathBuf::from(d));
    }
    let dir = match kernel {
        "softmax" | "log_softmax" => kernels_softmax::TABLES_DIR,
        "rmsnorm" | "fused_add_rmsnorm" => kernels_rmsnorm::TABLES_DIR,
        "gemm" => kernels_gemm::TABLES_DIR,
        "moe" => kernels_moe::TABLES_DIR,
        _ => return None,
    };
    Some(PathBuf::from(dir))
}

/// Every folder of committed tables that exists: `$TUNED_TABLES_DIR`, else each
/// family crate's `tables`.
pub fn all_tables_dirs() -> Vec<PathBuf> {
    if let Some(d) = std::env::var_os("TUNED_TABLES_DIR") {
        return vec![PathBuf::from(d)];
    }
    let mut dirs: Vec<PathBuf> = [
        kernels_softmax::TABLES_DIR,
        kernels_rmsnorm::TABLES_DIR,
        kernels_gemm::TABLES_DIR,
        kernels_moe::TABLES_DIR,
    ]
    .into_iter()
    .map(PathBuf::from)
    .filter(|d| d.is_dir())
    .collect();
    dirs.dedup();
    dirs
}

/// Which GPU runtime `kernels tune` measures with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// NVIDIA GPUs through CUDA (feature `cuda`, the default).
    #[default]
    Cuda,
    /// AMD GPUs through HIP (feature `rocm`).
    Hip,
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "cuda" => Ok(Backend::Cuda),
            "hip" | "rocm" => Ok(Backend::Hip),
            _ => Err(format!("`{s}` is not a backend (cuda or hip)")),
        }
    }
}

/// A usage error (exit status 2); runtime failures print themselves and return
/// `ExitCode::FAILURE`.
pub type CmdResult = Result<ExitCode, String>;

/// The value of a `Result`, or: print `kernels: <command>: <error>` and return
/// `Ok(ExitCode::FAILURE)` (a runtime failure, not a usage error).
#[cfg(any(feature = "cuda", feature = "rocm"))]
macro_rules! or_fail {
    ($cmd:literal, $result:expr) => {
        match $result {
            Ok(v) => v,
            Err(e) => {
                eprintln!(concat!("kernels: ", $cmd, ": {}"), e);
                return Ok(ExitCode::FAILURE);
            }
        }
    };
}

/// Reads and parses a shape file for `schema`.
#[cfg(any(feature = "cuda", feature = "rocm"))]
pub(crate) fn read_shapes(
    schema: &'static tuned::KernelSchema,
    path: &Path,
) -> Result<Vec<(StaticKey, u64)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--shapes: cannot read {}: {e}", path.display()))?;
    kernels_core::tune::parse_shapes(schema, &text, &path.display().to_string())
        .map_err(|e| format!("--shapes: {e}"))
}

/// The kernel named `kernel` among `all` (named by their schema), or an error naming
/// `KERNEL`, what it lacks (`what`: the trait) and the kernels there are.
#[cfg(any(feature = "cuda", feature = "rocm"))]
pub(crate) fn find_kernel<T: ?Sized>(
    all: Vec<&'static T>,
    kernel: &str,
    schema: impl Fn(&T) -> &'static tuned::KernelSchema,
    what: &str,
) -> Result<&'static T, String> {
    let names: Vec<&str> = all.iter().map(|k| schema(k).kernel).collect();
    let known = if names.is_empty() {
        "none yet".to_string()
    } else {
        names.join(", ")
    };
    all.into_iter()
        .find(|k| schema(k).kernel == kernel)
        .ok_or_else(|| format!("KERNEL: `{kernel}` has no {what} implementation (tunable kernels: {known})"))
}

/// The usage error of `--backend hip` in a binary built without `rocm`.
#[cfg(not(feature = "rocm"))]
pub(crate) fn no_rocm() -> String {
    "--backend: `hip` needs the `rocm` feature, and this binary was built without it \
     (build on a machine with ROCm: HIP_PATH=/opt/rocm cargo build --release -p kernels --features rocm)"
        .into()
}

#[cfg(feature = "cuda")]
pub mod cuda {
    use kernels_core::{Cuda, CudaDevice, CudaRuntime, DynTunable, RuntimeOptions};

    use super::find_kernel;

    /// Every kernel that implements `kernels_core::Tunable`, for `tune` and
    /// `precompile`. (Log-softmax shares softmax's tables, so `tune softmax` covers it.)
    pub fn tunables() -> Vec<&'static dyn DynTunable<Cuda>> {
        vec![
            &kernels_softmax::ops::SOFTMAX_TUNABLE,
            &kernels_rmsnorm::ops::RMSNORM_TUNABLE,
            &kernels_rmsnorm::ops::FUSED_ADD_RMSNORM_TUNABLE,
            &kernels_gemm::ops::GEMM_TUNABLE,
            &kernels_moe::ops::MOE_TUNABLE,
        ]
    }

    pub(crate) fn find(kernel: &str) -> Result<&'static dyn DynTunable<Cuda>, String> {
        find_kernel(tunables(), kernel, |k| k.schema(), "Tunable")
    }

    /// A runtime with options from the environment, except that it launches plainly
    /// (`KERNELS_PDL` is ignored): the CLI measures and checks tables, which are tuned
    /// with plain launches.
    pub(crate) fn open(device: usize) -> Result<CudaRuntime, String> {
        let dev = CudaDevice::open(device).map_err(|e| e.to_string())?;
        let mut options = RuntimeOptions::from_env().map_err(|e| e.to_string())?;
        options.pdl = false;
        CudaRuntime::with_options(dev, options).map_err(|e| e.to_string())
    }

    /// A runtime as `kernels tune` opens one (plain launches) and a new stream on its
    /// device, for commands outside this library (`kernels tables check --served`).
    pub fn cuda_runtime(
        device: usize,
    ) -> Result<
        (
            CudaRuntime,
            std::sync::Arc<kernels_core::cudarc::driver::CudaStream>,
        ),
        String,
    > {
        let rt = open(device)?;
        let stream = rt.device().new_stream().map_err(|e| e.to_string())?;
        Ok((rt, stream))
    }
}

#[cfg(feature = "rocm")]
pub mod hip {
    use kernels_core::{DynTunable, Hip};

    use super::find_kernel;

    /// Every kernel `kernels tune --backend hip` can tune. (Log-softmax shares
    /// softmax's tables, so `tune softmax` covers it.)
    pub fn hip_tunables() -> Vec<&'static dyn DynTunable<Hip>> {
        vec![
            &kernels_softmax::ops::SOFTMAX_TUNABLE,
            &kernels_rmsnorm::ops::RMSNORM_TUNABLE,
            &kernels_rmsnorm::ops::FUSED_ADD_RMSNORM_TUNABLE,
        ]
    }

    pub(crate) fn find(kernel: &str) -> Result<&'static dyn DynTunable<Hip>, String> {
        find_kernel(hip_tunables(), kernel, |k| k.schema(), "Tunable")
    }
}
