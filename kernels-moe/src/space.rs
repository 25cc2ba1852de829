//! The fused-MoE search space and the rules that prune it for one problem.

use tuned::{Target, Vendor};

use crate::config::{MoeConfig, MoeKey};
use crate::schema::{BLOCK_K, BLOCK_M, BLOCK_N, STAGES, WARPS};

/// Shared memory one block may use on `target`, in bytes.
pub fn smem_limit(target: Target) -> usize {
    match target {
        Target::Sm90 => 227 * 1024,
        Target::Sm80 => 163 * 1024,
        Target::Gfx950 => 160 * 1024,
        Target::Gfx90a | Target::Gfx942 => 64 * 1024,
    }
}

/// Whether `config` fits `key` on `target`. Only NVIDIA targets have the kernel (its
/// tensor-core steps are `mma.sync`). The pipeline fits shared memory; every warp
/// owns whole 16x16 fragments; the gate-up GEMM's accumulators stay at or under 128
/// registers a thread (beyond that they spill); a k step is not longer than k rounded
/// up to 32; rows per tile do not exceed the pairs a launch can have.
pub fn fits(target: Target, key: &MoeKey, c: &MoeConfig) -> bool {
    let (wm, wn) = (c.warps_m(), c.warps_n());
    target.vendor() == Vendor::Nvidia
        && wm * wn == c.warps
        && c.block_m.is_multiple_of(16 * wm)
        && c.block_n.is_multiple_of(16 * wn)
        && c.accumulators() <= 128
        && c.smem_bytes(key.dtype) <= smem_limit(target)
        && c.block_k <= key.k.next_multiple_of(32).max(32)
}

/// Rows per expert under uniform routing: `tokens * topk / experts`, rounded up.
pub fn rows_per_expert(key: &MoeKey, tokens: u64) -> u64 {
    (tokens * key.topk as u64).div_ceil(key.experts.max(1) as u64)
}

/// Every config of the space that fits `key` on `target` for `tokens`. Tiles of more
/// rows than twice the rows an expert gets under uniform routing are pruned (beyond
/// that they compute padding), keeping 16 always.
pub fn search_space(target: Target, key: &MoeKey, tokens: u64) -> Vec<MoeConfig> {
    let rows = rows_per_expert(key, tokens);
    let mut out = Vec::new();
    for &block_m in BLOCK_M {
        if block_m > 16 && block_m as u64 > 2 * rows {
            continue;
        }
        for &block_n in BLOCK_N {
            for &block_k in BLOCK_K {
                for &warps in WARPS {
                    for &stages in STAGES {
                        let c = MoeConfig {
                            block_m: block_m as u32,
                            block_n: block_n as u32,
                            block_k: block_k as u32,
                            warps: warps as u32,
                            stages: stages as u32,
                        };
                        if fits(target, key, &c) {
                            out.push(c);
                        }
                    }
                }
            }
        }
    }
    out
}
