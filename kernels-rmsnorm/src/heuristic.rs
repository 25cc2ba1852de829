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
        .max(1)
        .next_power_of_two()
        .clamp(target.warp_size(), 1024)
}

/// Most rows that take a cluster per row by default on sm90 (plain RMSNorm); at 256 rows
/// one block per row won in every tuned shape (docs/results/rmsnorm.md).
pub const DECODE_MAX_ROWS: u64 = 128;
/// Fewest columns that take a cluster by default (plain RMSNorm): in the H200's tables
/// 3584 columns took one at 1-128 rows, 2048 never did.
pub const DECODE_MIN_COLS: u32 = 3072;
/// Fewest columns that take a cluster by default (fused): 2048 columns took one at 1-16 rows.
pub const DECODE_MIN_COLS_FUSED: u32 = 2048;
/// Blocks per row of the decode cluster at its fewest rows.
pub const DECODE_SPLITS: u32 = 8;

/// A cluster config of `splits` blocks of `threads` threads reading `vec` elements per
/// access, if it fits `key` on `target`.
fn cluster(target: Target, key: &RmsNormKey, splits: u32, vec: u32, threads: u32) -> Option<RmsNormConfig> {
    let c = RmsNormConfig {
        threads: threads.clamp(target.warp_size(), 1024),
        vec,
        rows: 1,
        occ: 0,
        splits,
        late: 0,
    };
    crate::space::fits(target, key, &c).then_some(c)
}

/// The fused kernel's cluster: [`cluster`] storing the residual after the reduction
/// (`late` 1), which the cluster's exchange hides: 1 x 4544 and 1 x 5120 bf16 on the H200
/// took 1.62-1.63 us against 1.91-1.93 storing it early (docs/results/rmsnorm.md).
fn cluster_fused(
    target: Target,
    key: &RmsNormKey,
    splits: u32,
    vec: u32,
    threads: u32,
) -> Option<RmsNormConfig> {
    let c = RmsNormConfig {
        threads: threads.clamp(target.warp_size(), 1024),
        vec,
        rows: 1,
        occ: 0,
        splits,
        late: 1,
    };
    crate::space::fits(target, key, &c).then_some(c)
}

/// About one 16-byte vector per thread of a cluster of `splits` blocks, if it fits (the
/// cluster's last block must get vectors, which rules it out where rounding the threads
/// up to a power of two overshoots by `splits / (splits - 1)`).
fn one_vector_each(target: Target, key: &RmsNormKey, splits: u32) -> Option<RmsNormConfig> {
    let vec = widest_vector(key);
    let threads = (key.cols / vec).div_ceil(splits).next_power_of_two();
    cluster(target, key, splits, vec, threads)
}

/// Plain RMSNorm's cluster per row for few rows on sm90 (`None` elsewhere), from the
/// H200's tuning records of 1-128 rows of 3584-8192 columns (bf16, docs/results/rmsnorm.md):
/// up to 16 rows a cluster of 8 with about one 16-byte vector per thread where that fits
/// (8192: the best config at 1-64 rows), else single elements over 8 blocks of 128
/// threads or more (3584, 4096, 7168: the best at 1-8 rows, 1.2-1.4x ahead of two
/// vectors per thread; 3072-6144 at 16 rows off the tables: 1.13-1.20x); from 17 rows a cluster of 8 or 4 with one vector per thread (the
/// best at 16-128 rows of 3584-8192), else two vectors per thread over 8 blocks.
fn decode_cluster(target: Target, key: &RmsNormKey, rows: u64) -> Option<RmsNormConfig> {
    if target != Target::Sm90 || rows > DECODE_MAX_ROWS || key.cols < DECODE_MIN_COLS {
        return None;
    }
    if rows <= 16 {
        return one_vector_each(target, key, DECODE_SPLITS).or_else(|| {
            let threads = (key.cols / DECODE_SPLITS / 8).next_power_of_two().max(128);
            cluster(target, key, DECODE_SPLITS, 1, threads)
        });
    }
    let splits = if rows <= 64 { [8, 4] } else { [4, 4] };
    splits
        .into_iter()
        .find_map(|s| one_vector_each(target, key, s))
        .or_else(|| {
            let vec = widest_vector(key);
            let mut threads = (key.cols / vec).div_ceil(DECODE_SPLITS).next_power_of_two();
            while threads > target.warp_size() && (DECODE_SPLITS - 1) * threads >= key.cols / vec {
                threads /= 2;
            }
            cluster(target, key, DECODE_SPLITS, vec, threads)
        })
}

/// Fused add RMSNorm's cluster per row for few rows on sm90 (`None` elsewhere), from the
/// H200's tuning records of 1-128 rows of 2048-8192 columns (bf16, docs/results/rmsnorm.md):
/// up to 16 rows 8 blocks of 4-byte accesses, about two per thread (the best config, or
/// within 2% of it, at every such shape; 16-byte vectors took 1.1-1.2x as long); at
/// 17-64 rows 32-thread blocks with two 16-byte vectors each, 8 or 16 of them per row
/// (the best at 32-64 rows of 3584-8192); at 65-128 rows of 6144 columns or more a
/// cluster of 4 with one vector per thread.
fn decode_cluster_fused(target: Target, key: &RmsNormKey, rows: u64) -> Option<RmsNormConfig> {
    if target != Target::Sm90 || rows > DECODE_MAX_ROWS || key.cols < DECODE_MIN_COLS_FUSED {
        return None;
    }
    let pair = (4 / key.dtype.size()) as u32;
    if rows <= 16 {
        let threads = (key.cols / pair / DECODE_SPLITS / 2).next_power_of_two();
        return cluster_fused(target, key, DECODE_SPLITS, pair.max(1), threads);
    }
    let vec = widest_vector(key);
    if rows <= 64 && key.cols >= DECODE_MIN_COLS {
        let splits = (key.cols / vec / 64).next_power_of_two().clamp(8, 16);
        return cluster_fused(target, key, splits, vec, target.warp_size())
            .or_else(|| cluster_fused(target, key, DECODE_SPLITS, vec, target.warp_size()));
    }
    if rows > 64 && key.cols >= 6144 {
        return one_vector_each(target, key, 4).and_then(|c| cluster_fused(target, key, 4, c.vec, c.threads));
    }
    None
}

/// Vectors per thread for one block per row, from the vectors of the whole batch: with
/// few, every thread takes one so more loads are in flight; with many, blocks are
/// plentiful and fewer, longer threads cost less. In the H200's tables of 2048-8192
/// columns one vector per thread won up to about 0.6 M vectors in the batch (2048 x
/// 256: 1.38 us against 1.98 for four), two up to about 1 M, four above (2304 x 4096,
/// 1.18 M vectors, off the tables: 128 threads 12.75 us against 13.53 for 256).
fn vectors_per_thread(rows: u64, vectors: u32) -> u32 {
    match rows.saturating_mul(u64::from(vectors)) {
        0..=655_360 => 1,
        655_361..=1_048_576 => 2,
        _ => 4,
    }
}

/// Rows per block for one block per row: rows of 128 vectors or fewer take two per block
/// from 2048 rows (plain, 768 x 4096 bf16: 5.33 us against 5.76; fused, 768 and 1024 x
/// 4096: 8.14 and 9.69 us against 8.45 and 10.39).
fn rows_per_block(rows: u64, vectors: u32) -> u32 {
    if vectors <= 128 && rows >= 2048 {
        2
    } else {
        1
    }
}

/// One block of `threads` x `vec` per row, [`rows_per_block`] rows to a block where
/// `fits` takes that, else one.
fn one_block_per_row(
    threads: u32,
    vec: u32,
    rows: u64,
    vectors: u32,
    fits: impl Fn(&RmsNormConfig) -> bool,
) -> RmsNormConfig {
    let c = RmsNormConfig {
        rows: rows_per_block(rows, vectors),
        ..block_per_row(threads, vec)
    };
    if fits(&c) {
        c
    } else {
        RmsNormConfig { rows: 1, ..c }
    }
}

/// The default for plain RMSNorm on `rows` rows of `key`.
pub fn analytic_default(target: Target, key: &RmsNormKey, rows: u64) -> RmsNormConfig {
    if let Some(c) = decode_cluster(target, key, rows) {
        return c;
    }
    let vec = widest_vector(key);
    // Whole vectors (the space's count), so an odd size takes its neighbour's threads.
    let vectors = (key.cols / vec).max(1);
    let mut threads = threads_for(target, vectors, vectors_per_thread(rows, vectors));
    // Keep the row in registers when 1024 threads can.
    while threads < 1024 && (vectors.div_ceil(threads) as i64) > MAX_ITERS {
        threads *= 2;
    }
    // Hidden sizes above 16K: 512 threads (measured best at 4096x32768).
    if key.cols > 16384 {
        threads = threads.min(512).max(target.warp_size());
    }
    // One row per block (16384x2048 bf16 ran 3.75 TB/s at rows=1 against 3.62 at t64 r2)
    // except short rows at large batches.
    one_block_per_row(threads, vec, rows, vectors, |c| {
        crate::space::fits_plain(target, key, c)
    })
}

/// One block of `threads` threads per row (one row per block), `vec` elements per access.
fn block_per_row(threads: u32, vec: u32) -> RmsNormConfig {
    RmsNormConfig {
        threads,
        vec,
        rows: 1,
        occ: 0,
        splits: 1,
        late: 0,
    }
}

/// The power of two nearest `x` (the larger one at a tie).
fn nearest_power_of_two(x: u32) -> u32 {
    let up = x.max(1).next_power_of_two();
    if up - x <= x - up / 2 || up == 1 {
        up
    } else {
        up / 2
    }
}

/// The default for fused add RMSNorm, which moves twice the bytes per row: about two
/// vectors per thread (f16 32768x4096: t256 4.14 TB/s against t128 3.84; 16384x2048
/// bf16: t256 3.96 against t64 r2 3.77).
pub fn analytic_default_fused(target: Target, key: &RmsNormKey, rows: u64) -> RmsNormConfig {
    if let Some(c) = decode_cluster_fused(target, key, rows) {
        return c;
    }
    // Short rows at small batches, one block per row:
    // - up to 16 rows of a multiple of 256 columns, 256 threads, each taking its share in
    //   whole accesses of the widest width that divides it (768 columns: 1.34 us with 3
    //   single elements a thread against 1.43 for 512 threads of 4 bytes; 1024: 1.37 us with
    //   one 8-byte access against 1.44);
    // - up to 256 rows, 4-byte accesses, about one per thread (768 and 1024 columns at 256
    //   rows on the H200: 512 threads of them were the best config, 1.27x ahead of 256;
    //   16-byte vectors took 1.2x the best time at 1-256 rows).
    if key.cols < DECODE_MIN_COLS_FUSED {
        let whole = (rows <= 16 && key.cols > 0 && key.cols.is_multiple_of(256)).then(|| {
            let share = key.cols / 256;
            block_per_row(256, (1u32 << share.trailing_zeros()).min(widest_vector(key)))
        });
        let pair = (4 / key.dtype.size()).max(1) as u32;
        let pairs = (rows <= 256).then(|| block_per_row(threads_for(target, key.cols / pair, 1), pair));
        if let Some(c) = [whole, pairs]
            .into_iter()
            .flatten()
            .find(|c| crate::space::fits(target, key, c))
        {
            return c;
        }
    }
    let vec = widest_vector(key);
    let vectors = (key.cols / vec).max(1);
    // About two vectors per thread: rounded up while the batch holds few vectors (4544 x
    // 256 bf16: 512 threads 4.44 us, 256 threads 4.79), to the nearest power of two
    // above (4544 x 4096: 256 threads 39.8 us, 512 threads 43.3).
    let per_two = if vectors_per_thread(rows, vectors) == 1 {
        (vectors / 2).max(1).next_power_of_two()
    } else {
        nearest_power_of_two(vectors / 2)
    };
    let mut threads = per_two.clamp(target.warp_size(), 1024);
    // Above 16K the register-held row spills at 1024 threads; 128 threads reading the row
    // twice ran 3.51 TB/s at 4096x32768 against 2.62 for t1024.
    if key.cols > 16384 {
        threads = 128.max(target.warp_size());
    }
    one_block_per_row(threads, vec, rows, vectors, |c| {
        crate::space::fits(target, key, c)
    })
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

    /// Few rows on sm90 default to a cluster per row with the shapes the H200's tables
    /// ranked first (docs/results/rmsnorm.md); more rows, shorter rows and other targets
    /// do not; every default lies in the space.
    #[test]
    fn decode_rows_default_to_a_cluster_on_sm90() {
        let cfg = |threads, vec, splits| RmsNormConfig {
            threads,
            vec,
            rows: 1,
            occ: 0,
            splits,
            late: 0,
        };
        let late = |c: RmsNormConfig| RmsNormConfig { late: 1, ..c };
        // Plain: one 16-byte vector per thread where it fits, single elements otherwise.
        assert_eq!(analytic_default(Target::Sm90, &key(8192), 1), cfg(128, 8, 8));
        assert_eq!(analytic_default(Target::Sm90, &key(4096), 4), cfg(64, 8, 8));
        assert_eq!(analytic_default(Target::Sm90, &key(7168), 1), cfg(128, 1, 8));
        assert_eq!(analytic_default(Target::Sm90, &key(7168), 16), cfg(128, 1, 8));
        assert_eq!(analytic_default(Target::Sm90, &key(7168), 32), cfg(256, 8, 4));
        assert_eq!(analytic_default(Target::Sm90, &key(3584), 128), cfg(128, 8, 4));
        assert_eq!(analytic_default(Target::Sm90, &key(8192), 128), cfg(256, 8, 4));
        // Fused: 4-byte accesses over 8 blocks up to 16 rows, 32-thread blocks to 64, the
        // residual stored late.
        for (cols, rows, want) in [
            (7168, 1, cfg(256, 2, 8)),
            (4096, 16, cfg(128, 2, 8)),
            (8192, 32, cfg(32, 8, 16)),
            (3584, 64, cfg(32, 8, 8)),
            (7168, 128, cfg(256, 8, 4)),
        ] {
            assert_eq!(
                analytic_default_fused(Target::Sm90, &key(cols), rows),
                late(want),
                "{cols} x {rows}"
            );
        }
        assert_eq!(analytic_default_fused(Target::Sm90, &key(4096), 128).splits, 1);
        for cols in [
            2048, 3072, 3584, 4096, 4097, 4544, 4608, 5120, 6144, 7168, 8192, 16384, 40000,
        ] {
            for rows in [1, 2, 8, 9, 16, 17, 32, 64, 65, 128, 129, 4096] {
                let (p, f) = (
                    analytic_default(Target::Sm90, &key(cols), rows),
                    analytic_default_fused(Target::Sm90, &key(cols), rows),
                );
                assert!(
                    crate::space::fits_plain(Target::Sm90, &key(cols), &p),
                    "{cols} x {rows}: {p}"
                );
                assert!(
                    crate::space::fits(Target::Sm90, &key(cols), &f),
                    "{cols} x {rows}: {f}"
                );
                if rows > DECODE_MAX_ROWS {
                    assert_eq!((p.splits, f.splits), (1, 1), "{cols} x {rows}");
                }
                if cols >= DECODE_MIN_COLS && rows <= DECODE_MAX_ROWS {
                    assert!(p.splits > 1, "{cols} x {rows}: {p}");
                }
                if rows <= 16 {
                    assert!(f.splits > 1, "{cols} x {rows}: {f}");
                }
            }
        }
        for (target, cols, rows) in [
            (Target::Sm90, 8192, DECODE_MAX_ROWS + 1),
            (Target::Sm90, 2048, 1),
            (Target::Sm80, 8192, 1),
            (Target::Gfx942, 8192, 1),
        ] {
            assert_eq!(
                analytic_default(target, &key(cols), rows).splits,
                1,
                "{target} {cols} x {rows}"
            );
        }
        assert_eq!(analytic_default_fused(Target::Sm80, &key(8192), 1).splits, 1);
    }

    /// One block per row: one vector per thread while the batch holds few vectors, two
    /// and then four as it grows (2048 columns: 256 threads up to 2560 rows, then 128,
    /// then 64).
    #[test]
    fn threads_shrink_as_the_batch_grows() {
        let t = |rows| analytic_default(Target::Sm90, &key(2048), rows).threads;
        assert_eq!((t(256), t(2560), t(4096), t(16384)), (256, 256, 128, 64));
        let c = |rows| analytic_default(Target::Sm80, &key(768), rows);
        assert_eq!((c(1).threads, c(1).rows), (128, 1));
        assert_eq!((c(4096).threads, c(4096).rows), (128, 2));
        // Fused: about two vectors per thread to the nearest power of two; short rows at
        // small batches on 4-byte accesses.
        let f = |cols, rows| analytic_default_fused(Target::Sm90, &key(cols), rows);
        assert_eq!(
            (
                f(4608, 4096).threads,
                f(6144, 4096).threads,
                f(7168, 4096).threads
            ),
            (256, 512, 512)
        );
        assert_eq!((f(768, 256).threads, f(768, 256).vec), (512, 2));
        // Up to 16 rows of a multiple of 256: 256 threads, whole accesses each.
        assert_eq!((f(768, 16).threads, f(768, 16).vec), (256, 1));
        assert_eq!((f(1024, 1).threads, f(1024, 1).vec), (256, 4));
        assert_eq!((f(1536, 1).threads, f(1536, 1).vec), (256, 2));
        assert_eq!((f(1000, 1).threads, f(1000, 1).vec), (512, 2));
        // Short rows at large batches: two per block.
        assert_eq!(
            (f(768, 4096).rows, f(1024, 4096).rows, f(2048, 4096).rows),
            (2, 2, 1)
        );
        assert_eq!(analytic_default(Target::Sm90, &key(2304), 4096).threads, 128);
        assert_eq!((f(4608, 256).threads, f(2304, 256).threads), (512, 256));
        assert_eq!(f(768, 4096).vec, 8);
        assert_eq!(nearest_power_of_two(1), 1);
        assert_eq!((nearest_power_of_two(284), nearest_power_of_two(384)), (256, 512));
    }
}
