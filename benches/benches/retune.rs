//! Retune every kernel over its shape set on the current GPU and write the tables:
//!
//!     KERNELS_RETUNE=1 cargo bench -p benches --bench retune
//!
//! It does what `kernels tune KERNEL --shapes tuned/shapes/KERNEL.json` does for each
//! tunable kernel in turn: progress with an ETA per shape, results persisted as they
//! come (an interrupted run resumes from the tuning cache), tables merged into
//! each kernel crate's `tables/<kernel>/<target>.json` atomically. `KERNELS_RETUNE_ONLY=rmsnorm,...`
//! limits the kernels; `KERNELS_RETUNE_FRESH=1` searches every shape again. Without
//! `KERNELS_RETUNE=1`, or without a GPU, it says so in one line and does nothing.

use std::path::Path;
use std::process::ExitCode;

use kernels::runtime_cmd::{tunables, tune, Backend, TuneArgs};

fn main() -> ExitCode {
    let flag = |name: &str| {
        tuned::env_flag(name).unwrap_or_else(|e| {
            eprintln!("retune: {e}");
            std::process::exit(2)
        })
    };
    if !flag("KERNELS_RETUNE") {
        println!("retune: skipped; set KERNELS_RETUNE=1 to retune every kernel's table on this GPU");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = kernels::core::CudaDevice::open(0) {
        println!("retune: skipped: no CUDA GPU found ({e})");
        return ExitCode::SUCCESS;
    }
    let only: Option<Vec<String>> = std::env::var("KERNELS_RETUNE_ONLY")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    // The repository root: where cargo runs benches (benches/), its parent, or the
    // source tree this binary was built from.
    let root = [
        Path::new(".").to_path_buf(),
        Path::new("..").to_path_buf(),
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    ]
    .into_iter()
    .find(|p| p.join("tuned/shapes").is_dir())
    .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let mut failed = false;
    for k in tunables() {
        let kernel = k.schema().kernel.to_string();
        if only.as_ref().is_some_and(|o| !o.contains(&kernel)) {
            continue;
        }
        println!("== retune {kernel}");
        let args = TuneArgs {
            shapes: root.join("tuned/shapes").join(format!("{kernel}.json")),
            kernel,
            target: "auto".into(),
            tables: None,
            retune: flag("KERNELS_RETUNE_FRESH"),
            reps: None,
            // Every candidate checked and timed in full, as the committed row tables were.
            finalists: 0,
            // The backend's best, as `kernels tune` by default: graph replays on CUDA,
            // as the GPU bench measures.
            timing: None,
            device: 0,
            backend: Backend::Cuda,
            filter: Default::default(),
            deadline: None,
            carry_from: None,
        };
        match tune(args) {
            Ok(code) if code == ExitCode::SUCCESS => {}
            Ok(_) => failed = true,
            Err(e) => {
                eprintln!("retune: {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
