//! Table files (`<crate>/tables/<kernel>/<target>.json`, schema v1): parsing with
//! precise validation, deterministic writing, and merging.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};

use crate::{BakedEntry, EntryConfig, FieldKind, KernelSchema, StaticKey, Target, Value};

/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: u64 = 1;

const HEADER_FIELDS: &[&str] = &[
    "schema",
    "kernel",
    "target",
    "device",
    "compiler",
    "source_fingerprint",
    "tuned_at",
    "key_fields",
    "params",
    "entries",
];
/// Header fields a file may leave out (older files): `timing` (absent: `single`).
const HEADER_OPTIONAL: &[&str] = &["timing"];
const ENTRY_FIELDS: &[&str] = &["key", "batch", "config", "us", "default_us"];
/// The header's `timing` values: graph replays per launch, or single launches.
pub const TIMINGS: &[&str] = &[TIMING_GRAPH, TIMING_SINGLE];
/// `timing` of tables timed from CUDA-graph replays (`kernels tune`'s default).
pub const TIMING_GRAPH: &str = "graph";
/// `timing` of tables timed one launch at a time (and of files without the field).
pub const TIMING_SINGLE: &str = "single";
/// The `config` of a default marker entry.
const DEFAULT_MARKER: &str = "default";

/// Where a validation error is: the file, the entry (0-based) if any, and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct TableError {
    pub file: String,
    pub entry: Option<usize>,
    pub reason: String,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.entry {
            Some(i) => write!(f, "{}: entry {i}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// A table file's provenance.
#[derive(Clone, Debug, PartialEq)]
pub struct TableHeader {
    pub kernel: String,
    pub target: Target,
    /// Device name as the driver reports it (`NVIDIA H200`).
    pub device: String,
    /// Compiler and version (`nvrtc 13.0`).
    pub compiler: String,
    /// Fingerprint of the kernel source the entries were measured with.
    pub source_fingerprint: String,
    /// Date of the tuning run (`YYYY-MM-DD`).
    pub tuned_at: String,
    /// How the entries were timed: `graph` (back-to-back launches replayed from a CUDA
    /// graph, per launch) or `single` (one launch after an L2 flush). Optional in the
    /// file; absent means `single`, how every table was timed before the field existed.
    pub timing: String,
    pub key_fields: Vec<String>,
    pub params: Vec<String>,
}

/// One measured entry: a tuned config, or a default marker (`"config": "default"`,
/// `us` equal to `default_us`) saying the analytic default measured best here.
#[derive(Clone, Debug, PartialEq)]
pub struct TableEntry {
    pub key: StaticKey,
    pub batch: u64,
    /// Values in `header.params` order, or [`EntryConfig::Default`] for a marker.
    pub config: EntryConfig<Vec<Value>>,
    /// Median time of `config`, microseconds (a marker: the default's).
    pub us: f64,
    /// Median time of the analytic default on the same problem, microseconds.
    pub default_us: f64,
}

impl TableEntry {
    /// A default marker for (`key`, `batch`), where the analytic default measured
    /// `default_us`.
    pub fn default_marker(key: StaticKey, batch: u64, default_us: f64) -> TableEntry {
        TableEntry {
            key,
            batch,
            config: EntryConfig::Default,
            us: default_us,
            default_us,
        }
    }
}

/// A parsed, validated table file.
#[derive(Clone, Debug, PartialEq)]
pub struct TableFile {
    pub header: TableHeader,
    /// Sorted by (static key, batch); (key, batch) pairs are unique.
    pub entries: Vec<TableEntry>,
}

/// The kernel and target a file's path says it holds (`.../<kernel>/<target>.json`).
pub fn origin_of_path(path: &Path) -> Result<(String, Target), String> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| "file name is not <target>.json".to_string())?;
    if path.extension().and_then(|e| e.to_str()) != Some("json") {
        return Err("file name is not <target>.json".into());
    }
    let target: Target = stem.parse().map_err(|e| format!("file name: {e}"))?;
    if stem != target.name() {
        return Err(format!(
            "file name `{stem}.json` should be `{}.json`",
            target.name()
        ));
    }
    let kernel = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|s| s.to_str())
        .ok_or_else(|| "file is not inside a <kernel>/ folder".to_string())?;
    Ok((kernel.to_string(), target))
}

impl TableFile {
    /// Reads and validates a table file. The kernel and target come from its path;
    /// with `schema`, key fields, parameter names and types are checked against the
    /// kernel's declaration too.
    pub fn read(path: &Path, schema: Option<&KernelSchema>) -> Result<TableFile, TableError> {
        let file = path.display().to_string();
        let err = |reason: String| TableError {
            file: file.clone(),
            entry: None,
            reason,
        };
        let (kernel, target) = origin_of_path(path).map_err(err)?;
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        Self::parse(&text, &file, &kernel, target, schema)
    }

    /// Parses and validates `text` as the table of `kernel` for `target`; `file`
    /// names it in errors.
    pub fn parse(
        text: &str,
        file: &str,
        kernel: &str,
        target: Target,
        schema: Option<&KernelSchema>,
    ) -> Result<TableFile, TableError> {
        let err = |entry: Option<usize>, reason: String| TableError {
            file: file.to_string(),
            entry,
            reason,
        };
        let json: Json = serde_json::from_str(text).map_err(|e| err(None, format!("not valid JSON: {e}")))?;
        let obj = json
            .as_object()
            .ok_or_else(|| err(None, "top level is not an object".into()))?;
        check_fields(obj, HEADER_FIELDS, HEADER_OPTIONAL).map_err(|r| err(None, r))?;

        let schema_v = obj["schema"]
            .as_u64()
            .ok_or_else(|| err(None, "`schema` must be an integer".into()))?;
        if schema_v != SCHEMA_VERSION {
            return Err(err(
                None,
                format!("`schema` is {schema_v}, this build reads {SCHEMA_VERSION}"),
            ));
        }
        let string = |name: &str| -> Result<String, TableError> {
            match &obj[name] {
                Json::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                Json::String(_) => Err(err(None, format!("`{name}` is empty"))),
                other => Err(err(
                    None,
                    format!("`{name}` must be a string, got {}", json_kind(other)),
                )),
            }
        };
        let file_kernel = string("kernel")?;
        if file_kernel != kernel {
            return Err(err(
                None,
                format!("`kernel` is `{file_kernel}` but the file's folder says `{kernel}`"),
            ));
        }
        let file_target = string("target")?;
        if file_target != target.name() {
            return Err(err(
                None,
                format!(
                    "`target` is `{file_target}` but the file name says `{}`",
                    target.name()
                ),
            ));
        }
        let names = |name: &str| -> Result<Vec<String>, TableError> {
            let arr = obj[name]
                .as_array()
                .ok_or_else(|| err(None, format!("`{name}` must be an array of names")))?;
            let v: Vec<String> = arr
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| err(None, format!("`{name}` must be an array of names")))?;
            let set: BTreeSet<&String> = v.iter().collect();
            if set.len() != v.len() {
                return Err(err(None, format!("`{name}` repeats a name")));
            }
            Ok(v)
        };
        let key_fields = names("key_fields")?;
        let params = names("params")?;
        if let Some(s) = schema {
            let want: Vec<&str> = s.key_names().collect();
            if key_fields != want {
                return Err(err(
                    None,
                    format!(
                        "`key_fields` is {key_fields:?}, kernel `{}` declares {want:?}",
                        s.kernel
                    ),
                ));
            }
            let want: Vec<&str> = s.param_names().collect();
            if params != want {
                return Err(err(
                    None,
                    format!("`params` is {params:?}, kernel `{}` declares {want:?}", s.kernel),
                ));
            }
        }
        let timing = match obj.get("timing") {
            None => TIMING_SINGLE.to_string(),
            Some(Json::String(t)) if TIMINGS.contains(&t.as_str()) => t.clone(),
            Some(other) => {
                return Err(err(
                    None,
                    format!("`timing` must be \"graph\" or \"single\", got {other}"),
                ))
            }
        };
        let header = TableHeader {
            kernel: file_kernel,
            target,
            device: string("device")?,
            compiler: string("compiler")?,
            source_fingerprint: string("source_fingerprint")?,
            tuned_at: string("tuned_at")?,
            timing,
            key_fields,
            params,
        };

        // Without a kernel schema, key and config values are typed by what the file holds.
        let typed = schema.is_some();
        let fallback;
        let schema = match schema {
            Some(s) => s,
            None => {
                fallback = untyped_schema(&header);
                &fallback.0
            }
        };

        let raw_entries = obj["entries"]
            .as_array()
            .ok_or_else(|| err(None, "`entries` must be an array".into()))?;
        let mut entries = Vec::with_capacity(raw_entries.len());
        let mut seen = BTreeMap::new();
        for (i, raw) in raw_entries.iter().enumerate() {
            let e = parse_entry(raw, schema, typed, &header).map_err(|r| err(Some(i), r))?;
            if let Some(first) = seen.insert((e.key.clone(), e.batch), i) {
                return Err(err(
                    Some(i),
                    format!("duplicate of entry {first}: key `{}` batch {}", e.key, e.batch),
                ));
            }
            entries.push(e);
        }
        entries.sort_by(|a, b| (&a.key, a.batch).cmp(&(&b.key, b.batch)));
        Ok(TableFile { header, entries })
    }

    /// The file's JSON text: header first, one entry per line, entries sorted, so
    /// the same table always writes the same bytes and diffs read line by line.
    pub fn to_json_string(&self) -> String {
        let h = &self.header;
        let q = |s: &str| Json::from(s).to_string();
        let list = |v: &[String]| Json::from(v.to_vec()).to_string();
        let mut out = String::new();
        out.push_str("{\n");
        out.push_str(&format!("  \"schema\": {SCHEMA_VERSION},\n"));
        out.push_str(&format!("  \"kernel\": {},\n", q(&h.kernel)));
        out.push_str(&format!("  \"target\": {},\n", q(h.target.name())));
        out.push_str(&format!("  \"device\": {},\n", q(&h.device)));
        out.push_str(&format!("  \"compiler\": {},\n", q(&h.compiler)));
        out.push_str(&format!(
            "  \"source_fingerprint\": {},\n",
            q(&h.source_fingerprint)
        ));
        out.push_str(&format!("  \"tuned_at\": {},\n", q(&h.tuned_at)));
        out.push_str(&format!("  \"timing\": {},\n", q(&h.timing)));
        out.push_str(&format!("  \"key_fields\": {},\n", list(&h.key_fields)));
        out.push_str(&format!("  \"params\": {},\n", list(&h.params)));
        out.push_str("  \"entries\": [");
        for (i, e) in self.entries.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            let key: Map<String, Json> = h
                .key_fields
                .iter()
                .cloned()
                .zip(e.key.values().iter().map(Value::to_json))
                .collect();
            let config = match &e.config {
                EntryConfig::Tuned(values) => Json::Object(
                    h.params
                        .iter()
                        .cloned()
                        .zip(values.iter().map(Value::to_json))
                        .collect(),
                ),
                EntryConfig::Default => Json::from(DEFAULT_MARKER),
            };
            out.push_str(&format!(
                "{{\"key\": {}, \"batch\": {}, \"config\": {}, \"us\": {}, \"default_us\": {}}}",
                Json::Object(key),
                e.batch,
                config,
                round_us(e.us),
                round_us(e.default_us)
            ));
        }
        if !self.entries.is_empty() {
            out.push_str("\n  ");
        }
        out.push_str("]\n}\n");
        out
    }

    /// Merges `newer` into `self`, keeping the faster entry of each (key, batch). A
    /// default marker takes part like any entry, with the default's time as its own:
    /// a newly tuned config faster than that default replaces it.
    /// The header (provenance) becomes `newer`'s when any of its entries is kept.
    /// Entries measured against another kernel source than `newer`'s are dropped
    /// (listed in [`MergeReport::stale_dropped`]): a table carries one fingerprint, and
    /// its entries must all have been measured with that source. Likewise, entries
    /// timed with another method than `newer`'s are dropped
    /// ([`MergeReport::retimed_dropped`]), and so are entries measured on another device
    /// ([`MergeReport::device_dropped`]): an H100's times do not compare with an H200's,
    /// and the header names one device for every entry.
    pub fn merge(&mut self, newer: TableFile) -> MergeReport {
        let mut report = MergeReport::default();
        let (old, new) = (&self.header, &newer.header);
        // Times of two methods do not compare either (a single launch carries its launch
        // latency): a table holds one method's, the newer one's.
        let dropped = if old.source_fingerprint != new.source_fingerprint {
            Some(&mut report.stale_dropped)
        } else if old.device != new.device {
            Some(&mut report.device_dropped)
        } else if old.timing != new.timing {
            Some(&mut report.retimed_dropped)
        } else {
            None
        };
        if let Some(list) = dropped {
            *list = std::mem::take(&mut self.entries)
                .into_iter()
                .map(|e| (e.key, e.batch))
                .collect();
            self.header = newer.header.clone();
        }
        let mut by_slot: BTreeMap<(StaticKey, u64), TableEntry> = std::mem::take(&mut self.entries)
            .into_iter()
            .map(|e| ((e.key.clone(), e.batch), e))
            .collect();
        for e in newer.entries {
            let slot = (e.key.clone(), e.batch);
            match by_slot.get(&slot) {
                None => {
                    report.added.push(slot.clone());
                    by_slot.insert(slot, e);
                }
                Some(old) if e.us < old.us => {
                    report.replaced.push((slot.clone(), old.us, e.us));
                    by_slot.insert(slot, e);
                }
                Some(old) => report.kept.push((slot, old.us, e.us)),
            }
        }
        if !report.added.is_empty() || !report.replaced.is_empty() {
            self.header = newer.header;
        }
        self.entries = by_slot.into_values().collect();
        report
    }

    /// Writes the table atomically (temp file + rename) to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        crate::write_atomic(path, self.to_json_string().as_bytes())
    }
}

/// What [`TableFile::merge`] did, slot by slot: (key, batch) and times in us.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MergeReport {
    pub added: Vec<(StaticKey, u64)>,
    /// (slot, old us, new us): the newer entry was faster.
    pub replaced: Vec<((StaticKey, u64), f64, f64)>,
    /// (slot, old us, new us): the existing entry was at least as fast.
    pub kept: Vec<((StaticKey, u64), f64, f64)>,
    /// Existing entries dropped because they were measured against another source.
    pub stale_dropped: Vec<(StaticKey, u64)>,
    /// Existing entries dropped because they were timed with another method (same
    /// source).
    pub retimed_dropped: Vec<(StaticKey, u64)>,
    /// Existing entries dropped because they were measured on another device (same
    /// source).
    pub device_dropped: Vec<(StaticKey, u64)>,
}

fn round_us(us: f64) -> String {
    // Three decimals is below timing noise and keeps diffs short.
    let r = (us * 1000.0).round() / 1000.0;
    Json::from(r).to_string()
}

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

fn check_fields(obj: &Map<String, Json>, known: &[&str], optional: &[&str]) -> Result<(), String> {
    if let Some(k) = obj
        .keys()
        .find(|k| !known.contains(&k.as_str()) && !optional.contains(&k.as_str()))
    {
        return Err(format!("unknown field `{k}`"));
    }
    if let Some(k) = known.iter().find(|k| !obj.contains_key(**k)) {
        return Err(format!("missing field `{k}`"));
    }
    Ok(())
}

/// A schema built from a file's own header, typing each field by its first use.
struct UntypedSchema(KernelSchema);

fn untyped_schema(h: &TableHeader) -> UntypedSchema {
    // Field names must be 'static for KernelSchema; a validation run leaks a few
    // short strings once, which is fine for a CLI or build script.
    let leak = |s: &String| -> &'static str { Box::leak(s.clone().into_boxed_str()) };
    let key: Vec<crate::Field> = h
        .key_fields
        .iter()
        .map(|n| crate::Field {
            name: leak(n),
            kind: FieldKind::Name,
        })
        .collect();
    let params: Vec<crate::Field> = h
        .params
        .iter()
        .map(|n| crate::Field {
            name: leak(n),
            kind: FieldKind::Name,
        })
        .collect();
    UntypedSchema(KernelSchema {
        kernel: leak(&h.kernel),
        key: Box::leak(key.into_boxed_slice()),
        params: Box::leak(params.into_boxed_slice()),
    })
}

fn json_to_value(field: &crate::Field, v: &Json, typed: bool) -> Result<Value, String> {
    let value = match v {
        Json::Number(n) => Value::Int(
            n.as_i64()
                .ok_or_else(|| format!("`{}` must be an integer, got {n}", field.name))?,
        ),
        Json::String(s) => Value::Str(s.clone().into()),
        other => {
            return Err(format!(
                "`{}` must be an integer or a name, got {}",
                field.name,
                json_kind(other)
            ))
        }
    };
    if typed {
        field.check(&value)?;
    } else if let Value::Int(i) = value {
        if i < 0 {
            return Err(format!("`{}` must be >= 0, got {i}", field.name));
        }
    }
    Ok(value)
}

fn parse_entry(
    raw: &Json,
    schema: &KernelSchema,
    typed: bool,
    h: &TableHeader,
) -> Result<TableEntry, String> {
    let obj = raw
        .as_object()
        .ok_or_else(|| "entry is not an object".to_string())?;
    check_fields(obj, ENTRY_FIELDS, &[])?;

    let key_obj = obj["key"].as_object().ok_or("`key` must be an object")?;
    let mut key_values = Vec::with_capacity(schema.key.len());
    for f in schema.key {
        let v = key_obj
            .get(f.name)
            .ok_or_else(|| format!("key: missing field `{}`", f.name))?;
        key_values.push(json_to_value(f, v, typed).map_err(|e| format!("key: {e}"))?);
    }
    if let Some(k) = key_obj
        .keys()
        .find(|k| !schema.key.iter().any(|f| f.name == k.as_str()))
    {
        return Err(format!("key: unknown field `{k}`"));
    }
    let key = if typed {
        StaticKey::new(schema, key_values).map_err(|e| format!("key: {e}"))?
    } else {
        StaticKey::untyped(schema, key_values)
    };

    let batch = match &obj["batch"] {
        Json::Number(n) => match n.as_u64() {
            Some(b) if b > 0 => b,
            _ => return Err(format!("`batch` must be a positive integer, got {n}")),
        },
        other => {
            return Err(format!(
                "`batch` must be a positive integer, got {}",
                json_kind(other)
            ))
        }
    };

    let config = match &obj["config"] {
        Json::Object(cfg_obj) => EntryConfig::Tuned(parse_config(cfg_obj, schema, typed, h)?),
        Json::String(s) if s == DEFAULT_MARKER => EntryConfig::Default,
        other => {
            return Err(format!(
                "`config` must be an object or \"{DEFAULT_MARKER}\", got {other}"
            ))
        }
    };

    let time = |name: &str| -> Result<f64, String> {
        match obj[name].as_f64() {
            Some(t) if t > 0.0 && t.is_finite() => Ok(t),
            _ => Err(format!(
                "`{name}` must be a positive number of microseconds, got {}",
                obj[name]
            )),
        }
    };
    let (us, default_us) = (time("us")?, time("default_us")?);
    if config.is_default() && us != default_us {
        return Err(format!(
            "a default marker's `us` ({us}) must equal its `default_us` ({default_us})"
        ));
    }
    Ok(TableEntry {
        key,
        batch,
        config,
        us,
        default_us,
    })
}

/// A tuned config object's values in the schema's parameter order.
fn parse_config(
    cfg_obj: &Map<String, Json>,
    schema: &KernelSchema,
    typed: bool,
    h: &TableHeader,
) -> Result<Vec<Value>, String> {
    if let Some(k) = cfg_obj
        .keys()
        .find(|k| !schema.params.iter().any(|f| f.name == k.as_str()))
    {
        return Err(format!(
            "config: unknown parameter `{k}` (params: {})",
            h.params.join(", ")
        ));
    }
    let mut config = Vec::with_capacity(schema.params.len());
    for f in schema.params {
        let v = cfg_obj
            .get(f.name)
            .ok_or_else(|| format!("config: missing parameter `{}`", f.name))?;
        config.push(json_to_value(f, v, typed).map_err(|e| format!("config: {e}"))?);
    }
    Ok(config)
}

/// Every `<kernel>/<target>.json` below `root`, sorted.
pub fn table_files(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for kernel_dir in std::fs::read_dir(root)? {
        let kernel_dir = kernel_dir?.path();
        if !kernel_dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&kernel_dir)? {
            let f = f?.path();
            if f.extension().and_then(|e| e.to_str()) == Some("json") {
                out.push(f);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A table file served in place of the baked table: a table a tuning run has just written,
/// timed in the same device call before it is landed and baked (see [`TableFile::to_serve`]).
#[derive(Debug)]
pub struct ServedTable {
    pub header: TableHeader,
    /// The entries per canonical static key text, in the baked form the lookup rule
    /// takes ([`crate::resolve_in_entries`]), sorted by batch.
    pub entries: HashMap<String, Vec<BakedEntry>>,
    /// Set where the file was tuned against another kernel source than the one given
    /// and served anyway: what differs, for the caller to say.
    pub other_source: Option<String>,
}

/// Why [`TableFile::to_serve`] refused a file.
#[derive(Clone, Debug, PartialEq)]
pub enum ServeError {
    /// Unreadable or invalid, or of another kernel or target.
    File(String),
    /// Tuned against another kernel source (served with `any_source`).
    OtherSource(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::File(e) | ServeError::OtherSource(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ServeError {}

impl ServedTable {
    /// The entries of one static key (none: the analytic default serves it).
    pub fn key_entries(&self, key: &str) -> &[BakedEntry] {
        self.entries.get(key).map_or(&[], Vec::as_slice)
    }
}

impl TableFile {
    /// Reads the table file at `path` to serve by the baked lookup rule: refused unless
    /// it holds `schema`'s kernel for `target` and was tuned against `fingerprint` (its
    /// configs would be served against code they were not measured on), unless
    /// `any_source`, which serves it anyway (two builds of a source change timed on the
    /// same configs) and says so in [`ServedTable::other_source`]; refused for that
    /// reason alone, the error is [`ServeError::OtherSource`]. The entries' values
    /// are leaked to `'static`, as the baked tables' are: for a process that serves one
    /// file for its whole run (a bench).
    pub fn to_serve(
        path: &Path,
        schema: &KernelSchema,
        target: Target,
        fingerprint: &str,
        any_source: bool,
    ) -> Result<ServedTable, ServeError> {
        let file = TableFile::read(path, Some(schema)).map_err(|e| ServeError::File(e.to_string()))?;
        let h = &file.header;
        if h.kernel != schema.kernel || h.target != target {
            return Err(ServeError::File(format!(
                "{} holds kernel {} for {}, not {} for this device's {}",
                path.display(),
                h.kernel,
                h.target.name(),
                schema.kernel,
                target.name()
            )));
        }
        let mut other_source = None;
        if h.source_fingerprint != fingerprint {
            let what = format!(
                "{} was tuned against kernel source {}, this binary has {fingerprint}",
                path.display(),
                h.source_fingerprint
            );
            if !any_source {
                return Err(ServeError::OtherSource(what));
            }
            other_source = Some(what);
        }
        let mut entries: HashMap<String, Vec<BakedEntry>> = HashMap::new();
        for e in file.entries {
            let config = match e.config {
                EntryConfig::Tuned(v) => EntryConfig::Tuned(&*Box::leak(v.into_boxed_slice())),
                EntryConfig::Default => EntryConfig::Default,
            };
            // The file's entries are sorted by (key, batch) with unique pairs, as the
            // nearest-batch rule needs.
            entries
                .entry(e.key.as_str().to_string())
                .or_default()
                .push(BakedEntry {
                    batch: e.batch,
                    config,
                    us: e.us,
                    default_us: e.default_us,
                });
        }
        Ok(ServedTable {
            header: file.header,
            entries,
            other_source,
        })
    }
}
