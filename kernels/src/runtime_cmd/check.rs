//! `kernels tables check` on a GPU: re-measures the baked entries of the device's target.

#[cfg(any(feature = "cuda", feature = "rocm"))]
use std::process::ExitCode;

#[cfg(any(feature = "cuda", feature = "rocm"))]
use tuned::{StaticKey, Target};

#[cfg(not(feature = "rocm"))]
use super::common::no_rocm;
use super::common::{Backend, CmdResult};

/// `kernels tables check` on a GPU, whatever the backend: re-measures every baked entry
/// of `target` of each of `kernels` (`recheck`: the entry's config, the analytic
/// default and a quick search, all on the device), prints what moved, and fails when
/// an entry is more than `threshold` slower than the default or than the quick
/// search's best. Default markers are skipped and counted (they serve the default).
/// `recheck` is also given the table's timing method (`graph` or `single`).
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn check_entries<K>(
    target: Target,
    kernels: &[K],
    schema_of: impl Fn(&K) -> &'static tuned::KernelSchema,
    threshold: f64,
    only: Option<&str>,
    mut recheck: impl FnMut(
        &K,
        &StaticKey,
        u64,
        &[tuned::Value],
        &str,
    ) -> kernels_core::Result<kernels_core::tune::Recheck>,
) -> CmdResult {
    let (mut checked, mut failed, mut markers) = (0usize, 0usize, 0usize);
    println!(
        "{:<18} {:<28} {:>6} {:>10} {:>10} {:>10} {:>10}  verdict",
        "kernel", "static key", "batch", "table us", "now us", "default us", "search us"
    );
    for k in kernels {
        let schema = schema_of(k);
        let name = schema.kernel;
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let Some(table) = crate::kernel(name).and_then(|d| d.baked_table(target)) else {
            continue;
        };
        let mut entries: Vec<_> = table.entries.entries().collect();
        entries.sort_by_key(|(key, _)| *key);
        for (canonical, list) in entries {
            let key =
                StaticKey::parse(schema, canonical).map_err(|e| format!("table key `{canonical}`: {e}"))?;
            for e in list.iter() {
                // A default marker serves the analytic default: nothing to compare it with.
                let Some(&config) = e.config.tuned() else {
                    markers += 1;
                    continue;
                };
                checked += 1;
                let r = match recheck(k, &key, e.batch, config, table.timing) {
                    Ok(r) => r,
                    Err(err) => {
                        failed += 1;
                        println!("{name:<18} {canonical:<28} {:>6}  FAIL: {err}", e.batch);
                        continue;
                    }
                };
                let slow_vs_default = r.entry_us > r.default_us * (1.0 + threshold);
                let beaten = r.best_us * (1.0 + threshold) < r.entry_us;
                let verdict = match (slow_vs_default, beaten) {
                    (true, _) => "FAIL: slower than the default",
                    (_, true) => "FAIL: a quick search beats it",
                    _ if (r.entry_us / e.us - 1.0).abs() > threshold => "ok (moved since tuning)",
                    _ => "ok",
                };
                if slow_vs_default || beaten {
                    failed += 1;
                }
                println!(
                    "{name:<18} {canonical:<28} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>10.3}  {verdict}",
                    e.batch, e.us, r.entry_us, r.default_us, r.best_us
                );
            }
        }
    }
    println!(
        "{checked} entries re-measured on {target}, {failed} failed (threshold {:.0}%); {markers} default marker(s) skipped (they serve the analytic default)",
        threshold * 100.0
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `kernels tables check` on a GPU of `backend` (`check_entries`), timing with
/// `timing`, or with each table's own method where `None` (HIP has single-launch timing
/// only).
pub fn check_tables(
    threshold: f64,
    sample: usize,
    timing: Option<kernels_core::tune::TimingMethod>,
    only: Option<String>,
    backend: Backend,
) -> CmdResult {
    match backend {
        #[cfg(feature = "cuda")]
        Backend::Cuda => cuda::check_tables(threshold, sample, timing, only),
        #[cfg(not(feature = "cuda"))]
        Backend::Cuda => {
            let _ = (threshold, sample, timing, only);
            Err("check: this binary was built without the `cuda` feature; use --offline".into())
        }
        #[cfg(feature = "rocm")]
        Backend::Hip => {
            let _ = timing;
            hip::check_tables(threshold, sample, only)
        }
        #[cfg(not(feature = "rocm"))]
        Backend::Hip => {
            let _ = (threshold, sample, timing, only);
            Err(no_rocm())
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::process::ExitCode;

    use super::check_entries;
    use crate::runtime_cmd::common::cuda::{open, tunables};
    use crate::runtime_cmd::common::CmdResult;

    /// `kernels tables check` on an NVIDIA GPU ([`super::check_entries`]), timed with
    /// `method`, or where `None` as each table was tuned (its header's `timing`).
    pub fn check_tables(
        threshold: f64,
        sample: usize,
        method: Option<kernels_core::tune::TimingMethod>,
        only: Option<String>,
    ) -> CmdResult {
        let rt = or_fail!("tables check", open(0));
        let stream = or_fail!("tables check", rt.device().new_stream());
        let Some(target) = rt.device().info().target() else {
            eprintln!("kernels: tables check: this device has no table target");
            return Ok(ExitCode::FAILURE);
        };
        match method {
            Some(m) => println!("timing: {m}"),
            None => println!("timing: each table's own (its header's `timing`)"),
        }
        check_entries(
            target,
            &tunables(),
            |k| k.schema(),
            threshold,
            only.as_deref(),
            |k, key, batch, config, table_timing| {
                // A table's method is `graph` or `single` (the build validated it).
                let method = method.unwrap_or_else(|| table_timing.parse().unwrap_or_default());
                let timing = kernels_core::tune::TimingOptions {
                    method,
                    ..kernels_core::tune::TimingOptions::default()
                };
                k.recheck(&rt, &stream, key, batch, config, sample, &timing)
            },
        )
    }
}

#[cfg(feature = "rocm")]
mod hip {
    use std::process::ExitCode;

    use kernels_core::{HipDevice, HipRuntime};

    use super::check_entries;
    use crate::runtime_cmd::common::hip::hip_tunables;
    use crate::runtime_cmd::common::CmdResult;

    /// `kernels tables check --backend hip`: the baked entries of the AMD device's
    /// target re-measured on it ([`super::check_entries`]).
    pub fn check_tables(threshold: f64, sample: usize, only: Option<String>) -> CmdResult {
        let opened = HipDevice::open(0).and_then(HipRuntime::new);
        let rt = or_fail!("tables check", opened);
        let stream = or_fail!("tables check", rt.device().new_stream());
        let Some(target) = rt.info().target() else {
            eprintln!(
                "kernels: tables check: this device ({}) has no table target",
                rt.arch()
            );
            return Ok(ExitCode::FAILURE);
        };
        let timing = kernels_core::tune::TimingOptions::default();
        check_entries(
            target,
            &hip_tunables(),
            |k| k.schema(),
            threshold,
            only.as_deref(),
            // HIP times single launches, whatever the table says.
            |k, key, batch, config, _table_timing| {
                k.recheck(&rt, &stream, key, batch, config, sample, &timing)
            },
        )
    }
}
