//! The kernel contract for tables ([`TunedKernel`]) and the serving resolution:
//! baked table, else the analytic default; never a search.

use std::fmt;
use std::marker::PhantomData;

use crate::{
    nearest_entry, write_canonical, BakedEntry, BakedTable, EntryConfig, KernelSchema, KeyBuf, KeyValues,
    StaticKey, Target, Value,
};

/// Where a resolved config came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Source {
    /// A baked table entry for this exact batch.
    TableExact,
    /// A baked table entry for `table_batch`, the nearest to the requested `batch` in
    /// log2 space.
    TableNearest { table_batch: u64, batch: u64 },
    /// The kernel's analytic default for `batch`, because the nearest table entry (at
    /// `table_batch`, equal to `batch` when exact) is a default marker: tuning measured
    /// there and the default won.
    TableDefault { table_batch: u64, batch: u64 },
    /// The kernel's analytic default (no table, or a table miss).
    Default,
    /// The online tuner's on-disk cache.
    OnlineCache,
    /// A search run just now by the online tuner.
    OnlineSearch,
}

impl Source {
    /// The stable name used in CLI output and reports.
    pub const fn name(&self) -> &'static str {
        match self {
            Source::TableExact => "table-exact",
            Source::TableNearest { .. } => "table-nearest",
            Source::TableDefault { .. } => "table-default",
            Source::Default => "default",
            Source::OnlineCache => "online-cache",
            Source::OnlineSearch => "online-search",
        }
    }

    /// The table batch whose entry decided, for a nearest hit or a default marker.
    pub fn table_batch(&self) -> Option<u64> {
        match *self {
            Source::TableNearest { table_batch, .. } | Source::TableDefault { table_batch, .. } => {
                Some(table_batch)
            }
            _ => None,
        }
    }

    /// |log2(batch) - log2(table_batch)| for a nearest hit or a default marker (0 when
    /// the marker is at the requested batch).
    pub fn distance(&self) -> Option<f64> {
        match *self {
            Source::TableNearest { table_batch, batch } | Source::TableDefault { table_batch, batch } => {
                Some(crate::baked::log2_distance(batch, table_batch))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::TableNearest { table_batch, .. } => write!(
                f,
                "table-nearest (batch {table_batch}, log2 distance {:.2})",
                self.distance().unwrap_or(0.0)
            ),
            Source::TableDefault { table_batch, batch } if table_batch == batch => {
                f.write_str("table-default (the default measured best at this batch)")
            }
            Source::TableDefault { table_batch, .. } => write!(
                f,
                "table-default (the default measured best at batch {table_batch}, log2 distance {:.2})",
                self.distance().unwrap_or(0.0)
            ),
            s => f.write_str(s.name()),
        }
    }
}

/// A config and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved<C> {
    pub config: C,
    pub source: Source,
}

/// What a kernel family declares so its tables can be baked and probed. GPU-free;
/// `kernels-core`'s `Tunable` builds on it with compile and launch.
pub trait TunedKernel: 'static {
    /// The static part of a problem (fixed by the model).
    type Key;
    /// The launch configuration.
    type Config: Clone;

    /// Key fields and config parameters.
    const SCHEMA: &'static KernelSchema;

    /// Fingerprint of the kernel source this crate was built from.
    const SOURCE_FINGERPRINT: &'static str;

    /// The key's values in `SCHEMA.key` order.
    fn key_values(key: &Self::Key) -> KeyValues;

    /// Builds and validates a key from values in `SCHEMA.key` order; the error names
    /// the bad field.
    fn key_from_values(values: &[Value]) -> Result<Self::Key, String>;

    /// Decodes a config from values in `SCHEMA.params` order, checking it lies in the
    /// kernel's search space; the error names the bad parameter.
    fn config_from_values(values: &[Value]) -> Result<Self::Config, String>;

    /// Decodes a config from a baked table entry. `build-tools` ran the kernel's
    /// config check on every entry before baking it, so a kernel may skip re-checking
    /// here (this is the serving path); the default re-checks.
    fn config_from_baked(values: &[Value]) -> Option<Self::Config> {
        Self::config_from_values(values).ok()
    }

    /// The config's values in `SCHEMA.params` order.
    fn config_values(config: &Self::Config) -> Vec<Value>;

    /// The analytic default: a heuristic from target, key and batch, no search.
    fn analytic_default(target: Target, key: &Self::Key, batch: u64) -> Self::Config;

    /// The baked table for `target`, if one was enabled and committed.
    fn baked_table(target: Target) -> Option<&'static BakedTable>;

    /// Whether `config` can run this problem (a table's nearest entry may have been
    /// tuned for a batch where it could). Defaults to yes.
    fn accepts(_target: Target, _key: &Self::Key, _batch: u64, _config: &Self::Config) -> bool {
        true
    }
}

/// The serving resolution: baked table (exact, else nearest batch), else the
/// analytic default. A hash probe and a binary search: no I/O, no allocation.
/// When the nearest entry is a default marker, the result is the analytic default
/// for the requested batch ([`Source::TableDefault`]), never a neighbour's config.
///
/// An engine that resolves the same static key for every request can do the hash
/// probe once with [`PreparedKey`] and pay only the batch search per request.
pub fn resolve_serve<K: TunedKernel>(target: Target, key: &K::Key, batch: u64) -> Resolved<K::Config> {
    resolve_among::<K>(target, key, table_entries::<K>(target, key), batch)
}

/// The baked entries of `key` on `target` (empty on a miss): the hash probe.
fn table_entries<K: TunedKernel>(target: Target, key: &K::Key) -> &'static [BakedEntry] {
    let Some(table) = K::baked_table(target) else {
        return &[];
    };
    let mut buf = KeyBuf::new();
    if write_canonical(K::SCHEMA, K::key_values(key).as_slice(), &mut buf).is_err() {
        return &[];
    }
    table.entries.get(buf.as_str()).copied().unwrap_or(&[])
}

/// [`resolve_serve`]'s rule over entries the caller holds instead of the baked table's
/// (a table file that is not baked into this binary, such as the one a tuning run has
/// just written, which the GEMM bench can time before it lands): the nearest batch,
/// default markers and [`TunedKernel::accepts`] as for a baked table, then the analytic
/// default. `entries` must be one static key's, sorted by batch with unique batches.
pub fn resolve_in_entries<K: TunedKernel>(
    target: Target,
    key: &K::Key,
    entries: &[BakedEntry],
    batch: u64,
) -> Resolved<K::Config> {
    resolve_among::<K>(target, key, entries, batch)
}

/// The nearest batch among one key's entries (a default marker gives the analytic
/// default), else the analytic default.
fn resolve_among<K: TunedKernel>(
    target: Target,
    key: &K::Key,
    entries: &[BakedEntry],
    batch: u64,
) -> Resolved<K::Config> {
    // One analytic-default call site keeps this small enough to inline in callers.
    let mut source = Source::Default;
    if let Some(entry) = nearest_entry(entries, batch) {
        match entry.config {
            EntryConfig::Tuned(values) => {
                if let Some(config) = K::config_from_baked(values) {
                    if K::accepts(target, key, batch, &config) {
                        let source = if entry.batch == batch {
                            Source::TableExact
                        } else {
                            Source::TableNearest {
                                table_batch: entry.batch,
                                batch,
                            }
                        };
                        return Resolved { config, source };
                    }
                }
            }
            EntryConfig::Default => {
                source = Source::TableDefault {
                    table_batch: entry.batch,
                    batch,
                }
            }
        }
    }
    Resolved {
        config: K::analytic_default(target, key, batch),
        source,
    }
}

/// A static key probed once against the baked table (at model load, say), so that
/// each request's resolution is only the nearest-batch search. Resolves exactly as
/// [`resolve_serve`] does.
///
/// ```
/// # use tuned::*;
/// # struct K;
/// # static S: KernelSchema = KernelSchema { kernel: "k", key: &[Field::int("cols")], params: &[] };
/// # impl TunedKernel for K {
/// #     type Key = u32; type Config = u32;
/// #     const SCHEMA: &'static KernelSchema = &S; const SOURCE_FINGERPRINT: &'static str = "";
/// #     fn key_values(k: &u32) -> KeyValues { KeyValues::new().push(*k as i64) }
/// #     fn key_from_values(_: &[Value]) -> Result<u32, String> { Ok(0) }
/// #     fn config_from_values(_: &[Value]) -> Result<u32, String> { Ok(0) }
/// #     fn config_values(_: &u32) -> Vec<Value> { vec![] }
/// #     fn analytic_default(_: Target, k: &u32, _: u64) -> u32 { *k }
/// #     fn baked_table(_: Target) -> Option<&'static BakedTable> { None }
/// # }
/// let prepared = PreparedKey::<K>::new(Target::Sm90, 4096);
/// for batch in [1, 7, 512] {
///     assert_eq!(prepared.resolve(batch), resolve_serve::<K>(Target::Sm90, &4096, batch));
/// }
/// ```
pub struct PreparedKey<K: TunedKernel> {
    target: Target,
    key: K::Key,
    entries: &'static [BakedEntry],
}

impl<K: TunedKernel> PreparedKey<K> {
    /// Probes the table for `key` on `target` once.
    pub fn new(target: Target, key: K::Key) -> Self {
        let entries = table_entries::<K>(target, &key);
        PreparedKey { target, key, entries }
    }

    /// The config for `batch`: the per-request part of [`resolve_serve`].
    pub fn resolve(&self, batch: u64) -> Resolved<K::Config> {
        resolve_among::<K>(self.target, &self.key, self.entries, batch)
    }

    /// Whether the table has entries for this key (else every batch gets the default).
    pub fn in_table(&self) -> bool {
        !self.entries.is_empty()
    }

    pub fn key(&self) -> &K::Key {
        &self.key
    }
}

/// A resolution in plain values, for tools that handle every kernel alike.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    pub kernel: &'static str,
    pub target: Target,
    pub static_key: StaticKey,
    pub batch: u64,
    pub source: Source,
    /// (parameter, value) in the kernel's parameter order.
    pub config: Vec<(&'static str, Value)>,
}

impl Resolution {
    /// The config as `name=value` pairs separated by spaces ([`crate::write_config`]),
    /// as the config type's `Display` prints it.
    pub fn config_text(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = crate::write_config(&mut out, self.config.iter().map(|(n, v)| (*n, v)));
        out
    }

    /// One JSON object: kernel, target, static_key, batch, source, config (and, for a
    /// nearest hit or a default marker, table_batch and distance).
    pub fn to_json(&self) -> serde_json::Value {
        let config: serde_json::Map<String, serde_json::Value> = self
            .config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_json()))
            .collect();
        let mut obj = serde_json::json!({
            "kernel": self.kernel,
            "target": self.target.name(),
            "static_key": self.static_key.as_str(),
            "batch": self.batch,
            "source": self.source.name(),
            "config": config,
        });
        if let (Some(table_batch), Some(distance)) = (self.source.table_batch(), self.source.distance()) {
            obj["table_batch"] = table_batch.into();
            obj["distance"] = ((distance * 1000.0).round() / 1000.0).into();
        }
        obj
    }
}

/// Object-safe view of a [`TunedKernel`], so the CLI and checks can list kernels by name.
pub trait DynKernel: Sync {
    fn schema(&self) -> &'static KernelSchema;
    fn source_fingerprint(&self) -> &'static str;
    fn baked_table(&self, target: Target) -> Option<&'static BakedTable>;
    /// Resolves as the serving path does. Errors name a bad key field.
    fn resolve(&self, target: Target, key: &StaticKey, batch: u64) -> Result<Resolution, String>;
    /// Checks a config (values in parameter order) against the kernel's search space.
    fn check_config(&self, values: &[Value]) -> Result<(), String>;
    /// The analytic default's config for `key` at `batch` on `target`, values in
    /// parameter order (what a default marker serves there today). Errors name a bad key
    /// field.
    fn analytic_default_values(
        &self,
        target: Target,
        key: &StaticKey,
        batch: u64,
    ) -> Result<Vec<Value>, String>;
}

/// The [`DynKernel`] of a [`TunedKernel`]: `static SOFTMAX: Dyn<Softmax> = Dyn::new();`.
pub struct Dyn<K>(PhantomData<fn() -> K>);

impl<K> Dyn<K> {
    pub const fn new() -> Self {
        Dyn(PhantomData)
    }
}

impl<K> Default for Dyn<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: TunedKernel> DynKernel for Dyn<K> {
    fn schema(&self) -> &'static KernelSchema {
        K::SCHEMA
    }

    fn source_fingerprint(&self) -> &'static str {
        K::SOURCE_FINGERPRINT
    }

    fn baked_table(&self, target: Target) -> Option<&'static BakedTable> {
        K::baked_table(target)
    }

    fn resolve(&self, target: Target, key: &StaticKey, batch: u64) -> Result<Resolution, String> {
        if batch == 0 {
            return Err("batch must be at least 1".into());
        }
        let k = K::key_from_values(key.values())?;
        let r = resolve_serve::<K>(target, &k, batch);
        let config = K::SCHEMA.param_names().zip(K::config_values(&r.config)).collect();
        Ok(Resolution {
            kernel: K::SCHEMA.kernel,
            target,
            static_key: key.clone(),
            batch,
            source: r.source,
            config,
        })
    }

    fn check_config(&self, values: &[Value]) -> Result<(), String> {
        K::SCHEMA.check_params(values)?;
        K::config_from_values(values).map(|_| ())
    }

    fn analytic_default_values(
        &self,
        target: Target,
        key: &StaticKey,
        batch: u64,
    ) -> Result<Vec<Value>, String> {
        let k = K::key_from_values(key.values())?;
        Ok(K::config_values(&K::analytic_default(target, &k, batch)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Field;

    /// A kernel whose config is one integer; its analytic default is `1000 + batch`, so
    /// a test sees which batch a default was computed for.
    struct One;

    static SCHEMA: KernelSchema = KernelSchema {
        kernel: "one",
        key: &[Field::int("cols")],
        params: &[Field::int("threads")],
    };

    impl TunedKernel for One {
        type Key = u32;
        type Config = i64;
        const SCHEMA: &'static KernelSchema = &SCHEMA;
        const SOURCE_FINGERPRINT: &'static str = "";
        fn key_values(k: &u32) -> KeyValues {
            KeyValues::new().push(i64::from(*k))
        }
        fn key_from_values(_: &[Value]) -> Result<u32, String> {
            Ok(0)
        }
        fn config_from_values(values: &[Value]) -> Result<i64, String> {
            values
                .first()
                .and_then(Value::as_int)
                .ok_or_else(|| "no threads".into())
        }
        fn config_values(c: &i64) -> Vec<Value> {
            vec![Value::Int(*c)]
        }
        fn analytic_default(_: Target, _: &u32, batch: u64) -> i64 {
            1000 + batch as i64
        }
        fn baked_table(_: Target) -> Option<&'static BakedTable> {
            None
        }
    }

    /// Tuned entries at 64 and 1024, a default marker at 256.
    static ENTRIES: [BakedEntry; 3] = [
        BakedEntry {
            batch: 64,
            config: EntryConfig::Tuned(&[Value::Int(64)]),
            us: 1.0,
            default_us: 2.0,
        },
        BakedEntry {
            batch: 256,
            config: EntryConfig::Default,
            us: 3.0,
            default_us: 3.0,
        },
        BakedEntry {
            batch: 1024,
            config: EntryConfig::Tuned(&[Value::Int(1024)]),
            us: 4.0,
            default_us: 5.0,
        },
    ];

    fn resolve(batch: u64) -> Resolved<i64> {
        resolve_among::<One>(Target::Sm90, &4096, &ENTRIES, batch)
    }

    #[test]
    fn a_default_marker_gives_the_default_for_the_requested_batch() {
        let exact = resolve(256);
        assert_eq!(exact.config, 1256);
        assert_eq!(
            exact.source,
            Source::TableDefault {
                table_batch: 256,
                batch: 256
            }
        );
        assert_eq!(exact.source.distance(), Some(0.0));
        assert_eq!(exact.source.name(), "table-default");

        // 300 is nearer the marker at 256 than the entry at 1024: the default for 300,
        // not batch 1024's config.
        let near = resolve(300);
        assert_eq!(near.config, 1300);
        assert_eq!(
            near.source,
            Source::TableDefault {
                table_batch: 256,
                batch: 300
            }
        );
        assert!((near.source.distance().unwrap() - (300f64 / 256.0).log2()).abs() < 1e-12);

        // 128 ties between 64 and the marker at 256: the larger batch, the marker, wins.
        assert_eq!(resolve(128).config, 1128);
    }

    #[test]
    fn tuned_entries_next_to_a_marker_still_serve() {
        assert_eq!(
            resolve(64),
            Resolved {
                config: 64,
                source: Source::TableExact
            }
        );
        assert_eq!(
            resolve(80),
            Resolved {
                config: 64,
                source: Source::TableNearest {
                    table_batch: 64,
                    batch: 80
                }
            }
        );
        assert_eq!(resolve(4096).config, 1024);
        // No entries: the plain default.
        let miss = resolve_among::<One>(Target::Sm90, &4096, &[], 256);
        assert_eq!((miss.config, miss.source), (1256, Source::Default));
    }

    #[test]
    fn a_marker_resolution_reports_its_table_batch() {
        let r = Resolution {
            kernel: "one",
            target: Target::Sm90,
            static_key: StaticKey::untyped(&SCHEMA, vec![Value::Int(4096)]),
            batch: 512,
            source: Source::TableDefault {
                table_batch: 256,
                batch: 512,
            },
            config: vec![("threads", Value::Int(1512))],
        };
        assert_eq!(r.config_text(), "threads=1512");
        let j = r.to_json();
        assert_eq!(j["source"], "table-default");
        assert_eq!(j["table_batch"], 256);
        assert_eq!(j["distance"], 1.0);
        assert_eq!(
            r.source.to_string(),
            "table-default (the default measured best at batch 256, log2 distance 1.00)"
        );
    }
}
