//! The persistent cache: compiled modules and online tuning results on disk.
//!
//! Layout: `<root>/v1/<section>/<kernel>-<hash>.kc`, one file per [`CacheKey`]. One
//! file per key means two processes never read-modify-write a shared file: each
//! writes whole files through [`tuned::write_atomic`] (temp file + rename), so
//! concurrent writers lose nothing and readers never see a torn file.
//!
//! Every file carries a header with a checksum and its full key text:
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | magic `KRNLCCH1` |
//! | 4 | key text length, little-endian |
//! | 4 | kind length (`cubin`, `ptx`, `tune`), little-endian |
//! | 8 | payload length, little-endian |
//! | 8 | FNV-1a 64 over key text, kind and payload, little-endian |
//! | ... | key text, kind, payload |
//!
//! A file that is short, long, mis-tagged, fails its checksum or holds another key is
//! reported as [`Lookup::Corrupt`] and never trusted; the caller recomputes and the
//! next store replaces it.

mod key;

pub use key::{
    cache_key, codegen_env, search_text, AlignClass, CacheKey, CacheKeyParts, Component, CODEGEN_ENV_VARS,
    PDL_TUNING_VARIANT,
};

use std::path::{Path, PathBuf};

use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"KRNLCCH1";
const HEADER_LEN: usize = 8 + 4 + 4 + 8 + 8;
/// Payloads larger than this are refused on read (no kernel image comes near it), so
/// a corrupt length field cannot make us allocate gigabytes.
const MAX_PAYLOAD: u64 = 1 << 30;

/// The environment variable naming the cache folder. Set but empty disables the cache.
pub const CACHE_DIR_ENV: &str = "KERNELS_CACHE_DIR";

/// What a cache section holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Section {
    /// Compiled modules (CUBIN, or PTX where CUBIN was unavailable).
    Modules,
    /// Online tuning results ([`crate::TuneRecord`] as JSON).
    Tuning,
}

impl Section {
    /// The section's folder name.
    pub const fn dir_name(self) -> &'static str {
        match self {
            Section::Modules => "modules",
            Section::Tuning => "tuning",
        }
    }
}

/// One cached item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// What the payload is (`cubin`, `ptx`, `tune`).
    pub kind: String,
    pub payload: Vec<u8>,
}

/// The result of a cache read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A whole, checked entry for exactly this key.
    Hit(CacheEntry),
    /// No file for this key (or the cache is disabled).
    Miss,
    /// A file exists but cannot be trusted; the reason says why.
    Corrupt { path: PathBuf, reason: String },
}

/// [`DiskCache::entries`]: checked entries with their key text, and the files that
/// failed their checks with the reason.
pub type SectionEntries = (Vec<(String, CacheEntry)>, Vec<(PathBuf, String)>);

/// The on-disk cache. Cheap to clone; holds only its folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskCache {
    root: Option<PathBuf>,
}

/// The default cache folder: `KERNELS_CACHE_DIR` if set, else `$XDG_CACHE_HOME/kernels`,
/// else `$HOME/.cache/kernels`, else `<temp>/kernels-cache`. `None` when
/// `KERNELS_CACHE_DIR` is set but empty (caching disabled).
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(CACHE_DIR_ENV) {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("kernels"));
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(h).join(".cache").join("kernels"));
    }
    Some(std::env::temp_dir().join("kernels-cache"))
}

impl DiskCache {
    /// A cache in `root` (created on first store).
    pub fn at(root: impl Into<PathBuf>) -> DiskCache {
        DiskCache {
            root: Some(root.into()),
        }
    }

    /// A cache that stores nothing and always misses.
    pub fn disabled() -> DiskCache {
        DiskCache { root: None }
    }

    /// The cache at [`default_cache_dir`].
    pub fn from_env() -> DiskCache {
        DiskCache {
            root: default_cache_dir(),
        }
    }

    /// The cache folder, or `None` when disabled.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Where `key`'s file lives in `section` (`None` when disabled).
    pub fn path_for(&self, section: Section, key: &CacheKey) -> Option<PathBuf> {
        self.root.as_ref().map(|r| {
            r.join("v1")
                .join(section.dir_name())
                .join(format!("{}.kc", key.file_stem()))
        })
    }

    /// Reads `key` from `section`, checking header, length, checksum and key text.
    pub fn load(&self, section: Section, key: &CacheKey) -> Lookup {
        let Some(path) = self.path_for(section, key) else {
            return Lookup::Miss;
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Lookup::Miss,
            Err(e) => {
                return Lookup::Corrupt {
                    path,
                    reason: format!("cannot read: {e}"),
                }
            }
        };
        match decode(&bytes, key.text()) {
            Ok(entry) => Lookup::Hit(entry),
            Err(reason) => Lookup::Corrupt { path, reason },
        }
    }

    /// Stores `payload` of `kind` under `key`, atomically. A disabled cache stores nothing.
    pub fn store(&self, section: Section, key: &CacheKey, kind: &str, payload: &[u8]) -> Result<()> {
        let Some(path) = self.path_for(section, key) else {
            return Ok(());
        };
        let bytes = encode(key.text(), kind, payload);
        tuned::write_atomic(&path, &bytes).map_err(|e| Error::io(&path, e))
    }

    /// Every checked entry of `section` with its key text, sorted by file name; files
    /// that fail their checks are returned as `(path, reason)` in the second list.
    pub fn entries(&self, section: Section) -> Result<SectionEntries> {
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        let Some(root) = &self.root else {
            return Ok((good, bad));
        };
        let dir = root.join("v1").join(section.dir_name());
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(e) => e.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((good, bad)),
            Err(e) => return Err(Error::io(&dir, e)),
        };
        paths.retain(|p| p.extension().and_then(|e| e.to_str()) == Some("kc"));
        paths.sort();
        for p in paths {
            match std::fs::read(&p)
                .map_err(|e| e.to_string())
                .and_then(|b| decode_any(&b))
            {
                Ok(kv) => good.push(kv),
                Err(reason) => bad.push((p, reason)),
            }
        }
        Ok((good, bad))
    }

    /// Number of cache files and their total size in bytes (0, 0 when disabled or
    /// empty): entries (`*.kc`) and the temporary files of writes in flight or of
    /// writers that were killed mid-write (`*.tmp`).
    pub fn usage(&self) -> Result<(u64, u64)> {
        let (mut files, mut bytes) = (0, 0);
        for path in self.section_files(&["kc", "tmp"])? {
            files += 1;
            bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        }
        Ok((files, bytes))
    }

    /// Deletes the temporary files that writers killed mid-write left behind: those
    /// not modified for [`STALE_TEMPORARY`] (a write takes milliseconds, so a younger
    /// one may belong to a live writer). Returns how many were deleted. The runtime
    /// calls it when it opens its cache.
    pub fn remove_stale_temporaries(&self) -> Result<usize> {
        let mut removed = 0;
        let now = std::time::SystemTime::now();
        for path in self.section_files(&["tmp"])? {
            let age = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok());
            if age.is_some_and(|a| a >= STALE_TEMPORARY) && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Every file of both sections whose extension is one of `extensions`.
    fn section_files(&self, extensions: &[&str]) -> Result<Vec<PathBuf>> {
        let Some(root) = &self.root else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for section in [Section::Modules, Section::Tuning] {
            let dir = root.join("v1").join(section.dir_name());
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&dir, e)),
            };
            for entry in entries {
                let path = entry.map_err(|e| Error::io(&dir, e))?.path();
                if path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| extensions.contains(&e))
                {
                    out.push(path);
                }
            }
        }
        Ok(out)
    }
}

/// How long a temporary file must have gone unmodified before
/// [`DiskCache::remove_stale_temporaries`] deletes it as left by a killed writer.
pub const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(600);

fn checksum(key: &[u8], kind: &[u8], payload: &[u8]) -> u64 {
    // One pass over the three parts with separators, so moving bytes between parts
    // changes the sum.
    let mut all = Vec::with_capacity(key.len() + kind.len() + payload.len() + 2);
    all.extend_from_slice(key);
    all.push(0);
    all.extend_from_slice(kind);
    all.push(0);
    all.extend_from_slice(payload);
    tuned::fnv1a64(&all)
}

fn encode(key: &str, kind: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + key.len() + kind.len() + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(kind.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(key.as_bytes(), kind.as_bytes(), payload).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(payload);
    out
}

fn decode(bytes: &[u8], want_key: &str) -> Result<CacheEntry, String> {
    let (key, entry) = decode_any(bytes)?;
    if key != want_key {
        return Err("holds a different key (hash collision); it will be replaced".into());
    }
    Ok(entry)
}

/// A checked file's key text and entry, whatever its key.
fn decode_any(bytes: &[u8]) -> Result<(String, CacheEntry), String> {
    if bytes.len() < HEADER_LEN {
        return Err(format!(
            "truncated: {} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err("not a kernels cache file (bad magic)".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]) as u64;
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let key_len = u32_at(8);
    let kind_len = u32_at(12);
    let payload_len = u64_at(16);
    let sum = u64_at(24);
    if payload_len > MAX_PAYLOAD {
        return Err(format!("payload length {payload_len} is implausible"));
    }
    let want_len = HEADER_LEN as u64 + key_len + kind_len + payload_len;
    if bytes.len() as u64 != want_len {
        return Err(format!(
            "truncated or padded: header says {want_len} bytes, file has {}",
            bytes.len()
        ));
    }
    let k0 = HEADER_LEN;
    let k1 = k0 + key_len as usize;
    let t1 = k1 + kind_len as usize;
    let (key, kind, payload) = (&bytes[k0..k1], &bytes[k1..t1], &bytes[t1..]);
    if checksum(key, kind, payload) != sum {
        return Err("checksum mismatch (corrupt file)".into());
    }
    let key = std::str::from_utf8(key).map_err(|_| "key is not UTF-8".to_string())?;
    let kind = std::str::from_utf8(kind).map_err(|_| "kind is not UTF-8".to_string())?;
    Ok((
        key.to_string(),
        CacheEntry {
            kind: kind.to_string(),
            payload: payload.to_vec(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_key;

    #[test]
    fn temporary_files_are_counted_and_stale_ones_removed() {
        let dir = temp_dir("stale-tmp");
        let c = DiskCache::at(&dir);
        let k = cache_key(&crate::testing::tuning_key_parts("k", "fnv1a64:0", "cols=1", 1));
        c.store(Section::Tuning, &k, "tune", b"entry").unwrap();
        let folder = dir.join("v1").join("tuning");
        // What a writer killed mid-write leaves (as tuned::write_atomic names it), an
        // hour old, and one of a write in flight.
        let stale = folder.join(".x.kc.1.0.0.tmp");
        let fresh = folder.join(".x.kc.2.0.0.tmp");
        std::fs::write(&stale, b"half a fi").unwrap();
        std::fs::write(&fresh, b"in flight").unwrap();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        assert_eq!(c.usage().unwrap().0, 3, "the entry and both temporary files");
        assert_eq!(c.remove_stale_temporaries().unwrap(), 1);
        assert!(!stale.exists() && fresh.exists());
        assert_eq!(c.usage().unwrap().0, 2);
        assert_eq!(
            c.load(Section::Tuning, &k),
            Lookup::Hit(CacheEntry {
                kind: "tune".into(),
                payload: b"entry".to_vec()
            })
        );
        assert_eq!(DiskCache::disabled().remove_stale_temporaries().unwrap(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    pub(crate) fn temp_dir(tag: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("kernels-core-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn key(batch: u64) -> CacheKey {
        cache_key(&crate::testing::tuning_key_parts(
            "softmax",
            "fnv1a64:00000000000000aa",
            "dtype=bf16,cols=4096",
            batch,
        ))
    }

    #[test]
    fn round_trip_and_miss() {
        let dir = temp_dir("rt");
        let c = DiskCache::at(&dir);
        assert_eq!(c.load(Section::Modules, &key(1)), Lookup::Miss);
        c.store(Section::Modules, &key(1), "cubin", b"\x7fELF...")
            .unwrap();
        match c.load(Section::Modules, &key(1)) {
            Lookup::Hit(e) => assert_eq!(
                (e.kind.as_str(), e.payload.as_slice()),
                ("cubin", &b"\x7fELF..."[..])
            ),
            other => panic!("{other:?}"),
        }
        // other section, other key: misses
        assert_eq!(c.load(Section::Tuning, &key(1)), Lookup::Miss);
        assert_eq!(c.load(Section::Modules, &key(2)), Lookup::Miss);
        assert_eq!(c.usage().unwrap().0, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_and_truncated_files_are_never_trusted() {
        let dir = temp_dir("corrupt");
        let c = DiskCache::at(&dir);
        let k = key(7);
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
        c.store(Section::Modules, &k, "cubin", &payload).unwrap();
        let path = c.path_for(Section::Modules, &k).unwrap();
        let good = std::fs::read(&path).unwrap();

        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "truncated payload",
                good[..good.len() - 100].to_vec(),
                "truncated",
            ),
            ("truncated header", good[..10].to_vec(), "truncated"),
            ("empty file", vec![], "truncated"),
            (
                "flipped payload bit",
                {
                    let mut b = good.clone();
                    let n = b.len();
                    b[n - 1] ^= 0x01;
                    b
                },
                "checksum",
            ),
            (
                "flipped key bit",
                {
                    let mut b = good.clone();
                    b[HEADER_LEN + 3] ^= 0x20;
                    b
                },
                "checksum",
            ),
            (
                "bad magic",
                {
                    let mut b = good.clone();
                    b[0] = b'X';
                    b
                },
                "magic",
            ),
            (
                "padded",
                {
                    let mut b = good.clone();
                    b.extend_from_slice(b"junk");
                    b
                },
                "padded",
            ),
        ];
        for (name, bytes, want) in cases {
            std::fs::write(&path, &bytes).unwrap();
            match c.load(Section::Modules, &k) {
                Lookup::Corrupt { reason, .. } => assert!(reason.contains(want), "{name}: {reason}"),
                other => panic!("{name}: expected Corrupt, got {other:?}"),
            }
            // recovery: the next store replaces the bad file
            c.store(Section::Modules, &k, "cubin", &payload).unwrap();
            assert!(
                matches!(c.load(Section::Modules, &k), Lookup::Hit(e) if e.payload == payload),
                "{name}"
            );
        }

        // A valid file of another key at this key's path (a hash collision) is a miss-like corruption.
        let other = encode(key(8).text(), "cubin", &payload);
        std::fs::write(&path, other).unwrap();
        match c.load(Section::Modules, &k) {
            Lookup::Corrupt { reason, .. } => assert!(reason.contains("different key"), "{reason}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn disabled_cache_stores_nothing() {
        let c = DiskCache::disabled();
        c.store(Section::Tuning, &key(1), "tune", b"{}").unwrap();
        assert_eq!(c.load(Section::Tuning, &key(1)), Lookup::Miss);
        assert_eq!(c.usage().unwrap(), (0, 0));
    }

    #[test]
    fn concurrent_writers_in_threads_lose_nothing() {
        let dir = temp_dir("threads");
        let c = DiskCache::at(&dir);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let c = &c;
                s.spawn(move || {
                    for i in 0..25u64 {
                        // a private key per thread and one key all threads share
                        let payload = vec![(t * 25 + i) as u8; 2048];
                        c.store(Section::Tuning, &key(1000 + t * 25 + i), "tune", &payload)
                            .unwrap();
                        c.store(Section::Tuning, &key(1), "tune", &[t as u8; 4096])
                            .unwrap();
                    }
                });
            }
        });
        for n in 0..100u64 {
            match c.load(Section::Tuning, &key(1000 + n)) {
                Lookup::Hit(e) => assert_eq!(e.payload, vec![n as u8; 2048]),
                other => panic!("key {n}: {other:?}"),
            }
        }
        assert!(matches!(c.load(Section::Tuning, &key(1)), Lookup::Hit(e) if e.payload.len() == 4096));
        assert_eq!(
            c.usage().unwrap().0,
            101,
            "temporary files left behind or entries lost"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
