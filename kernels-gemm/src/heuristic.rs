//! The analytic default: a GEMM config from target, key and m, no search.
//!
//! A first cut from tile arithmetic (fill the SMs, deep pipelines where shared memory
//! allows, split-K only when the tile grid is far below the SM count); tuning on the
//! device replaces its thresholds with measured ones.

use tuned::Target;

use crate::config::{GemmConfig, GemmKey};
use crate::space::fits;

/// The default config for `m` rows of `key` on `target`.
pub fn analytic_default(target: Target, key: &GemmKey, m: u64) -> GemmConfig {
    let sms = u64::from(target.reference_sm_count());
    // Decode (m <= 16) reads the weight once; a 16-row tile wastes the least.
    let block_m: u32 = match m {
        0..=16 => 16,
        17..=32 => 32,
        33..=64 => 64,
        _ => 128,
    };
    let block_n: u32 = if m <= 64 { 64 } else { 128 };
    let block_k: u32 = if m <= 64 { 128 } else { 64 };
    let warps = if block_m * block_n >= 128 * 128 { 8 } else { 4 };
    let tiles = m.div_ceil(block_m as u64) * (key.n as u64).div_ceil(block_n as u64);
    // Split k until the grid covers the SMs, while each split keeps 4+ k steps.
    let mut split_k = 1u32;
    while tiles * (split_k as u64) * 2 <= sms && key.k >= block_k * split_k * 2 * 4 && split_k < 16 {
        split_k *= 2;
    }
    let mut c = GemmConfig {
        block_m,
        block_n,
        block_k,
        warps,
        stages: 4,
        split_k,
        group_m: 8,
    };
    while !fits(target, key, &c) && c.stages > 2 {
        c.stages -= 1;
    }
    while !fits(target, key, &c) && c.block_k > 16 {
        c.block_k /= 2;
    }
    while !fits(target, key, &c) && c.split_k > 1 {
        c.split_k /= 2;
    }
    c
}
