//! The analytic default: a fused-MoE config from target, key and tokens, no search.
//!
//! The row tile follows the rows an expert gets under uniform routing
//! (`tokens * topk / experts`), so few padded rows are computed; decode tiles are thin
//! in n and long in k so many blocks stream weights at once.
//!
//! On sm90 the default takes the Hopper paths: `wgmma_swap` (the weights on wgmma's 64-row
//! side, the few pairs on its N side) below 32 rows per expert, `wgmma` from there. The H200
//! tuning of Qwen3-30B-A3B (tokens 1-8192) and Mixtral-8x7B (1-2048) picked these tiles (ring
//! depths aside) and measured the mma default 1.16-1.54x slower at decode and 1.84-2.29x slower
//! from 512 tokens.
//! Other NVIDIA targets take the mma path (cp.async and mma.sync).

use tuned::Target;

use crate::config::{MoeConfig, MoeKey, Path};
use crate::space::{fits, rows_per_expert};

/// The default config for `tokens` tokens of `key` on `target`.
pub fn analytic_default(target: Target, key: &MoeKey, tokens: u64) -> MoeConfig {
    if target == Target::Sm90 {
        if let Some(c) = hopper_default(key, tokens) {
            return c;
        }
    }
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

/// The sm90 default on the wgmma paths, or `None` where the tile does not fit `key` (TMA's
/// row coordinates over all experts' weights; then the mma default stands).
fn hopper_default(key: &MoeKey, tokens: u64) -> Option<MoeConfig> {
    let c = match rows_per_expert(key, tokens) {
        // Decode: 16 pairs on the N side, 64 weight rows a tile, a deep ring of weights.
        0..=15 => MoeConfig::wgmma(Path::WgmmaSwap, 16, 64, 4, 6),
        16..=31 => MoeConfig::wgmma(Path::WgmmaSwap, 32, 64, 4, 4),
        // One consumer of 64 pairs; from about 100 rows an expert, two of 64 each.
        32..=96 => MoeConfig::wgmma(Path::Wgmma, 64, 128, 4, 4),
        _ => MoeConfig::wgmma(Path::Wgmma, 128, 128, 8, 4),
    };
    fits(Target::Sm90, key, &c).then_some(c)
}
