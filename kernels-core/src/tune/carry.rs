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
    seen: Mutex<HashMap<Variant, Compared>>,
}

/// How a variant's image from the new source compares with the old one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compared {
    /// Byte for byte the same: its searches may carry.
    Same,
    /// Other bytes, but the same instructions (every executable section of the ELF
    /// image alike): other data or symbols, such as a constant added at namespace scope,
    /// which NVRTC emits into every image. Not carried (data may be read), but worth
    /// naming, as the edit that causes it usually has a form that leaves the bytes.
    SameInstructions,
    /// Other instructions, an image that is not ELF, or a failed compile.
    Changed,
}

/// What [`SameCode`] compared so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodeCounts {
    /// Variants compiled from both sources.
    pub compared: usize,
    /// Those whose images differ.
    pub changed: usize,
    /// Of the changed, those whose executable sections are all alike (only data or
    /// symbols differ).
    pub same_instructions: usize,
}

/// The executable sections of an ELF64 little-endian image (a CUDA cubin or an AMDGPU
/// code object) by name, in the file's order; `None` for anything else or an image
/// whose headers point outside it.
fn executable_sections(image: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    const SHF_EXECINSTR: u64 = 0x4;
    let u16_at = |o: usize| Some(u16::from_le_bytes(image.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(image.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(image.get(o..o + 8)?.try_into().ok()?));
    if image.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let (entsize, count, names) = (
        usize::from(u16_at(0x3A)?),
        usize::from(u16_at(0x3C)?),
        usize::from(u16_at(0x3E)?),
    );
    if entsize < 64 {
        return None;
    }
    let header = |i: usize| -> Option<(u32, u64, &[u8])> {
        let h = shoff.checked_add(i.checked_mul(entsize)?)?;
        let (offset, size) = (
            usize::try_from(u64_at(h + 24)?).ok()?,
            usize::try_from(u64_at(h + 32)?).ok()?,
        );
        let body = if u32_at(h + 4)? == 8 {
            &[][..]
        } else {
            image.get(offset..offset.checked_add(size)?)?
        };
        Some((u32_at(h)?, u64_at(h + 8)?, body))
    };
    let (_, _, strings) = header(names)?;
    let mut out = Vec::new();
    for i in 0..count {
        let (name, flags, body) = header(i)?;
        if flags & SHF_EXECINSTR != 0 {
            let name = strings.get(usize::try_from(name).ok()?..)?;
            let end = name.iter().position(|&b| b == 0)?;
            out.push((&name[..end], body));
        }
    }
    Some(out)
}

/// How `new` compares with `old` (two compiled images of one variant).
fn compare_images(old: &[u8], new: &[u8]) -> Compared {
    if old == new {
        return Compared::Same;
    }
    match (executable_sections(old), executable_sections(new)) {
        (Some(a), Some(b)) if !a.is_empty() && a == b => Compared::SameInstructions,
        _ => Compared::Changed,
    }
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
                        (Ok(a), Ok(b)) => compare_images(&a, &b),
                        _ => Compared::Changed,
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
        variants.iter().all(|v| seen.get(v) == Some(&Compared::Same))
    }

    /// The variants compared so far, how many of them changed, and how many of those
    /// kept their instructions.
    pub fn counts(&self) -> CodeCounts {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let count = |c: Compared| seen.values().filter(|s| **s == c).count();
        CodeCounts {
            compared: seen.len(),
            changed: seen.len() - count(Compared::Same),
            same_instructions: count(Compared::SameInstructions),
        }
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
        assert_eq!(
            same.counts(),
            CodeCounts {
                compared: 2,
                changed: 1,
                same_instructions: 0
            }
        );
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

    /// A minimal ELF64 image: the given sections (name, flags, bytes) after a null
    /// section, then the section-name table.
    fn elf(sections: &[(&str, u64, &[u8])]) -> Vec<u8> {
        let mut names = vec![0u8];
        let mut headers = vec![[0u8; 64]];
        let mut body = Vec::new();
        let at = |o: usize, h: &mut [u8; 64], v: &[u8]| h[o..o + v.len()].copy_from_slice(v);
        let mut section = |name: &str, kind: u32, flags: u64, bytes: &[u8], body: &mut Vec<u8>| {
            let mut h = [0u8; 64];
            at(0, &mut h, &(names.len() as u32).to_le_bytes());
            names.extend(name.bytes().chain([0]));
            at(4, &mut h, &kind.to_le_bytes());
            at(8, &mut h, &flags.to_le_bytes());
            at(24, &mut h, &(64 + body.len() as u64).to_le_bytes());
            at(32, &mut h, &(bytes.len() as u64).to_le_bytes());
            body.extend_from_slice(bytes);
            h
        };
        for (name, flags, bytes) in sections {
            headers.push(section(name, 1, *flags, bytes, &mut body));
        }
        let mut h = section(".shstrtab", 3, 0, &[], &mut body);
        let names_at = 64 + body.len() as u64;
        body.extend_from_slice(&names);
        h[24..32].copy_from_slice(&names_at.to_le_bytes());
        h[32..40].copy_from_slice(&(names.len() as u64).to_le_bytes());
        headers.push(h);
        let mut image = vec![0u8; 64];
        image[..6].copy_from_slice(b"\x7fELF\x02\x01");
        image[0x28..0x30].copy_from_slice(&(64 + body.len() as u64).to_le_bytes());
        image[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        image[0x3C..0x3E].copy_from_slice(&(headers.len() as u16).to_le_bytes());
        image[0x3E..0x40].copy_from_slice(&(headers.len() as u16 - 1).to_le_bytes());
        image.extend(body);
        image.extend(headers.concat());
        image
    }

    /// Images compare byte for byte; where they differ, the executable sections tell
    /// other data or symbols (a constant added at namespace scope) from other code.
    #[test]
    fn images_with_the_same_instructions_are_told_apart_from_other_code() {
        const EXEC: u64 = 0x6;
        let base = elf(&[
            (".text.k", EXEC, b"code"),
            (".nv.constant4", 2, b"\x03\x00\x00\x00"),
        ]);
        assert_eq!(
            executable_sections(&base),
            Some(vec![(&b".text.k"[..], &b"code"[..])])
        );
        assert_eq!(compare_images(&base, &base.clone()), Compared::Same);
        // One more constant: other bytes, the same instructions. Not carried.
        let more_data = elf(&[
            (".text.k", EXEC, b"code"),
            (".nv.constant4", 2, b"\x03\x00\x00\x00\x05\x00\x00\x00"),
        ]);
        assert_eq!(compare_images(&base, &more_data), Compared::SameInstructions);
        // Other instructions, a kernel more or less, a non-ELF image, a broken header.
        let other_code = elf(&[
            (".text.k", EXEC, b"c0de"),
            (".nv.constant4", 2, b"\x03\x00\x00\x00"),
        ]);
        assert_eq!(compare_images(&base, &other_code), Compared::Changed);
        let two = elf(&[(".text.k", EXEC, b"code"), (".text.j", EXEC, b"more")]);
        assert_eq!(compare_images(&base, &two), Compared::Changed);
        assert_eq!(compare_images(b"ptx a", b"ptx b"), Compared::Changed);
        let mut cut = more_data.clone();
        cut.truncate(cut.len() - 70);
        assert_eq!(executable_sections(&cut), None);
        assert_eq!(compare_images(&base, &cut), Compared::Changed);
        // Data only on both sides: nothing executable to compare.
        let data = elf(&[(".nv.constant4", 2, b"\x03")]);
        assert_eq!(
            compare_images(&data, &elf(&[(".nv.constant4", 2, b"\x04")])),
            Compared::Changed
        );
        // Counted, and not carried.
        let old = KernelSource {
            fingerprint: "fnv1a64:old",
            ..new_source()
        };
        let new = new_source();
        let images = |s: &KernelSource, _: &Variant| {
            Ok(if s.fingerprint == "fnv1a64:old" {
                base.clone()
            } else {
                more_data.clone()
            })
        };
        let same = SameCode::new(&old, &new, &images);
        assert!(!same.all_same(&[Variant::new("k")]));
        assert_eq!(
            same.counts(),
            CodeCounts {
                compared: 1,
                changed: 1,
                same_instructions: 1
            }
        );
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
        assert_eq!(
            same.counts(),
            CodeCounts {
                compared: 1,
                changed: 1,
                same_instructions: 0
            }
        );
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
