//! The analytic default: a fused-MoE config from target, key and tokens, no search.
//!
//! A first cut from the routing arithmetic: with `tokens * topk / experts` rows per
//! expert, the row tile follows that count so few padded rows are computed; tuning on
//! the device replaces its thresholds with measured ones.

use tuned::Target;

use crate::config::{MoeConfig, MoeKey};
use crate::space::fits;

/// The default config for `tokens` tokens of `key` on `target`.
pub fn analytic_default(target: Target, key: &MoeKey, tokens: u64) -> MoeConfig {
    let rows_per_expert = (tokens * key.topk as u64).div_ceil(key.experts.max(1) as u64);
    let block_m: u32 = match rows_per_expert {
        0..=16 => 16,
        17..=32 => 32,
        33..=96 => 64,
        _ => 128,
    };
    let block_n: u32 = if block_m <= 32 { 64 } else { 128 };
    let block_k: u32 = if block_m <= 32 { 128 } else { 64 };
    let warps = if block_m * block_n >= 128 * 128 { 8 } else { 4 };
    let group_m = if block_m <= 32 { 1 } else { 8 };
    let mut c = MoeConfig {
        block_m,
        block_n,
        block_k,
        group_m,
        warps,
        stages: 4,
    };
    while !fits(target, key, &c) && c.stages > 2 {
        c.stages -= 1;
    }
    while !fits(target, key, &c) && c.block_k > 32 {
        c.block_k /= 2;
    }
    c
}
