//! The tuning model shared by every crate of the workspace, with no GPU code.
//!
//! - [`Target`] and [`DType`]: what a table is for and what a kernel computes on.
//! - [`KernelSchema`]: a kernel's key fields and config parameters.
//! - [`StaticKey`] and [`write_canonical`]: the one canonical key form, used when
//!   baking and when probing.
//! - [`TableFile`]: committed table files (schema v1), validated with errors that name
//!   the file, the entry and the reason; merged and written atomically.
//! - [`BakedTable`]: what `build-tools` emits; [`BakedTable::lookup`] is the serving
//!   probe (exact static key, then nearest batch in log2 space, ties to the larger).
//!   An entry is a tuned config or a default marker ([`EntryConfig`]): tuning measured
//!   that batch and the analytic default won.
//! - [`env_flag`]: the one parser of the boolean environment flags.
//! - [`TunedKernel`] and [`resolve_serve`]: a kernel family's contract and the
//!   serving resolution (table, else analytic default; never a search).
//!
//! ```
//! use tuned::{nearest, BakedEntry, EntryConfig, TableHit};
//! let entries = [
//!     BakedEntry { batch: 1, config: EntryConfig::Tuned(&[]), us: 2.0, default_us: 2.5 },
//!     BakedEntry { batch: 64, config: EntryConfig::Tuned(&[]), us: 9.0, default_us: 9.5 },
//! ];
//! // 8 is exactly between 1 and 64 in log2 space: the larger batch wins.
//! let (e, hit) = nearest(&entries, 8).unwrap();
//! assert_eq!(e.batch, 64);
//! assert_eq!(hit, TableHit::Nearest { table_batch: 64, distance: 3.0 });
//! ```

mod atomic;
mod baked;
mod dtype;
mod fingerprint;
mod flag;
mod key;
mod resolve;
mod schema;
mod table;
mod target;
mod value;

pub use atomic::write_atomic;
pub use baked::{log2_distance, nearest, nearest_entry, BakedEntry, BakedTable, EntryConfig, TableHit};
pub use dtype::{DType, DTypeError};
pub use fingerprint::{fingerprint, fnv1a64};
pub use flag::{env_flag, parse_flag, FlagError};
pub use key::{
    config_values_from_pairs, write_canonical, KeyBuf, KeyFormatError, KeyPart, KeySink, KeyValues,
    StaticKey, MAX_KEY_FIELDS,
};
pub use resolve::{
    resolve_in_entries, resolve_serve, Dyn, DynKernel, PreparedKey, Resolution, Resolved, Source, TunedKernel,
};
pub use schema::{
    dtype_key, int_key, int_param, name_param, param_index, write_config, Field, FieldKind, KernelSchema,
};
pub use table::{
    origin_of_path, table_files, MergeReport, ServeError, ServedTable, TableEntry, TableError, TableFile,
    TableHeader, SCHEMA_VERSION, TIMINGS, TIMING_GRAPH, TIMING_SINGLE,
};
pub use target::{Target, TargetError, Vendor};
pub use value::Value;

/// Re-exported so generated table code names one `phf`.
pub use phf;
