//! Every compiled variant a lookup can return for a target: each committed table
//! entry, and the analytic default over each shape set (`tuned/shapes`). CI compiles
//! the lists on a machine with no GPU, NVIDIA targets with NVRTC
//! (`scripts/nvrtc_check.py`) and AMD ones with clang (`scripts/hip_check.py`), so a
//! table entry or default that does not compile fails before it ships.

use std::collections::BTreeSet;
use std::path::Path;

use kernels_core::{parse_shapes, DeviceInfo, Tunable, Variant};
use serde_json::{json, Value as Json};
use tuned::Target;

/// One variant to compile: where its source comes from and its defines.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct VariantJob {
    pub name: String,
    /// Source files, repository-relative, concatenated in order.
    pub sources: Vec<&'static str>,
    pub entry: String,
    pub defines: Vec<(String, String)>,
    pub arch: String,
}

impl VariantJob {
    /// The object `scripts/nvrtc_check.py` reads.
    pub fn to_json(&self) -> Json {
        let defines: serde_json::Map<String, Json> = self
            .defines
            .iter()
            .map(|(k, v)| (k.clone(), Json::from(v.clone())))
            .collect();
        json!({
            "name": self.name,
            "sources": self.sources,
            "defines": defines,
            "archs": [self.arch],
            "kernels": [self.entry],
        })
    }
}

const PRELUDE: &str = "kernels-core/cuda/prelude.cuh";

fn jobs_of<K: Tunable>(
    target: Target,
    info: &DeviceInfo,
    source: &'static str,
    shapes_dir: &Path,
    shape_file: &str,
    out: &mut BTreeSet<VariantJob>,
) -> Result<(), String> {
    let kernel = K::SCHEMA.kernel;
    let mut push = |origin: String, key: &K::Key, config: &K::Config| {
        let v: Variant = K::variant(info, key, config);
        out.insert(VariantJob {
            name: format!("{kernel} {origin} {config:?}"),
            sources: vec![PRELUDE, source],
            entry: v.entry().to_string(),
            defines: v.defines().to_vec(),
            arch: target.compile_arch().to_string(),
        });
    };
    if let Some(table) = K::baked_table(target) {
        for (canonical, entries) in table.entries.entries() {
            let key = tuned::StaticKey::parse(K::SCHEMA, canonical)
                .and_then(|k| K::key_from_values(k.values()))
                .map_err(|e| format!("{kernel} table key `{canonical}`: {e}"))?;
            for e in entries.iter() {
                // A default marker serves the analytic default (computed for the requested
                // batch; the shape sets below cover those), here for the marker's batch.
                let Some(values) = e.config.tuned() else {
                    let config = K::analytic_default(target, &key, e.batch);
                    push(
                        format!("table-default [{canonical}] batch {}", e.batch),
                        &key,
                        &config,
                    );
                    continue;
                };
                let config = K::config_from_baked(values).ok_or_else(|| {
                    format!(
                        "{kernel} table key `{canonical}` batch {}: config does not decode",
                        e.batch
                    )
                })?;
                push(format!("table [{canonical}] batch {}", e.batch), &key, &config);
            }
        }
    }
    let path = shapes_dir.join(shape_file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let shapes = parse_shapes(K::SCHEMA, &text, &path.display().to_string()).map_err(|e| e.to_string())?;
    for (static_key, batch) in shapes {
        let key = K::key_from_values(static_key.values()).map_err(|e| format!("{}: {e}", path.display()))?;
        let config = K::analytic_default(target, &key, batch);
        push(format!("default [{static_key}] batch {batch}"), &key, &config);
    }
    Ok(())
}

/// The variants of every tunable kernel reachable on `target`, from its baked tables
/// and the analytic defaults over the shape sets in `shapes_dir`. Deduplicated by
/// (entry, defines, arch). AMD targets get the same kinds of defines; they compile
/// with clang for the gfx arch (`scripts/hip_check.py`).
pub fn reachable(target: Target, shapes_dir: &Path) -> Result<Vec<VariantJob>, String> {
    // These kernels' variants depend on key and config only; `PlannedKernel::variant` takes a
    // device description, so a nominal one stands in (with AMD's 64-lane wavefront).
    let info = match target.vendor() {
        tuned::Vendor::Nvidia => DeviceInfo::nominal(target),
        tuned::Vendor::Amd => DeviceInfo::nominal(Target::Sm90).map(|d| DeviceInfo {
            name: format!("AMD {} (nominal)", target.name()),
            warp_size: 64,
            ..d
        }),
    }
    .ok_or_else(|| format!("--target: no nominal device for {target}"))?;
    let mut jobs = BTreeSet::new();
    use kernels_rmsnorm::{FusedAddRmsNorm, RmsNorm};
    use kernels_softmax::{LogSoftmax, Softmax};
    let (softmax, rmsnorm) = (
        "kernels-softmax/cuda/softmax.cu",
        "kernels-rmsnorm/cuda/rmsnorm.cu",
    );
    jobs_of::<Softmax>(target, &info, softmax, shapes_dir, "softmax.json", &mut jobs)?;
    jobs_of::<LogSoftmax>(target, &info, softmax, shapes_dir, "softmax.json", &mut jobs)?;
    jobs_of::<RmsNorm>(target, &info, rmsnorm, shapes_dir, "rmsnorm.json", &mut jobs)?;
    jobs_of::<FusedAddRmsNorm>(
        target,
        &info,
        rmsnorm,
        shapes_dir,
        "fused_add_rmsnorm.json",
        &mut jobs,
    )?;
    // One job per distinct compile (the name of the first origin is kept).
    let mut seen = BTreeSet::new();
    Ok(jobs
        .into_iter()
        .filter(|j| seen.insert((j.entry.clone(), j.defines.clone(), j.arch.clone())))
        .collect())
}

/// The shape sets of the source tree this binary was built from.
pub fn default_shapes_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned/shapes")
}
