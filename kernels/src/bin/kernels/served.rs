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

use crate::variants::{served_cases, ServedCase};

/// Counts of one kernel's or the whole check's runs.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
}

/// Checks every served case of `K` (shape set `shape_file`), printing one line each.
/// Each case runs at [`Tunable::check_batch`] of its batch; the cases of one key and
/// batch share one upload of the inputs and one CPU reference
/// ([`kernels_core::tune::verify_each`]), and a config served at several batches that
/// fall on the same checked batch runs once (its line names every origin).
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
    for group in check_groups::<K>(cases) {
        let configs: Vec<K::Config> = group.runs.iter().map(|r| r.config.clone()).collect();
        let verdicts =
            kernels_core::tune::verify_each::<Cuda, K>(rt, stream, &group.key, group.rows, &configs)
                .unwrap_or_else(|e| vec![Err(e); configs.len()]);
        for (run, verdict) in group.runs.iter().zip(verdicts) {
            let verdict = match verdict {
                Ok(()) => {
                    tally.passed += 1;
                    "ok".to_string()
                }
                Err(e) => {
                    tally.failed += 1;
                    format!("FAIL: {e}")
                }
            };
            let values = K::config_values(&run.config);
            let mut config = String::new();
            let _ = tuned::write_config(&mut config, K::SCHEMA.params.iter().map(|f| f.name).zip(&values));
            println!(
                "{kernel:<18} {:<52} rows {:>5}  {config}  {verdict}",
                run.origins.join(", "),
                group.rows
            );
        }
    }
    Ok(())
}

/// One config of a [`CheckGroup`] and the served cases it stands for.
struct CheckRun<K: Tunable> {
    config: K::Config,
    origins: Vec<String>,
}

/// The served cases of one static key that run at one checked batch.
struct CheckGroup<K: Tunable> {
    key: K::Key,
    rows: u64,
    runs: Vec<CheckRun<K>>,
}

/// `cases` grouped by (static key, [`Tunable::check_batch`]) in first-seen order, each
/// group's configs distinct.
fn check_groups<K: Tunable>(cases: Vec<ServedCase<K>>) -> Vec<CheckGroup<K>> {
    let mut groups: Vec<(tuned::KeyValues, CheckGroup<K>)> = Vec::new();
    for case in cases {
        let rows = K::check_batch(&case.key, case.batch).max(1);
        let values = K::key_values(&case.key);
        let at = match groups.iter().position(|(v, g)| *v == values && g.rows == rows) {
            Some(i) => i,
            None => {
                groups.push((
                    values,
                    CheckGroup {
                        key: case.key,
                        rows,
                        runs: Vec::new(),
                    },
                ));
                groups.len() - 1
            }
        };
        let group = &mut groups[at].1;
        let config_values = K::config_values(&case.config);
        match group
            .runs
            .iter_mut()
            .find(|r| K::config_values(&r.config) == config_values)
        {
            Some(run) => run.origins.push(case.origin),
            None => group.runs.push(CheckRun {
                config: case.config,
                origins: vec![case.origin],
            }),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// `kernels tables check --served [--kernel K]`: failure when any served config's output
/// is outside the reference's bound or does not run.
pub fn check_served(only: Option<&str>, shapes: Option<std::path::PathBuf>) -> ExitCode {
    use kernels_gemm::Gemm;
    use kernels_moe::Moe;
    use kernels_rmsnorm::{FusedAddRmsNorm, RmsNorm};
    use kernels_softmax::{LogSoftmax, Softmax};
    const KERNELS: [&str; 5] = ["softmax", "rmsnorm", "fused_add_rmsnorm", "gemm", "moe"];
    if let Some(o) = only.filter(|o| !KERNELS.contains(o)) {
        eprintln!(
            "kernels: tables check --served --kernel: no table kernel named `{o}` ({})",
            KERNELS.join(", ")
        );
        return ExitCode::from(2);
    }
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
        if wanted("gemm") {
            check_kernel::<Gemm>(&rt, &stream, &shapes, "gemm.json", &mut tally)?;
        }
        if wanted("moe") {
            check_kernel::<Moe>(&rt, &stream, &shapes, "moe.json", &mut tally)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_gemm::{Gemm, GemmKey, Layout};
    use tuned::{DType, Target, TunedKernel};

    fn case(key: GemmKey, batch: u64, origin: &str) -> ServedCase<Gemm> {
        ServedCase {
            origin: origin.to_string(),
            key,
            batch,
            config: Gemm::analytic_default(Target::Sm90, &key, 1),
        }
    }

    /// A 1 GB lm_head is checked on one row, a router on its whole batch; served cases
    /// that fall on one checked batch with one config run once, naming every origin.
    #[test]
    fn served_cases_group_by_key_and_checked_batch() {
        let lm_head = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 151936,
            k: 2048,
        };
        let router = GemmKey { n: 8, ..lm_head };
        let groups = check_groups::<Gemm>(vec![
            case(lm_head, 1, "a"),
            case(lm_head, 4, "b"),
            case(router, 64, "c"),
            case(lm_head, 16, "d"),
        ]);
        let shape: Vec<(u32, u64, Vec<Vec<&str>>)> = groups
            .iter()
            .map(|g| {
                let origins = g
                    .runs
                    .iter()
                    .map(|r| r.origins.iter().map(String::as_str).collect())
                    .collect();
                (g.key.n, g.rows, origins)
            })
            .collect();
        assert_eq!(
            shape,
            [
                (151936, 1, vec![vec!["a"]]),
                (151936, 3, vec![vec!["b", "d"]]),
                (8, 64, vec![vec!["c"]]),
            ]
        );
    }
}
