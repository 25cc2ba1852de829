//! The softmax search space and the rules that prune it for one problem.

use tuned::{Target, Vendor};

use crate::config::{SoftmaxConfig, SoftmaxKey, Strategy};
use crate::schema::{MAX_ITERS, ROWS, SPLITS, THREADS, VECS};

/// Whether `config` can run rows of `key` on `target`: a vector is at most 16 bytes
/// (any row length: the kernel reads the elements before a row's first aligned vector
/// and after its last one by themselves); `row` and `cluster` must hold the row in registers
/// (at most `MAX_ITERS` vectors per thread); clusters exist on Hopper only (16-block
/// clusters with at most 256 threads per block); a warp (64 lanes on AMD) is the
/// smallest thread group. `staged` runs on NVIDIA targets
/// (cp.async; clusters of 2..8 blocks on Hopper only) with vectors of 4 bytes or more
/// (what cp.async copies) and at least 128 threads, every slice non-empty and at least
/// one step staged in shared memory. `keep` only where `keep_fits`.
pub fn fits(target: Target, key: &SoftmaxKey, config: &SoftmaxConfig) -> bool {
    let vec_bytes = config.vec as usize * key.dtype.size();
    if vec_bytes > 16 {
        return false;
    }
    if config.threads < target.warp_size() {
        return false;
    }
    let iters = config.iters(key.cols) as i64;
    if config.keep && !keep_fits(config, iters) {
        return false;
    }
    match config.strategy {
        // More threads than vectors in a row would idle whole warps.
        Strategy::Row => iters <= MAX_ITERS && config.threads <= max_useful_threads(target, key, config.vec),
        Strategy::Online => key.cols > config.threads * config.vec,
        // Each block of the cluster gets at least one full pass of the row. Clusters of
        // 16 (non-portable) take at most 256 threads per block: more threads per block
        // were slower at every cluster size (1 x 128256 bf16 on the H200: 16 x 128 3.48
        // us, 16 x 512 4.99; docs/results/softmax.md).
        Strategy::Cluster => {
            target.vendor() == Vendor::Nvidia
                && target == Target::Sm90
                && iters <= MAX_ITERS
                && (config.splits <= 8 || config.threads <= 256)
                && key.cols >= config.threads * config.vec * config.splits
        }
        Strategy::Staged => {
            target.vendor() == Vendor::Nvidia
                && (config.splits == 1 || target == Target::Sm90)
                && config.splits <= 8
                && config.threads >= 128
                && vec_bytes >= 4
                && key.cols as u64 >= config.threads as u64 * config.vec as u64 * config.splits as u64
                && config.stage_vectors(target, key) >= 1
        }
    }
}

/// `keep` holds one fp32 per element a thread handles (`iters * vec`) on top of the
/// row itself: `row` and `cluster` only, and only while those take at most half of
/// the registers a thread of a full block can have (65536 per SM, 255 per thread), so
/// keeping never forces a spill or a smaller block count for lack of registers.
fn keep_fits(config: &SoftmaxConfig, iters: i64) -> bool {
    let budget = (65536 / config.block_threads().max(1) as i64).min(255);
    matches!(config.strategy, Strategy::Row | Strategy::Cluster) && 2 * iters * config.vec as i64 <= budget
}

fn max_useful_threads(target: Target, key: &SoftmaxKey, vec: u32) -> u32 {
    (key.cols / vec).next_power_of_two().max(target.warp_size())
}

/// Every config of the space that fits `key` on `target`.
pub fn search_space(target: Target, key: &SoftmaxKey) -> Vec<SoftmaxConfig> {
    let mut out = Vec::new();
    for &threads in THREADS {
        for &vec in VECS {
            for &rows in ROWS {
                if threads * rows <= 1024 {
                    out.push(SoftmaxConfig {
                        strategy: Strategy::Row,
                        threads: threads as u32,
                        vec: vec as u32,
                        rows: rows as u32,
                        splits: 1,
                        keep: false,
                    });
                }
            }
            out.push(SoftmaxConfig {
                strategy: Strategy::Online,
                threads: threads as u32,
                vec: vec as u32,
                rows: 1,
                splits: 1,
                keep: false,
            });
            for &splits in SPLITS.iter().filter(|&&s| s >= 2) {
                out.push(SoftmaxConfig {
                    strategy: Strategy::Cluster,
                    threads: threads as u32,
                    vec: vec as u32,
                    rows: 1,
                    splits: splits as u32,
                    keep: false,
                });
            }
            for &splits in SPLITS {
                out.push(SoftmaxConfig {
                    strategy: Strategy::Staged,
                    threads: threads as u32,
                    vec: vec as u32,
                    rows: 1,
                    splits: splits as u32,
                    keep: false,
                });
            }
        }
    }
    let kept: Vec<SoftmaxConfig> = out
        .iter()
        .filter(|c| matches!(c.strategy, Strategy::Row | Strategy::Cluster))
        .map(|c| SoftmaxConfig { keep: true, ..*c })
        .collect();
    out.extend(kept);
    out.retain(|c| fits(target, key, c));
    out
}
