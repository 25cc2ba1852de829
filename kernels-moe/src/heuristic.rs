//! The analytic default: a fused-MoE config from target, key and tokens, no search.
//!
//! The row tile follows the rows an expert gets under uniform routing
//! (`tokens * topk / experts`), so few padded rows are computed; decode tiles are thin
//! in n and long in k so many blocks stream weights at once.
//!
//! The default is the mma path on every NVIDIA target: the sm90 wgmma paths are in the
//! search space, and the tuner picks them per shape where they measure faster.

use tuned::Target;

use crate::config::{MoeConfig, MoeKey, Path};
use crate::space::{fits, rows_per_expert};

/// The default config for `tokens` tokens of `key` on `target`.
pub fn analytic_default(target: Target, key: &MoeKey, tokens: u64) -> MoeConfig {
    let mut c = match rows_per_expert(key, tokens) {
        // Decode: 1-16 rows per expert; the GEMMs stream the active experts' weights.
        0..=16 => MoeConfig {
            path: Path::Mma,
            block_m: 16,
            block_n: 64,
            block_k: 128,
            warps: 4,
            stages: 4,
        },
        17..=32 => MoeConfig {
            path: Path::Mma,
            block_m: 32,
            block_n: 64,
            block_k: 128,
            warps: 4,
            stages: 4,
        },
        33..=96 => MoeConfig {
            path: Path::Mma,
            block_m: 64,
            block_n: 128,
            block_k: 64,
            warps: 8,
            stages: 3,
        },
        _ => MoeConfig {
            path: Path::Mma,
            block_m: 128,
            block_n: 128,
            block_k: 64,
            warps: 8,
            stages: 3,
        },
    };
    while !fits(target, key, &c) && c.stages > 2 {
        c.stages -= 1;
    }
    while !fits(target, key, &c) && c.block_k > 32 {
        c.block_k /= 2;
    }
    c
}
