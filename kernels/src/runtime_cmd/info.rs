//! `kernels info`: the device, its runtime and compiler, the policy and the caches.

#[cfg(feature = "cuda")]
pub use cuda::info;

#[cfg(not(feature = "cuda"))]
use super::common::CmdResult;

#[cfg(not(feature = "cuda"))]
pub fn info(_: usize) -> CmdResult {
    Err("info: this binary was built without the `cuda` feature".into())
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::process::ExitCode;

    use kernels_core::{cache::CODEGEN_ENV_VARS, CudaDevice, DiskCache, Policy, PDL_ENV, TUNING_ENV};

    use crate::runtime_cmd::common::cuda::tunables;
    use crate::runtime_cmd::common::CmdResult;

    /// `kernels info`: device, arch, driver, NVRTC, policy, cache folder and size.
    pub fn info(device: usize) -> CmdResult {
        let mut ok = true;
        match CudaDevice::open(device) {
            Ok(d) => {
                let i = d.info();
                let target = i
                    .target()
                    .map(|t| t.name().to_string())
                    .unwrap_or_else(|| format!("none (defaults as {})", i.tuning_target()));
                println!(
                    "device {}: {} (compute capability {}.{}, target {target}, compiles for {})",
                    i.ordinal,
                    i.name,
                    i.compute_capability.0,
                    i.compute_capability.1,
                    i.compile_arch()
                );
                println!(
                    "  {} SMs, L2 {} MiB, shared memory {} KiB per block ({} KiB opt-in), {} registers per SM, {} GiB",
                    i.sm_count,
                    i.l2_bytes >> 20,
                    i.max_smem_per_block >> 10,
                    i.max_smem_per_block_optin >> 10,
                    i.regs_per_sm,
                    i.total_memory >> 30
                );
            }
            Err(e) => {
                ok = false;
                println!("device {device}: unavailable: {e}");
            }
        }
        match CudaDevice::driver_version() {
            Ok((major, minor)) => println!("driver: CUDA {major}.{minor}"),
            Err(e) => println!("driver: unavailable: {e}"),
        }
        match kernels_core::Compiler::detect() {
            Ok(c) => println!("nvrtc: {}", c.id()),
            Err(e) => {
                ok = false;
                println!("nvrtc: unavailable: {e}")
            }
        }
        match Policy::from_env() {
            Ok(p) => println!("policy: {p} ({TUNING_ENV})"),
            Err(e) => {
                ok = false;
                println!("policy: {e}")
            }
        }
        match kernels_core::pdl_from_env() {
            Ok(on) => println!(
                "programmatic dependent launch: {} ({PDL_ENV}; sm_90+, softmax and RMSNorm; the CLI's own launches are plain)",
                if on { "on" } else { "off" }
            ),
            Err(e) => {
                ok = false;
                println!("programmatic dependent launch: {e}")
            }
        }
        let cache = DiskCache::from_env();
        match cache.root() {
            None => println!("cache: disabled (KERNELS_CACHE_DIR is empty)"),
            Some(root) => match cache.usage() {
                Ok((files, bytes)) => println!(
                    "cache: {} ({files} files, {:.1} MiB)",
                    root.display(),
                    bytes as f64 / (1 << 20) as f64
                ),
                Err(e) => println!("cache: {}: {e}", root.display()),
            },
        }
        let env = kernels_core::cache::codegen_env();
        if env.is_empty() {
            println!("codegen env: none set ({})", CODEGEN_ENV_VARS.join(", "));
        } else {
            let set: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("codegen env: {}", set.join(" "));
        }
        let names: Vec<&str> = tunables().iter().map(|k| k.schema().kernel).collect();
        println!(
            "tunable kernels: {}",
            if names.is_empty() {
                "none yet".to_string()
            } else {
                names.join(", ")
            }
        );
        Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}
