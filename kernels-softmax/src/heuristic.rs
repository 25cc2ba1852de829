//! The analytic default: a softmax config from target, key and batch, no search.
//!
//! A ladder from the kernel's structure (16-byte vectors, the row in registers when it
//! fits, enough blocks to fill the GPU) with thresholds measured on the H200 (bf16 and
//! f32; the figures are in docs/results/softmax.md). Tables replace the default wherever
//! a model's shape was tuned.

use tuned::{DType, Target, Vendor};

use crate::config::{SoftmaxConfig, SoftmaxKey, Strategy};
use crate::schema::MAX_ITERS;
use crate::space::fits;

/// The default config for `rows` rows of `key` on `target`.
///
/// On NVIDIA targets a `row` or `cluster` config keeps pass 1's exponentials when its
/// grid is at most one block per SM: then the wait for the row's (max, sum) is the
/// critical path and pass 2 is shorter for it (H200, bf16: 1 x 128256 16 x 128 2.85
/// to 2.78 us, 8 x 151936 8 x 256 4.78 to 4.52, 1 x 4096 1.71 to 1.65), while at
/// larger grids the extra registers cost more (64 x 128256 8 x 256: 13.32 to 14.02;
/// docs/results/softmax.md).
///
/// Vocabulary rows on clusters keep them at larger grids too: below 64 rows, below 128
/// rows where a thread keeps at most [`MAX_KEPT_AT_64_ROWS`], and up to 1024 rows of at
/// most 32768 columns (the H200's tables: 32000 x 256 9.95 us kept against 11.15;
/// 128256 x 32 7.07 against 8.32; from 64 rows of 128256 not keeping was ahead).
pub fn analytic_default(target: Target, key: &SoftmaxKey, rows: u64) -> SoftmaxConfig {
    let c = ladder(target, key, rows);
    let blocks = rows.div_ceil(u64::from(c.rows)) * u64::from(c.splits);
    let vocabulary_cluster = c.strategy == Strategy::Cluster
        && key.cols >= 16384
        && (rows < 64
            || (rows < 128 && c.iters(key.cols) * c.vec <= MAX_KEPT_AT_64_ROWS)
            || (key.cols <= 32768 && rows <= 1024));
    if target.vendor() != Vendor::Nvidia
        || !(blocks <= u64::from(target.reference_sm_count()) || vocabulary_cluster)
    {
        return c;
    }
    let kept = SoftmaxConfig { keep: true, ..c };
    if fits(target, key, &kept) {
        return kept;
    }
    // A cluster whose exponentials do not fit the registers keeps them at half the
    // vector width over twice the blocks, or else twice the threads (H200, bf16, 1 and 8
    // x 256000: 16 x 256 x 4 kept 3.67 and 5.71 us against 16 x 128 x 8 and 8 x 256 x 8
    // not kept, 3.98 and 6.16).
    if c.strategy == Strategy::Cluster && c.vec > 1 {
        let half = c.vec / 2;
        let wider = [
            SoftmaxConfig {
                splits: c.splits * 2,
                vec: half,
                ..kept
            },
            SoftmaxConfig {
                threads: c.threads * 2,
                vec: half,
                ..kept
            },
        ];
        let in_schema = |w: &SoftmaxConfig| {
            crate::schema::SPLITS.contains(&i64::from(w.splits))
                && crate::schema::THREADS.contains(&i64::from(w.threads))
        };
        if let Some(w) = wider.into_iter().find(|w| in_schema(w) && fits(target, key, w)) {
            return w;
        }
    }
    c
}

/// Most exponentials a thread of a vocabulary cluster keeps at 64-127 rows: the H200's
/// defaults check kept them at 92544 and 100352 columns (48 and 52 a thread, 1.06-1.11x
/// faster) and its tables did not at 128256 (64 a thread).
pub const MAX_KEPT_AT_64_ROWS: u32 = 56;

/// A row over a cluster of `splits` blocks of `threads` threads, `vec` elements per
/// access, exponentials not kept.
fn cluster_config(threads: u32, vec: u32, splits: u32) -> SoftmaxConfig {
    SoftmaxConfig {
        strategy: Strategy::Cluster,
        threads,
        vec,
        rows: 1,
        splits,
        keep: false,
    }
}

/// The default before `keep`: a ladder of strategies.
fn ladder(target: Target, key: &SoftmaxKey, rows: u64) -> SoftmaxConfig {
    // 16-byte vectors at any row length: the kernel reads the elements around a row's
    // aligned vectors one at a time, so odd lengths and offset rows keep them.
    let vec = (16 / key.dtype.size()) as u32;
    let warp = target.warp_size();
    let sms = u64::from(target.reference_sm_count());
    let cluster = |threads: u32| {
        [8, 4, 2]
            .into_iter()
            .map(|splits| cluster_config(threads, vec, splits))
            .find(|c| fits(target, key, c))
    };
    // Few long rows (decode-time sampling over a vocabulary): split each row over a
    // cluster of 8 so more SMs stream it. 256 threads per block beat 1024 (64x128256:
    // 2.02 against 1.36 TB/s; 1 row: 4.6 against 5.6 us); 128 at 32000 columns (1 row:
    // 3.0 us against 5.6 for a block per row).
    // From 32 rows of 32000 columns and more, the vocabulary rule below (narrower
    // accesses, more blocks per row) took 1.09-1.18x less time in the H200's tables.
    let vocabulary = key.dtype != DType::F32 && key.cols >= 32000;
    if target == Target::Sm90 && rows < sms / 2 && key.cols >= 16384 && !(vocabulary && rows >= 32) {
        // One vocabulary row: a non-portable cluster of 16 x 128, faster than 8 x 256 at
        // one row while 8 x 256 stays ahead from 8 rows (docs/results/softmax.md).
        // 2-element accesses while a thread takes at most 16 of them (up to 65536
        // columns: 1 x 32064-50432 bf16 took 1.80-1.85 us against 1.94 for 16-byte
        // vectors), 16-byte vectors above (92544-151936).
        let narrow = cluster_config(128, 2, 16);
        let wide = SoftmaxConfig { vec, ..narrow };
        if rows == 1 && vocabulary {
            if let Some(c) = [narrow, wide]
                .into_iter()
                .find(|c| c.iters(key.cols) <= 16 && fits(target, key, c))
            {
                return c;
            }
        }
        if rows == 1 && key.cols > 32768 && fits(target, key, &wide) {
            return wide;
        }
        if let Some(c) = cluster(if key.cols <= 32768 { 128 } else { 256 }) {
            return c;
        }
    }
    // Vocabulary rows at larger batches (16-bit, 32000 columns and more): a cluster of
    // 128-thread blocks, each thread holding at most 16 vectors of 4 elements (of 8 where
    // 4 would need more than 16 blocks per row), as few blocks per row as that allows:
    // in the H200's tuning records of 128-8192 rows of 32000-152064 columns it took
    // 1.00-1.10x the best candidate's time, the staged config below up to 1.35x
    // (docs/results/softmax.md).
    // Below 256 rows, 4-byte accesses first and clusters of 8 or 16 (32000 x 32-128: 8 x
    // 128 x 2 elements, 3.36-6.08 us against 3.73-7.23 for 4 x 128 x 4; 65536 x 32: 16 x
    // 128 x 2; 128256 x 32-128: 16 x 128 x 4; 151936: 16 x 128 x 8, the same rule).
    // The first cluster of 128-thread blocks that fits, trying vector widths in `vecs`
    // order and, for each, blocks per row in `splits` order.
    // At 64-127 rows of up to 65536 columns, 8 blocks of 256 threads with 8-byte accesses
    // (the H200's tables at 64 rows of 32000-65536 columns; 50257 x 64 off the tables:
    // 5.69-5.79 us against 6.23 for 4-byte accesses and 6.92 for 16 x 128 unkept); above,
    // the 128-thread rule (100352 x 64: 16 x 128 8.62 us against 9.50 for 8 x 256).
    let vocabulary_cluster = |threads: u32, vecs: &[u32], splits: &[u32]| {
        vecs.iter()
            .flat_map(|&vec| splits.iter().map(move |&splits| (vec, splits)))
            .map(|(vec, splits)| cluster_config(threads, vec, splits))
            .find(|c| fits(target, key, c))
    };
    if target == Target::Sm90 && vocabulary {
        let c = if (64..128).contains(&rows) && key.cols <= 65536 {
            vocabulary_cluster(256, &[4], &[8]).or_else(|| vocabulary_cluster(128, &[2, 4, 8], &[8, 16]))
        } else if rows < 256 {
            vocabulary_cluster(128, &[2, 4, 8], &[8, 16])
                .or_else(|| vocabulary_cluster(128, &[4, 8], &[2, 4, 8, 16]))
        } else {
            vocabulary_cluster(128, &[4, 8], &[2, 4, 8, 16])
        };
        if let Some(c) = c {
            return c;
        }
    }
    // Long rows at larger batches, staged in shared memory by cp.async (one pass over
    // HBM), measured with `kernels tune` on the H200 (bf16, 2026-11-30): 32768 columns
    // x 512 rows 22.6 us staged (256 threads) against 28.0 for a row in registers;
    // 65536 x 4096 269.5 against 280.9 online; 128256 x 1024 142.8 against 157.3
    // online. Rows too long for shared memory take 1024 threads so the part left in
    // registers is short. Below 512 rows of 64K+ columns online stays ahead (65536 x
    // 256: 24.5 against 26.7), and f32 rows of 64K+ keep the cluster below.
    if key.cols >= 16384 && (key.cols < 65536 || rows >= 512) && (key.dtype != DType::F32 || key.cols < 65536)
    {
        let mut c = SoftmaxConfig {
            strategy: Strategy::Staged,
            threads: 256,
            vec,
            rows: 1,
            splits: 1,
            keep: false,
        };
        let row_bytes = key.cols as u64 * key.dtype.size() as u64;
        if row_bytes > crate::config::staged_smem_limit(target) {
            c.threads = 1024;
        } else if row_bytes >= 96 << 10 {
            c.threads = 512;
        }
        if fits(target, key, &c) {
            return c;
        }
    }
    // Rows of 64K columns and more at larger batches: a row held by 1024 threads spills
    // (2.1-2.4 TB/s at 128256), so stream it: online with 1024 threads for 16-bit types
    // (3.32-3.61 TB/s at 1024-4096 rows x 128256), a cluster of 8 x 256 for f32 (3.73
    // against 2.86 for online at 1024x128256).
    if key.cols >= 65536 {
        if key.dtype == DType::F32 && target == Target::Sm90 {
            if let Some(c) = cluster(256) {
                return c;
            }
        }
        let c = SoftmaxConfig {
            strategy: Strategy::Online,
            threads: 1024,
            vec,
            rows: 1,
            splits: 1,
            keep: false,
        };
        if fits(target, key, &c) {
            return c;
        }
    }
    // Rows in registers: about 4 vectors per thread, at most 256 threads unless the row
    // needs more to stay within MAX_ITERS vectors each (4096x32000: t256 3.95 TB/s
    // against t1024 2.80).
    let vectors = key.cols.div_ceil(vec);
    let mut threads = (vectors / 4).next_power_of_two().clamp(warp, 256.max(warp));
    while threads < 1024 && vectors.div_ceil(threads) as i64 > MAX_ITERS {
        threads *= 2;
    }
    let mut c = SoftmaxConfig {
        strategy: Strategy::Row,
        threads,
        vec,
        rows: 1,
        splits: 1,
        keep: false,
    };
    // Short rows: several rows per block so a block still has 128+ threads.
    if threads < 128 {
        c.rows = (128 / threads).min(16);
    }
    if fits(target, key, &c) {
        return c;
    }
    c = SoftmaxConfig {
        strategy: Strategy::Online,
        threads: 1024.max(warp),
        vec,
        rows: 1,
        splits: 1,
        keep: false,
    };
    if !fits(target, key, &c) {
        c = SoftmaxConfig {
            strategy: Strategy::Row,
            threads: warp,
            vec: 1,
            rows: 1,
            splits: 1,
            keep: false,
        };
    }
    c
}
