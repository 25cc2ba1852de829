//! `kernels tables check --served` on an NVIDIA GPU: every config a lookup on the
//! device's target serves (each entry of the baked tables, a default marker's analytic
//! default, and the analytic default over each shape set) compiled for its exact static
//! key, run once on the problem the tuner makes for it, and every buffer checked against
//! the kernel's CPU reference (`kernels_core::verify`).

use std::path::Path;
use std::process::ExitCode;

use kernels::runtime_cmd::cuda_runtime;
use kernels_core::cudarc::driver::CudaStream;
use kernels_core::{Cuda, CudaRuntime, Tunable};

use crate::variants::served_cases;

/// At most this many bytes of inputs per run: a batch larger than that runs fewer rows
/// (the compiled variant is the same; rows are independent), which keeps the CPU
/// reference to seconds for the whole set.
const MAX_INPUT_BYTES: usize = 16 << 20;

/// Counts of one kernel's or the whole check's runs.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
}

/// Checks every served case of `K` (shape set `shape_file`), printing one line each.
fn check_kernel<K: Tunable>(
    rt: &CudaRuntime,
    stream: &std::sync::Arc<CudaStream>,
    shapes_dir: &Path,
    shape_file: &str,
    tally: &mut Tally,
) -> Result<(), String> {
    let target = rt
        .info()
        .target()
        .ok_or_else(|| format!("this device ({}) has no table target", rt.arch()))?;
    let kernel = K::SCHEMA.kernel;
    let cases = served_cases::<K>(target, shapes_dir, shape_file)?;
    // Every variant compiled in parallel first; a failure shows in its case's run.
    let jobs: Vec<_> = cases
        .iter()
        .flat_map(|c| K::variants(rt.info(), &c.key, &c.config))
        .map(|v| (*K::SOURCE, v))
        .collect();
    let _ = rt.precompile(&jobs);
    for case in cases {
        let row_bytes: usize = K::tuning_inputs(&case.key, 1).iter().map(Vec::len).sum();
        let rows = case.batch.min((MAX_INPUT_BYTES / row_bytes.max(1)).max(1) as u64);
        let verdict = match kernels_core::tune::verify::<Cuda, K>(rt, stream, &case.key, rows, &case.config) {
            Ok(()) => {
                tally.passed += 1;
                "ok".to_string()
            }
            Err(e) => {
                tally.failed += 1;
                format!("FAIL: {e}")
            }
        };
        let values = K::config_values(&case.config);
        let mut config = String::new();
        let _ = tuned::write_config(&mut config, K::SCHEMA.params.iter().map(|f| f.name).zip(&values));
        println!(
            "{kernel:<18} {:<52} rows {rows:>5}  {config}  {verdict}",
            case.origin
        );
    }
    Ok(())
}

/// `kernels tables check --served [--kernel K]`: failure when any served config's output
/// is outside the reference's bound or does not run.
pub fn check_served(only: Option<&str>, shapes: Option<std::path::PathBuf>) -> ExitCode {
    use kernels_rmsnorm::{FusedAddRmsNorm, RmsNorm};
    use kernels_softmax::{LogSoftmax, Softmax};
    let (rt, stream) = match cuda_runtime(0) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kernels: tables check --served: {e}");
            return ExitCode::FAILURE;
        }
    };
    let shapes = shapes.unwrap_or_else(crate::variants::default_shapes_dir);
    let mut tally = Tally::default();
    let wanted = |name: &str| only.is_none_or(|o| o == name);
    let mut run = || -> Result<(), String> {
        // The softmax table serves softmax and log-softmax.
        if wanted("softmax") {
            check_kernel::<Softmax>(&rt, &stream, &shapes, "softmax.json", &mut tally)?;
            check_kernel::<LogSoftmax>(&rt, &stream, &shapes, "softmax.json", &mut tally)?;
        }
        if wanted("rmsnorm") {
            check_kernel::<RmsNorm>(&rt, &stream, &shapes, "rmsnorm.json", &mut tally)?;
        }
        if wanted("fused_add_rmsnorm") {
            check_kernel::<FusedAddRmsNorm>(&rt, &stream, &shapes, "fused_add_rmsnorm.json", &mut tally)?;
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("kernels: tables check --served: {e}");
        return ExitCode::FAILURE;
    }
    println!(
        "{} served configs checked against the reference on {} ({}): {} passed, {} failed",
        tally.passed + tally.failed,
        rt.info().name,
        rt.arch(),
        tally.passed,
        tally.failed
    );
    if tally.failed == 0 && tally.passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
