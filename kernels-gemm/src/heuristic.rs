//! The analytic default: a GEMM config from target, key and m, no search.
//!
//! A ladder from tile arithmetic: few rows stream the weight through short, wide
//! k steps with split-K to fill the SMs; more rows take larger square tiles so each
//! loaded byte feeds more products. Tuned tables replace it wherever a shape was tuned.

use tuned::Target;

use crate::config::{GemmConfig, GemmKey, Path};
use crate::space::{fits, split_allowed, warp_grid, MIN_BLOCK_CAP};

/// The default config for `m` rows of `key` on `target`.
pub fn analytic_default(target: Target, key: &GemmKey, m: u64) -> GemmConfig {
    let sms = u64::from(target.reference_sm_count());
    // (block_m, block_n, block_k, warps): decode (m <= 16) reads the weight once, so a
    // 16-row tile wastes the least and 128-wide k steps keep 16 KiB per stage in flight;
    // from 128 rows the 128x128 tile reuses each loaded byte 64 times per operand.
    let (block_m, block_n, block_k, warps) = match m {
        0..=16 => (16, 64, 128, 4),
        17..=32 => (32, 64, 128, 4),
        33..=64 => (64, 64, 64, 4),
        65..=128 => (64, 128, 64, 8),
        _ => (128, 128, 32, 8),
    };
    let (warps_m, warps_n) = warp_grid(block_m, block_n, warps).unwrap_or((1, warps));
    let mut c = GemmConfig {
        path: Path::Mma,
        block_m,
        block_n: block_n.min(key.n.next_power_of_two().max(MIN_BLOCK_CAP)),
        block_k: block_k.min(key.k.next_power_of_two().max(MIN_BLOCK_CAP)),
        warps_m,
        warps_n,
        stages: 4,
        split_k: 1,
        group_m: 8,
        vec: 8,
    };
    if let Some((wm, wn)) = warp_grid(c.block_m, c.block_n, warps) {
        (c.warps_m, c.warps_n) = (wm, wn);
    }
    // Split k while the tiles leave more than half the SMs idle and each split keeps
    // 4+ k steps.
    let k_steps = key.k.div_ceil(c.block_k);
    while c.tiles(m, key.n) * u64::from(c.split_k) * 2 <= sms && k_steps >= 8 * c.split_k && c.split_k < 16 {
        c.split_k *= 2;
    }
    while !split_allowed(target, key, m, &c) && c.split_k > 1 {
        c.split_k /= 2;
    }
    while !fits(target, key, &c) && c.stages > 2 {
        c.stages -= 1;
    }
    while !fits(target, key, &c) && c.block_k > 32 {
        c.block_k /= 2;
    }
    while !fits(target, key, &c) && c.split_k > 1 {
        c.split_k /= 2;
    }
    c
}
