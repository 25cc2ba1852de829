//! Every compiled variant a lookup can return for a target: each committed table
//! entry, and the analytic default over each shape set (`tuned/shapes`); with
//! [`Reach::Space`] also every config of the search space on a sample of each shape
//! set (what the tuner may pick next). CI compiles the lists on a machine with no GPU,
//! NVIDIA targets with NVRTC (`scripts/nvrtc_check.py`) and AMD ones with clang
//! (`scripts/hip_check.py`), so a table entry, default or searched config that does
//! not compile fails before it ships.

use std::collections::BTreeSet;
use std::path::Path;

use kernels_core::{tune::parse_shapes, DeviceInfo, Tunable, Variant};
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

const PRELUDE: &str = "kernels-prelude/cuda/prelude.cuh";

/// One entry of a baked table as it serves: canonical key, batch, decoded key, the
/// config it launches (a default marker: the analytic default for its batch) and
/// whether it is a marker.
struct Served<K: Tunable> {
    canonical: String,
    batch: u64,
    key: K::Key,
    config: K::Config,
    marker: bool,
}

/// Every entry of `K`'s baked table for `target` (none without a table).
fn served<K: Tunable>(target: Target) -> Result<Vec<Served<K>>, String> {
    let kernel = K::SCHEMA.kernel;
    let Some(table) = K::baked_table(target) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (canonical, entries) in table.entries.entries() {
        let key = tuned::StaticKey::parse(K::SCHEMA, canonical)
            .and_then(|k| K::key_from_values(k.values()))
            .map_err(|e| format!("{kernel} table key `{canonical}`: {e}"))?;
        for e in entries.iter() {
            // A default marker serves the analytic default (computed for the requested
            // batch), here for the marker's batch.
            let (config, marker) = match e.config.tuned() {
                None => (K::analytic_default(target, &key, e.batch), true),
                Some(values) => {
                    let config = K::config_from_baked(values).ok_or_else(|| {
                        format!(
                            "{kernel} table key `{canonical}` batch {}: config does not decode",
                            e.batch
                        )
                    })?;
                    (config, false)
                }
            };
            out.push(Served {
                canonical: canonical.to_string(),
                batch: e.batch,
                key: key.clone(),
                config,
                marker,
            });
        }
    }
    Ok(out)
}

/// One (static key, batch) a lookup serves on a target and the config it launches:
/// where it comes from (`table`, `table-default` for a default marker, `default` for
/// the analytic default over a shape set) and the key and batch in words.
pub struct ServedCase<K: Tunable> {
    pub origin: String,
    pub key: K::Key,
    pub batch: u64,
    pub config: K::Config,
}

/// Every (static key, batch) `K` serves on `target`: each entry of its baked table, and
/// the analytic default over the shape set `shape_file` in `shapes_dir`.
pub fn served_cases<K: Tunable>(
    target: Target,
    shapes_dir: &Path,
    shape_file: &str,
) -> Result<Vec<ServedCase<K>>, String> {
    let mut out: Vec<ServedCase<K>> = served::<K>(target)?
        .into_iter()
        .map(|s| ServedCase {
            origin: format!(
                "{} [{}] batch {}",
                if s.marker { "table-default" } else { "table" },
                s.canonical,
                s.batch
            ),
            key: s.key,
            batch: s.batch,
            config: s.config,
        })
        .collect();
    let path = shapes_dir.join(shape_file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let shapes = parse_shapes(K::SCHEMA, &text, &path.display().to_string()).map_err(|e| e.to_string())?;
    for (static_key, batch) in shapes {
        let key = K::key_from_values(static_key.values()).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(ServedCase {
            origin: format!("default [{static_key}] batch {batch}"),
            config: K::analytic_default(target, &key, batch),
            key,
            batch,
        });
    }
    Ok(out)
}

fn jobs_of<K: Tunable>(
    target: Target,
    info: &DeviceInfo,
    sources: &[&'static str],
    (shapes_dir, reach): (&Path, Reach),
    shape_file: &str,
    out: &mut BTreeSet<VariantJob>,
) -> Result<(), String> {
    jobs_with::<K>(
        target,
        info,
        sources,
        (shapes_dir, reach),
        shape_file,
        |_, _| Vec::new(),
        out,
    )
}

/// [`jobs_of`], with the variants `extra` adds per served (key, config): launches an
/// op makes around the tuned call (MoE's align step).
fn jobs_with<K: Tunable>(
    target: Target,
    info: &DeviceInfo,
    sources: &[&'static str],
    (shapes_dir, reach): (&Path, Reach),
    shape_file: &str,
    extra: impl Fn(&K::Key, &K::Config) -> Vec<Variant>,
    out: &mut BTreeSet<VariantJob>,
) -> Result<(), String> {
    let kernel = K::SCHEMA.kernel;
    let mut cases = served_cases::<K>(target, shapes_dir, shape_file)?;
    if reach == Reach::Space {
        cases.extend(space_cases::<K>(target, info, shapes_dir, shape_file)?);
    }
    for case in cases {
        // Every launch of the call: a multi-launch family's steps each compile.
        let variants = K::variants(info, &case.key, &case.config);
        for v in variants.into_iter().chain(extra(&case.key, &case.config)) {
            out.insert(job(
                format!("{kernel} {} {:?}", case.origin, case.config),
                sources,
                &v,
                target,
            ));
        }
    }
    Ok(())
}

/// A covering sample of `K`'s search space on a sample of the shape set: its first
/// and last static key (the file's order: smallest and largest problems), each at
/// every batch the file lists for it (spaces differ between decode and prefill, and
/// some configs enter only from some batch on); of each key's spaces, the configs that
/// bring something no config before them had (see [`Covering`]).
fn space_cases<K: Tunable>(
    target: Target,
    info: &DeviceInfo,
    shapes_dir: &Path,
    shape_file: &str,
) -> Result<Vec<ServedCase<K>>, String> {
    let path = shapes_dir.join(shape_file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let shapes = parse_shapes(K::SCHEMA, &text, &path.display().to_string()).map_err(|e| e.to_string())?;
    let (Some((first, _)), Some((last, _))) = (shapes.first(), shapes.last()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for sample in BTreeSet::from([first, last]) {
        let batches: BTreeSet<u64> = shapes
            .iter()
            .filter(|(k, _)| k == sample)
            .map(|(_, b)| *b)
            .collect();
        let key = K::key_from_values(sample.values()).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut covering = Covering::default();
        for batch in batches {
            // What the tuner times: the space less the configs the kernel refuses here.
            for config in K::search_space(info, &key, batch) {
                if K::accepts(target, &key, batch, &config)
                    && covering.brings_news::<K>(&config, &K::variants(info, &key, &config))
                {
                    out.push(ServedCase {
                        origin: format!("space [{sample}] batch {batch}"),
                        key: key.clone(),
                        batch,
                        config,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// What the configs kept so far bring: each parameter's values, and each entry point's
/// define values in their variants, alone and on each value of a `path` parameter. A
/// config is kept when it brings a value none kept before had, so every value of every
/// parameter compiles at least once (every code path a single parameter selects, such as
/// a GEMM or MoE path, an epilogue or a cluster size) and every code path a combination
/// of them selects (a GEMM split through the workspace on each wgmma path), at a few
/// dozen compiles per space instead of hundreds.
#[derive(Default)]
struct Covering {
    seen: BTreeSet<String>,
}

impl Covering {
    fn brings_news<K: Tunable>(&mut self, config: &K::Config, variants: &[Variant]) -> bool {
        let values = K::config_values(config);
        // Where a `path` parameter picks the code path (GEMM, MoE), a define value is news
        // on each path that has not had it (empty where there is none): a GEMM split
        // through the workspace on the unswapped wgmma path compiles a reduction of its
        // own, though its define also comes with the swapped path's splits.
        let path_at = K::SCHEMA.param_names().position(|name| name == "path");
        let path = path_at
            .and_then(|i| values.get(i))
            .map(|v| format!("{v:?}"))
            .unwrap_or_default();
        let path = path.as_str();
        let params = values.iter().enumerate().map(|(i, v)| format!("{i}:{v:?}"));
        let defines = variants.iter().flat_map(|v| {
            v.defines()
                .iter()
                .map(move |(name, value)| format!("{}:{path}:{name}={value}", v.entry()))
        });
        let fresh: Vec<String> = params.chain(defines).filter(|p| !self.seen.contains(p)).collect();
        let news = !fresh.is_empty();
        self.seen.extend(fresh);
        news
    }
}

/// Which variants [`reachable`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// What a lookup serves: table entries and the analytic defaults.
    Served,
    /// And a covering sample of each search space on a sample of its shape set.
    Space,
}

fn job(name: String, sources: &[&'static str], v: &Variant, target: Target) -> VariantJob {
    VariantJob {
        name,
        sources: std::iter::once(PRELUDE).chain(sources.iter().copied()).collect(),
        entry: v.entry().to_string(),
        defines: v.defines().to_vec(),
        arch: target.compile_arch().to_string(),
    }
}

/// The device description variants are derived for on `target` (as `kernels variants`
/// and the variants lock use it): the target's nominal device, AMD's with its 64-lane
/// wavefront.
fn nominal(target: Target) -> Result<DeviceInfo, String> {
    DeviceInfo::nominal(target).ok_or_else(|| format!("--target: no nominal device for {target}"))
}

/// The variants of every tunable kernel reachable on `target`, from its baked tables
/// and the analytic defaults over the shape sets in `shapes_dir` (with
/// [`Reach::Space`], also its search spaces on a sample of them). Deduplicated by
/// (entry, defines, arch). AMD targets get the same kinds of defines; they compile
/// with clang for the gfx arch (`scripts/hip_check.py`).
pub fn reachable(target: Target, shapes_dir: &Path, reach: Reach) -> Result<Vec<VariantJob>, String> {
    let shapes = (shapes_dir, reach);
    // `PlannedKernel::variant` takes a device description (the staged softmax's prefetch
    // reads its SM count and shared memory); the target's nominal device stands in.
    let info = nominal(target)?;
    let mut jobs = BTreeSet::new();
    use kernels_rmsnorm::{FusedAddRmsNorm, RmsNorm};
    use kernels_softmax::{LogSoftmax, Softmax};
    let (softmax, rmsnorm) = (
        "kernels-softmax/cuda/softmax.cu",
        "kernels-rmsnorm/cuda/rmsnorm.cu",
    );
    jobs_of::<Softmax>(target, &info, &[softmax], shapes, "softmax.json", &mut jobs)?;
    jobs_of::<LogSoftmax>(target, &info, &[softmax], shapes, "softmax.json", &mut jobs)?;
    jobs_of::<RmsNorm>(target, &info, &[rmsnorm], shapes, "rmsnorm.json", &mut jobs)?;
    jobs_of::<FusedAddRmsNorm>(
        target,
        &info,
        &[rmsnorm],
        shapes,
        "fused_add_rmsnorm.json",
        &mut jobs,
    )?;
    // GEMM's device code is NVIDIA-only (mma.sync PTX); AMD targets serve none of it.
    if target.vendor() == tuned::Vendor::Nvidia {
        let gemm = [
            "kernels-gemm/cuda/gemm_ptx.cuh",
            "kernels-gemm/cuda/gemm_wgmma.cuh",
            "kernels-gemm/cuda/gemm.cu",
        ];
        jobs_of::<kernels_gemm::Gemm>(target, &info, &gemm, shapes, "gemm.json", &mut jobs)?;
        moe_jobs(target, &info, shapes, &mut jobs)?;
    }
    // One job per distinct compile (the name of the first origin is kept).
    let mut seen = BTreeSet::new();
    Ok(jobs
        .into_iter()
        .filter(|j| seen.insert((j.entry.clone(), j.defines.clone(), j.arch.clone())))
        .collect())
}

/// Fused MoE's variants: each served config's tuned call (both grouped GEMMs and the
/// combine) and the align step launched before it, and the routing kernels for every
/// logits dtype and scoring (they take no config).
fn moe_jobs(
    target: Target,
    info: &DeviceInfo,
    shapes: (&Path, Reach),
    jobs: &mut BTreeSet<VariantJob>,
) -> Result<(), String> {
    use kernels_moe::plan::{routing_variant, step_variant, Scoring, Step};
    // As kernels-moe's build concatenates them: the GEMM's PTX and wgmma wrappers first.
    let moe = [
        "kernels-gemm/cuda/gemm_ptx.cuh",
        "kernels-gemm/cuda/gemm_wgmma.cuh",
        "kernels-moe/cuda/moe.cu",
    ];
    jobs_with::<kernels_moe::Moe>(
        target,
        info,
        &moe,
        shapes,
        "moe.json",
        |key, c| vec![step_variant(key, c, Step::Align)],
        jobs,
    )?;
    let scorings = [
        Scoring::Softmax { renormalize: true },
        Scoring::Grouped {
            n_group: 8,
            topk_group: 4,
            renormalize: true,
            scale: 1.0,
            bias: None,
        },
    ];
    for dtype in [tuned::DType::F32, tuned::DType::Bf16, tuned::DType::F16] {
        for s in &scorings {
            let v = routing_variant(dtype, s);
            jobs.insert(job(
                format!("moe routing {dtype} {}", v.entry()),
                &moe,
                &v,
                target,
            ));
        }
    }
    Ok(())
}

/// The shape sets of the source tree this binary was built from.
pub fn default_shapes_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned/shapes")
}

// ---- the variants lock ------------------------------------------------------------

/// The lock file: `tuned/variants.lock` in the source tree this binary was built from.
pub fn default_lock_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned/variants.lock")
}

/// One committed table's served variants: every entry's (key, batch) and the entry
/// point and defines its config compiles to on the target's nominal device, digested.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableVariants {
    pub kernel: &'static str,
    pub target: Target,
    pub entries: usize,
    /// `fnv1a64:` and 16 hex digits over the sorted entry lines.
    pub digest: String,
}

fn lines_of<K: Tunable>(target: Target, info: &DeviceInfo, lines: &mut Vec<String>) -> Result<usize, String> {
    let served = served::<K>(target)?;
    for s in &served {
        // One line per launch of the call.
        for v in K::variants(info, &s.key, &s.config) {
            let defines: Vec<String> = v.defines().iter().map(|(k, v)| format!("{k}={v}")).collect();
            lines.push(format!(
                "{} {} {} {}",
                s.canonical,
                s.batch,
                v.entry(),
                defines.join(",")
            ));
        }
    }
    Ok(served.len())
}

/// Every baked table's [`TableVariants`], tables in a fixed order (kernel, target).
///
/// The source fingerprint covers a kernel's device code only. The Rust code that turns a
/// config into `-D` defines (the staged softmax's `STAGE_VECS` and `PREFETCH_ROWS`, the
/// analytic default a marker serves) can change what an entry compiles to without
/// staling its table; the lock records what each table served when it was last
/// tuned, so such a change fails the check until the table is retuned and relocked.
pub fn served_variants() -> Result<Vec<TableVariants>, String> {
    use kernels_rmsnorm::{FusedAddRmsNorm, RmsNorm};
    use kernels_softmax::{LogSoftmax, Softmax};
    let mut out = Vec::new();
    for target in Target::ALL {
        let info = nominal(target)?;
        // The softmax table serves softmax and log-softmax.
        let mut lines = Vec::new();
        let n = lines_of::<Softmax>(target, &info, &mut lines)?;
        lines_of::<LogSoftmax>(target, &info, &mut lines)?;
        push_table(&mut out, "softmax", target, n, lines);
        let mut lines = Vec::new();
        let n = lines_of::<RmsNorm>(target, &info, &mut lines)?;
        push_table(&mut out, "rmsnorm", target, n, lines);
        let mut lines = Vec::new();
        let n = lines_of::<FusedAddRmsNorm>(target, &info, &mut lines)?;
        push_table(&mut out, "fused_add_rmsnorm", target, n, lines);
        let mut lines = Vec::new();
        let n = lines_of::<kernels_gemm::Gemm>(target, &info, &mut lines)?;
        push_table(&mut out, "gemm", target, n, lines);
        let mut lines = Vec::new();
        let n = lines_of::<kernels_moe::Moe>(target, &info, &mut lines)?;
        push_table(&mut out, "moe", target, n, lines);
    }
    out.sort_by_key(|t| (t.kernel, t.target.name()));
    Ok(out)
}

fn push_table(
    out: &mut Vec<TableVariants>,
    kernel: &'static str,
    target: Target,
    entries: usize,
    mut lines: Vec<String>,
) {
    if entries == 0 {
        return;
    }
    lines.sort();
    let text = lines.join("\n");
    out.push(TableVariants {
        kernel,
        target,
        entries,
        digest: format!("fnv1a64:{:016x}", tuned::fnv1a64(text.as_bytes())),
    });
}

/// The lock file's text for `tables`.
pub fn lock_text(tables: &[TableVariants]) -> String {
    let mut s = String::from(
        "# The compiled variants each committed table serves, digested: kernel, target, entries,\n\
         # digest. Written by `kernels tables lock` after a table is tuned; `kernels tables lock\n\
         # --check` and the tests fail when the Rust code that derives a config's defines changes\n\
         # what a table serves (retune the keys whose variants differ, then relock).\n",
    );
    for t in tables {
        s.push_str(&format!(
            "{} {} {} {}\n",
            t.kernel,
            t.target.name(),
            t.entries,
            t.digest
        ));
    }
    s
}

/// Compares the lock file's text with what the baked tables serve now; the error names
/// every table that differs and what to do.
pub fn check_lock(recorded: &str, now: &[TableVariants]) -> Result<(), String> {
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    let (was, is) = (rows(recorded), rows(&lock_text(now)));
    if was == is {
        return Ok(());
    }
    let mut diff = Vec::new();
    for l in was.iter().filter(|l| !is.contains(l)) {
        diff.push(format!("locked: {l}"));
    }
    for l in is.iter().filter(|l| !was.contains(l)) {
        diff.push(format!("now:    {l}"));
    }
    Err(format!(
        "the tables serve other variants than tuned/variants.lock records ({}). If a table was \
         retuned on these sources, record it with `kernels tables lock`. Otherwise the Rust code \
         that derives a config's defines changed what a committed entry compiles to: retune the \
         keys whose variants differ (`kernels variants --target T`, before and after), then relock.",
        diff.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_names_every_table_that_serves_other_variants() {
        let now = served_variants().unwrap();
        assert!(!now.is_empty(), "the committed sm90 tables are baked");
        let text = lock_text(&now);
        assert_eq!(check_lock(&text, &now), Ok(()));
        // A recorded digest that differs, and a table the lock does not know.
        let mut changed = now.clone();
        changed[0].digest = "fnv1a64:0000000000000000".into();
        let e = check_lock(&lock_text(&changed), &now).unwrap_err();
        assert!(
            e.contains(&format!("locked: {} {}", now[0].kernel, now[0].target.name())),
            "{e}"
        );
        assert!(e.contains("kernels tables lock"), "{e}");
        let e = check_lock(&lock_text(&now[1..]), &now).unwrap_err();
        assert!(
            e.contains(&format!("now:    {} {}", now[0].kernel, now[0].target.name())),
            "{e}"
        );
    }

    #[test]
    fn the_committed_lock_matches_what_the_tables_serve() {
        let path = default_lock_path();
        let recorded = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(e) = check_lock(&recorded, &served_variants().unwrap()) {
            panic!("{}: {e}", path.display());
        }
    }
}
