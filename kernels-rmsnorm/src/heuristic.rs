//! The analytic defaults: an RMSNorm config from target, key and batch, no search.
//!
//! A ladder from the kernel's structure (16-byte vectors, the row in registers when it
//! fits) with thresholds measured on the H200 (bf16/f16; the figures are in
//! docs/results/rmsnorm.md). Tables replace the default wherever a model's shape was
//! tuned.

use tuned::Target;

use crate::config::{RmsNormConfig, RmsNormKey};
use crate::schema::MAX_ITERS;

/// 16-byte vectors at any hidden size: the kernel reads the elements around a row's
/// aligned vectors one at a time, so odd sizes and offset rows keep them.
fn widest_vector(key: &RmsNormKey) -> u32 {
    (16 / key.dtype.size()) as u32
}

/// Threads for `per_thread` vectors per thread, within one warp and 1024.
fn threads_for(target: Target, vectors: u32, per_thread: u32) -> u32 {
    (vectors / per_thread)
        .next_power_of_two()
        .clamp(target.warp_size(), 1024)
}

/// Few rows of 4096 columns or more on sm90: a cluster of [`DECODE_SPLITS`] blocks per
/// row (so a decode batch uses more SMs than it has rows), at the widest vector, with
/// about one vector per thread; fewer threads where that would leave the cluster's last
/// block without vectors. `None` elsewhere.
///
/// In the H200's tuning records of 1-64 rows of 4096, 7168 and 8192 columns (bf16, every
/// candidate timed in one pass) this config took 1.000-1.086x the best candidate's time
/// (fused: 1.000-1.043x), one block per row up to 1.341x; at 128 rows, and below 4096
/// columns, one block per row wins (docs/results/rmsnorm.md).
pub const DECODE_SPLITS: u32 = 8;
pub const DECODE_MAX_ROWS: u64 = 64;
pub const DECODE_MIN_COLS: u32 = 4096;

fn decode_cluster(target: Target, key: &RmsNormKey, rows: u64) -> Option<RmsNormConfig> {
    if target != Target::Sm90 || rows > DECODE_MAX_ROWS || key.cols < DECODE_MIN_COLS {
        return None;
    }
    let vec = widest_vector(key);
    let vectors = key.cols / vec;
    let mut threads = vectors.div_ceil(DECODE_SPLITS).next_power_of_two().min(1024);
    while threads > target.warp_size() && (DECODE_SPLITS - 1) * threads >= vectors {
        threads /= 2;
    }
    let c = RmsNormConfig {
        threads,
        vec,
        rows: 1,
        occ: 0,
        splits: DECODE_SPLITS,
        late: 0,
    };
    crate::space::fits(target, key, &c).then_some(c)
}

/// The default for plain RMSNorm on `rows` rows of `key`.
pub fn analytic_default(target: Target, key: &RmsNormKey, rows: u64) -> RmsNormConfig {
    if let Some(c) = decode_cluster(target, key, rows) {
        return c;
    }
    let vec = widest_vector(key);
    let vectors = key.cols.div_ceil(vec);
    // About 4 vectors per thread: hidden 4096 in bf16 -> 128 threads of 4 x 16 bytes.
    let mut threads = threads_for(target, vectors, 4);
    // Keep the row in registers when 1024 threads can.
    while threads < 1024 && (vectors.div_ceil(threads) as i64) > MAX_ITERS {
        threads *= 2;
    }
    // Hidden sizes above 16K: 512 threads (measured best at 4096x32768).
    if key.cols > 16384 {
        threads = threads.min(512).max(target.warp_size());
    }
    // One row per block: 16384x2048 bf16 ran 3.75 TB/s at rows=1 against 3.62 at t64 r2.
    RmsNormConfig {
        threads,
        vec,
        rows: 1,
        occ: 0,
        splits: 1,
        late: 0,
    }
}

/// The default for fused add RMSNorm, which moves twice the bytes per row: about two
/// vectors per thread (f16 32768x4096: t256 4.14 TB/s against t128 3.84; 16384x2048
/// bf16: t256 3.96 against t64 r2 3.77).
pub fn analytic_default_fused(target: Target, key: &RmsNormKey, rows: u64) -> RmsNormConfig {
    if let Some(c) = decode_cluster(target, key, rows) {
        return c;
    }
    let vec = widest_vector(key);
    let vectors = key.cols.div_ceil(vec);
    let mut threads = threads_for(target, vectors, 2);
    // Above 16K the register-held row spills at 1024 threads; 128 threads reading the row
    // twice ran 3.51 TB/s at 4096x32768 against 2.62 for t1024.
    if key.cols > 16384 {
        threads = 128.max(target.warp_size());
    }
    RmsNormConfig {
        threads,
        vec,
        rows: 1,
        occ: 0,
        splits: 1,
        late: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuned::DType;

    fn key(cols: u32) -> RmsNormKey {
        RmsNormKey {
            dtype: DType::Bf16,
            cols,
        }
    }

    /// Decode batches of 4096+ columns on sm90 default to an 8-block cluster with about
    /// one 16-byte vector per thread (the configs the tuning records rank first or close
    /// behind; docs/results/rmsnorm.md); more rows, shorter rows and other targets do not.
    #[test]
    fn decode_rows_default_to_a_cluster_on_sm90() {
        for (cols, threads) in [(4096, 64), (7168, 64), (8192, 128), (16384, 256)] {
            for rows in [1, 16, DECODE_MAX_ROWS] {
                for f in [analytic_default, analytic_default_fused] {
                    let c = f(Target::Sm90, &key(cols), rows);
                    assert_eq!(
                        c,
                        RmsNormConfig {
                            threads,
                            vec: 8,
                            rows: 1,
                            occ: 0,
                            splits: DECODE_SPLITS,
                            late: 0,
                        },
                        "{cols} x {rows}"
                    );
                    assert!(crate::space::fits(Target::Sm90, &key(cols), &c));
                }
            }
        }
        for (target, cols, rows) in [
            (Target::Sm90, 8192, DECODE_MAX_ROWS + 1),
            (Target::Sm90, 3584, 1),
            (Target::Sm80, 8192, 1),
            (Target::Gfx942, 8192, 1),
        ] {
            for f in [analytic_default, analytic_default_fused] {
                assert_eq!(f(target, &key(cols), rows).splits, 1, "{target} {cols} x {rows}");
            }
        }
        // An odd hidden size keeps 16-byte vectors (its head and tail are read by
        // elements), as its aligned neighbour does.
        let odd = analytic_default(Target::Sm90, &key(4097), 1);
        assert_eq!((odd.vec, odd.threads, odd.splits), (8, 64, DECODE_SPLITS));
        assert!(crate::space::fits(Target::Sm90, &key(4097), &odd));
    }
}
