//! `kernels tables check --defaults DIR` on an NVIDIA GPU: how good the analytic default
//! is where no table entry serves. For each kernel with a shape file `DIR/<kernel>.json`
//! (shapes absent from the tables, from models the catalog does not hold), each shape
//! is searched in full, and the default's time is compared with the best config found.

use std::path::Path;
use std::process::ExitCode;

use super::common::{read_shapes, CmdResult};

/// One searched shape: the default's and the best config's medians.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultRow {
    pub kernel: String,
    pub key: String,
    pub batch: u64,
    pub default_us: f64,
    pub best_us: f64,
    /// Whether a baked table entry exists for the static key (then the shape is not
    /// off the table, and the default is not what serves it).
    pub in_table: bool,
    /// The analytic default and the best config found, values in parameter order (what
    /// a revision of the heuristic starts from).
    pub default: String,
    pub best: String,
}

impl DefaultRow {
    /// How much slower the default is than the best config found (0.05: 5%).
    pub fn slowdown(&self) -> f64 {
        self.default_us / self.best_us - 1.0
    }
}

/// The verdict of a row under `threshold`.
fn verdict(row: &DefaultRow, threshold: f64) -> &'static str {
    if row.in_table {
        "skip: the table serves this key"
    } else if row.slowdown() > threshold {
        "FAIL: the default is slower"
    } else {
        "ok"
    }
}

/// The header of the rows [`row_line`] prints.
pub fn header() -> String {
    format!(
        "{:<18} {:<36} {:>6} {:>11} {:>10} {:>9}  verdict  [default] -> [best]",
        "kernel", "static key", "batch", "default us", "best us", "slower"
    )
}

/// One row and its verdict under `threshold`, as printed when its search ends (so a
/// run stopped by a time limit keeps the rows it finished).
pub fn row_line(r: &DefaultRow, threshold: f64) -> String {
    format!(
        "{:<18} {:<36} {:>6} {:>11.3} {:>10.3} {:>8.1}%  {}  [{}] -> [{}]",
        r.kernel,
        r.key,
        r.batch,
        r.default_us,
        r.best_us,
        r.slowdown() * 100.0,
        verdict(r, threshold),
        r.default,
        r.best
    )
}

/// The summary of the rows (already printed one by one) and the errors; failure when
/// a row off the tables is slower than the best found by more than `threshold`, or a
/// search failed.
pub fn report(rows: &[DefaultRow], errors: &[String], threshold: f64) -> ExitCode {
    let mut failed = errors.len();
    failed += rows
        .iter()
        .filter(|r| verdict(r, threshold).starts_with("FAIL"))
        .count();
    for e in errors {
        println!("FAIL: {e}");
    }
    let off: Vec<&DefaultRow> = rows.iter().filter(|r| !r.in_table).collect();
    let worst = off.iter().map(|r| r.slowdown()).fold(0.0f64, f64::max);
    println!(
        "{} shape(s) off the tables searched: the default within {:.0}% of the best on {}, worst {:.1}% slower; {} failed",
        off.len(),
        threshold * 100.0,
        off.iter().filter(|r| r.slowdown() <= threshold).count(),
        worst * 100.0,
        failed
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Searches every shape of `dir`'s shape files on device 0 and reports; with
/// `finalists` above 0 each search screens its candidates first (see
/// [`kernels_core::tune::TuneOptions::finalists`]).
#[cfg(feature = "cuda")]
pub fn check_defaults(dir: &Path, threshold: f64, only: Option<&str>, finalists: usize) -> CmdResult {
    use super::common::cuda::{open, tunables};
    let has_file = |k: &&dyn kernels_core::DynTunable<kernels_core::Cuda>| {
        only.is_none_or(|o| o == k.schema().kernel)
            && dir.join(format!("{}.json", k.schema().kernel)).is_file()
    };
    if !tunables().iter().any(has_file) {
        return Err(format!(
            "--defaults: no <kernel>.json shape file{} in {}",
            only.map(|o| format!(" for `{o}`")).unwrap_or_default(),
            dir.display()
        ));
    }
    let rt = or_fail!("tables check --defaults", open(0));
    let stream = or_fail!("tables check --defaults", rt.device().new_stream());
    let Some(target) = rt.info().target() else {
        eprintln!("kernels: tables check --defaults: this device has no table target");
        return Ok(ExitCode::FAILURE);
    };
    let mut opts = kernels_core::tune::TuneOptions {
        finalists,
        ..kernels_core::tune::TuneOptions::default()
    };
    // The tables' timing (`kernels tune`'s on CUDA), so the default is judged as an entry
    // of them would be: single launches would add the launch cost to every time.
    opts.timing.method = kernels_core::tune::TimingMethod::Graph;
    let values = |v: &[tuned::Value]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ");
    let (mut rows, mut errors) = (Vec::new(), Vec::new());
    println!("{}", header());
    for k in tunables() {
        let schema = k.schema();
        if only.is_some_and(|o| o != schema.kernel) {
            continue;
        }
        let path = dir.join(format!("{}.json", schema.kernel));
        if !path.is_file() {
            continue;
        }
        let dynk = crate::kernel(schema.kernel);
        let table = dynk.and_then(|d| d.baked_table(target));
        for (key, batch) in read_shapes(schema, &path)? {
            let in_table = table.is_some_and(|t| t.entries.get(key.as_str()).is_some());
            match k.search(&rt, &stream, &key, batch, &opts) {
                Ok(r) => match r.default_us {
                    Some(default_us) => {
                        let row = DefaultRow {
                            kernel: schema.kernel.to_string(),
                            key: key.as_str().to_string(),
                            batch,
                            default_us,
                            best_us: r.us,
                            in_table,
                            default: dynk
                                .and_then(|d| d.analytic_default_values(target, &key, batch).ok())
                                .map(|v| values(&v))
                                .unwrap_or_default(),
                            best: values(&r.config),
                        };
                        println!("{}", row_line(&row, threshold));
                        rows.push(row);
                    }
                    None => errors.push(format!(
                        "{} [{key}] batch {batch}: the default failed",
                        schema.kernel
                    )),
                },
                Err(e) => errors.push(format!("{} [{key}] batch {batch}: {e}", schema.kernel)),
            }
        }
    }
    Ok(report(&rows, &errors, threshold))
}

/// Without the `cuda` feature there is no GPU runtime to search with.
#[cfg(not(feature = "cuda"))]
pub fn check_defaults(dir: &Path, threshold: f64, only: Option<&str>, finalists: usize) -> CmdResult {
    let _ = (dir, threshold, only, finalists);
    Err("check --defaults: this binary was built without the `cuda` feature".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(default_us: f64, best_us: f64, in_table: bool) -> DefaultRow {
        DefaultRow {
            kernel: "softmax".into(),
            key: "dtype=bf16,cols=50257".into(),
            batch: 64,
            default_us,
            best_us,
            in_table,
            default: "online 1024 8 1 1 0".into(),
            best: "cluster 128 8 1 16 0".into(),
        }
    }

    #[test]
    fn a_default_beyond_the_threshold_fails_and_a_tabled_key_is_skipped() {
        assert_eq!(verdict(&row(10.4, 10.0, false), 0.05), "ok");
        assert_eq!(
            verdict(&row(10.6, 10.0, false), 0.05),
            "FAIL: the default is slower"
        );
        assert_eq!(
            verdict(&row(20.0, 10.0, true), 0.05),
            "skip: the table serves this key"
        );
        assert!(row_line(&row(10.6, 10.0, false), 0.05)
            .ends_with("6.0%  FAIL: the default is slower  [online 1024 8 1 1 0] -> [cluster 128 8 1 16 0]"));
        assert_eq!(report(&[row(10.4, 10.0, false)], &[], 0.05), ExitCode::SUCCESS);
        assert_eq!(report(&[row(10.6, 10.0, false)], &[], 0.05), ExitCode::FAILURE);
        assert_eq!(
            report(&[row(10.0, 10.0, false)], &["x".into()], 0.05),
            ExitCode::FAILURE
        );
    }
}
