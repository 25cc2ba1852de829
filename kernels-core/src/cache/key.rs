//! The one cache key: what identifies a compiled module or an online tuning result.
//!
//! Both caches use [`cache_key`]. A compiled module depends on the exact compile
//! (the [`CacheKeyParts::variant`]) but not on the problem, so its static key, batch
//! and alignment class are [`Component::DoesNotApply`]; a tuning result depends on the
//! problem but not on one compile, so its variant does not apply; it does depend on
//! what was searched, the [`CacheKeyParts::candidates`]. "Does not apply" is written
//! into the key, so a module key can never equal a tuning key.
//!
//! ```
//! use kernels_core::{cache::{cache_key, AlignClass, CacheKeyParts, Component}};
//! let parts = CacheKeyParts {
//!     crate_version: "0.1.0",
//!     kernel: "rmsnorm",
//!     source_fingerprint: "fnv1a64:0123456789abcdef",
//!     compiler: "nvrtc 13.0",
//!     arch: "sm_90a",
//!     device_name: "NVIDIA H200",
//!     sm_count: 132,
//!     codegen_env: &[],
//!     variant: Component::DoesNotApply,
//!     candidates: Component::Applies("fnv1a64:00000000000000aa"),
//!     static_key: Component::Applies("dtype=bf16,cols=4096"),
//!     batch: Component::Applies(64),
//!     alignment: Component::Applies(AlignClass::A16),
//! };
//! let key = cache_key(&parts);
//! assert!(key.text().contains("batch = 64"));
//! assert_eq!(key, cache_key(&parts));
//! ```

use std::fmt::{self, Write as _};

/// Environment variables that change generated code. Their values (when set) are part
/// of every cache key, so changing one never serves a stale module or tuning result.
///
/// - `KERNELS_NVRTC_FLAGS`: extra NVRTC options, split on whitespace, appended last.
/// - `KERNELS_CUDA_INCLUDE`: a CUDA toolkit include folder passed as `-I` (the kernel
///   sources are self-contained; this is for experiments with toolkit headers).
pub const CODEGEN_ENV_VARS: &[&str] = &["KERNELS_NVRTC_FLAGS", "KERNELS_CUDA_INCLUDE"];

/// The codegen variables of [`CODEGEN_ENV_VARS`] that are set, as (name, value), in
/// that order. Unset variables are left out.
pub fn codegen_env() -> Vec<(String, String)> {
    CODEGEN_ENV_VARS
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| (name.to_string(), v)))
        .collect()
}

/// One component of a cache key: it applies with a value, or it does not apply to
/// this kind of cached item (and says so in the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component<T> {
    Applies(T),
    DoesNotApply,
}

/// The pointer and stride alignment class of a problem: the largest of 16, 8, 4, 2, 1
/// bytes that divides every pointer and stride. Vectorised configs need it, so tuning
/// results are cached per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlignClass {
    A1,
    A2,
    A4,
    A8,
    A16,
}

impl AlignClass {
    /// Every class, least aligned first.
    pub const ALL: [AlignClass; 5] = [
        AlignClass::A1,
        AlignClass::A2,
        AlignClass::A4,
        AlignClass::A8,
        AlignClass::A16,
    ];

    /// The class's byte alignment.
    pub const fn bytes(self) -> u32 {
        match self {
            AlignClass::A1 => 1,
            AlignClass::A2 => 2,
            AlignClass::A4 => 4,
            AlignClass::A8 => 8,
            AlignClass::A16 => 16,
        }
    }

    /// The class of a set of byte addresses and byte strides (an empty set is `A16`).
    ///
    /// ```
    /// use kernels_core::cache::AlignClass;
    /// assert_eq!(AlignClass::of([0x1000, 8192]), AlignClass::A16);
    /// assert_eq!(AlignClass::of([0x1000, 0x1004]), AlignClass::A4);
    /// assert_eq!(AlignClass::of([0x1001]), AlignClass::A1);
    /// ```
    pub fn of(values: impl IntoIterator<Item = u64>) -> AlignClass {
        let mut bits = 16u64;
        for v in values {
            while bits > 1 && v % bits != 0 {
                bits /= 2;
            }
        }
        match bits {
            16 => AlignClass::A16,
            8 => AlignClass::A8,
            4 => AlignClass::A4,
            2 => AlignClass::A2,
            _ => AlignClass::A1,
        }
    }
}

impl fmt::Display for AlignClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}B", self.bytes())
    }
}

/// Every component of a cache key. Fill all of them; a component that does not apply
/// to the cached item is [`Component::DoesNotApply`], never left out.
#[derive(Clone, Debug)]
pub struct CacheKeyParts<'a> {
    /// Version of `kernels-core` (how sources are compiled and results stored).
    pub crate_version: &'a str,
    /// Kernel name (`rmsnorm`).
    pub kernel: &'a str,
    /// Fingerprint of the kernel source (`tuned::fingerprint`).
    pub source_fingerprint: &'a str,
    /// Compiler name and version (`nvrtc 13.0`).
    pub compiler: &'a str,
    /// Architecture compiled for (`sm_90a`).
    pub arch: &'a str,
    /// Device name as the driver reports it.
    pub device_name: &'a str,
    /// Number of SMs (a cut-down part of the same name tunes differently).
    pub sm_count: u32,
    /// Set codegen variables (see [`CODEGEN_ENV_VARS`]).
    pub codegen_env: &'a [(String, String)],
    /// The exact compile: entry point and every compiler option. Modules only (offline
    /// tuning results put their timing method here).
    pub variant: Component<&'a str>,
    /// Digest of the variants a search compiles for the problem
    /// ([`crate::candidates_digest`]): a change in the search space or in how the host
    /// derives a config's defines is a miss, never a stale result. Tuning results only.
    pub candidates: Component<&'a str>,
    /// Canonical static key (`dtype=bf16,cols=4096`). Tuning results only.
    pub static_key: Component<&'a str>,
    /// The batch (rows, tokens). Tuning results only.
    pub batch: Component<u64>,
    /// Pointer/stride alignment class. Tuning results only.
    pub alignment: Component<AlignClass>,
}

impl<'a> CacheKeyParts<'a> {
    /// These parts with the components of a tuning result applied: the search's
    /// `candidates` digest, the canonical `static_key`, the `batch` and the `alignment`
    /// class.
    pub(crate) fn for_tuning(
        self,
        static_key: &'a str,
        batch: u64,
        alignment: AlignClass,
        candidates: &'a str,
    ) -> CacheKeyParts<'a> {
        CacheKeyParts {
            candidates: Component::Applies(candidates),
            static_key: Component::Applies(static_key),
            batch: Component::Applies(batch),
            alignment: Component::Applies(alignment),
            ..self
        }
    }
}

/// The variant component of an online tuning result timed with programmatic dependent
/// launch (plain online results have none; `kernels tune` writes `timing=...`).
pub const PDL_TUNING_VARIANT: &str = "launch=pdl";

/// A cache key: its canonical text (stored in the cache file and compared on read, so
/// a hash collision is a miss, never a wrong hit) and the hash that names the file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    text: String,
    hash: u64,
    stem: String,
}

impl CacheKey {
    /// The canonical text: one `name = value` line per component, values JSON-quoted,
    /// `n/a` for a component that does not apply.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// FNV-1a 64 of [`CacheKey::text`].
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The cache file's name without extension: `<kernel>-<hash as 16 hex digits>`.
    pub fn file_stem(&self) -> &str {
        &self.stem
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stem)
    }
}

/// The text of a cache key ([`CacheKey::text`], as a cache file stores it) without its
/// `candidates` line: the search it names whatever candidate list that search had
/// (`kernels tune --carry-from` finds an earlier source's records by it).
pub fn search_text(key_text: &str) -> String {
    key_text
        .lines()
        .filter(|l| !l.starts_with("candidates = "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The one cache-key function, for compiled modules and online tuning results alike.
///
/// The key is a hash over every component of [`CacheKeyParts`], in a fixed order,
/// each written as `name = value`: the crate version, kernel name, kernel-source
/// fingerprint, compiler and version, arch, device name, SM count, the set codegen
/// environment variables, the compile variant, the candidates' digest, the static key,
/// the batch and the alignment class. A component that does not apply is written `n/a`.
pub fn cache_key(p: &CacheKeyParts<'_>) -> CacheKey {
    fn q(s: &str) -> String {
        serde_json::Value::from(s).to_string()
    }
    let mut t = String::from("kernels cache key v2\n");
    // Writing to a String cannot fail.
    let _ = writeln!(t, "crate_version = {}", q(p.crate_version));
    let _ = writeln!(t, "kernel = {}", q(p.kernel));
    let _ = writeln!(t, "source_fingerprint = {}", q(p.source_fingerprint));
    let _ = writeln!(t, "compiler = {}", q(p.compiler));
    let _ = writeln!(t, "arch = {}", q(p.arch));
    let _ = writeln!(t, "device = {}", q(p.device_name));
    let _ = writeln!(t, "sm_count = {}", p.sm_count);
    let env: Vec<String> = p
        .codegen_env
        .iter()
        .map(|(k, v)| q(&format!("{k}={v}")))
        .collect();
    let _ = writeln!(t, "codegen_env = [{}]", env.join(", "));
    let _ = match p.variant {
        Component::Applies(v) => writeln!(t, "variant = {}", q(v)),
        Component::DoesNotApply => writeln!(t, "variant = n/a"),
    };
    let _ = match p.candidates {
        Component::Applies(c) => writeln!(t, "candidates = {}", q(c)),
        Component::DoesNotApply => writeln!(t, "candidates = n/a"),
    };
    let _ = match p.static_key {
        Component::Applies(k) => writeln!(t, "static_key = {}", q(k)),
        Component::DoesNotApply => writeln!(t, "static_key = n/a"),
    };
    let _ = match p.batch {
        Component::Applies(b) => writeln!(t, "batch = {b}"),
        Component::DoesNotApply => writeln!(t, "batch = n/a"),
    };
    let _ = match p.alignment {
        Component::Applies(a) => writeln!(t, "alignment = {}", a.bytes()),
        Component::DoesNotApply => writeln!(t, "alignment = n/a"),
    };
    let hash = tuned::fnv1a64(t.as_bytes());
    let name: String = p
        .kernel
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    CacheKey {
        stem: format!("{name}-{hash:016x}"),
        text: t,
        hash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base_env() -> Vec<(String, String)> {
        vec![("KERNELS_NVRTC_FLAGS".into(), "-O3".into())]
    }

    fn base(env: &[(String, String)]) -> CacheKeyParts<'_> {
        CacheKeyParts {
            crate_version: "0.1.0",
            kernel: "rmsnorm",
            source_fingerprint: "fnv1a64:0000000000000001",
            compiler: "nvrtc 13.0",
            arch: "sm_90a",
            device_name: "NVIDIA H200",
            sm_count: 132,
            codegen_env: env,
            variant: Component::Applies("entry\n--gpu-architecture=sm_90a -DT=1"),
            candidates: Component::Applies("fnv1a64:0000000000000003"),
            static_key: Component::Applies("dtype=bf16,cols=4096"),
            batch: Component::Applies(64),
            alignment: Component::Applies(AlignClass::A16),
        }
    }

    /// Keys that differ in the candidates alone name one search; any other component
    /// still tells searches apart.
    #[test]
    fn the_search_text_leaves_out_the_candidates_only() {
        let env = base_env();
        let key = |edit: fn(&mut CacheKeyParts<'_>)| {
            let mut p = base(&env);
            edit(&mut p);
            search_text(cache_key(&p).text())
        };
        let k0 = key(|_| {});
        assert!(!k0.contains("candidates") && k0.contains("batch = 64"), "{k0}");
        assert_eq!(
            k0,
            key(|p| p.candidates = Component::Applies("fnv1a64:0000000000000009"))
        );
        assert_eq!(k0, key(|p| p.candidates = Component::DoesNotApply));
        assert_ne!(k0, key(|p| p.batch = Component::Applies(65)));
        assert_ne!(k0, key(|p| p.source_fingerprint = "fnv1a64:0000000000000002"));
    }

    #[test]
    fn every_component_changes_the_key() {
        let env = base_env();
        let other_env = vec![("KERNELS_NVRTC_FLAGS".into(), "-O2".into())];
        let no_env: Vec<(String, String)> = vec![];
        let k0 = cache_key(&base(&env));
        type Edit = fn(&mut CacheKeyParts<'_>);
        let edits: Vec<(&str, Edit)> = vec![
            ("crate_version", |p| p.crate_version = "0.2.0"),
            ("kernel", |p| p.kernel = "fused_add_rmsnorm"),
            ("source_fingerprint", |p| {
                p.source_fingerprint = "fnv1a64:0000000000000002"
            }),
            ("compiler", |p| p.compiler = "nvrtc 13.1"),
            ("arch", |p| p.arch = "sm_90"),
            ("device_name", |p| p.device_name = "NVIDIA H100 80GB HBM3"),
            ("sm_count", |p| p.sm_count = 114),
            ("variant", |p| {
                p.variant = Component::Applies("entry\n--gpu-architecture=sm_90a -DT=2")
            }),
            ("variant n/a", |p| p.variant = Component::DoesNotApply),
            ("candidates", |p| {
                p.candidates = Component::Applies("fnv1a64:0000000000000004")
            }),
            ("candidates n/a", |p| p.candidates = Component::DoesNotApply),
            ("static_key", |p| {
                p.static_key = Component::Applies("dtype=bf16,cols=8192")
            }),
            ("static_key n/a", |p| p.static_key = Component::DoesNotApply),
            ("batch", |p| p.batch = Component::Applies(65)),
            ("batch n/a", |p| p.batch = Component::DoesNotApply),
            ("alignment", |p| p.alignment = Component::Applies(AlignClass::A8)),
            ("alignment n/a", |p| p.alignment = Component::DoesNotApply),
        ];
        let mut seen = std::collections::BTreeSet::new();
        seen.insert(k0.hash());
        for (name, edit) in edits {
            let mut p = base(&env);
            edit(&mut p);
            let k = cache_key(&p);
            assert_ne!(k.text(), k0.text(), "{name} did not change the key text");
            assert!(seen.insert(k.hash()), "{name} collided with another key's hash");
        }
        // the codegen environment: a changed value, and an unset variable
        for e in [&other_env, &no_env] {
            let k = cache_key(&base(e));
            assert_ne!(k.hash(), k0.hash(), "codegen env {e:?} did not change the key");
        }
    }

    #[test]
    fn key_is_deterministic_and_names_its_file() {
        let env = base_env();
        let a = cache_key(&base(&env));
        let b = cache_key(&base(&env));
        assert_eq!(a, b);
        assert!(a.file_stem().starts_with("rmsnorm-"));
        assert_eq!(a.file_stem().len(), "rmsnorm-".len() + 16);
        // values are quoted, so a value cannot pose as another component or as `n/a`
        let mut p = base(&env);
        p.static_key = Component::Applies("n/a");
        assert_ne!(cache_key(&p).text(), {
            let mut q = base(&env);
            q.static_key = Component::DoesNotApply;
            cache_key(&q).text().to_string()
        });
    }

    #[test]
    fn alignment_class_of_addresses_and_strides() {
        assert_eq!(AlignClass::of([]), AlignClass::A16);
        assert_eq!(AlignClass::of([0x7f00_0000_0000, 4096 * 2]), AlignClass::A16);
        assert_eq!(AlignClass::of([0x7f00_0000_0008]), AlignClass::A8);
        assert_eq!(AlignClass::of([0x7f00_0000_0000, 6]), AlignClass::A2);
        assert_eq!(AlignClass::of([3]), AlignClass::A1);
    }
}
