//! Carrying searches across a source change that leaves their machine code as it was.
//!
//! A search's record is cached under the kernel-source fingerprint, so any edit of a
//! kernel's source (a new variant, a fix in one path) sends `kernels tune` back to
//! searching every shape. Most searches may not have seen the edit at all: when every
//! candidate a search timed compiles, under the device's compiler, to the same bytes
//! from the old source as from the new, the search would run the same machine code on
//! the same problems, and its record stands for the new source too. [`OldSource`] reads
//! the old files, [`SameCode`] compares what each variant compiles to (in parallel,
//! once per variant), and [`carries`] decides for one record. A search that any part of
//! the edit reaches (a changed variant among its candidates, or a candidate the old
//! search did not time) is searched again.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use tuned::Value;

use super::TuneRecord;
use crate::{Error, KernelSource, Result, Variant};

/// A kernel's source as it was before a change: its files, read from a folder by the
/// names its fingerprint covers ([`KernelSource::files`]), in the current source's
/// structure (the same preamble parts, then the code).
#[derive(Clone, Copy, Debug)]
pub struct OldSource {
    /// The old texts, under the old fingerprint (leaked: a tool reads one per run).
    pub source: KernelSource,
}

impl OldSource {
    /// The old version of `current` from the files of `dir` (`--carry-from`), each
    /// named as in [`KernelSource::files`]. Errors name `carry-from`: a source without
    /// file names or with headers, names that do not give the current fingerprint from
    /// the current texts (so they would not give the old one from the old texts), or a
    /// file that does not read.
    pub fn read(current: &KernelSource, dir: &Path) -> Result<OldSource> {
        let arg = "carry-from";
        let names = current.files;
        if names.is_empty() || !current.headers.is_empty() || names.len() != current.preamble.len() + 1 {
            return Err(Error::invalid(
                arg,
                format!(
                    "kernel `{}`: its source does not name the files its fingerprint covers, one per preamble part and one for the code",
                    current.name
                ),
            ));
        }
        let texts: Vec<&str> = current.preamble.iter().copied().chain([current.code]).collect();
        let pairs: Vec<(&str, &str)> = names.iter().copied().zip(texts).collect();
        if tuned::fingerprint(&pairs) != current.fingerprint {
            return Err(Error::invalid(
                arg,
                format!(
                    "kernel `{}`: the files {names:?} do not give its fingerprint {}",
                    current.name, current.fingerprint
                ),
            ));
        }
        let mut old = Vec::with_capacity(names.len());
        for name in names {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                Error::invalid(
                    arg,
                    format!("kernel `{}`: cannot read {}: {e}", current.name, path.display()),
                )
            })?;
            old.push(&*Box::leak(text.into_boxed_str()));
        }
        let pairs: Vec<(&str, &str)> = names.iter().copied().zip(old.iter().copied()).collect();
        let fingerprint: &'static str = Box::leak(tuned::fingerprint(&pairs).into_boxed_str());
        let (code, preamble) = old.split_last().expect("one file per preamble part and the code");
        let preamble: &'static [&'static str] = Box::leak(preamble.to_vec().into_boxed_slice());
        Ok(OldSource {
            source: KernelSource {
                preamble,
                code,
                fingerprint,
                ..*current
            },
        })
    }

    /// Whether the old files are the current ones, as far as the fingerprint sees
    /// (comments aside): then there is nothing to carry.
    pub fn is_current(&self, current: &KernelSource) -> bool {
        self.source.fingerprint == current.fingerprint
    }
}

/// Compiles one variant of a source to its machine code (the device's compiler, for
/// the device's arch).
pub type CompileFn<'a> = dyn Fn(&KernelSource, &Variant) -> Result<Vec<u8>> + Sync + 'a;

/// Which variants compile to the same bytes from the old source as from the new: each
/// variant compiled once from each, the comparisons kept. A variant that fails to
/// compile from either source counts as changed.
pub struct SameCode<'a> {
    old: &'a KernelSource,
    new: &'a KernelSource,
    compile: &'a CompileFn<'a>,
    seen: Mutex<HashMap<Variant, bool>>,
}

impl<'a> SameCode<'a> {
    pub fn new(old: &'a KernelSource, new: &'a KernelSource, compile: &'a CompileFn<'a>) -> SameCode<'a> {
        SameCode {
            old,
            new,
            compile,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Compares the variants not compared yet, on `threads` threads at once (each
    /// compile is independent and the compilers are thread-safe).
    pub fn prepare(&self, variants: &[Variant], threads: usize) {
        let mut todo: Vec<Variant> = {
            let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            variants
                .iter()
                .filter(|v| !seen.contains_key(*v))
                .cloned()
                .collect()
        };
        todo.sort_by_key(|v| v.to_string());
        todo.dedup();
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads.clamp(1, todo.len().max(1)) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(v) = todo.get(i) else { break };
                    let same = match ((self.compile)(self.old, v), (self.compile)(self.new, v)) {
                        (Ok(a), Ok(b)) => a == b,
                        _ => false,
                    };
                    self.seen
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(v.clone(), same);
                });
            }
        });
    }

    /// Whether every one of `variants` compiles to the same bytes from both sources
    /// (compared here, one at a time, where [`SameCode::prepare`] has not).
    pub fn all_same(&self, variants: &[Variant]) -> bool {
        self.prepare(variants, 1);
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        variants.iter().all(|v| seen.get(v).copied().unwrap_or(false))
    }

    /// The variants compared so far and how many of them changed.
    pub fn counts(&self) -> (usize, usize) {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        (seen.len(), seen.values().filter(|same| !**same).count())
    }
}

/// Whether `record`, a search made under the old source whose cache key matches the
/// new search's but for the fingerprint and the candidate list (same kernel, device,
/// compiler, key, batch and timing), stands for the new search, whose candidates are
/// `candidates` (the default first, the table's entry after it where the space holds
/// it): the record timed every one of them, its chosen config is one of them, and
/// every one compiles to the same bytes from both sources. The new search would run
/// the same machine code on the same problem, less the candidates the space no longer
/// holds (pruned, or past a new limit), none of which was chosen.
pub fn carries(
    record: &TuneRecord,
    candidates: &[Vec<Value>],
    variants: &dyn Fn(&[Value]) -> Result<Vec<Variant>>,
    same: &SameCode<'_>,
) -> bool {
    let timed = |c: &Vec<Value>| record.candidates.iter().any(|r| r.config == *c);
    if candidates.is_empty() || !candidates.iter().all(timed) || !candidates.contains(&record.config) {
        return false;
    }
    let mut all = Vec::new();
    for c in candidates {
        match variants(c) {
            Ok(v) => all.extend(v),
            Err(_) => return false,
        }
    }
    same.all_same(&all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::{CandidateRecord, SearchPhases};

    static NEW: KernelSource = KernelSource::new("k", "int code;\n#if A\nint a;\n#endif\n", "fnv1a64:?")
        .with_preamble(&["int prelude;\n"])
        .with_files(&["prelude.cuh", "k.cu"]);

    /// NEW with its real fingerprint.
    fn new_source() -> KernelSource {
        let fp = tuned::fingerprint(&[("prelude.cuh", NEW.preamble[0]), ("k.cu", NEW.code)]);
        KernelSource {
            fingerprint: Box::leak(fp.into_boxed_str()),
            ..NEW
        }
    }

    fn dir_with(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("kernels-carry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (n, t) in files {
            std::fs::write(dir.join(n), t).unwrap();
        }
        dir
    }

    /// A stand-in compiler: the "machine code" of a variant is the text the
    /// preprocessor would keep for it (here: the lines outside `#if A` blocks, and those
    /// inside where the variant defines A).
    fn compile(source: &KernelSource, v: &Variant) -> Result<Vec<u8>> {
        let a = v.to_string().contains("-DA=1");
        let mut out = String::new();
        let mut keep = true;
        for line in source.text().lines() {
            match line.trim() {
                "#if A" => keep = a,
                "#endif" => keep = true,
                _ if keep => out.push_str(line),
                _ => {}
            }
        }
        Ok(out.into_bytes())
    }

    fn record(configs: &[i64]) -> TuneRecord {
        TuneRecord {
            config: vec![Value::Int(configs[0])],
            us: 1.0,
            default_us: Some(2.0),
            device: "d".into(),
            compiler: "c".into(),
            tuned_at: "2026-12-01".into(),
            candidates: configs
                .iter()
                .map(|&c| CandidateRecord {
                    config: vec![Value::Int(c)],
                    outcome: Ok(1.0),
                })
                .collect(),
            phases: SearchPhases::default(),
        }
    }

    /// Config 1 defines A (the block the edit reaches), every other config does not.
    fn variants(config: &[Value]) -> Result<Vec<Variant>> {
        match config {
            [Value::Int(1)] => Ok(vec![Variant::new("k").define("A", 1)]),
            [Value::Int(c)] if *c >= 0 => Ok(vec![Variant::new("k").define("B", *c)]),
            _ => Err(Error::invalid("config", "no such config")),
        }
    }

    /// The old files are read by their names under the old fingerprint; an edit inside
    /// `#if A` leaves the searches without an A variant carried and the others not; a
    /// preferred config the record did not time, or a candidate that no longer parses,
    /// stops the carry.
    #[test]
    fn only_searches_whose_code_is_unchanged_carry() {
        let new = new_source();
        let old_code = "int code;\n#if A\nint a_before;\n#endif\n";
        let dir = dir_with("edit", &[("prelude.cuh", "int prelude;\n"), ("k.cu", old_code)]);
        let old = OldSource::read(&new, &dir).unwrap();
        assert!(!old.is_current(&new));
        assert_eq!(old.source.code, old_code);
        assert_eq!(old.source.preamble, new.preamble);
        assert_eq!(
            old.source.fingerprint,
            tuned::fingerprint(&[("prelude.cuh", "int prelude;\n"), ("k.cu", old_code)])
        );
        let same = SameCode::new(&old.source, &new, &compile);
        same.prepare(
            &[Variant::new("k").define("B", 0), Variant::new("k").define("A", 1)],
            4,
        );
        assert_eq!(same.counts(), (2, 1));
        let list = |c: &[i64]| -> Vec<Vec<Value>> { c.iter().map(|&c| vec![Value::Int(c)]).collect() };
        // `record(&[chosen, ...])`: the configs it timed, the first chosen.
        let untouched = record(&[0, 2, 3]);
        assert!(carries(&untouched, &list(&[0, 2, 3]), &variants, &same));
        // The space lost a config the search had timed (not the chosen one).
        assert!(carries(&untouched, &list(&[0, 3]), &variants, &same));
        // ... or the chosen one: the new search would choose among the others.
        assert!(!carries(&untouched, &list(&[2, 3]), &variants, &same));
        // A candidate the old search never timed (a new config, or the table's entry).
        assert!(!carries(&untouched, &list(&[0, 2, 3, 7]), &variants, &same));
        // A candidate whose code changed.
        assert!(!carries(&record(&[0, 1, 3]), &list(&[0, 1, 3]), &variants, &same));
        // A candidate that no longer parses.
        assert!(!carries(&record(&[0, -1]), &list(&[0, -1]), &variants, &same));
        std::fs::remove_dir_all(&dir).unwrap();
        // The same files: nothing to carry.
        let dir = dir_with("same", &[("prelude.cuh", "int prelude;\n"), ("k.cu", NEW.code)]);
        assert!(OldSource::read(&new, &dir).unwrap().is_current(&new));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A failed compile counts as changed code.
    #[test]
    fn a_variant_that_does_not_compile_is_changed() {
        let new = new_source();
        let failing = |s: &KernelSource, v: &Variant| {
            if s.fingerprint == new.fingerprint {
                compile(s, v)
            } else {
                Err(Error::invalid("source", "does not compile"))
            }
        };
        let old = KernelSource {
            fingerprint: "fnv1a64:old",
            ..new
        };
        let same = SameCode::new(&old, &new, &failing);
        assert!(!same.all_same(&[Variant::new("k").define("B", 0)]));
        assert_eq!(same.counts(), (1, 1));
    }

    /// Errors name `carry-from`: a missing file, names that do not give the fingerprint,
    /// a source that names no files.
    #[test]
    fn bad_old_sources_are_errors_naming_the_argument() {
        let new = new_source();
        let dir = dir_with("missing", &[("prelude.cuh", "int prelude;\n")]);
        let e = OldSource::read(&new, &dir).unwrap_err().to_string();
        assert!(e.contains("carry-from") && e.contains("k.cu"), "{e}");
        let misnamed = KernelSource {
            files: &["prelude.cuh", "other.cu"],
            ..new
        };
        let e = OldSource::read(&misnamed, &dir).unwrap_err().to_string();
        assert!(e.contains("carry-from") && e.contains("fingerprint"), "{e}");
        let unnamed = KernelSource { files: &[], ..new };
        let e = OldSource::read(&unnamed, &dir).unwrap_err().to_string();
        assert!(e.contains("carry-from") && e.contains("name"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
