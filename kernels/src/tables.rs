//! Table maintenance shared by the CLI and tests: what is baked, validating files on
//! disk, and the offline regression guard.

use std::path::{Path, PathBuf};

use tuned::{origin_of_path, table_files, TableFile, Target};

/// One baked table, as `kernels tables list` shows it.
#[derive(Clone, Debug)]
pub struct BakedInfo {
    pub kernel: &'static str,
    pub target: Target,
    pub entries: usize,
    pub device: &'static str,
    pub tuned_at: &'static str,
    pub fingerprint: &'static str,
    pub stale: bool,
}

/// Every table baked into this binary.
pub fn baked() -> Vec<BakedInfo> {
    let mut out = Vec::new();
    for k in crate::registry() {
        for t in Target::ALL {
            if let Some(b) = k.baked_table(t) {
                out.push(BakedInfo {
                    kernel: b.kernel,
                    target: t,
                    entries: b.len,
                    device: b.device,
                    tuned_at: b.tuned_at,
                    fingerprint: b.source_fingerprint,
                    stale: b.is_stale(),
                });
            }
        }
    }
    out
}

/// The folder of committed tables: `$TUNED_TABLES_DIR`, else `tuned/tables` of the
/// source tree this binary was built from.
pub fn default_dir() -> PathBuf {
    std::env::var_os("TUNED_TABLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned/tables"))
}

/// One problem found in a table file.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub file: String,
    pub entry: Option<usize>,
    pub reason: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.entry {
            Some(i) => write!(f, "{}: entry {i}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// The table files named by `paths` (files, or folders searched for `<kernel>/<target>.json`).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Finding> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let found = table_files(p).map_err(|e| Finding {
                file: p.display().to_string(),
                entry: None,
                reason: format!("cannot list: {e}"),
            })?;
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

/// Validates one file against its kernel's schema and search space. With `offline_check`,
/// also the regression guard: a fingerprint that is not the current kernel source's,
/// or an entry slower than its analytic default, is a finding.
pub fn check_file(path: &Path, offline_check: bool) -> Vec<Finding> {
    let file = path.display().to_string();
    let finding = |entry, reason: String| Finding {
        file: file.clone(),
        entry,
        reason,
    };
    let (kernel_name, _target) = match origin_of_path(path) {
        Ok(o) => o,
        Err(e) => return vec![finding(None, e)],
    };
    let Some(kernel) = crate::kernel(&kernel_name) else {
        return vec![finding(
            None,
            format!("no kernel named `{kernel_name}` (the folder names the kernel)"),
        )];
    };
    let table = match TableFile::read(path, Some(kernel.schema())) {
        Ok(t) => t,
        Err(e) => return vec![finding(e.entry, e.reason)],
    };
    let mut out = Vec::new();
    for (i, e) in table.entries.iter().enumerate() {
        if let Err(r) = kernel.check_config(&e.config) {
            out.push(finding(Some(i), format!("config outside the search space: {r}")));
        }
        if offline_check && e.us > e.default_us {
            out.push(finding(
                Some(i),
                format!(
                    "key `{}` batch {}: tuned config ({:.3} us) is slower than the analytic default ({:.3} us)",
                    e.key, e.batch, e.us, e.default_us
                ),
            ));
        }
    }
    if offline_check && table.header.source_fingerprint != kernel.source_fingerprint() {
        out.push(finding(
            None,
            format!(
                "stale: tuned against kernel source {}, the source is now {}",
                table.header.source_fingerprint,
                kernel.source_fingerprint()
            ),
        ));
    }
    out
}

/// What [`prune`] did to one file.
#[derive(Clone, Debug, PartialEq)]
pub struct Pruned {
    pub kept: usize,
    /// (static key, batch, us, default_us) of each dropped entry.
    pub dropped: Vec<(String, u64, f64, f64)>,
}

/// Drops every entry whose tuned time does not beat its analytic default's by more
/// than `margin` (a fraction: 0.02 is 2%), and rewrites the file atomically. Such an
/// entry buys nothing over the default, and a kept entry is a promise that the table
/// is faster.
pub fn prune(path: &Path, margin: f64) -> Result<Pruned, Finding> {
    let file = path.display().to_string();
    let finding = |entry, reason: String| Finding {
        file: file.clone(),
        entry,
        reason,
    };
    let (kernel_name, _) = origin_of_path(path).map_err(|e| finding(None, e))?;
    let kernel = crate::kernel(&kernel_name)
        .ok_or_else(|| finding(None, format!("no kernel named `{kernel_name}`")))?;
    let mut table = TableFile::read(path, Some(kernel.schema())).map_err(|e| finding(e.entry, e.reason))?;
    let (keep, drop): (Vec<_>, Vec<_>) = table
        .entries
        .into_iter()
        .partition(|e| e.us < e.default_us * (1.0 - margin));
    table.entries = keep;
    let pruned = Pruned {
        kept: table.entries.len(),
        dropped: drop
            .iter()
            .map(|e| (e.key.to_string(), e.batch, e.us, e.default_us))
            .collect(),
    };
    table
        .write(path)
        .map_err(|e| finding(None, format!("cannot write: {e}")))?;
    Ok(pruned)
}
