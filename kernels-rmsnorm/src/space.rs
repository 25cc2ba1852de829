//! The RMSNorm search space and the rules that prune it for one problem.

use tuned::Target;

use crate::config::{RmsNormConfig, RmsNormKey};
use crate::schema::{occ_leaves_enough_threads, LATES, MAX_ITERS, OCCS, ROWS, SPLITS, THREADS, VECS};

/// Whether `config` can run rows of `key` on `target`: a vector is at most 16 bytes
/// (any row length: the kernel reads the elements before a row's first aligned vector
/// and after its last one by themselves); a thread group is at least a warp (64 lanes on AMD) and has
/// no more threads than the row has vectors (idle warps), except the smallest group.
/// Rows longer than registers hold are read twice, which is correct for any length.
/// A blocks-per-SM cap needs Hopper's 196 KiB carveout (sm90 only) and leaves
/// 768..=2048 resident threads. A cluster per row (`splits` > 1) needs sm90, one row
/// per block, no cap, and the row in registers (at most `MAX_ITERS` vectors per
/// thread); its blocks together have no more threads than the row has vectors, so
/// none is left without any. Storing the residual late (`late` 1) needs the row in
/// registers too. This is the fused kernel's rule; [`fits_plain`] the plain one's.
pub fn fits(target: Target, key: &RmsNormKey, config: &RmsNormConfig) -> bool {
    // Past the kernels' 32-bit column index (which the ops refuse) nothing fits, and the
    // arithmetic below would overflow.
    if key.cols > i32::MAX as u32 {
        return false;
    }
    let vec_bytes = config.vec as usize * key.dtype.size();
    let vectors = key.cols / config.vec.max(1);
    let group_limit = vectors.next_power_of_two().max(target.warp_size());
    (config.occ == 0
        || (target == Target::Sm90
            && occ_leaves_enough_threads(config.block_threads() as i64, config.occ as i64)))
        && (config.splits == 1
            || (target == Target::Sm90
                && config.rows == 1
                && config.occ == 0
                && config.iters(key.cols) as i64 <= MAX_ITERS
                && (config.splits - 1) * config.threads < vectors))
        && (config.late == 0 || config.iters(key.cols) as i64 <= MAX_ITERS)
        && vec_bytes <= 16
        && config.threads >= target.warp_size()
        && config.threads <= group_limit
}

/// Whether plain RMSNorm can run `config` on rows of `key`: [`fits`], with `late` 0
/// (the plain kernel has no residual).
pub fn fits_plain(target: Target, key: &RmsNormKey, config: &RmsNormConfig) -> bool {
    config.late == 0 && fits(target, key, config)
}

/// Most rows at which the tuner tries clusters: with more, one block per row already
/// has blocks for every SM. On the H200, 256 x 7168 bf16 fused ran 5.36 us on clusters of
/// 2 against 5.23 on one block per row, and at 128 rows no cluster config won in any of
/// the ten tuned RMSNorm shapes (docs/results/rmsnorm.md).
pub const CLUSTER_MAX_BATCH: u64 = 128;

/// The configs the tuner times for `batch` rows of `key`: [`search_space`], without
/// clusters above [`CLUSTER_MAX_BATCH`] rows. Every config of [`search_space`] stays
/// correct at any batch; this only saves tuning time.
pub fn tuning_space(target: Target, key: &RmsNormKey, batch: u64, fused: bool) -> Vec<RmsNormConfig> {
    let mut out = search_space(target, key, fused);
    if batch > CLUSTER_MAX_BATCH {
        out.retain(|c| c.splits == 1);
    }
    out
}

/// Every config of the space that fits `key` on `target`, for the fused kernel
/// (`fused`) or the plain one ([`fits_plain`]: no late residual store).
pub fn search_space(target: Target, key: &RmsNormKey, fused: bool) -> Vec<RmsNormConfig> {
    let mut out = Vec::new();
    for &threads in THREADS {
        for &vec in VECS {
            for &rows in ROWS {
                for &occ in OCCS {
                    for &splits in SPLITS {
                        for &late in LATES {
                            if threads * rows <= 1024 {
                                out.push(RmsNormConfig {
                                    threads: threads as u32,
                                    vec: vec as u32,
                                    rows: rows as u32,
                                    occ: occ as u32,
                                    splits: splits as u32,
                                    late: late as u32,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out.retain(|c| {
        if fused {
            fits(target, key, c)
        } else {
            fits_plain(target, key, c)
        }
    });
    out
}
