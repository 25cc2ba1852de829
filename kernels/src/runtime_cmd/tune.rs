//! `kernels tune`: search a kernel's shapes on this GPU and merge the results into its
//! table.

#[cfg(any(feature = "cuda", feature = "rocm"))]
use std::path::Path;
use std::path::PathBuf;
#[cfg(any(feature = "cuda", feature = "rocm"))]
use std::process::ExitCode;

#[cfg(any(feature = "cuda", feature = "rocm"))]
use tuned::{StaticKey, Target};

#[cfg(not(feature = "rocm"))]
use super::common::no_rocm;
#[cfg(any(feature = "cuda", feature = "rocm"))]
use super::common::read_shapes;
use super::common::{Backend, CmdResult};

/// What `kernels tune` was asked.
pub struct TuneArgs {
    pub kernel: String,
    pub shapes: PathBuf,
    /// `auto` (the device's target) or a target name that must match the device.
    pub target: String,
    /// Tables folder (default: the `tables` folder of the crate that bakes the kernel's tables).
    pub tables: Option<PathBuf>,
    /// Search every shape again instead of resuming from cached results.
    pub retune: bool,
    /// Timed repetitions per candidate (default 25, at least 10).
    pub reps: Option<u32>,
    /// Candidates checked and timed in full after a quick screening pass (0: every
    /// candidate; [`kernels_core::tune::TuneOptions::finalists`]).
    pub finalists: usize,
    /// How candidates are timed; `None`: the backend's best (graph replays on CUDA,
    /// single launches on HIP, which has nothing else and says so when graph is asked).
    pub timing: Option<kernels_core::tune::TimingMethod>,
    pub device: usize,
    /// The GPU runtime that measures: CUDA (NVIDIA, the default) or HIP (AMD).
    pub backend: Backend,
    /// Which shapes of the file to tune (`--only`, `--batch`); empty: all of them.
    pub filter: ShapeFilter,
    /// `--deadline`: no search starts that would end past it
    /// ([`kernels_core::tune::TableJob::deadline`]).
    pub deadline: Option<std::time::Instant>,
    /// `--carry-from`: the kernel's source files before a change, to carry the
    /// searches it left alone ([`kernels_core::tune::carries`]).
    pub carry_from: Option<PathBuf>,
}

/// `kernels tune --only FIELD=VALUE --batch N`: the part of a shape file to tune, to
/// measure a few shapes again (after a host-side change, or to look closer) without
/// the whole file. A shape is kept when, for every key field named, its value is one
/// of the values given for that field, and its batch is one of the batches given (if
/// any). Tuning part of a file merges into the table like the whole file does, so it
/// is refused where the table was tuned against another source or timing: the merge
/// would drop every other entry as stale.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShapeFilter {
    /// (key field, value) pairs, as given (`cols=128256`).
    pub only: Vec<(String, String)>,
    pub batches: Vec<u64>,
}

impl ShapeFilter {
    /// The filter of `--only FIELD=VALUE` arguments and `--batch` values; an `--only`
    /// without `=` is an error naming it.
    pub fn new(only: &[String], batches: &[u64]) -> Result<ShapeFilter, String> {
        let only = only
            .iter()
            .map(|raw| {
                raw.split_once('=')
                    .filter(|(f, v)| !f.is_empty() && !v.is_empty())
                    .map(|(f, v)| (f.to_string(), v.to_string()))
                    .ok_or_else(|| format!("--only: expected FIELD=VALUE, got `{raw}`"))
            })
            .collect::<Result<_, _>>()?;
        Ok(ShapeFilter {
            only,
            batches: batches.to_vec(),
        })
    }

    /// Whether it keeps every shape.
    pub fn is_empty(&self) -> bool {
        self.only.is_empty() && self.batches.is_empty()
    }

    /// The shapes it keeps, in file order. Errors name the argument: a field the
    /// kernel's key lacks, or a filter that keeps nothing.
    pub fn apply(
        &self,
        schema: &tuned::KernelSchema,
        shapes: Vec<(tuned::StaticKey, u64)>,
    ) -> Result<Vec<(tuned::StaticKey, u64)>, String> {
        if self.is_empty() {
            return Ok(shapes);
        }
        let mut fields = Vec::new();
        for (name, _) in &self.only {
            let idx = schema.key_index(name).map_err(|e| format!("--only: {e}"))?;
            fields.push(idx);
        }
        let keeps = |key: &tuned::StaticKey, batch: u64| {
            let by_field = fields.iter().zip(&self.only).all(|(&idx, (name, _))| {
                self.only
                    .iter()
                    .filter(|(n, _)| n == name)
                    .any(|(_, v)| key.values()[idx].to_string() == *v)
            });
            by_field && (self.batches.is_empty() || self.batches.contains(&batch))
        };
        let kept: Vec<_> = shapes.into_iter().filter(|(k, b)| keeps(k, *b)).collect();
        if kept.is_empty() {
            return Err("--only/--batch: no shape of the file matches".into());
        }
        Ok(kept)
    }

    /// Refuses to tune part of a file into the table at `path` when that table was
    /// tuned against another source (`fingerprint`) or timing (`timing`): merging
    /// would drop its other entries. Nothing to check for the whole file or a table
    /// not written yet.
    pub fn check_table(&self, path: &std::path::Path, fingerprint: &str, timing: &str) -> Result<(), String> {
        if self.is_empty() || !path.exists() {
            return Ok(());
        }
        let table = tuned::TableFile::read(path, None).map_err(|e| format!("--only/--batch: {e}"))?;
        let h = &table.header;
        let why = if h.source_fingerprint != fingerprint {
            format!(
                "tuned against source {}, the kernel is now {fingerprint}",
                h.source_fingerprint
            )
        } else if h.timing != timing {
            format!("timed with `{}`, this run with `{timing}`", h.timing)
        } else {
            return Ok(());
        };
        Err(format!(
            "--only/--batch: {} was {why}; tuning part of the shapes would drop every other entry: tune the whole shape file",
            path.display()
        ))
    }
}

/// `kernels tune KERNEL --shapes FILE [--target auto] [--backend cuda|hip]`: tunes on
/// the backend's device 0 (or `--device`) and merges the results into the table of
/// the device's target.
pub fn tune(args: TuneArgs) -> CmdResult {
    match args.backend {
        #[cfg(feature = "cuda")]
        Backend::Cuda => cuda::tune(args),
        #[cfg(not(feature = "cuda"))]
        Backend::Cuda => Err("tune: this binary was built without the `cuda` feature".into()),
        #[cfg(feature = "rocm")]
        Backend::Hip => hip::tune(args),
        #[cfg(not(feature = "rocm"))]
        Backend::Hip => Err(no_rocm()),
    }
}

/// The target to tune for: the device's (`auto`), or the one named, which must be the
/// device's. `device` describes the device for messages. A device without a table
/// target under `auto` is a runtime failure (printed), not a usage error.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn choose_target(
    asked: &str,
    device_target: Option<Target>,
    device: &str,
) -> Result<Result<Target, String>, String> {
    if asked == "auto" {
        return Ok(device_target
            .ok_or_else(|| format!("device {device} has no table target; name one with --target")));
    }
    let t: Target = asked.parse().map_err(|e| format!("--target: {e}"))?;
    if device_target != Some(t) {
        return Err(format!(
            "--target: `{t}` does not match the device {device}; tables must be tuned on their target"
        ));
    }
    Ok(Ok(t))
}

/// Prints what `tune_table` did and returns the exit status (failure when a shape
/// failed).
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn report_table(out: &kernels_core::tune::TableOutcome) -> ExitCode {
    for (key, batch, reason) in &out.failed {
        println!("failed: [{key}] batch {batch}: {reason}");
    }
    for (key, batch) in &out.no_default_time {
        println!(
            "not written: [{key}] batch {batch}: the analytic default did not run, so default_us is unknown"
        );
    }
    if out.written {
        let m = &out.merge;
        for (key, batch) in &m.added {
            println!("added    [{key}] batch {batch}");
        }
        for ((key, batch), old, new) in &m.replaced {
            println!("replaced [{key}] batch {batch}: {old:.3} us -> {new:.3} us");
        }
        for ((key, batch), old, new) in &m.kept {
            println!("kept     [{key}] batch {batch}: {old:.3} us (new run {new:.3} us)");
        }
        for (key, batch) in &m.stale_dropped {
            println!("dropped  [{key}] batch {batch}: measured against another kernel source");
        }
        for (key, batch) in &m.retimed_dropped {
            println!("dropped  [{key}] batch {batch}: timed with another method");
        }
        for (key, batch) in &m.device_dropped {
            println!("dropped  [{key}] batch {batch}: measured on another device");
        }
        println!(
            "wrote {} ({} added, {} replaced, {} kept, {} stale dropped, {} retimed dropped, {} other-device dropped; {} searched, {} from cache, {} carried)",
            out.path.display(),
            m.added.len(),
            m.replaced.len(),
            m.kept.len(),
            m.stale_dropped.len(),
            m.retimed_dropped.len(),
            m.device_dropped.len(),
            out.tuned,
            out.cached,
            out.carried
        );
        println!(
            "next: `kernels tables prune`, then, on a build with the new tables, `kernels tables lock` \
             (tuned/variants.lock records the variants they serve)"
        );
    } else {
        println!("nothing to write to {}", out.path.display());
    }
    for (key, found) in &out.held_back {
        println!(
            "held back [{key}]: {found} batch(es) found, the rest past --deadline; not written until the key is whole"
        );
    }
    if out.past_deadline > 0 {
        println!(
            "{} shape(s) not searched: they would have ended past --deadline; run again to resume",
            out.past_deadline
        );
    }
    if out.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `[done/total]` per shape, and an ETA from the pace of the shapes done so far.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn print_progress(p: &kernels_core::tune::Progress<'_>, started: std::time::Instant) {
    use kernels_core::tune::Progress;
    let eta = |index: usize, total: usize| {
        let done = index + 1;
        let per = started.elapsed().as_secs_f64() / done as f64;
        format!("ETA {:.0} s", per * (total - done) as f64)
    };
    match p {
        Progress::Searching {
            index,
            total,
            key,
            batch,
        } => println!("[{}/{total}] [{key}] batch {batch}: searching", index + 1),
        Progress::Cached {
            index,
            total,
            key,
            batch,
            record,
        }
        | Progress::Carried {
            index,
            total,
            key,
            batch,
            record,
        }
        | Progress::Tuned {
            index,
            total,
            key,
            batch,
            record,
            ..
        } => {
            let from = match p {
                Progress::Tuned { seconds, .. } => {
                    let searched = record.candidates.len();
                    match record.phases.summary() {
                        Some(phases) => format!("tuned in {seconds:.1} s ({searched} candidates: {phases})"),
                        None => format!("tuned in {seconds:.1} s"),
                    }
                }
                Progress::Carried { .. } => "carried (same machine code as under the old source)".into(),
                _ => "cached".into(),
            };
            let cfg: Vec<String> = record.config.iter().map(ToString::to_string).collect();
            let vs = match record.default_us {
                Some(d) => format!("default {d:.3} us, {:.2}x", d / record.us),
                None => "default failed".into(),
            };
            println!(
                "[{}/{total}] [{key}] batch {batch}: {from} [{}] {:.3} us ({vs}); {}",
                index + 1,
                cfg.join(" "),
                record.us,
                eta(*index, *total)
            );
        }
        Progress::Failed {
            index,
            total,
            key,
            batch,
            error,
        } => println!("[{}/{total}] [{key}] batch {batch}: FAILED {error}", index + 1),
    }
}

/// What `kernels tune` needs of an open device, whatever the backend.
#[cfg(any(feature = "cuda", feature = "rocm"))]
struct TuneDevice<'a> {
    schema: &'static tuned::KernelSchema,
    fingerprint: &'static str,
    target: Target,
    /// Device name, as recorded in the table.
    device: &'a str,
    /// Compiler and version, as recorded in the table.
    compiler: &'a str,
    arch: &'a str,
    /// How candidates are timed (HIP: single launches, whatever was asked).
    timing: kernels_core::tune::TimingMethod,
    /// The backend and timing, for the banner (`graph timing`, `HIP, single-launch timing`).
    timing_label: &'a str,
    cache: &'a kernels_core::DiskCache,
}

/// The backend-neutral rest of `kernels tune` once a device is open: the options, the
/// table job, the banner, [`kernels_core::tune::tune_table`] over `shapes` (each shape
/// searched by `search`, results cached under `key_for`) and the report.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn tune_on(
    args: &TuneArgs,
    dev: &TuneDevice<'_>,
    shapes: &[(StaticKey, u64)],
    key_for: &dyn Fn(&StaticKey, u64) -> kernels_core::cache::CacheKey,
    carry: &dyn Fn(&Previous) -> Result<Option<Carried>, String>,
    search: &mut dyn FnMut(
        &StaticKey,
        u64,
        &kernels_core::tune::TuneOptions,
    ) -> kernels_core::Result<kernels_core::tune::TuneRecord>,
) -> CmdResult {
    let mut opts = kernels_core::tune::TuneOptions::default();
    if let Some(r) = args.reps {
        opts.timing.reps = r;
    }
    opts.finalists = args.finalists;
    opts.timing.method = dev.timing;
    let tables = match args
        .tables
        .clone()
        .or_else(|| super::common::tables_dir(dev.schema.kernel))
    {
        Some(t) => t,
        None => {
            return Err(format!(
                "--tables: no crate bakes `{}`'s tables; name a folder",
                dev.schema.kernel
            ))
        }
    };
    let job = kernels_core::tune::TableJob {
        schema: dev.schema,
        target: dev.target,
        source_fingerprint: dev.fingerprint,
        device: dev.device,
        compiler: dev.compiler,
        tables_dir: &tables,
        retune: args.retune,
        timing: dev.timing,
        deadline: args.deadline,
        carried: None,
    };
    args.filter
        .check_table(&job.table_path(), dev.fingerprint, &dev.timing.to_string())?;
    let previous = previous_configs(&job.table_path(), dev.schema);
    let carried = if args.retune { None } else { carry(&previous)? };
    let job = kernels_core::tune::TableJob {
        carried: carried.as_ref(),
        ..job
    };
    println!(
        "tuning {} on {} ({}, {}, {}) for {} shape(s); results cached in {}",
        dev.schema.kernel,
        dev.device,
        dev.target,
        dev.arch,
        dev.timing_label,
        shapes.len(),
        dev.cache
            .root()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(cache disabled: not resumable)".into())
    );
    let started = std::time::Instant::now();
    let result = kernels_core::tune::tune_table(
        &job,
        shapes,
        dev.cache,
        key_for,
        &mut |key, batch| {
            let mut opts = opts.clone();
            opts.prefer = previous.get(&(key.clone(), batch)).cloned();
            search(key, batch, &opts)
        },
        &mut |p| print_progress(&p, started),
    );
    match result {
        Ok(out) => Ok(report_table(&out)),
        Err(e) => {
            eprintln!("kernels: tune: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The tuned configs of a table, by (key, batch).
#[cfg(any(feature = "cuda", feature = "rocm"))]
type Previous = std::collections::HashMap<(StaticKey, u64), Vec<tuned::Value>>;

/// Records of searches under an earlier source, by the (key, batch) they stand for.
#[cfg(any(feature = "cuda", feature = "rocm"))]
type Carried = std::collections::HashMap<(StaticKey, u64), kernels_core::tune::TuneRecord>;

/// `--carry-from DIR`: the kernel's source as DIR holds it, read before any device is
/// opened (an error names `--carry-from`); `None` without it.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn old_source(
    dir: Option<&Path>,
    current: &kernels_core::KernelSource,
) -> Result<Option<kernels_core::tune::OldSource>, String> {
    dir.map(|d| {
        kernels_core::tune::OldSource::read(current, d).map_err(|e| match e {
            kernels_core::Error::InvalidArgument { name, reason } => format!("--{name}: {reason}"),
            e => e.to_string(),
        })
    })
    .transpose()
}

/// The tuning cache key `kernels tune` on CUDA gives the search of `k` for `key` at
/// `batch` under the source of `fingerprint`, timed with `method` (results of one timing
/// method never resume a run of the other).
#[cfg(feature = "cuda")]
fn offline_key<B: kernels_core::Backend>(
    rt: &kernels_core::Runtime<B>,
    k: &dyn kernels_core::tune::DynTunable<B>,
    method: kernels_core::tune::TimingMethod,
    fingerprint: &str,
    key: &StaticKey,
    batch: u64,
) -> kernels_core::cache::CacheKey {
    let candidates = k.candidates(rt.info(), key, batch);
    rt.offline_tuning_key(
        k.schema().kernel,
        fingerprint,
        key.as_str(),
        batch,
        method,
        &candidates,
    )
}

/// `--carry-from DIR` (`old`, read from `dir`): for each shape not yet searched under
/// the current source, a record of the tuning cache for its search under the old one
/// (`old_key_for(old fingerprint, key, batch)` but for the candidate list: the same
/// kernel, device, compiler, timing, key and batch), kept where it stands for the
/// current search ([`kernels_core::tune::carries`]: it timed every candidate of the
/// current search, chose one of them, and each compiles to the same bytes from both
/// sources with this runtime's compiler, for its arch). `None` without `--carry-from`,
/// or where DIR holds the current source. Prints what it found.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn carry_records<B: kernels_core::Backend>(
    old: Option<(&kernels_core::tune::OldSource, &Path)>,
    rt: &kernels_core::Runtime<B>,
    k: &dyn kernels_core::tune::DynTunable<B>,
    shapes: &[(StaticKey, u64)],
    previous: &Previous,
    old_key_for: &dyn Fn(&str, &StaticKey, u64) -> kernels_core::cache::CacheKey,
) -> Result<Option<Carried>, String> {
    use kernels_core::cache::{search_text, Lookup, Section};
    use kernels_core::tune::{carries, SameCode, TuneRecord};
    let Some((old, dir)) = old else {
        return Ok(None);
    };
    if old.is_current(k.source()) {
        println!(
            "carry: {} holds the current source ({}); nothing to carry",
            dir.display(),
            k.source_fingerprint()
        );
        return Ok(None);
    }
    // Every record in the cache, by the search it names.
    let (entries, _corrupt) = rt.cache().entries(Section::Tuning).map_err(|e| e.to_string())?;
    let mut by_search: std::collections::HashMap<String, Vec<TuneRecord>> = Default::default();
    for (text, entry) in entries {
        if let Some(r) = std::str::from_utf8(&entry.payload)
            .ok()
            .and_then(|t| TuneRecord::from_json(t).ok())
        {
            by_search.entry(search_text(&text)).or_default().push(r);
        }
    }
    let info = rt.info();
    let variants_of = |key: &StaticKey, config: &[tuned::Value]| k.variants_of(info, key, config);
    // (shape, its candidates now, the old records of its search).
    let mut found = Vec::new();
    for (key, batch) in shapes {
        // A search made under the current source already: nothing to carry.
        let current = old_key_for(k.source_fingerprint(), key, *batch);
        if matches!(rt.cache().load(Section::Tuning, &current), Lookup::Hit(_)) {
            continue;
        }
        let Some(records) = by_search.remove(&search_text(
            old_key_for(old.source.fingerprint, key, *batch).text(),
        )) else {
            continue;
        };
        let prefer = previous.get(&(key.clone(), *batch)).map(Vec::as_slice);
        let Ok(candidates) = k.candidate_values(info, key, *batch, prefer) else {
            continue;
        };
        found.push(((key.clone(), *batch), candidates, records));
    }
    let compile = |s: &kernels_core::KernelSource, v: &kernels_core::Variant| {
        B::compile(rt.compiler(), s, v, rt.arch()).map(|image| image.bytes)
    };
    let same = SameCode::new(&old.source, k.source(), &compile);
    let all: Vec<kernels_core::Variant> = found
        .iter()
        .flat_map(|((key, _), candidates, _)| candidates.iter().filter_map(|c| variants_of(key, c).ok()))
        .flatten()
        .collect();
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    same.prepare(&all, threads);
    let searched_before = found.len();
    let carried: Carried = found
        .into_iter()
        .filter_map(|(shape, candidates, records)| {
            let variants = |c: &[tuned::Value]| variants_of(&shape.0, c);
            let r = records
                .into_iter()
                .find(|r| carries(r, &candidates, &variants, &same))?;
            Some((shape, r))
        })
        .collect();
    let counts = same.counts();
    println!(
        "carry: {searched_before} of {} shape(s) searched under {} ({}) and not yet under this source, {} of them carried ({} variants compared, {} compiled to other bytes)",
        shapes.len(),
        old.source.fingerprint,
        dir.display(),
        carried.len(),
        counts.compared,
        counts.changed,
    );
    if counts.same_instructions > 0 {
        println!(
            "carry: {} of the {} changed variants kept every instruction: only data or symbols differ, as when a constant is declared at namespace scope (an enumerator or a constexpr function adds nothing to the image: docs/tuning.md)",
            counts.same_instructions, counts.changed
        );
    }
    Ok(Some(carried))
}

/// The tuned configs of the table file at `path`, by (key, batch), stale or not: each
/// search tries its shape's entry right after the analytic default
/// ([`kernels_core::tune::TuneOptions::prefer`]), and stays unless a candidate beats it by
/// the noise margin. Empty where there is no file; a file that does not read is
/// left to [`kernels_core::tune::tune_table`], which refuses to overwrite it.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn previous_configs(path: &Path, schema: &'static tuned::KernelSchema) -> Previous {
    if !path.exists() {
        return Default::default();
    }
    tuned::TableFile::read(path, Some(schema))
        .map(|t| {
            t.entries
                .into_iter()
                .filter_map(|e| Some(((e.key, e.batch), e.config.tuned()?.clone())))
                .collect()
        })
        .unwrap_or_default()
}

/// The shapes `kernels tune` searches: those of the file `filter` keeps, at least one.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn tune_shapes(
    schema: &'static tuned::KernelSchema,
    path: &Path,
    filter: &ShapeFilter,
) -> Result<Vec<(StaticKey, u64)>, String> {
    let shapes = read_shapes(schema, path)?;
    if shapes.is_empty() {
        return Err("--shapes: the file lists no shapes".into());
    }
    filter.apply(schema, shapes)
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::process::ExitCode;

    use tuned::StaticKey;

    use super::{choose_target, tune_on, tune_shapes, TuneArgs, TuneDevice};
    use crate::runtime_cmd::common::cuda::{find, open};
    use crate::runtime_cmd::common::CmdResult;

    /// `kernels tune` on CUDA.
    pub fn tune(args: TuneArgs) -> CmdResult {
        let k = find(&args.kernel)?;
        let shapes = tune_shapes(k.schema(), &args.shapes, &args.filter)?;
        let old = super::old_source(args.carry_from.as_deref(), k.source())?;
        let rt = or_fail!("tune", open(args.device));
        let info = rt.device().info();
        let described = format!(
            "`{}` (compute capability {}.{})",
            info.name, info.compute_capability.0, info.compute_capability.1
        );
        let target = or_fail!("tune", choose_target(&args.target, info.target(), &described)?);
        let stream = or_fail!("tune", rt.device().new_stream());
        let compiler = rt.compiler_id().to_string();
        let method = args.timing.unwrap_or(kernels_core::tune::TimingMethod::Graph);
        let timing = format!("{method} timing");
        let dev = TuneDevice {
            schema: k.schema(),
            fingerprint: k.source_fingerprint(),
            target,
            device: &info.name,
            compiler: &compiler,
            arch: rt.arch(),
            timing: method,
            timing_label: &timing,
            cache: rt.cache(),
        };
        let key_under = |fingerprint: &str, key: &StaticKey, batch: u64| {
            super::offline_key(&rt, k, method, fingerprint, key, batch)
        };
        let key_for = |key: &StaticKey, batch: u64| key_under(k.source_fingerprint(), key, batch);
        let carry = |previous: &super::Previous| {
            let old = old.as_ref().zip(args.carry_from.as_deref());
            super::carry_records(old, &rt, k, &shapes, previous, &key_under)
        };
        tune_on(&args, &dev, &shapes, &key_for, &carry, &mut |key, batch, opts| {
            k.search(&rt, &stream, key, batch, opts)
        })
    }
}

#[cfg(feature = "rocm")]
mod hip {
    use std::process::ExitCode;

    use kernels_core::{cache::AlignClass, HipDevice, HipRuntime};
    use tuned::StaticKey;

    use super::{choose_target, tune_on, tune_shapes, TuneArgs, TuneDevice};
    use crate::runtime_cmd::common::hip::find;
    use crate::runtime_cmd::common::CmdResult;

    /// `kernels tune --backend hip`: the CUDA command's steps on an AMD GPU, writing
    /// the table of the device's gfx target. Nothing is written when no device opens.
    pub fn tune(args: TuneArgs) -> CmdResult {
        let k = find(&args.kernel)?;
        let shapes = tune_shapes(k.schema(), &args.shapes, &args.filter)?;
        let old = super::old_source(args.carry_from.as_deref(), k.source())?;
        let opened = HipDevice::open(args.device).and_then(HipRuntime::new);
        let rt = or_fail!("tune", opened);
        if args.timing == Some(kernels_core::tune::TimingMethod::Graph) {
            println!("timing: HIP has single-launch timing only (L2 flushed where it fits); graph timing is CUDA's");
        }
        let info = rt.device().info();
        let described = format!("`{}` ({})", info.name, info.gcn_arch_name);
        let target = or_fail!("tune", choose_target(&args.target, info.target(), &described)?);
        let stream = or_fail!("tune", rt.device().new_stream());
        let compiler = rt.compiler_id().to_string();
        let dev = TuneDevice {
            schema: k.schema(),
            fingerprint: k.source_fingerprint(),
            target,
            device: &info.name,
            compiler: &compiler,
            arch: rt.arch(),
            timing: kernels_core::tune::TimingMethod::Single,
            timing_label: "HIP, single-launch timing",
            cache: rt.cache(),
        };
        let key_under = |fingerprint: &str, key: &StaticKey, batch: u64| {
            rt.tuning_key(
                k.schema().kernel,
                fingerprint,
                key.as_str(),
                batch,
                AlignClass::A16,
                &k.candidates(rt.info(), key, batch),
            )
        };
        let key_for = |key: &StaticKey, batch: u64| key_under(k.source_fingerprint(), key, batch);
        let carry = |previous: &super::Previous| {
            let old = old.as_ref().zip(args.carry_from.as_deref());
            super::carry_records(old, &rt, k, &shapes, previous, &key_under)
        };
        tune_on(&args, &dev, &shapes, &key_for, &carry, &mut |key, batch, opts| {
            k.search(&rt, &stream, key, batch, opts)
        })
    }
}

/// `--carry-from` end to end on the mock backend (whose compiler ignores the source
/// text, so every variant counts as unchanged): records of the old source's searches
/// are found whatever their candidate list, and carried where they timed every current
/// candidate and chose one of them.
#[cfg(all(test, feature = "cuda"))]
mod carry_tests {
    use kernels_core::cache::Section;
    use kernels_core::tune::{CandidateRecord, DynTunable, OldSource, TimingMethod, TuneRecord};
    use kernels_core::{Backend, DiskCache, Mock, Policy, Runtime, RuntimeOptions};
    use tuned::{StaticKey, Value};

    #[test]
    fn records_of_the_old_source_are_carried_where_they_cover_the_search() {
        let dir = std::env::temp_dir().join(format!("kernels-carry-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let options = RuntimeOptions {
            policy: Policy::Serve,
            cache: DiskCache::at(dir.join("cache")),
            tune: Default::default(),
            pdl: false,
        };
        let rt = Runtime::<Mock>::with_options(Mock::open(0).unwrap(), options).unwrap();
        let k: &dyn DynTunable<Mock> = &kernels_gemm::ops::GEMM_TUNABLE;
        let source = k.source();
        // The old source: the same files but one line more of code in the last.
        let old_dir = dir.join("old");
        std::fs::create_dir_all(&old_dir).unwrap();
        let texts: Vec<&str> = source.preamble.iter().copied().chain([source.code]).collect();
        for (i, (name, text)) in source.files.iter().zip(&texts).enumerate() {
            let text = if i + 1 == texts.len() {
                format!("{text}\nint an_edit;\n")
            } else {
                text.to_string()
            };
            std::fs::write(old_dir.join(name), text).unwrap();
        }
        let old = OldSource::read(source, &old_dir).unwrap();
        assert!(!old.is_current(source));
        let info = rt.info().clone();
        let key = StaticKey::parse(k.schema(), "dtype=bf16,layout=nt,n=128,k=2048").unwrap();
        let key_under = |fingerprint: &str, key: &StaticKey, batch: u64| {
            super::offline_key(&rt, k, TimingMethod::Graph, fingerprint, key, batch)
        };
        // One record per batch under the old source, stored under another candidate
        // list's digest (its space held one more config).
        let extra = vec![
            Value::str("wgmma_swap"),
            Value::Int(16),
            Value::Int(64),
            Value::Int(64),
            Value::Int(1),
            Value::Int(4),
            Value::Int(7),
            Value::Int(1),
            Value::Int(8),
            Value::Int(8),
            Value::Int(1),
            Value::str("direct"),
        ];
        let store = |batch: u64, timed: Vec<Vec<Value>>, chosen: Vec<Value>| {
            let record = TuneRecord {
                config: chosen,
                us: 5.0,
                default_us: Some(6.0),
                device: info.name.clone(),
                compiler: "mock 1.0".into(),
                tuned_at: "2026-12-01".into(),
                candidates: timed
                    .into_iter()
                    .map(|config| CandidateRecord {
                        config,
                        outcome: Ok(5.0),
                    })
                    .collect(),
                phases: Default::default(),
            };
            let ck = rt.offline_tuning_key(
                k.schema().kernel,
                old.source.fingerprint,
                key.as_str(),
                batch,
                TimingMethod::Graph,
                "fnv1a64:0123456789abcdef",
            );
            rt.cache()
                .store(Section::Tuning, &ck, "tune", record.to_json().as_bytes())
                .unwrap();
        };
        let now = |batch: u64| k.candidate_values(&info, &key, batch, None).unwrap();
        // Batch 1: every current candidate and one more, a current one chosen.
        let mut timed = now(1);
        timed.push(extra.clone());
        store(1, timed, now(1)[1].clone());
        // Batch 4: the pruned config chosen.
        let mut timed = now(4);
        timed.push(extra.clone());
        store(4, timed, extra.clone());
        // Batch 16: one current candidate never timed.
        let timed = now(16)[1..].to_vec();
        store(16, timed, now(16)[1].clone());
        let shapes: Vec<(StaticKey, u64)> = [1, 4, 16, 64].iter().map(|&b| (key.clone(), b)).collect();
        let carry = || {
            let previous = super::Previous::default();
            let old = Some((&old, old_dir.as_path()));
            super::carry_records(old, &rt, k, &shapes, &previous, &key_under)
                .unwrap()
                .unwrap()
        };
        let carried = carry();
        let mut batches: Vec<u64> = carried.keys().map(|(_, b)| *b).collect();
        batches.sort_unstable();
        assert_eq!(batches, [1]);
        assert_eq!(carried[&(key.clone(), 1)].config, now(1)[1]);
        // The current source's own record wins: nothing left to carry.
        let ck = key_under(source.fingerprint, &key, 1);
        let own = carried[&(key.clone(), 1)].to_json();
        rt.cache()
            .store(Section::Tuning, &ck, "tune", own.as_bytes())
            .unwrap();
        let again = carry();
        assert!(again.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::ShapeFilter;
    use tuned::{StaticKey, TableFile};

    fn shapes() -> Vec<(StaticKey, u64)> {
        let schema = &kernels_softmax::schema::SOFTMAX;
        let key = |dtype: &str, cols: &str| {
            StaticKey::from_pairs(schema, [("dtype", dtype), ("cols", cols)]).unwrap()
        };
        let mut out = Vec::new();
        for (dtype, cols) in [
            ("bf16", "4096"),
            ("bf16", "128256"),
            ("f16", "128256"),
            ("bf16", "151936"),
        ] {
            for batch in [1, 64, 1024] {
                out.push((key(dtype, cols), batch));
            }
        }
        out
    }

    fn kept(filter: &ShapeFilter) -> Result<Vec<String>, String> {
        Ok(filter
            .apply(&kernels_softmax::schema::SOFTMAX, shapes())?
            .into_iter()
            .map(|(k, b)| format!("{k} {b}"))
            .collect())
    }

    #[test]
    fn filter_values_of_a_field_are_alternatives_and_fields_and_batches_all_apply() {
        let f = |only: &[&str], batches: &[u64]| {
            let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
            ShapeFilter::new(&only, batches).unwrap()
        };
        assert_eq!(kept(&f(&[], &[])).unwrap().len(), 12, "no filter keeps all");
        assert_eq!(
            kept(&f(&["cols=128256", "cols=151936"], &[1024])).unwrap(),
            [
                "dtype=bf16,cols=128256 1024",
                "dtype=f16,cols=128256 1024",
                "dtype=bf16,cols=151936 1024"
            ]
        );
        assert_eq!(
            kept(&f(&["cols=128256", "dtype=f16"], &[])).unwrap(),
            [
                "dtype=f16,cols=128256 1",
                "dtype=f16,cols=128256 64",
                "dtype=f16,cols=128256 1024"
            ]
        );
        let e = kept(&f(&["cols=4097"], &[])).unwrap_err();
        assert!(e.contains("--only/--batch") && e.contains("no shape"), "{e}");
        let e = kept(&f(&["rows=4"], &[])).unwrap_err();
        assert!(
            e.contains("--only") && e.contains("`rows`") && e.contains("dtype, cols"),
            "{e}"
        );
        for bad in ["cols", "=4096", "cols="] {
            let e = ShapeFilter::new(&[bad.to_string()], &[]).unwrap_err();
            assert!(e.contains("--only") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn part_of_a_file_is_refused_over_a_table_of_another_source_or_timing() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../kernels-softmax/tables/softmax/sm90.json");
        let header = TableFile::read(&path, None).unwrap().header;
        let (fp, timing) = (header.source_fingerprint.as_str(), header.timing.as_str());
        let part = ShapeFilter::new(&["cols=128256".to_string()], &[]).unwrap();
        part.check_table(&path, fp, timing).unwrap();
        let e = part
            .check_table(&path, "fnv1a64:0000000000000000", timing)
            .unwrap_err();
        assert!(
            e.contains("tuned against source") && e.contains("whole shape file"),
            "{e}"
        );
        let other = if timing == "graph" { "single" } else { "graph" };
        let e = part.check_table(&path, fp, other).unwrap_err();
        assert!(e.contains("timed with"), "{e}");
        // The whole file, or a table not written yet: nothing to refuse.
        ShapeFilter::default()
            .check_table(&path, "fnv1a64:0000000000000000", other)
            .unwrap();
        part.check_table(&path.with_file_name("sm_none.json"), "fnv1a64:0", other)
            .unwrap();
    }

    #[cfg(any(feature = "cuda", feature = "rocm"))]
    #[test]
    fn a_retune_prefers_each_shapes_current_entry_and_markers_prefer_nothing() {
        // The fixture table (tuned entries and a marker): every tuned entry is offered
        // back, by key and batch, exactly as stored; markers (the default serves) are not.
        let schema = &kernels_rmsnorm::schema::RMSNORM;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/tables/rmsnorm/sm90.json");
        let table = TableFile::read(&path, Some(schema)).unwrap();
        let prefer = super::previous_configs(&path, schema);
        let tuned: Vec<_> = table
            .entries
            .iter()
            .filter(|e| e.config.tuned().is_some())
            .collect();
        assert!(
            !tuned.is_empty() && tuned.len() < table.entries.len(),
            "tuned entries and markers"
        );
        assert_eq!(prefer.len(), tuned.len());
        for e in &table.entries {
            assert_eq!(
                prefer.get(&(e.key.clone(), e.batch)),
                e.config.tuned(),
                "{} {}",
                e.key,
                e.batch
            );
        }
        // No file, or one that does not read: no preference (tune_table reports the
        // unreadable file and refuses to overwrite it).
        let dir = std::env::temp_dir().join(format!("kernels-prefer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(super::previous_configs(&dir.join("none.json"), schema).is_empty());
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{ not a table").unwrap();
        assert!(super::previous_configs(&bad, schema).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
