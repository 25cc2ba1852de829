//! Build-time baking of committed tuning tables into perfect-hash maps.
//!
//! A kernel crate's `build.rs` names its kernels (schema and search-space check)
//! and its kernel sources (its own files, and texts from its build-dependencies such
//! as the shared prelude), then calls [`Bake::run`]:
//!
//! ```no_run
//! # static SCHEMA: tuned::KernelSchema = tuned::KernelSchema { kernel: "softmax", key: &[], params: &[] };
//! # fn check(_: &[tuned::Value]) -> Result<(), String> { Ok(()) }
//! # const PRELUDE: &str = "";
//! build_tools::Bake::new()
//!     .kernel(&SCHEMA, check)
//!     .source_text("prelude.cuh", PRELUDE)
//!     .source("cuda/softmax.cu")
//!     .run();
//! ```
//!
//! For each kernel and each target enabled by the crate's cargo features
//! (`sm80 sm90 gfx90a gfx942 gfx950`), `tables/<kernel>/<target>.json` of the crate (its own folder) is read,
//! validated (file, entry and reason on failure, which fails the build) and emitted
//! as a `phf::Map` in `$OUT_DIR/tuned_tables.rs`. The crate includes that file and
//! gets, per kernel, `<kernel>_table(Target) -> Option<&'static BakedTable>`, plus
//! `SOURCE_FINGERPRINT` and `SOURCE_FILES` (the names it covers, in order). A table
//! whose `source_fingerprint` differs from the current source is stale: a cargo
//! warning, or an error when `TUNED_STRICT` is on (`1`, `true`, `yes`, `on`; another
//! value that is not off fails the build).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tuned::{EntryConfig, KernelSchema, TableError, TableFile, Target, Value};

/// A kernel to bake: its schema and the check its configs must pass.
#[derive(Clone, Copy)]
pub struct KernelSpec {
    pub schema: &'static KernelSchema,
    pub check_config: fn(&[Value]) -> Result<(), String>,
}

/// A kernel source the fingerprint covers, named by its file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file (in [`Bake`], relative to the crate), named by its file name.
    File(PathBuf),
    /// A text that reaches the crate through a dependency, under the file name it has
    /// there (the shared prelude: `prelude.cuh`).
    Text { name: String, text: String },
}

/// One baking job (one kernel crate).
pub struct Bake {
    kernels: Vec<KernelSpec>,
    sources: Vec<Source>,
    tables_dir: Option<PathBuf>,
    targets: Option<Vec<Target>>,
}

/// Why baking failed.
#[derive(Debug)]
pub enum BakeError {
    /// A table did not validate: file, entry and reason.
    Table(TableError),
    /// A table was tuned against another kernel source and strictness was asked for.
    Stale {
        file: String,
        table: String,
        current: String,
    },
    /// A source file or the output could not be read or written.
    Io(String),
}

impl std::fmt::Display for BakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BakeError::Table(e) => write!(f, "{e}"),
            BakeError::Stale { file, table, current } => write!(
                f,
                "{file}: stale table: tuned against source {table}, the kernel source is now {current} (retune, or unset TUNED_STRICT)"
            ),
            BakeError::Io(e) => f.write_str(e),
        }
    }
}

impl Default for Bake {
    fn default() -> Self {
        Self::new()
    }
}

impl Bake {
    pub fn new() -> Self {
        Bake {
            kernels: Vec::new(),
            sources: Vec::new(),
            tables_dir: None,
            targets: None,
        }
    }

    /// Adds a kernel whose tables this crate bakes.
    pub fn kernel(
        mut self,
        schema: &'static KernelSchema,
        check_config: fn(&[Value]) -> Result<(), String>,
    ) -> Self {
        self.kernels.push(KernelSpec { schema, check_config });
        self
    }

    /// Adds a kernel source file (relative to the crate) to the fingerprint.
    pub fn source(mut self, path: impl Into<PathBuf>) -> Self {
        self.sources.push(Source::File(path.into()));
        self
    }

    /// Adds a kernel source text from a dependency, under its file `name`, to the
    /// fingerprint. Cargo reruns the build script when that dependency changes.
    pub fn source_text(mut self, name: &str, text: &str) -> Self {
        self.sources.push(Source::Text {
            name: name.to_string(),
            text: text.to_string(),
        });
        self
    }

    /// Reads tables from `dir` (relative to the crate) instead of the crate's `tables`.
    pub fn tables_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.tables_dir = Some(dir.into());
        self
    }

    /// Bakes these targets instead of those enabled by cargo features.
    pub fn targets(mut self, targets: &[Target]) -> Self {
        self.targets = Some(targets.to_vec());
        self
    }

    /// The build-script entry point: bakes into `$OUT_DIR/tuned_tables.rs`, prints
    /// the cargo directives, and on failure prints the reason and exits non-zero.
    pub fn run(self) {
        match self.run_in_build_script() {
            Ok(warnings) => {
                for w in warnings {
                    println!("cargo:warning={w}");
                }
            }
            Err(e) => {
                // A build script reports by its exit status; the message is what cargo shows.
                eprintln!("error: {e}");
                println!("cargo:warning={e}");
                std::process::exit(1);
            }
        }
    }

    fn run_in_build_script(self) -> Result<Vec<String>, BakeError> {
        let env = |k: &str| std::env::var(k).map_err(|_| BakeError::Io(format!("{k} is not set")));
        let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
        let out = PathBuf::from(env("OUT_DIR")?);
        println!("cargo:rerun-if-env-changed=TUNED_STRICT");
        println!("cargo:rerun-if-env-changed=TUNED_TABLES_DIR");
        let strict = tuned::env_flag("TUNED_STRICT").map_err(|e| BakeError::Io(e.to_string()))?;
        let tables_dir = match (&self.tables_dir, std::env::var_os("TUNED_TABLES_DIR")) {
            (_, Some(d)) => PathBuf::from(d),
            (Some(d), None) => manifest.join(d),
            (None, None) => manifest.join("tables"),
        };
        let targets = self.targets.clone().unwrap_or_else(enabled_targets);
        let sources: Vec<Source> = self
            .sources
            .iter()
            .map(|s| match s {
                Source::File(path) => {
                    let path = manifest.join(path);
                    println!("cargo:rerun-if-changed={}", path.display());
                    Source::File(path)
                }
                text => text.clone(),
            })
            .collect();
        for k in &self.kernels {
            let dir = tables_dir.join(k.schema.kernel);
            // Watching the folder catches a table file being added for a new target.
            println!("cargo:rerun-if-changed={}", dir.display());
            for t in &targets {
                println!(
                    "cargo:rerun-if-changed={}",
                    dir.join(format!("{}.json", t.name())).display()
                );
            }
        }
        let baked = self.generate(&tables_dir, &targets, &sources, strict)?;
        std::fs::write(out.join("tuned_tables.rs"), baked.code)
            .map_err(|e| BakeError::Io(format!("cannot write tuned_tables.rs: {e}")))?;
        Ok(baked.warnings)
    }

    /// Reads, validates and generates the code, with no cargo directives: the testable
    /// core of [`Bake::run`].
    pub fn generate(
        &self,
        tables_dir: &Path,
        targets: &[Target],
        sources: &[Source],
        strict: bool,
    ) -> Result<Baked, BakeError> {
        let fingerprint = source_fingerprint(sources)?;
        let mut code = String::new();
        let mut warnings = Vec::new();
        writeln!(
            code,
            "// @generated by build-tools from committed tuning tables. Do not edit."
        )
        .ok();
        writeln!(code, "/// Fingerprint of this crate's kernel source.").ok();
        writeln!(code, "pub const SOURCE_FINGERPRINT: &str = {fingerprint:?};").ok();
        writeln!(
            code,
            "/// The file names the fingerprint covers, in its order (`KernelSource::with_files`)."
        )
        .ok();
        writeln!(
            code,
            "pub const SOURCE_FILES: &[&str] = &{:?};",
            source_names(sources)
        )
        .ok();
        for k in &self.kernels {
            let name = k.schema.kernel;
            let mut arms = Vec::new();
            for &target in targets {
                let path = tables_dir.join(name).join(format!("{}.json", target.name()));
                if !path.exists() {
                    continue;
                }
                let table = TableFile::read(&path, Some(k.schema)).map_err(BakeError::Table)?;
                // A default marker has no config to check: it serves the analytic default.
                for (i, e) in table.entries.iter().enumerate() {
                    let Some(config) = e.config.tuned() else {
                        continue;
                    };
                    (k.check_config)(config).map_err(|reason| {
                        BakeError::Table(TableError {
                            file: path.display().to_string(),
                            entry: Some(i),
                            reason: format!("config outside the search space: {reason}"),
                        })
                    })?;
                }
                if table.header.source_fingerprint != fingerprint {
                    let file = path.display().to_string();
                    if strict {
                        return Err(BakeError::Stale {
                            file,
                            table: table.header.source_fingerprint.clone(),
                            current: fingerprint,
                        });
                    }
                    warnings.push(format!(
                        "{file}: stale table: tuned against source {}, the kernel source is now {fingerprint}; its entries still serve, retune to refresh them",
                        table.header.source_fingerprint
                    ));
                }
                let ident = format!(
                    "{}_{}",
                    name.to_ascii_uppercase(),
                    target.name().to_ascii_uppercase()
                );
                emit_table(&mut code, &ident, &table, &fingerprint);
                arms.push((target, ident));
            }
            writeln!(
                code,
                "/// The baked `{name}` table for `target`, if that target was enabled and has one."
            )
            .ok();
            // With no table baked the match has only its fallback arm.
            writeln!(code, "#[allow(clippy::match_single_binding)]").ok();
            writeln!(
                code,
                "pub fn {name}_table(target: ::tuned::Target) -> ::core::option::Option<&'static ::tuned::BakedTable> {{"
            )
            .ok();
            writeln!(code, "    match target {{").ok();
            for (t, ident) in &arms {
                writeln!(
                    code,
                    "        ::tuned::Target::{t:?} => ::core::option::Option::Some(&{ident}),"
                )
                .ok();
            }
            writeln!(code, "        _ => ::core::option::Option::None,").ok();
            writeln!(code, "    }}\n}}").ok();
        }
        Ok(Baked {
            code,
            warnings,
            fingerprint,
        })
    }
}

/// What [`Bake::generate`] produced.
pub struct Baked {
    pub code: String,
    pub warnings: Vec<String>,
    pub fingerprint: String,
}

/// The targets enabled by the building crate's cargo features.
pub fn enabled_targets() -> Vec<Target> {
    Target::ALL
        .into_iter()
        .filter(|t| std::env::var_os(format!("CARGO_FEATURE_{}", t.name().to_ascii_uppercase())).is_some())
        .collect()
}

/// The names [`source_fingerprint`] gives `sources`, in order: each file's file name,
/// each text's own name.
pub fn source_names(sources: &[Source]) -> Vec<String> {
    sources
        .iter()
        .map(|s| match s {
            Source::File(p) => p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string(),
            Source::Text { name, .. } => name.clone(),
        })
        .collect()
}

/// The fingerprint ([`tuned::fingerprint`]) of kernel sources, each named by its file
/// name (so it does not depend on where the workspace is checked out).
pub fn source_fingerprint(sources: &[Source]) -> Result<String, BakeError> {
    let mut files = Vec::new();
    for (s, name) in sources.iter().zip(source_names(sources)) {
        let text = match s {
            Source::File(p) => std::fs::read_to_string(p)
                .map_err(|e| BakeError::Io(format!("cannot read kernel source {}: {e}", p.display())))?,
            Source::Text { text, .. } => text.clone(),
        };
        files.push((name, text));
    }
    let refs: Vec<(&str, &str)> = files.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    Ok(tuned::fingerprint(&refs))
}

fn value_code(v: &Value) -> String {
    match v {
        Value::Int(i) => format!("::tuned::Value::Int({i})"),
        Value::Str(s) => format!("::tuned::Value::str({:?})", s.as_ref()),
    }
}

fn emit_table(code: &mut String, ident: &str, table: &TableFile, built_fingerprint: &str) {
    let h = &table.header;
    // Entries are sorted by (key, batch), so each key's run is contiguous and sorted.
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for e in &table.entries {
        let config = match &e.config {
            EntryConfig::Tuned(values) => {
                let values: Vec<String> = values.iter().map(value_code).collect();
                format!("::tuned::EntryConfig::Tuned(&[{}])", values.join(", "))
            }
            EntryConfig::Default => "::tuned::EntryConfig::Default".to_string(),
        };
        let entry = format!(
            "::tuned::BakedEntry {{ batch: {}, config: {config}, us: {:?}, default_us: {:?} }}",
            e.batch, e.us, e.default_us
        );
        match groups.last_mut() {
            Some((k, v)) if k == e.key.as_str() => v.push(entry),
            _ => groups.push((e.key.as_str().to_string(), vec![entry])),
        }
    }
    let mut map = phf_codegen::Map::new();
    map.phf_path("::tuned::phf");
    let values: Vec<String> = groups
        .iter()
        .map(|(_, v)| format!("&[\n        {}\n    ]", v.join(",\n        ")))
        .collect();
    for ((k, _), v) in groups.iter().zip(&values) {
        map.entry(k.as_str(), v.as_str());
    }
    let params: Vec<String> = h.params.iter().map(|p| format!("{p:?}")).collect();
    writeln!(
        code,
        "/// `{}` tuned for {} on {} ({}), {}.\n// Measured times can look like a constant (3.141 us is not PI).\n#[allow(clippy::approx_constant)]\npub static {ident}: ::tuned::BakedTable = ::tuned::BakedTable {{\n    kernel: {:?},\n    target: ::tuned::Target::{:?},\n    device: {:?},\n    compiler: {:?},\n    source_fingerprint: {:?},\n    built_fingerprint: {:?},\n    tuned_at: {:?},\n    timing: {:?},\n    params: &[{}],\n    len: {},\n    entries: {},\n}};",
        h.kernel,
        h.target,
        h.device,
        h.compiler,
        h.tuned_at,
        h.kernel,
        h.target,
        h.device,
        h.compiler,
        h.source_fingerprint,
        built_fingerprint,
        h.tuned_at,
        h.timing,
        params.join(", "),
        table.entries.len(),
        map.build()
    )
    .ok();
}
