//! The analytic default: a softmax config from target, key and batch, no search.
//!
//! The ladder is a first cut from the kernel's structure (16-byte vectors, a few
//! vectors per thread, enough blocks to fill the GPU); the H200 tuning run replaces
//! its thresholds with measured ones.

use tuned::Target;

use crate::config::{SoftmaxConfig, SoftmaxKey, Strategy};
use crate::schema::MAX_ITERS;
use crate::space::fits;

/// The default config for `rows` rows of `key` on `target`.
pub fn analytic_default(target: Target, key: &SoftmaxKey, rows: u64) -> SoftmaxConfig {
    let vec = widest_vec(key);
    let warp = target.warp_size();
    let vectors = key.cols.div_ceil(vec);
    // Aim for about 4 vectors per thread: enough loads in flight per thread, few idle lanes.
    let threads = (vectors / 4).next_power_of_two().clamp(warp, 1024);
    let mut c = SoftmaxConfig {
        strategy: Strategy::Row,
        threads,
        vec,
        rows: 1,
        splits: 1,
    };
    // Short rows: several rows per block so a block still has 128+ threads.
    if threads < 128 {
        c.rows = (128 / threads).min(16);
    }
    let sms = match target {
        Target::Sm90 => 132,
        Target::Sm80 => 108,
        _ => 304,
    };
    // Few long rows: split each row over a cluster so more SMs stream it.
    if target == Target::Sm90 && rows < sms / 2 && c.iters(key.cols) as i64 > 4 {
        for splits in [8, 4, 2] {
            let cl = SoftmaxConfig {
                strategy: Strategy::Cluster,
                threads: 1024,
                vec,
                rows: 1,
                splits,
            };
            if fits(target, key, &cl) {
                return cl;
            }
        }
    }
    if c.iters(key.cols) as i64 > MAX_ITERS || !fits(target, key, &c) {
        c = SoftmaxConfig {
            strategy: Strategy::Online,
            threads: 1024.max(warp),
            vec,
            rows: 1,
            splits: 1,
        };
        if !fits(target, key, &c) {
            c.threads = warp;
            c.vec = 1;
        }
    }
    c
}

/// The widest vector (at most 16 bytes) that divides the row.
pub fn widest_vec(key: &SoftmaxKey) -> u32 {
    let mut vec = (16 / key.dtype.size()) as u32;
    while vec > 1 && !key.cols.is_multiple_of(vec) {
        vec /= 2;
    }
    vec
}
