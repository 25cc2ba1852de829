//! `kernels`: resolve, plan and maintain tuned kernel configurations.

use std::path::PathBuf;
use std::process::ExitCode;

mod catalog;
mod export;
mod plan;
#[cfg(feature = "cuda")]
mod served;
mod tables;
#[cfg(feature = "cuda")]
mod variants;

use clap::{Parser, Subcommand};
use kernels::runtime_cmd;
use tuned::{DType, StaticKey, Target};

#[derive(Parser)]
#[command(
    name = "kernels",
    version,
    about = "GPU kernels with tuned launch configurations baked in"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Resolve one kernel's config exactly as the serving path does (no GPU needed).
    Lookup {
        /// softmax, rmsnorm, fused_add_rmsnorm, gemm or moe.
        kernel: String,
        #[arg(long)]
        target: String,
        #[arg(long)]
        dtype: String,
        /// Rows / tokens (the batch part of the problem).
        #[arg(long)]
        batch: String,
        /// The other static-key fields, as NAME=VALUE (cols=4096; layout=nt n=6144 k=4096).
        #[arg(value_name = "KEY=VALUE")]
        key: Vec<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Every kernel call of one transformer layer of a model, with its resolved config.
    Plan {
        /// A model of the catalog (see `kernels plan --list`).
        #[arg(long, required_unless_present = "list")]
        model: Option<String>,
        /// Tokens in the batch.
        #[arg(long, default_value = "1")]
        batch: String,
        #[arg(long, default_value = "sm90")]
        target: String,
        #[arg(long, default_value = "bf16")]
        dtype: String,
        /// Tensor-parallel degree (default: the model's first).
        #[arg(long)]
        tp: Option<String>,
        /// List the catalog's models.
        #[arg(long)]
        list: bool,
        #[arg(long)]
        json: bool,
    },
    /// Every compiled variant a lookup can return on a target (committed table entries and
    /// analytic defaults over tuned/shapes), as JSON for scripts/nvrtc_check.py (NVIDIA)
    /// or scripts/hip_check.py (AMD).
    Variants {
        #[arg(long, default_value = "sm90")]
        target: String,
        /// Shape sets folder (default: the source tree's tuned/shapes).
        #[arg(long)]
        shapes: Option<PathBuf>,
        /// Also a covering sample of each search space (every value of every
        /// parameter at least once) on a sample of its shape set (the first and last
        /// key, each at its smallest and largest batch): what a retune may pick, so a
        /// code path that does not compile fails before it is searched.
        #[arg(long)]
        space: bool,
    },
    /// Inspect and check tuned tables.
    Tables {
        #[command(subcommand)]
        command: TablesCommand,
    },
    /// Tune a kernel on this GPU over a shape file and merge the results into its table
    /// (resumable: finished shapes are cached as they complete).
    ///
    /// Each search tries the analytic default first and the table's current entry for the
    /// shape next (stale or not); a candidate must beat the incumbent by the noise margin,
    /// so the entry stays unless this run measures something clearly faster. Point
    /// --tables at a folder without the table to search without that preference.
    Tune {
        /// A kernel with a Tunable implementation.
        kernel: String,
        /// JSON array of {key fields..., "batch": N or [N, ...]}.
        #[arg(long)]
        shapes: PathBuf,
        /// `auto` (the device's) or the device's target name.
        #[arg(long, default_value = "auto")]
        target: String,
        /// Tables folder (default: the tables folder of the crate that bakes each kernel's tables).
        #[arg(long)]
        tables: Option<PathBuf>,
        /// Search every shape again instead of resuming from cached results.
        #[arg(long)]
        retune: bool,
        /// Timed repetitions per candidate (at least 10).
        #[arg(long)]
        reps: Option<u32>,
        /// Screen large spaces: every candidate but the default and the table's entry
        /// gets a quick unchecked timing, and only the fastest are checked and timed in
        /// full, until N have passed the check (0: every candidate checked and timed in
        /// full). For spaces of hundreds of configs on large problems (GEMM, MoE).
        #[arg(long, default_value = "0", value_name = "N")]
        finalists: usize,
        /// `graph`: back-to-back launches replayed from a CUDA graph over rotating
        /// copies, per launch (as engines run them and the GPU bench measures);
        /// `single`: one launch after an L2 flush; `auto`: the backend's best, graph
        /// on CUDA, single on HIP (which has no graph timing).
        #[arg(long, default_value = "auto")]
        timing: String,
        #[arg(long, default_value = "0")]
        device: usize,
        /// `cuda` (NVIDIA) or `hip` (AMD; needs a binary built with `--features rocm`).
        #[arg(long, default_value = "cuda")]
        backend: String,
        /// Tune only the shapes whose key field FIELD is VALUE (repeatable; values of one
        /// field are alternatives). Refused where the table was tuned against another
        /// source or timing, since the merge would drop the other entries.
        #[arg(long, value_name = "FIELD=VALUE")]
        only: Vec<String>,
        /// Tune only these batches of the file's shapes (repeatable).
        #[arg(long = "batch", value_name = "N")]
        batches: Vec<u64>,
        /// Start no search that would end later than SECS seconds after the command
        /// started (estimated from the longest search so far), then write the table from
        /// what was found: for runs under a time limit, which would otherwise be killed
        /// before the table is written. A key with batches left unsearched is held back
        /// (not written) until a later run, which resumes from the cache, completes it.
        #[arg(long, value_name = "SECS")]
        deadline: Option<String>,
        /// The kernel's source files as they were before a change (DIR/prelude.cuh,
        /// DIR/gemm.cu, ...: the names its fingerprint covers): a shape with no record
        /// under the current source but one under the old, in the cache, takes that one
        /// where every candidate it timed compiles (here, with this compiler) to the
        /// same machine code from both sources; the others are searched.
        #[arg(long, value_name = "DIR")]
        carry_from: Option<PathBuf>,
    },
    /// Resolve a kernel's shapes under KERNELS_TUNING and compile them in parallel into
    /// the module cache.
    Precompile {
        kernel: String,
        #[arg(long)]
        shapes: PathBuf,
        #[arg(long, default_value = "0")]
        device: usize,
    },
    /// Device, arch, driver and NVRTC versions, policy, cache folder and size.
    Info {
        #[arg(long, default_value = "0")]
        device: usize,
    },
}

#[derive(Subcommand)]
enum TablesCommand {
    /// What is baked into this binary: kernel, target, entries, default markers,
    /// fingerprint fresh or stale.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Validate table files on disk (default: the committed tables).
    Validate { paths: Vec<PathBuf> },
    /// The regression guard. With --offline (no GPU): every entry validates, lies in the
    /// current search space, beats its analytic default (a default marker records the
    /// default's own time), the table's fingerprint is the current kernel source's, and
    /// every batch tuned/shapes lists for a key the table holds has an entry within one
    /// doubling (a partly tuned key would serve its batches' configs far away).
    /// On a GPU, default markers are skipped and counted.
    Check {
        #[arg(long)]
        offline: bool,
        /// On an NVIDIA GPU: instead of timing, run every config the baked tables and the
        /// analytic defaults serve (on its exact static key) and check its output against
        /// the CPU reference.
        #[arg(long, conflicts_with = "offline")]
        served: bool,
        /// With --served: the shape sets whose analytic defaults are checked too
        /// (default: tuned/shapes of the source tree this binary was built from).
        #[arg(long, requires = "served")]
        shapes: Option<PathBuf>,
        /// On an NVIDIA GPU: instead, search every shape of DIR's `<kernel>.json` shape
        /// files (shapes no table holds, e.g. tuned/shapes/defaults) and compare the
        /// analytic default with the best config found; fails beyond
        /// --defaults-threshold.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["offline", "served"])]
        defaults: Option<PathBuf>,
        /// With --defaults: the allowed slowdown of the default against the best found.
        #[arg(long, default_value = "0.05", requires = "defaults")]
        defaults_threshold: String,
        /// With --defaults: screen each search's candidates and time only the N fastest
        /// that pass the output check in full (0: every candidate in full), as `kernels
        /// tune --finalists`.
        #[arg(long, default_value = "0", requires = "defaults")]
        finalists: String,
        /// On a GPU: the allowed slowdown against the default or a quick search.
        #[arg(long, default_value = "0.10")]
        threshold: String,
        /// On a GPU: configs sampled from the search space per entry.
        #[arg(long, default_value = "12")]
        sample: String,
        /// On a GPU: only this kernel's table.
        #[arg(long)]
        kernel: Option<String>,
        /// On a GPU: how to time: `auto` (each table as it was tuned, its header's
        /// `timing`), `graph` or `single` (as for `kernels tune`).
        #[arg(long, default_value = "auto")]
        timing: String,
        /// On a GPU: `cuda` (NVIDIA) or `hip` (AMD; needs a binary built with `--features rocm`).
        #[arg(long, default_value = "cuda")]
        backend: String,
        paths: Vec<PathBuf>,
    },
    /// Move tuning results (the online tuner's, KERNELS_TUNING=online, or `kernels
    /// tune`'s) from the disk cache into the committed tables, merged; results that
    /// cannot serve from a table are listed.
    Promote {
        /// Cache folder (default: KERNELS_CACHE_DIR, else the user's cache folder).
        #[arg(long)]
        cache: Option<PathBuf>,
        /// Tables folder (default: the tables folder of the crate that bakes each kernel's tables).
        #[arg(long)]
        tables: Option<PathBuf>,
        /// Choose each record's winner again from its recorded candidate times by this
        /// build's selection rule (nothing is timed).
        #[arg(long)]
        reselect: bool,
    },
    /// Record in tuned/variants.lock the compiled variants each baked table serves (run
    /// after tuning a table); with --check, fail if they differ from the recorded ones
    /// (the Rust code deriving a config's defines changed what a table serves).
    Lock {
        #[arg(long)]
        check: bool,
        /// The lock file (default: tuned/variants.lock of this source tree).
        #[arg(long)]
        path: Option<PathBuf>,
    },
    /// Write the sm90 fused-MoE table in another engine's layout. `--format sglang`: one
    /// JSON file per (experts, n, device) named as SGLang's fused-MoE config loader looks
    /// it up, keyed by tokens (M), with SGLang's field names (see docs/tuning.md).
    Export {
        #[arg(long)]
        format: String,
        /// Folder to write into (created if missing).
        #[arg(long, default_value = "sglang-moe-configs")]
        out: PathBuf,
        /// The table to export (default: the committed sm90 moe table).
        #[arg(long)]
        table: Option<PathBuf>,
    },
    /// Turn entries that do not beat their analytic default by more than --margin
    /// (default 0.02, the tuner's noise threshold; half of it where the default takes 10 us
    /// or more, as the tuner's rule) into default markers (the batch then
    /// serves the analytic default, not a neighbour's config), rewriting the files
    /// atomically.
    Prune {
        #[arg(long, default_value = "0.02")]
        margin: String,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Replace every default marker with the config the analytic default gives for its
    /// key and batch now, rewriting the files atomically. Run before changing a
    /// heuristic, so the tables keep serving what tuning measured (then `tables lock
    /// --check` still passes and only batches off the tables see the new default).
    Pin {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

/// A bad argument: one line naming it, exit status 2.
struct Usage(String);

/// Runs `edit` on every table file under `paths` (a bad path is a usage error), printing
/// `FAIL <finding>` for each file it fails on; failure when any did.
fn each_table_file(
    paths: &[PathBuf],
    mut edit: impl FnMut(&std::path::Path) -> Result<(), tables::Finding>,
) -> Result<ExitCode, Usage> {
    let files = tables::collect(paths).map_err(|f| Usage(f.to_string()))?;
    let mut failed = false;
    for f in files {
        if let Err(e) = edit(&f) {
            failed = true;
            println!("FAIL {e}");
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Restores the default action of SIGPIPE, which Rust's runtime ignores: a listing piped
/// into `head` then ends the process quietly, as other command-line tools do, instead of
/// panicking on the closed pipe at the next print.
#[cfg(unix)]
fn default_sigpipe() {
    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    const SIGPIPE: i32 = 13;
    const SIG_DFL: usize = 0;
    // SAFETY: `signal` from the C library the binary links, with SIGPIPE and SIG_DFL,
    // before any other thread exists.
    unsafe {
        signal(SIGPIPE, SIG_DFL);
    }
}

#[cfg(not(unix))]
fn default_sigpipe() {}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // clap's message up to its usage block, on one line.
            let msg = e.to_string();
            let head = msg.split("\n\n").next().unwrap_or("bad arguments");
            let line: Vec<&str> = head.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            eprintln!("kernels: {}", line.join(" ").trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(Usage(msg)) => {
            eprintln!("kernels: {msg}");
            ExitCode::from(2)
        }
    }
}

fn arg<T: std::str::FromStr>(name: &str, raw: &str) -> Result<T, Usage>
where
    T::Err: std::fmt::Display,
{
    raw.parse::<T>().map_err(|e| Usage(format!("--{name}: {e}")))
}

fn batch_arg(raw: &str) -> Result<u64, Usage> {
    match raw.parse::<u64>() {
        Ok(b) if b > 0 => Ok(b),
        _ => Err(Usage(format!("--batch: must be a positive integer, got `{raw}`"))),
    }
}

/// The problem `lookup` and `plan` resolve for: `--target`, `--dtype` and `--batch`,
/// parsed in that order, an error naming the first that does not parse.
fn problem_args(target: &str, dtype: &str, batch: &str) -> Result<(Target, DType, u64), Usage> {
    Ok((arg("target", target)?, arg("dtype", dtype)?, batch_arg(batch)?))
}

/// The usage error of a name `arg` does not know: `ARG: unknown WHAT `NAME` (known: ...)`.
fn unknown<S: AsRef<str>>(arg: &str, what: &str, name: &str, known: impl IntoIterator<Item = S>) -> Usage {
    let known: Vec<S> = known.into_iter().collect();
    let known: Vec<&str> = known.iter().map(AsRef::as_ref).collect();
    Usage(format!(
        "{arg}: unknown {what} `{name}` (known: {})",
        known.join(", ")
    ))
}

fn run(cli: Cli) -> Result<ExitCode, Usage> {
    // Where `kernels tune --deadline` counts from.
    let started = std::time::Instant::now();
    match cli.command {
        Command::Lookup {
            kernel,
            target,
            dtype,
            batch,
            key,
            json,
        } => {
            let k = kernels::kernel(&kernel).ok_or_else(|| {
                let names = kernels::registry().map(|k| k.schema().kernel);
                unknown("KERNEL", "kernel", &kernel, names)
            })?;
            let (target, dtype, batch) = problem_args(&target, &dtype, &batch)?;
            let mut pairs = vec![("dtype", dtype.name())];
            for kv in &key {
                let (n, v) = kv
                    .split_once('=')
                    .ok_or_else(|| Usage(format!("KEY=VALUE: `{kv}` is not NAME=VALUE")))?;
                if n == "dtype" {
                    return Err(Usage("KEY=VALUE: give the dtype with --dtype".into()));
                }
                pairs.push((n, v));
            }
            let static_key =
                StaticKey::from_pairs(k.schema(), pairs).map_err(|e| Usage(format!("KEY=VALUE: {e}")))?;
            let r = k
                .resolve(target, &static_key, batch)
                .map_err(|e| Usage(format!("KEY=VALUE: {e}")))?;
            if json {
                println!("{}", r.to_json());
            } else {
                println!(
                    "{} {} [{}] batch {}: {} ({})",
                    r.kernel,
                    r.target,
                    r.static_key,
                    r.batch,
                    r.config_text(),
                    r.source
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan {
            model,
            batch,
            target,
            dtype,
            tp,
            list,
            json,
        } => {
            if list {
                for m in catalog::models() {
                    println!(
                        "{} (hidden {}, vocab {}, tp {:?})",
                        m.name, m.hidden, m.vocab, m.tp
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            let name = model.unwrap_or_default();
            let m = catalog::find(&name).ok_or_else(|| {
                let names = catalog::models().into_iter().map(|m| m.name);
                unknown("--model", "model", &name, names)
            })?;
            let (target, dtype, batch) = problem_args(&target, &dtype, &batch)?;
            let tp = match tp {
                Some(t) => arg::<u32>("tp", &t)?,
                None => m.tp.first().copied().unwrap_or(1),
            };
            let calls = plan::plan(&m, target, dtype, batch, tp).map_err(|e| Usage(e.0))?;
            if json {
                let arr: Vec<_> = calls.iter().map(plan::PlannedCall::to_json).collect();
                println!(
                    "{}",
                    serde_json::json!({"model": m.name, "tp": tp, "batch": batch, "target": target.name(), "calls": arr})
                );
            } else {
                println!(
                    "{} on {target}, {dtype}, tp {tp}, {batch} tokens: one layer's kernel calls",
                    m.name
                );
                println!(
                    "{:<17} {:<18} {:<44} {:<14} config",
                    "step", "kernel", "static key", "source"
                );
                for c in &calls {
                    println!(
                        "{:<17} {:<18} {:<44} {:<14} {}",
                        c.step,
                        c.kernel(),
                        c.key(),
                        c.source(),
                        c.config_text()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Tables { command } => tables_command(command),
        Command::Variants {
            target,
            shapes,
            space,
        } => variants_command(&target, shapes, space),
        Command::Tune {
            kernel,
            shapes,
            target,
            tables,
            retune,
            reps,
            finalists,
            timing,
            device,
            backend,
            only,
            batches,
            deadline,
            carry_from,
        } => runtime_cmd::tune(runtime_cmd::TuneArgs {
            kernel,
            shapes,
            target,
            tables,
            retune,
            reps,
            finalists,
            timing: match timing.as_str() {
                "auto" => None,
                t => Some(arg("timing", t)?),
            },
            device,
            backend: arg("backend", &backend)?,
            filter: runtime_cmd::ShapeFilter::new(&only, &batches).map_err(Usage)?,
            deadline: match deadline {
                None => None,
                Some(d) => {
                    let secs: f64 = arg("deadline", &d)?;
                    if !(secs.is_finite() && secs > 0.0) {
                        return Err(Usage(format!(
                            "--deadline: must be a number of seconds above 0, got {d}"
                        )));
                    }
                    Some(started + std::time::Duration::from_secs_f64(secs))
                }
            },
            carry_from,
        })
        .map_err(Usage),
        Command::Precompile {
            kernel,
            shapes,
            device,
        } => runtime_cmd::precompile(kernel, shapes, device).map_err(Usage),
        Command::Info { device } => runtime_cmd::info(device).map_err(Usage),
    }
}

#[cfg(feature = "cuda")]
fn lock_command(check: bool, path: Option<PathBuf>) -> Result<ExitCode, Usage> {
    use crate::variants::{check_lock, default_lock_path, lock_text, served_variants};
    let path = path.unwrap_or_else(default_lock_path);
    let now = served_variants().map_err(Usage)?;
    if check {
        let recorded =
            std::fs::read_to_string(&path).map_err(|e| Usage(format!("--path: {}: {e}", path.display())))?;
        return Ok(match check_lock(&recorded, &now) {
            Ok(()) => {
                println!(
                    "{}: {} table(s) serve the locked variants",
                    path.display(),
                    now.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("FAIL {}: {e}", path.display());
                ExitCode::FAILURE
            }
        });
    }
    tuned::write_atomic(&path, lock_text(&now).as_bytes())
        .map_err(|e| Usage(format!("--path: {}: {e}", path.display())))?;
    for t in &now {
        println!(
            "{} {} {} entries {}",
            t.kernel,
            t.target.name(),
            t.entries,
            t.digest
        );
    }
    println!("wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "cuda"))]
fn lock_command(_: bool, _: Option<PathBuf>) -> Result<ExitCode, Usage> {
    Err(Usage(
        "tables lock: this binary was built without the `cuda` feature".into(),
    ))
}

#[cfg(feature = "cuda")]
fn variants_command(target: &str, shapes: Option<PathBuf>, space: bool) -> Result<ExitCode, Usage> {
    let target: Target = arg("target", target)?;
    let dir = shapes.unwrap_or_else(variants::default_shapes_dir);
    let reach = if space {
        variants::Reach::Space
    } else {
        variants::Reach::Served
    };
    let jobs = variants::reachable(target, &dir, reach).map_err(Usage)?;
    let list: Vec<_> = jobs.iter().map(|j| j.to_json()).collect();
    println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default());
    eprintln!("{} distinct variants for {target}", jobs.len());
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "cuda"))]
fn variants_command(_: &str, _: Option<PathBuf>, _: bool) -> Result<ExitCode, Usage> {
    Err(Usage(
        "variants: this binary was built without the `cuda` feature".into(),
    ))
}

fn tables_command(cmd: TablesCommand) -> Result<ExitCode, Usage> {
    match cmd {
        TablesCommand::List { json } => {
            let baked = tables::baked();
            if json {
                let arr: Vec<_> = baked
                    .iter()
                    .map(|b| serde_json::json!({"kernel": b.kernel, "target": b.target.name(), "entries": b.entries, "markers": b.markers, "device": b.device, "tuned_at": b.tuned_at, "timing": b.timing, "fingerprint": b.fingerprint, "stale": b.stale}))
                    .collect();
                println!("{}", serde_json::Value::from(arr));
            } else if baked.is_empty() {
                println!("no tables are baked into this binary (every lookup uses the analytic default)");
            } else {
                println!(
                    "{:<18} {:<7} {:>7} {:>7}  {:<14} {:<11} {:<7} fingerprint",
                    "kernel", "target", "entries", "markers", "device", "tuned", "timing"
                );
                for b in &baked {
                    let fresh = if b.stale { "stale" } else { "fresh" };
                    println!(
                        "{:<18} {:<7} {:>7} {:>7}  {:<14} {:<11} {:<7} {} ({fresh})",
                        b.kernel,
                        b.target,
                        b.entries,
                        b.markers,
                        b.device,
                        b.tuned_at,
                        b.timing,
                        b.fingerprint
                    );
                }
                println!("(markers: batches where tuning measured the analytic default best; they serve it)");
            }
            Ok(ExitCode::SUCCESS)
        }
        TablesCommand::Validate { paths } => check(paths, false),
        TablesCommand::Export { format, out, table } => {
            if format != "sglang" {
                return Err(Usage(format!(
                    "--format: `{format}` is not known (known: sglang)"
                )));
            }
            let table = match table {
                Some(t) => t,
                None => runtime_cmd::tables_dir("moe")
                    .map(|d| d.join("moe").join("sm90.json"))
                    .ok_or_else(|| Usage("--table: no crate bakes the moe table".into()))?,
            };
            if !table.exists() {
                return Err(Usage(format!(
                    "--table: {} does not exist (no sm90 moe table is committed yet; tune one with `kernels tune moe`, or pass --table FILE)",
                    table.display()
                )));
            }
            match export::write_sglang(&table, &out) {
                Ok(e) => {
                    for (name, _) in &e.files {
                        println!("wrote {}", out.join(name).display());
                    }
                    for why in &e.skipped {
                        println!("skipped {why}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("export: {e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        TablesCommand::Promote {
            cache,
            tables: dir,
            reselect,
        } => {
            let cache = match cache {
                Some(c) => kernels::core::DiskCache::at(c),
                None => kernels::core::DiskCache::from_env(),
            };
            match tables::promote(&cache, dir.as_deref(), reselect) {
                Ok(p) => {
                    for (path, added, replaced, kept, dropped) in &p.written {
                        println!(
                            "{}: {added} added, {replaced} replaced, {kept} kept, {dropped} dropped \
                             (measured against another source, timing method or device)",
                            path.display()
                        );
                    }
                    for what in &p.markers {
                        println!("default marker {what}: the analytic default was at least as fast");
                    }
                    for (what, why) in &p.skipped {
                        println!("skipped {what}: {why}");
                    }
                    if p.written.is_empty() {
                        println!("nothing to promote");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(f) => {
                    println!("FAIL {f}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        TablesCommand::Lock { check, path } => lock_command(check, path),
        TablesCommand::Pin { paths } => each_table_file(&paths, |f| {
            tables::pin(f).map(|n| println!("{}: pinned {n} default marker(s)", f.display()))
        }),
        TablesCommand::Prune { margin, paths } => {
            let margin: f64 = arg("margin", &margin)?;
            if !(0.0..1.0).contains(&margin) {
                return Err(Usage(format!("--margin: must be in [0, 1), got {margin}")));
            }
            each_table_file(&paths, |f| {
                let p = tables::prune(f, margin)?;
                println!(
                    "{}: kept {}, marked default {} (markers already there: {})",
                    f.display(),
                    p.kept,
                    p.marked.len(),
                    p.markers_before
                );
                for (key, batch, us, default_us) in p.marked {
                    println!(
                        "  marked default {key} batch {batch}: {us:.3} us vs default {default_us:.3} us"
                    );
                }
                Ok(())
            })
        }
        TablesCommand::Check {
            offline,
            served,
            shapes,
            defaults,
            defaults_threshold,
            finalists,
            threshold,
            sample,
            kernel,
            timing,
            backend,
            paths,
        } => {
            let backend: runtime_cmd::Backend = arg("backend", &backend)?;
            if offline {
                return check(paths, true);
            }
            if !paths.is_empty() {
                return Err(Usage(
                    "check: PATHS are for --offline; on a GPU the baked tables are re-measured".into(),
                ));
            }
            if let Some(dir) = defaults {
                if backend != runtime_cmd::Backend::Cuda {
                    return Err(Usage("check: --defaults runs on CUDA (--backend cuda)".into()));
                }
                let t: f64 = arg("defaults-threshold", &defaults_threshold)?;
                let finalists: usize = arg("finalists", &finalists)?;
                return runtime_cmd::check_defaults(&dir, t, kernel.as_deref(), finalists).map_err(Usage);
            }
            if served {
                if backend != runtime_cmd::Backend::Cuda {
                    return Err(Usage("check: --served runs on CUDA (--backend cuda)".into()));
                }
                #[cfg(feature = "cuda")]
                return Ok(served::check_served(kernel.as_deref(), shapes));
                #[cfg(not(feature = "cuda"))]
                return Err(Usage(
                    "check: --served needs a binary built with the `cuda` feature".into(),
                ));
            }
            let threshold: f64 = arg("threshold", &threshold)?;
            let sample: usize = arg("sample", &sample)?;
            let timing = match timing.as_str() {
                "auto" => None,
                t => Some(arg("timing", t)?),
            };
            runtime_cmd::check_tables(threshold, sample, timing, kernel, backend).map_err(Usage)
        }
    }
}

fn check(paths: Vec<PathBuf>, offline_check: bool) -> Result<ExitCode, Usage> {
    let paths = if paths.is_empty() {
        runtime_cmd::all_tables_dirs()
    } else {
        paths
    };
    let files = match tables::collect(&paths) {
        Ok(f) => f,
        Err(f) => {
            eprintln!("{f}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut bad = 0;
    for f in &files {
        let findings = tables::check_file(f, offline_check);
        if findings.is_empty() {
            println!("ok   {}", f.display());
        } else {
            bad += 1;
            for x in findings {
                println!("FAIL {x}");
            }
        }
    }
    println!("{} table file(s), {} with problems", files.len(), bad);
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
