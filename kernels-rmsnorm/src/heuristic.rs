//! The analytic default: an RMSNorm config from target, key and batch, no search.
//!
//! A first cut from the kernel's structure (16-byte vectors, a few vectors per thread,
//! 128+ threads per block); the H200 tuning run replaces its thresholds with
//! measured ones.

use tuned::Target;

use crate::config::{RmsNormConfig, RmsNormKey};
use crate::schema::MAX_ITERS;

/// The default config for `rows` rows of `key` on `target` (plain and fused alike).
pub fn analytic_default(target: Target, key: &RmsNormKey, _rows: u64) -> RmsNormConfig {
    let mut vec = (16 / key.dtype.size()) as u32;
    while vec > 1 && !key.cols.is_multiple_of(vec) {
        vec /= 2;
    }
    let warp = target.warp_size();
    let vectors = key.cols.div_ceil(vec);
    // About 4 vectors per thread; hidden 4096 in bf16 -> 128 threads of 4 x 16 bytes.
    let mut threads = (vectors / 4).next_power_of_two().clamp(warp, 1024);
    // Keep the row in registers when 1024 threads can.
    while threads < 1024 && (vectors.div_ceil(threads) as i64) > MAX_ITERS {
        threads *= 2;
    }
    let rows = if threads < 128 { (128 / threads).min(16) } else { 1 };
    RmsNormConfig { threads, vec, rows }
}
