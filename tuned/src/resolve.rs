//! The kernel contract for tables ([`TunedKernel`]) and the serving resolution:
//! baked table, else the analytic default; never a search.

use std::fmt;
use std::marker::PhantomData;

use crate::{
    write_canonical, BakedTable, KernelSchema, KeyBuf, KeyValues, StaticKey, TableHit, Target, Value,
};

/// Where a resolved config came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Source {
    /// A baked table entry for this exact batch.
    TableExact,
    /// A baked table entry for the nearest batch in log2 space.
    TableNearest { table_batch: u64, distance: f64 },
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
            Source::Default => "default",
            Source::OnlineCache => "online-cache",
            Source::OnlineSearch => "online-search",
        }
    }

    fn from_hit(hit: TableHit) -> Source {
        match hit {
            TableHit::Exact => Source::TableExact,
            TableHit::Nearest {
                table_batch,
                distance,
            } => Source::TableNearest {
                table_batch,
                distance,
            },
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::TableNearest {
                table_batch,
                distance,
            } => {
                write!(
                    f,
                    "table-nearest (batch {table_batch}, log2 distance {distance:.2})"
                )
            }
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
pub fn resolve_serve<K: TunedKernel>(target: Target, key: &K::Key, batch: u64) -> Resolved<K::Config> {
    if let Some(hit) = table_config::<K>(target, key, batch) {
        return hit;
    }
    Resolved {
        config: K::analytic_default(target, key, batch),
        source: Source::Default,
    }
}

fn table_config<K: TunedKernel>(target: Target, key: &K::Key, batch: u64) -> Option<Resolved<K::Config>> {
    let table = K::baked_table(target)?;
    let mut buf = KeyBuf::new();
    write_canonical(K::SCHEMA, K::key_values(key).as_slice(), &mut buf).ok()?;
    let (entry, hit) = table.lookup(buf.as_str(), batch)?;
    let config = K::config_from_values(entry.config).ok()?;
    K::accepts(target, key, batch, &config).then_some(Resolved {
        config,
        source: Source::from_hit(hit),
    })
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
    /// One JSON object: kernel, target, static_key, batch, source, config (and, for a
    /// nearest hit, table_batch and distance).
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
        if let Source::TableNearest {
            table_batch,
            distance,
        } = self.source
        {
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
}
