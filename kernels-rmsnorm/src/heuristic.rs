//! The analytic defaults: an RMSNorm config from target, key and batch, no search.
//!
//! A ladder from the kernel's structure (16-byte vectors, the row in registers when it
//! fits) with thresholds measured on the H200 (bf16/f16, 2026-11-30, the device-code
//! harness `scripts/gpu_check.py`; docs/results/device-code-notes.md). Tables replace
//! the default wherever a model's shape was tuned.

use tuned::Target;

use crate::config::{RmsNormConfig, RmsNormKey};
use crate::schema::MAX_ITERS;

/// Threads for `per_thread` vectors per thread, within one warp and 1024.
fn threads_for(target: Target, vectors: u32, per_thread: u32) -> u32 {
    (vectors / per_thread)
        .next_power_of_two()
        .clamp(target.warp_size(), 1024)
}

/// The default for plain RMSNorm on `rows` rows of `key`.
pub fn analytic_default(target: Target, key: &RmsNormKey, _rows: u64) -> RmsNormConfig {
    let vec = kernels_core::widest_vector(key.dtype, key.cols);
    let vectors = key.cols.div_ceil(vec);
    // About 4 vectors per thread: hidden 4096 in bf16 -> 128 threads of 4 x 16 bytes.
    let mut threads = threads_for(target, vectors, 4);
    // Keep the row in registers when 1024 threads can.
    while threads < 1024 && (vectors.div_ceil(threads) as i64) > MAX_ITERS {
        threads *= 2;
    }
    // Hidden sizes above 16K: 512 threads (measured best at 4096x32768).
    if key.cols > 16384 {
        threads = threads.min(512).max(target.warp_size());
    }
    // One row per block: 16384x2048 bf16 ran 3.75 TB/s at rows=1 against 3.62 at t64 r2.
    RmsNormConfig {
        threads,
        vec,
        rows: 1,
        occ: 0,
        splits: 1,
    }
}

/// The default for fused add RMSNorm, which moves twice the bytes per row: about two
/// vectors per thread (f16 32768x4096: t256 4.14 TB/s against t128 3.84; 16384x2048
/// bf16: t256 3.96 against t64 r2 3.77).
pub fn analytic_default_fused(target: Target, key: &RmsNormKey, _rows: u64) -> RmsNormConfig {
    let vec = kernels_core::widest_vector(key.dtype, key.cols);
    let vectors = key.cols.div_ceil(vec);
    let mut threads = threads_for(target, vectors, 2);
    // Above 16K the register-held row spills at 1024 threads; 128 threads reading the row
    // twice ran 3.51 TB/s at 4096x32768 against 2.62 for t1024.
    if key.cols > 16384 {
        threads = 128.max(target.warp_size());
    }
    RmsNormConfig {
        threads,
        vec,
        rows: 1,
        occ: 0,
        splits: 1,
    }
}
