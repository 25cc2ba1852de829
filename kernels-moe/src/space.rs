//! The fused-MoE search space and the rules that prune it for one problem.

use tuned::{Target, Vendor};

use crate::config::{MoeConfig, MoeKey};
use crate::schema::{BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, STAGES, WARPS};

/// Shared memory one block may use on `target`, in bytes.
pub fn smem_limit(target: Target) -> usize {
    match target {
        Target::Sm90 => 227 * 1024,
        Target::Sm80 => 163 * 1024,
        Target::Gfx950 => 160 * 1024,
        Target::Gfx90a | Target::Gfx942 => 64 * 1024,
    }
}

/// Whether `config` fits `key` on `target`: operands fit shared memory, a k step does
/// not exceed k, a tile gives each warp 16x16 outputs or more, AMD runs 4 stages at most.
pub fn fits(target: Target, key: &MoeKey, c: &MoeConfig) -> bool {
    c.smem_bytes(key.dtype) <= smem_limit(target)
        && key.k >= c.block_k
        && c.block_m * c.block_n >= 256 * c.warps
        && (target.vendor() == Vendor::Nvidia || c.stages <= 4)
}

/// Every config of the space that fits `key` on `target`.
pub fn search_space(target: Target, key: &MoeKey) -> Vec<MoeConfig> {
    let mut out = Vec::new();
    for &block_m in BLOCK_M {
        for &block_n in BLOCK_N {
            for &block_k in BLOCK_K {
                for &group_m in GROUP_M {
                    for &warps in WARPS {
                        for &stages in STAGES {
                            let c = MoeConfig {
                                block_m: block_m as u32,
                                block_n: block_n as u32,
                                block_k: block_k as u32,
                                group_m: group_m as u32,
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
    }
    out
}
