//! Offline tuning into committed tables (`kernels tune`), GPU-free in itself: shape
//! files, the tuning record the cache stores, and the resumable driver that searches
//! shape by shape and merges the results into `<tables>/<kernel>/<target>.json`.
//!
//! # Shape files
//!
//! A JSON array of objects, each with every static-key field of the kernel and a
//! `batch`, one positive integer or an array of them:
//!
//! ```json
//! [
//!   {"dtype": "bf16", "cols": 4096, "batch": [1, 8, 64, 512]},
//!   {"dtype": "f16", "cols": 8192, "batch": 128}
//! ]
//! ```
//!
//! # Resuming
//!
//! Each shape's result is written to the tuning cache (the same cache and key as the
//! online policy) as soon as it is measured, so an interrupted run started again
//! finds the finished shapes there and searches only the rest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value as Json};
use tuned::{
    EntryConfig, KernelSchema, MergeReport, StaticKey, TableEntry, TableFile, TableHeader, Target, Value,
};

use crate::{CacheKey, DiskCache, Error, Lookup, Result, Section};

/// Parses a shape file (see the module docs) for the kernel `schema` into (static key,
/// batch) pairs, in file order, duplicates removed. `file` names the file in errors.
pub fn parse_shapes(schema: &KernelSchema, text: &str, file: &str) -> Result<Vec<(StaticKey, u64)>> {
    let err = |reason: String| Error::Shapes {
        file: file.to_string(),
        reason,
    };
    let json: Json = serde_json::from_str(text).map_err(|e| err(format!("not valid JSON: {e}")))?;
    let list = json
        .as_array()
        .ok_or_else(|| err("top level must be an array of shape objects".into()))?;
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, item) in list.iter().enumerate() {
        let obj = item
            .as_object()
            .ok_or_else(|| err(format!("shape {i}: not an object")))?;
        if let Some(k) = obj
            .keys()
            .find(|k| k.as_str() != "batch" && !schema.key.iter().any(|f| f.name == k.as_str()))
        {
            return Err(err(format!(
                "shape {i}: unknown field `{k}` (kernel `{}` takes {} and batch)",
                schema.kernel,
                schema.key_names().collect::<Vec<_>>().join(", ")
            )));
        }
        let mut values = Vec::with_capacity(schema.key.len());
        for f in schema.key {
            let v = obj
                .get(f.name)
                .ok_or_else(|| err(format!("shape {i}: missing key field `{}`", f.name)))?;
            values.push(match v {
                Json::Number(n) => Value::Int(
                    n.as_i64()
                        .ok_or_else(|| err(format!("shape {i}: `{}` must be an integer, got {n}", f.name)))?,
                ),
                Json::String(s) => Value::Str(s.clone().into()),
                other => {
                    return Err(err(format!(
                        "shape {i}: `{}` must be an integer or a name, got {other}",
                        f.name
                    )))
                }
            });
        }
        let key = StaticKey::new(schema, values).map_err(|e| err(format!("shape {i}: {e}")))?;
        let batches: Vec<&Json> = match obj.get("batch") {
            Some(Json::Array(a)) if !a.is_empty() => a.iter().collect(),
            Some(b @ Json::Number(_)) => vec![b],
            Some(other) => {
                return Err(err(format!(
                    "shape {i}: `batch` must be a positive integer or a non-empty array of them, got {other}"
                )))
            }
            None => return Err(err(format!("shape {i}: missing `batch`"))),
        };
        for b in batches {
            let batch = b
                .as_u64()
                .filter(|&b| b > 0)
                .ok_or_else(|| err(format!("shape {i}: batch {b} is not a positive integer")))?;
            if seen.insert((key.clone(), batch)) {
                out.push((key.clone(), batch));
            }
        }
    }
    Ok(out)
}

/// One candidate's measurement in a [`TuneRecord`].
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateRecord {
    /// Values in the kernel's parameter order.
    pub config: Vec<Value>,
    /// Median microseconds, or why it failed.
    pub outcome: std::result::Result<f64, String>,
}

/// Where a search's wall time went, seconds: making and uploading its inputs, compiling
/// the candidates, reading the buffers back before anything runs, the quick screening
/// timings, the output checks and full timings, and the end (large inputs compared,
/// the winner's final run). For reading a `kernels tune` log: device time is what the
/// tables cost. Zero where not measured (records written before they were).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SearchPhases {
    pub inputs: f64,
    pub compile: f64,
    pub setup: f64,
    pub screen: f64,
    pub full: f64,
    pub finish: f64,
}

impl SearchPhases {
    const NAMES: [&'static str; 6] = ["inputs", "compile", "setup", "screen", "full", "finish"];

    fn values(&self) -> [f64; 6] {
        [
            self.inputs,
            self.compile,
            self.setup,
            self.screen,
            self.full,
            self.finish,
        ]
    }

    /// `inputs 0.42 s, compile 1.20 s, ...`, or `None` where nothing was measured.
    pub fn summary(&self) -> Option<String> {
        let v = self.values();
        v.iter().any(|&s| s > 0.0).then(|| {
            Self::NAMES
                .iter()
                .zip(v)
                .map(|(n, s)| format!("{n} {s:.2} s"))
                .collect::<Vec<_>>()
                .join(", ")
        })
    }
}

/// The result of tuning one (static key, batch): what the tuning cache stores and a
/// table entry is made of. Every candidate's time is kept for reports.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneRecord {
    /// The chosen config, values in the kernel's parameter order.
    pub config: Vec<Value>,
    /// Its median time, microseconds.
    pub us: f64,
    /// The analytic default's median on the same problem (`None` if it failed).
    pub default_us: Option<f64>,
    pub device: String,
    pub compiler: String,
    /// `YYYY-MM-DD`.
    pub tuned_at: String,
    pub candidates: Vec<CandidateRecord>,
    /// Where the search's time went.
    pub phases: SearchPhases,
}

impl TuneRecord {
    /// The record as JSON text.
    pub fn to_json(&self) -> String {
        let vals = |v: &[Value]| Json::Array(v.iter().map(Value::to_json).collect());
        let candidates: Vec<Json> = self
            .candidates
            .iter()
            .map(|c| match &c.outcome {
                Ok(us) => json!({"config": vals(&c.config), "us": us}),
                Err(e) => json!({"config": vals(&c.config), "error": e}),
            })
            .collect();
        json!({
            "config": vals(&self.config),
            "us": self.us,
            "default_us": self.default_us,
            "device": self.device,
            "compiler": self.compiler,
            "tuned_at": self.tuned_at,
            "candidates": candidates,
            "phases": SearchPhases::NAMES
                .iter()
                .zip(self.phases.values())
                .map(|(n, s)| (n.to_string(), json!(s)))
                .collect::<serde_json::Map<_, _>>(),
        })
        .to_string()
    }

    /// Parses [`TuneRecord::to_json`]'s output; the error says what is wrong.
    pub fn from_json(text: &str) -> std::result::Result<TuneRecord, String> {
        let j: Json = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let values = |v: &Json, what: &str| -> std::result::Result<Vec<Value>, String> {
            v.as_array()
                .ok_or_else(|| format!("`{what}` must be an array"))?
                .iter()
                .map(|x| match x {
                    Json::Number(n) => n
                        .as_i64()
                        .map(Value::Int)
                        .ok_or_else(|| format!("`{what}` holds a non-integer {n}")),
                    Json::String(s) => Ok(Value::Str(s.clone().into())),
                    other => Err(format!("`{what}` holds {other}")),
                })
                .collect()
        };
        let string = |name: &str| {
            j[name]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("`{name}` must be a string"))
        };
        let us = j["us"]
            .as_f64()
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or("`us` must be a positive number")?;
        let default_us = match &j["default_us"] {
            Json::Null => None,
            v => Some(
                v.as_f64()
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .ok_or("`default_us` must be a positive number or null")?,
            ),
        };
        let mut candidates = Vec::new();
        for c in j["candidates"]
            .as_array()
            .ok_or("`candidates` must be an array")?
        {
            let outcome = match (c["us"].as_f64(), c["error"].as_str()) {
                (Some(us), _) => Ok(us),
                (None, Some(e)) => Err(e.to_string()),
                _ => return Err("a candidate has neither `us` nor `error`".into()),
            };
            candidates.push(CandidateRecord {
                config: values(&c["config"], "candidates.config")?,
                outcome,
            });
        }
        // Optional: records written before phases were measured have none.
        let phase = |name: &str| {
            j["phases"][name]
                .as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .unwrap_or(0.0)
        };
        let phases = SearchPhases {
            inputs: phase("inputs"),
            compile: phase("compile"),
            setup: phase("setup"),
            screen: phase("screen"),
            full: phase("full"),
            finish: phase("finish"),
        };
        Ok(TuneRecord {
            config: values(&j["config"], "config")?,
            us,
            default_us,
            device: string("device")?,
            compiler: string("compiler")?,
            tuned_at: string("tuned_at")?,
            candidates,
            phases,
        })
    }
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    civil_date(secs / 86_400)
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// What a [`tune_table`] run is for.
#[derive(Clone, Debug)]
pub struct TableJob<'a> {
    pub schema: &'static KernelSchema,
    pub target: Target,
    /// The kernel source's fingerprint (recorded in the table).
    pub source_fingerprint: &'a str,
    /// Device name (recorded in the table).
    pub device: &'a str,
    /// Compiler and version (recorded in the table).
    pub compiler: &'a str,
    /// The tables folder (a kernel crate's `tables`); the file is `<kernel>/<target>.json` in it.
    pub tables_dir: &'a Path,
    /// Search every shape again, ignoring cached results.
    pub retune: bool,
    /// How `search` times candidates (recorded in the table; a table's entries all
    /// share one method).
    pub timing: crate::TimingMethod,
    /// No search starts that would end past this instant, as estimated from the
    /// longest search of this run so far (the first always starts): the run then
    /// writes the table from what it has, and a later run resumes from the cache.
    /// For runs under a time limit, which would otherwise be killed before writing.
    pub deadline: Option<std::time::Instant>,
    /// Records of searches made under an earlier version of the kernel source that
    /// stand for this one's (see [`crate::tune::carries`]), by (key, batch): a shape
    /// with no record of its own takes its carried record (stored under its own key,
    /// so a later run finds it cached) instead of being searched. Not with `retune`.
    pub carried: Option<&'a std::collections::HashMap<(StaticKey, u64), TuneRecord>>,
}

impl TableJob<'_> {
    /// The table file this job writes.
    pub fn table_path(&self) -> PathBuf {
        self.tables_dir
            .join(self.schema.kernel)
            .join(format!("{}.json", self.target.name()))
    }
}

/// Progress of a [`tune_table`] run, one event per shape.
#[derive(Debug)]
pub enum Progress<'a> {
    /// Shape `index` of `total` is being searched now.
    Searching {
        index: usize,
        total: usize,
        key: &'a StaticKey,
        batch: u64,
    },
    /// Its result came from the cache (an earlier, maybe interrupted, run).
    Cached {
        index: usize,
        total: usize,
        key: &'a StaticKey,
        batch: u64,
        record: &'a TuneRecord,
    },
    /// Its result is a search made under the earlier source ([`TableJob::carried`]).
    Carried {
        index: usize,
        total: usize,
        key: &'a StaticKey,
        batch: u64,
        record: &'a TuneRecord,
    },
    /// It was searched and persisted, in `seconds` (compiles, timings and output checks).
    Tuned {
        index: usize,
        total: usize,
        key: &'a StaticKey,
        batch: u64,
        record: &'a TuneRecord,
        seconds: f64,
    },
    /// Its search failed; the run goes on.
    Failed {
        index: usize,
        total: usize,
        key: &'a StaticKey,
        batch: u64,
        error: &'a Error,
    },
}

/// What a [`tune_table`] run did.
#[derive(Debug, Default)]
pub struct TableOutcome {
    /// The table file (written only when `written`).
    pub path: PathBuf,
    pub written: bool,
    /// Shapes searched in this run, shapes taken from the cache, and shapes carried
    /// from searches under the earlier source ([`TableJob::carried`]).
    pub tuned: usize,
    pub cached: usize,
    pub carried: usize,
    /// Shapes whose search failed, with the reason.
    pub failed: Vec<(StaticKey, u64, String)>,
    /// Shapes left out of the table because the analytic default did not run (a table
    /// entry records the default's time).
    pub no_default_time: Vec<(StaticKey, u64)>,
    /// How the new entries merged with the existing file.
    pub merge: MergeReport,
    /// Shapes not searched because the job's deadline would have passed.
    pub past_deadline: usize,
    /// Keys some of whose shapes the deadline left unsearched, with how many of their
    /// entries were found: held out of the table, so a file written under a deadline
    /// never holds a partly tuned key (whose few batches the nearest-batch lookup would
    /// serve across every other); their records stay in the cache for the next run.
    pub held_back: Vec<(StaticKey, usize)>,
}

/// Tunes every shape and merges the results into the job's table file.
///
/// For each (key, batch): the cached record (unless `retune`), else the job's carried
/// record, else `search`; a carried or searched result is persisted at once under
/// `key_for(key, batch)` so an interrupted run resumes. Failed searches are reported and skipped. The new entries are then merged
/// with the existing file (the faster entry of each (key, batch) is kept) and the file
/// is written atomically.
pub fn tune_table(
    job: &TableJob<'_>,
    shapes: &[(StaticKey, u64)],
    cache: &DiskCache,
    key_for: &dyn Fn(&StaticKey, u64) -> CacheKey,
    search: &mut dyn FnMut(&StaticKey, u64) -> Result<TuneRecord>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<TableOutcome> {
    let total = shapes.len();
    let mut outcome = TableOutcome {
        path: job.table_path(),
        ..TableOutcome::default()
    };
    let mut entries = Vec::new();
    let mut partial: Vec<StaticKey> = Vec::new();
    let mut longest = std::time::Duration::ZERO;
    for (index, (key, batch)) in shapes.iter().enumerate() {
        let batch = *batch;
        let ck = key_for(key, batch);
        let cached = if job.retune {
            None
        } else {
            match cache.load(Section::Tuning, &ck) {
                Lookup::Hit(e) => std::str::from_utf8(&e.payload)
                    .ok()
                    .and_then(|t| TuneRecord::from_json(t).ok()),
                Lookup::Miss | Lookup::Corrupt { .. } => None,
            }
        };
        let carried = match (&cached, job.carried) {
            (None, Some(map)) if !job.retune => map.get(&(key.clone(), batch)),
            _ => None,
        };
        let record = match (cached, carried) {
            (Some(r), _) => {
                outcome.cached += 1;
                progress(Progress::Cached {
                    index,
                    total,
                    key,
                    batch,
                    record: &r,
                });
                r
            }
            (None, Some(r)) => {
                cache.store(Section::Tuning, &ck, "tune", r.to_json().as_bytes())?;
                outcome.carried += 1;
                progress(Progress::Carried {
                    index,
                    total,
                    key,
                    batch,
                    record: r,
                });
                r.clone()
            }
            (None, None) => {
                if job
                    .deadline
                    .is_some_and(|d| std::time::Instant::now() + longest > d)
                {
                    outcome.past_deadline += 1;
                    if !partial.contains(key) {
                        partial.push(key.clone());
                    }
                    continue;
                }
                progress(Progress::Searching {
                    index,
                    total,
                    key,
                    batch,
                });
                let started = std::time::Instant::now();
                let result = search(key, batch);
                let took = started.elapsed();
                longest = longest.max(took);
                match result {
                    Ok(r) => {
                        // Persist before moving on: this is what makes the run resumable.
                        cache.store(Section::Tuning, &ck, "tune", r.to_json().as_bytes())?;
                        outcome.tuned += 1;
                        progress(Progress::Tuned {
                            index,
                            total,
                            key,
                            batch,
                            record: &r,
                            seconds: took.as_secs_f64(),
                        });
                        r
                    }
                    Err(e) => {
                        progress(Progress::Failed {
                            index,
                            total,
                            key,
                            batch,
                            error: &e,
                        });
                        outcome.failed.push((key.clone(), batch, e.to_string()));
                        continue;
                    }
                }
            }
        };
        match record.default_us {
            Some(default_us) => entries.push(TableEntry {
                key: key.clone(),
                batch,
                config: EntryConfig::Tuned(record.config.clone()),
                us: table_us(record.us),
                default_us: table_us(default_us),
            }),
            None => outcome.no_default_time.push((key.clone(), batch)),
        }
    }
    for key in partial {
        let found = entries.iter().filter(|e| e.key == key).count();
        if found > 0 {
            entries.retain(|e| e.key != key);
            outcome.held_back.push((key, found));
        }
    }
    if entries.is_empty() {
        return Ok(outcome);
    }
    write_table(job, entries, &mut outcome)?;
    Ok(outcome)
}

/// Microseconds as table files store them (three decimals), so a result compares
/// equal to itself after a write and read (the merge keeps the faster entry).
fn table_us(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}

fn write_table(job: &TableJob<'_>, entries: Vec<TableEntry>, outcome: &mut TableOutcome) -> Result<()> {
    let path = job.table_path();
    let file = path.display().to_string();
    let header = TableHeader {
        kernel: job.schema.kernel.to_string(),
        target: job.target,
        device: job.device.to_string(),
        compiler: job.compiler.to_string(),
        source_fingerprint: job.source_fingerprint.to_string(),
        tuned_at: today(),
        timing: job.timing.name().to_string(),
        key_fields: job.schema.key_names().map(str::to_string).collect(),
        params: job.schema.param_names().map(str::to_string).collect(),
    };
    let mut new = TableFile {
        header,
        entries: Vec::new(),
    };
    // Entries sorted and unique, as TableFile promises.
    let mut sorted = entries;
    sorted.sort_by(|a, b| (&a.key, a.batch).cmp(&(&b.key, b.batch)));
    sorted.dedup_by(|a, b| a.key == b.key && a.batch == b.batch);
    new.entries = sorted;

    let table = if path.exists() {
        // A file that does not validate is an error, never overwritten.
        let mut existing = TableFile::read(&path, Some(job.schema))?;
        outcome.merge = existing.merge(new);
        existing
    } else {
        outcome.merge = MergeReport {
            added: new.entries.iter().map(|e| (e.key.clone(), e.batch)).collect(),
            ..MergeReport::default()
        };
        new
    };
    // What is written must read back: validate before replacing the file.
    let text = table.to_json_string();
    TableFile::parse(&text, &file, job.schema.kernel, job.target, Some(job.schema))?;
    tuned::write_atomic(&path, text.as_bytes()).map_err(|e| Error::io(&path, e))?;
    outcome.written = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_key;
    use tuned::Field;

    static SCHEMA: KernelSchema = KernelSchema {
        kernel: "toy",
        key: &[Field::dtype("dtype"), Field::int("cols")],
        params: &[Field::int("threads")],
    };

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kernels-core-tt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn key_for(k: &StaticKey, batch: u64) -> CacheKey {
        cache_key(&crate::testing::tuning_key_parts(
            "toy",
            "fnv1a64:1",
            k.as_str(),
            batch,
        ))
    }

    fn record(threads: i64, us: f64, default_us: Option<f64>) -> TuneRecord {
        TuneRecord {
            config: vec![Value::Int(threads)],
            us,
            default_us,
            device: "NVIDIA H200".into(),
            compiler: "nvrtc 13.0".into(),
            tuned_at: "2026-01-01".into(),
            candidates: vec![
                CandidateRecord {
                    config: vec![Value::Int(threads)],
                    outcome: Ok(us),
                },
                CandidateRecord {
                    config: vec![Value::Int(32)],
                    outcome: Err("too many resources requested".into()),
                },
            ],
            phases: Default::default(),
        }
    }

    #[test]
    fn shapes_parse_and_errors_name_the_shape_and_field() {
        let s = parse_shapes(
            &SCHEMA,
            r#"[{"dtype": "bf16", "cols": 4096, "batch": [1, 8, 8]}, {"cols": 128, "dtype": "f32", "batch": 3}]"#,
            "s.json",
        )
        .unwrap();
        let got: Vec<(String, u64)> = s.iter().map(|(k, b)| (k.to_string(), *b)).collect();
        assert_eq!(
            got,
            [
                ("dtype=bf16,cols=4096".to_string(), 1),
                ("dtype=bf16,cols=4096".to_string(), 8),
                ("dtype=f32,cols=128".to_string(), 3)
            ]
        );
        for (text, want) in [
            ("{}", "top level must be an array"),
            ("[1]", "shape 0: not an object"),
            (r#"[{"dtype": "bf16", "batch": 1}]"#, "missing key field `cols`"),
            (
                r#"[{"dtype": "bf16", "cols": 1, "rows": 1, "batch": 1}]"#,
                "unknown field `rows`",
            ),
            (
                r#"[{"dtype": "int4", "cols": 1, "batch": 1}]"#,
                "`dtype` must be a dtype",
            ),
            (r#"[{"dtype": "bf16", "cols": 1}]"#, "missing `batch`"),
            (
                r#"[{"dtype": "bf16", "cols": 1, "batch": [0]}]"#,
                "batch 0 is not a positive integer",
            ),
            (
                r#"[{"dtype": "bf16", "cols": 1, "batch": []}]"#,
                "non-empty array",
            ),
            ("[", "not valid JSON"),
        ] {
            let e = parse_shapes(&SCHEMA, text, "s.json").unwrap_err().to_string();
            assert!(e.contains("s.json") && e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn record_round_trips() {
        let r = record(128, 12.5, Some(15.0));
        assert_eq!(TuneRecord::from_json(&r.to_json()).unwrap(), r);
        let r = record(128, 12.5, None);
        assert_eq!(TuneRecord::from_json(&r.to_json()).unwrap(), r);
        assert!(TuneRecord::from_json(r#"{"us": -1}"#).is_err());
        // Where the time went comes back too; a record written without it reads as
        // unmeasured, and says nothing.
        let timed = TuneRecord {
            phases: SearchPhases {
                inputs: 0.5,
                compile: 1.25,
                setup: 0.125,
                screen: 3.0,
                full: 0.75,
                finish: 0.0625,
            },
            ..record(128, 12.5, Some(15.0))
        };
        assert_eq!(TuneRecord::from_json(&timed.to_json()).unwrap(), timed);
        assert_eq!(
            timed.phases.summary().unwrap(),
            "inputs 0.50 s, compile 1.25 s, setup 0.12 s, screen 3.00 s, full 0.75 s, finish 0.06 s"
        );
        let mut old: Json = serde_json::from_str(&timed.to_json()).unwrap();
        old.as_object_mut().unwrap().remove("phases");
        let read = TuneRecord::from_json(&old.to_string()).unwrap();
        assert_eq!(read.phases, SearchPhases::default());
        assert_eq!(read.phases.summary(), None);
    }

    #[test]
    fn dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(19_723), "2024-01-01");
        assert_eq!(civil_date(19_782), "2024-02-29");
        assert_eq!(today().len(), 10);
    }

    fn job(dir: &Path, retune: bool) -> TableJob<'_> {
        TableJob {
            schema: &SCHEMA,
            target: Target::Sm90,
            source_fingerprint: "fnv1a64:1",
            device: "NVIDIA H200",
            compiler: "nvrtc 13.0",
            tables_dir: dir,
            retune,
            timing: crate::TimingMethod::Single,
            deadline: None,
            carried: None,
        }
    }

    /// One key at batches 1, 64 and 512.
    fn three_batches() -> Vec<(StaticKey, u64)> {
        parse_shapes(
            &SCHEMA,
            r#"[{"dtype": "bf16", "cols": 4096, "batch": [1, 64, 512]}]"#,
            "s",
        )
        .unwrap()
    }

    /// With a deadline, no search starts that the longest search so far says would
    /// end past it; the table is written from the keys whose every shape was found (a
    /// key cut short is held back), and a later run resumes from the cache.
    #[test]
    fn a_deadline_stops_starting_searches_and_writes_only_whole_keys() {
        let dir = temp_dir("deadline");
        let tables = dir.join("tables");
        let cache = DiskCache::at(dir.join("cache"));
        let mut shapes =
            parse_shapes(&SCHEMA, r#"[{"dtype": "bf16", "cols": 2048, "batch": 1}]"#, "s").unwrap();
        shapes.extend(three_batches());
        let step = std::time::Duration::from_millis(200);
        let mut calls = Vec::new();
        let mut search = |k: &StaticKey, b: u64| {
            calls.push((k.to_string(), b));
            std::thread::sleep(step);
            Ok(record(128, 10.0, Some(12.0)))
        };
        // Just under three steps: a search sleeps at least `step`, so the third never
        // fits, and the second fits unless the first overshoots its sleep by about half
        // a step (on a loaded CI machine a 2.5-step deadline left too little room).
        let limited = TableJob {
            deadline: Some(std::time::Instant::now() + step * 3 - std::time::Duration::from_millis(1)),
            ..job(&tables, false)
        };
        let out = tune_quietly(&limited, &shapes, &cache, &mut search).unwrap();
        let wide = "dtype=bf16,cols=4096";
        assert_eq!(
            calls,
            [("dtype=bf16,cols=2048".to_string(), 1), (wide.to_string(), 1)]
        );
        assert_eq!((out.tuned, out.past_deadline), (2, 2));
        assert!(out.written);
        let held: Vec<(String, usize)> = out.held_back.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        assert_eq!(held, [(wide.to_string(), 1)]);
        let written = TableFile::read(&out.path, Some(&SCHEMA)).unwrap();
        assert!(
            written.entries.iter().all(|e| e.key.to_string() != wide),
            "the cut key is not in the file"
        );
        // No deadline: the run resumes with the two left and writes the whole key.
        let mut calls = Vec::new();
        let mut search = |_: &StaticKey, b: u64| {
            calls.push(b);
            Ok(record(128, 10.0, Some(12.0)))
        };
        let out = tune_quietly(&job(&tables, false), &shapes, &cache, &mut search).unwrap();
        assert_eq!(calls, [64, 512]);
        assert_eq!((out.tuned, out.cached, out.past_deadline), (2, 2, 0));
        assert!(out.held_back.is_empty());
        let written = TableFile::read(&out.path, Some(&SCHEMA)).unwrap();
        assert_eq!(
            written
                .entries
                .iter()
                .filter(|e| e.key.to_string() == wide)
                .count(),
            3
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// [`tune_table`] of `job` on `shapes` with the test keys and no progress reports.
    fn tune_quietly(
        job: &TableJob<'_>,
        shapes: &[(StaticKey, u64)],
        cache: &DiskCache,
        search: &mut dyn FnMut(&StaticKey, u64) -> Result<TuneRecord>,
    ) -> Result<TableOutcome> {
        tune_table(job, shapes, cache, &key_for, search, &mut |_| {})
    }

    /// A shape with a carried record takes it instead of searching, stores it under
    /// its own key (a second run finds it cached) and counts it; the shapes without one
    /// are searched; `retune` searches them all.
    #[test]
    fn carried_records_stand_in_for_searches_and_are_cached() {
        let dir = temp_dir("carry");
        let tables = dir.join("tables");
        let cache = DiskCache::at(dir.join("cache"));
        let shapes = three_batches();
        let wide = shapes[0].0.clone();
        let carried: std::collections::HashMap<_, _> = [((wide.clone(), 64), record(256, 7.0, Some(9.0)))]
            .into_iter()
            .collect();
        let carrying = TableJob {
            carried: Some(&carried),
            ..job(&tables, false)
        };
        // Each run's searched batches, in order.
        let run = |job: &TableJob<'_>| {
            let mut calls = Vec::new();
            let mut search = |_: &StaticKey, b: u64| {
                calls.push(b);
                Ok(record(128, 10.0, Some(12.0)))
            };
            let out = tune_quietly(job, &shapes, &cache, &mut search).unwrap();
            (calls, out)
        };
        let (calls, out) = run(&carrying);
        assert_eq!(calls, [1, 512]);
        assert_eq!((out.tuned, out.cached, out.carried), (2, 0, 1));
        let written = TableFile::read(&out.path, Some(&SCHEMA)).unwrap();
        let at_64 = written.entries.iter().find(|e| e.batch == 64).unwrap();
        assert_eq!(at_64.config.tuned(), Some(&vec![Value::Int(256)]));
        // The carried record is now this source's own cached one.
        let (calls, out) = run(&job(&tables, false));
        assert!(calls.is_empty());
        assert_eq!((out.tuned, out.cached, out.carried), (0, 3, 0));
        // Retuning searches every shape, carried or not.
        let retune = TableJob {
            carried: Some(&carried),
            ..job(&tables, true)
        };
        let (calls, out) = run(&retune);
        assert_eq!(calls, [1, 64, 512]);
        assert_eq!(out.carried, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn interrupted_run_resumes_and_merge_keeps_the_faster_entry() {
        let dir = temp_dir("resume");
        let tables = dir.join("tables");
        let cache = DiskCache::at(dir.join("cache"));
        let shapes = three_batches();

        // First run: the search "crashes" (errors) on the third shape.
        let mut calls = Vec::new();
        let mut search = |k: &StaticKey, b: u64| {
            calls.push(b);
            if b == 512 {
                Err(Error::Tune {
                    kernel: "toy".into(),
                    key: k.to_string(),
                    batch: b,
                    reason: "interrupted".into(),
                })
            } else {
                Ok(record(128, 10.0, Some(12.0)))
            }
        };
        let mut events = Vec::new();
        let out = tune_table(
            &job(&tables, false),
            &shapes,
            &cache,
            &key_for,
            &mut search,
            &mut |p| {
                events.push(
                    format!("{p:?}")
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_string(),
                )
            },
        )
        .unwrap();
        assert_eq!(calls, [1, 64, 512]);
        assert_eq!((out.tuned, out.cached, out.failed.len()), (2, 0, 1));
        assert!(out.written);
        assert_eq!(out.merge.added.len(), 2);
        assert_eq!(
            events,
            ["Searching", "Tuned", "Searching", "Tuned", "Searching", "Failed"]
        );

        // Second run: the two finished shapes come from the cache; only 512 is searched.
        // 512 now gets 9 us; the table gains it.
        let mut calls = Vec::new();
        let mut search = |_: &StaticKey, b: u64| {
            calls.push(b);
            Ok(record(256, 9.0, Some(12.0)))
        };
        let out = tune_quietly(&job(&tables, false), &shapes, &cache, &mut search).unwrap();
        assert_eq!(calls, [512], "resume must skip finished shapes");
        assert_eq!((out.tuned, out.cached), (1, 2));
        assert_eq!(out.merge.added.len(), 1);
        assert_eq!(out.merge.kept.len(), 2);

        // A retune that is slower for batch 1 and faster for batch 64: merge keeps the faster.
        let mut search = |_: &StaticKey, b: u64| {
            Ok(match b {
                1 => record(512, 11.0, Some(12.0)),
                64 => record(512, 8.0, Some(12.0)),
                _ => record(256, 9.0, None), // no default time: left out of the table
            })
        };
        let out = tune_quietly(&job(&tables, true), &shapes, &cache, &mut search).unwrap();
        assert_eq!(out.tuned, 3);
        assert_eq!(out.no_default_time.len(), 1);
        assert_eq!(out.merge.replaced.len(), 1, "{:?}", out.merge);
        assert_eq!(out.merge.replaced[0].0 .1, 64);
        assert_eq!(out.merge.kept.len(), 1);

        let t = TableFile::read(&out.path, Some(&SCHEMA)).unwrap();
        let by_batch: Vec<(u64, i64, f64)> = t
            .entries
            .iter()
            .map(|e| (e.batch, e.config.tuned().unwrap()[0].as_int().unwrap(), e.us))
            .collect();
        assert_eq!(by_batch, [(1, 128, 10.0), (64, 512, 8.0), (512, 256, 9.0)]);
        assert_eq!(t.header.device, "NVIDIA H200");
        assert_eq!(t.header.source_fingerprint, "fnv1a64:1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rerunning_the_same_results_keeps_every_entry() {
        let dir = temp_dir("same");
        let tables = dir.join("tables");
        let shapes =
            parse_shapes(&SCHEMA, r#"[{"dtype": "f16", "cols": 64, "batch": [1, 2]}]"#, "s").unwrap();
        // Times with more digits than a table keeps.
        let mut search =
            |_: &StaticKey, _: u64| Ok(record(128, 10.271_999_984_979_63, Some(65.151_996_910_572_05)));
        let first = tune_quietly(&job(&tables, true), &shapes, &DiskCache::disabled(), &mut search).unwrap();
        assert_eq!(first.merge.added.len(), 2);
        let again = tune_quietly(&job(&tables, true), &shapes, &DiskCache::disabled(), &mut search).unwrap();
        assert_eq!(
            (again.merge.kept.len(), again.merge.replaced.len()),
            (2, 0),
            "{:?}",
            again.merge
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_invalid_existing_table_is_never_overwritten() {
        let dir = temp_dir("invalid");
        let tables = dir.join("tables");
        let j = job(&tables, false);
        std::fs::create_dir_all(j.table_path().parent().unwrap()).unwrap();
        std::fs::write(j.table_path(), "{ not json").unwrap();
        let shapes = parse_shapes(&SCHEMA, r#"[{"dtype": "bf16", "cols": 64, "batch": 1}]"#, "s").unwrap();
        let e = tune_quietly(&j, &shapes, &DiskCache::disabled(), &mut |_, _| {
            Ok(record(128, 1.0, Some(2.0)))
        })
        .unwrap_err();
        assert!(e.to_string().contains("not valid JSON"), "{e}");
        assert_eq!(std::fs::read_to_string(j.table_path()).unwrap(), "{ not json");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
