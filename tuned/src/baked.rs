//! Baked tables: what `build-tools` emits into each kernel crate, and the serving
//! lookup over them (a perfect-hash probe, then a binary search over batches).

use crate::{Target, Value};

/// What a table entry says about its (key, batch): a tuned config, or a default
/// marker (tuning measured there and the analytic default won).
///
/// A marker is what `kernels tables prune` leaves where it drops a config that does
/// not beat the default: the batch keeps its place in the nearest-batch lookup, so
/// nearby batches get the default instead of a neighbouring batch's config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EntryConfig<V> {
    /// A tuned config: values in the table's `params` order.
    Tuned(V),
    /// Measured here: the analytic default wins (written `"config": "default"`).
    Default,
}

impl<V> EntryConfig<V> {
    /// The tuned config's values, `None` for a default marker.
    pub fn tuned(&self) -> Option<&V> {
        match self {
            EntryConfig::Tuned(v) => Some(v),
            EntryConfig::Default => None,
        }
    }

    /// Whether this is a default marker.
    pub fn is_default(&self) -> bool {
        matches!(self, EntryConfig::Default)
    }
}

/// One entry of a baked table.
#[derive(Debug)]
pub struct BakedEntry {
    pub batch: u64,
    /// The tuned config (values in the table's `params` order), or a default marker.
    pub config: EntryConfig<&'static [Value]>,
    /// Median time of the config, microseconds (a marker: the default's time).
    pub us: f64,
    /// Median time of the analytic default on the same problem, microseconds.
    pub default_us: f64,
}

/// A kernel's table for one target, baked at build time.
#[derive(Debug)]
pub struct BakedTable {
    pub kernel: &'static str,
    pub target: Target,
    pub device: &'static str,
    pub compiler: &'static str,
    /// Fingerprint of the kernel source the entries were tuned against.
    pub source_fingerprint: &'static str,
    /// Fingerprint of the kernel source this binary was built from.
    pub built_fingerprint: &'static str,
    pub tuned_at: &'static str,
    /// How the entries were timed: `graph` or `single` (the table file's `timing`).
    pub timing: &'static str,
    pub params: &'static [&'static str],
    /// Canonical static key -> entries sorted by batch, batches unique.
    pub entries: phf::Map<&'static str, &'static [BakedEntry]>,
    /// Number of entries over all keys, default markers included.
    pub len: usize,
}

/// How a table lookup matched.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TableHit {
    /// The table has an entry for exactly this batch.
    Exact,
    /// The nearest batch in log2 space; `distance` is |log2(batch) - log2(table_batch)|.
    Nearest { table_batch: u64, distance: f64 },
}

impl BakedTable {
    /// The table was tuned against a different kernel source than this binary has.
    pub fn is_stale(&self) -> bool {
        self.source_fingerprint != self.built_fingerprint
    }

    /// Number of default markers over all keys.
    pub fn markers(&self) -> usize {
        self.entries
            .values()
            .map(|list| list.iter().filter(|e| e.config.is_default()).count())
            .sum()
    }

    /// The serving lookup: the entry for `key`, at the batch nearest `batch` in log2
    /// space (ties go to the larger batch), default markers included. `None` when
    /// the key is not in the table or `batch` is 0.
    pub fn lookup(&self, key: &str, batch: u64) -> Option<(&'static BakedEntry, TableHit)> {
        let entries: &'static [BakedEntry] = self.entries.get(key)?;
        nearest(entries, batch)
    }
}

/// The nearest-batch rule over entries sorted by batch (unique batches): the entry
/// whose batch is nearest `batch` in log2 space, ties to the larger batch.
pub fn nearest_entry(entries: &[BakedEntry], batch: u64) -> Option<&BakedEntry> {
    if batch == 0 {
        return None;
    }
    let i = entries.partition_point(|e| e.batch < batch);
    match (i.checked_sub(1).map(|j| &entries[j]), entries.get(i)) {
        (_, Some(hi)) if hi.batch == batch => Some(hi),
        // log2(hi/batch) <= log2(batch/lo)  <=>  hi*lo <= batch^2, exact in integers.
        (Some(lo), Some(hi)) => Some(
            if (hi.batch as u128) * (lo.batch as u128) <= (batch as u128) * (batch as u128) {
                hi
            } else {
                lo
            },
        ),
        (Some(lo), None) => Some(lo),
        (None, Some(hi)) => Some(hi),
        (None, None) => None,
    }
}

/// [`nearest_entry`] with how it matched.
pub fn nearest(entries: &[BakedEntry], batch: u64) -> Option<(&BakedEntry, TableHit)> {
    let e = nearest_entry(entries, batch)?;
    let hit = if e.batch == batch {
        TableHit::Exact
    } else {
        TableHit::Nearest {
            table_batch: e.batch,
            distance: log2_distance(batch, e.batch),
        }
    };
    Some((e, hit))
}

/// |log2(a) - log2(b)|.
pub fn log2_distance(a: u64, b: u64) -> f64 {
    (a as f64 / b as f64).log2().abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(batch: u64) -> BakedEntry {
        BakedEntry {
            batch,
            config: EntryConfig::Tuned(&[]),
            us: 1.0,
            default_us: 1.0,
        }
    }

    fn marker(batch: u64) -> BakedEntry {
        BakedEntry {
            batch,
            config: EntryConfig::Default,
            us: 1.0,
            default_us: 1.0,
        }
    }

    #[test]
    fn markers_take_part_in_the_nearest_batch_rule() {
        let t = [e(64), marker(256), e(1024)];
        // 300 is nearer the marker at 256 than the entry at 1024.
        let (x, h) = nearest(&t, 300).unwrap();
        assert!(x.config.is_default());
        assert_eq!(x.batch, 256);
        assert!(matches!(h, TableHit::Nearest { table_batch: 256, .. }));
        // 128 is exactly between 64 and 256: the tie goes to the larger, the marker.
        assert!(nearest(&t, 128).unwrap().0.config.is_default());
        assert!(!nearest(&t, 100).unwrap().0.config.is_default());
    }

    #[test]
    fn exact_nearest_tie_and_edges() {
        let t = [e(4), e(16), e(64)];
        assert_eq!(nearest(&t, 16).unwrap().1, TableHit::Exact);
        // from below the first entry and above the last
        let (x, h) = nearest(&t, 1).unwrap();
        assert_eq!(
            (x.batch, h),
            (
                4,
                TableHit::Nearest {
                    table_batch: 4,
                    distance: 2.0
                }
            )
        );
        let (x, _) = nearest(&t, 10_000).unwrap();
        assert_eq!(x.batch, 64);
        // 7 is nearer 4 (log2 0.81) than 16 (log2 1.19)
        assert_eq!(nearest(&t, 7).unwrap().0.batch, 4);
        // 9 is nearer 16 (0.83) than 4 (1.17)
        assert_eq!(nearest(&t, 9).unwrap().0.batch, 16);
        // 8 is exactly between 4 and 16 in log2: the tie goes to the larger batch
        let (x, h) = nearest(&t, 8).unwrap();
        assert_eq!(
            (x.batch, h),
            (
                16,
                TableHit::Nearest {
                    table_batch: 16,
                    distance: 1.0
                }
            )
        );
        assert!(nearest(&t, 0).is_none());
        assert!(nearest(&[], 5).is_none());
    }
}
