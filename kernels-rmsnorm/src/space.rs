//! The RMSNorm search space and the rules that prune it for one problem.

use tuned::Target;

use crate::config::{RmsNormConfig, RmsNormKey};
use crate::schema::{occ_leaves_enough_threads, OCCS, ROWS, THREADS, VECS};

/// Whether `config` can run rows of `key` on `target`: a vector is at most 16 bytes
/// and divides the row; a thread group is at least a warp (64 lanes on AMD) and has
/// no more threads than the row has vectors (idle warps), except the smallest group.
/// Rows longer than registers hold are read twice, which is correct for any length.
/// A blocks-per-SM cap needs Hopper's 196 KiB carveout (sm90 only) and leaves
/// 768..=2048 resident threads.
pub fn fits(target: Target, key: &RmsNormKey, config: &RmsNormConfig) -> bool {
    let vec_bytes = config.vec as usize * key.dtype.size();
    (config.occ == 0
        || (target == Target::Sm90
            && occ_leaves_enough_threads(config.block_threads() as i64, config.occ as i64)))
        && vec_bytes <= 16
        && key.cols.is_multiple_of(config.vec)
        && config.threads >= target.warp_size()
        && config.threads
            <= (key.cols / config.vec)
                .next_power_of_two()
                .max(target.warp_size())
}

/// Every config of the space that fits `key` on `target`.
pub fn search_space(target: Target, key: &RmsNormKey) -> Vec<RmsNormConfig> {
    let mut out = Vec::new();
    for &threads in THREADS {
        for &vec in VECS {
            for &rows in ROWS {
                for &occ in OCCS {
                    if threads * rows <= 1024 {
                        out.push(RmsNormConfig {
                            threads: threads as u32,
                            vec: vec as u32,
                            rows: rows as u32,
                            occ: occ as u32,
                        });
                    }
                }
            }
        }
    }
    out.retain(|c| fits(target, key, c));
    out
}
