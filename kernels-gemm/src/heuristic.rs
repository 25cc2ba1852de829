//! The analytic default: a GEMM config from target, key and m, no search.
//!
//! A ladder from tile arithmetic: few rows stream the weight through short, wide
//! k steps with split-K to fill the SMs; more rows take larger square tiles so each
//! loaded byte feeds more products. On sm_90 with layout nt the `stream` path serves up
//! to 8 rows, then the wgmma paths: swapped operands up to 64 rows (a weight stream),
//! warpgroup tiles above. Tuned
//! tables replace it wherever a shape was tuned.

use tuned::Target;

use crate::config::{Epilogue, GemmConfig, GemmKey, Layout, Path};
use crate::space::{block_cap, fits, split_allowed, warp_grid, MAX_ROWS};

/// The default config for `m` rows of `key` on `target`.
pub fn analytic_default(target: Target, key: &GemmKey, m: u64) -> GemmConfig {
    // As the space does: rows past the op's limit are planned as that many.
    let m = m.min(MAX_ROWS);
    if target == Target::Sm90 && key.layout == Layout::Nt {
        if let Some(c) = wgmma_default(target, key, m) {
            return c;
        }
    }
    portable_default(target, key, m)
}

/// Fraction of the SMs' time busy when `units` equal units of work run `sms` at a time.
fn wave_efficiency(units: u64, sms: u64) -> f64 {
    units as f64 / (units.div_ceil(sms) * sms) as f64
}

/// The sm_90 nt default, when one fits.
fn wgmma_default(target: Target, key: &GemmKey, m: u64) -> Option<GemmConfig> {
    if m <= 8 {
        if let Some(c) = stream_default(target, key, m) {
            return Some(c);
        }
    }
    let sms = u64::from(target.reference_sm_count());
    let n_cap = block_cap(key.n);
    let c = if m <= 64 {
        // A weight stream, the tokens in wgmma's N (16..64). Where the weight has at
        // most one tile of 64 rows per SM: 64-row tiles over one consumer, 8 stages,
        // and the largest power-of-two split that keeps the units within one wave
        // (the tuned H200 table's pick on 8 of the 9 bench projections at m = 1..64,
        // 1.01-1.23x over 128-row tiles). Wider weights: 128 rows over two consumers
        // and the fewest splits giving 48+ units (timing splits 1..16 at m = 1 and 16,
        // `GEMM_BENCH_ALTS=1`; more blocks streamed no faster). Each split keeps 4+ k
        // steps.
        let narrow = u64::from(key.n.div_ceil(64)) <= sms;
        let block_n = if narrow { 64 } else { 128.min(n_cap) };
        let mut c = GemmConfig {
            path: Path::WgmmaSwap,
            block_m: (m.next_power_of_two() as u32).clamp(16, 64),
            block_n,
            block_k: 64,
            warps_m: 1,
            warps_n: if block_n == 128 { 8 } else { 4 },
            stages: 8,
            split_k: 1,
            group_m: 8,
            vec: 8,
            cluster: 1,
            epilogue: Epilogue::Direct,
        };
        let tiles = c.tiles(m, key.n);
        let k_steps = key.k.div_ceil(64);
        let mut best = 1;
        for split_k in [1, 2, 4, 8, 16] {
            let s = GemmConfig { split_k, ..c };
            if split_k > 1 && (k_steps < 4 * split_k || !split_allowed(target, key, m, &s)) {
                break;
            }
            if narrow && tiles * u64::from(split_k) > sms {
                break;
            }
            best = split_k;
            if !narrow && tiles * u64::from(split_k) >= 48 {
                break;
            }
        }
        c.split_k = best;
        // A split of 2 runs as one cluster, summed through distributed shared memory
        // (faster than through the workspace at 248 of 254 shapes timed on the H200).
        let clustered = GemmConfig { cluster: 2, ..c };
        if best == 2 && fits(target, key, &clustered) {
            c = clustered;
        }
        c
    } else {
        // Warpgroup tiles: 128x256 over two consumers feeds the tensor cores best,
        // smaller tiles fill the SMs when there are few output tiles; the score is the
        // wave efficiency times a per-tile rate (0.85 for 128x128, 0.72 for 128x64,
        // 0.7 for 64x128, 0.55 for 64x64: rates under which the tuned H200 table's picks
        // at m = 128..512 on the 9 bench projections score highest, or within a few
        // percent where the default stayed). No clusters: clusters of 2 are searched,
        // and the tables take them where they win (none did on the H200). C is stored
        // by TMA wherever the tile is whole 128-byte rows of it: in the tuned H200
        // table TMA stores won 43 of the 44 unswapped entries, at 1.01-1.31x over the
        // default with direct stores.
        let mut best: Option<(f64, GemmConfig)> = None;
        for (block_m, block_n, consumers, rate) in [
            (128, 256, 2, 1.0),
            (128, 128, 2, 0.85),
            (128, 64, 2, 0.72),
            (64, 128, 1, 0.7),
            (64, 64, 1, 0.55),
        ] {
            // One consumer only below 256 rows, as the search space.
            if consumers == 1 && m >= 256 {
                continue;
            }
            let mut c = GemmConfig {
                path: Path::Wgmma,
                block_m,
                block_n: block_n.min(n_cap),
                block_k: 64,
                warps_m: 4 * consumers,
                warps_n: 1,
                stages: 6,
                split_k: 1,
                group_m: 8,
                vec: 8,
                cluster: 1,
                epilogue: if block_n.min(n_cap) % 64 == 0 {
                    Epilogue::Tma
                } else {
                    Epilogue::Direct
                },
            };
            while !fits(target, key, &c) && c.stages > 3 {
                c.stages -= 1;
            }
            if !fits(target, key, &c) {
                continue;
            }
            let score = wave_efficiency(c.tiles(m, key.n), sms) * rate;
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, c));
            }
        }
        best?.1
    };
    (fits(target, key, &c) && split_allowed(target, key, m, &c)).then_some(c)
}

/// The `stream` default up to 8 tokens: 16 weight rows a block over 8 warps splitting its
/// k, 4 blocks of 32 k in flight a warp, and the fewest splits of k (1, 2, 4, 8) that make
/// 2.4 blocks an SM, as one cluster, each warp keeping 8+ blocks of k (4+ for weights of
/// fewer than 32 row tiles, the routers, where any parallelism pays). The decode probe's
/// best config on 13 of its 15 points at m = 1-8 (five Llama weights, H100, gemm.md) had
/// these rows and warps. In the H100 tuning at m = 1 (gemm.md), splits that left a warp 4-7
/// blocks of k lost to the unsplit tile (Qwen2.5-7B qkv, 4608 x 3584: 18.3 against 13.6 µs;
/// 8B-tp2 o, 4096 x 2048: 9.8 against 7.6), those leaving 8+ won (8B-tp2 qkv, 70B-tp4 and
/// 70B-tp8 qkv, 8B-tp2 down) but at 8B o (4096 x 4096, 1.07 behind).
fn stream_default(target: Target, key: &GemmKey, m: u64) -> Option<GemmConfig> {
    let sms = u64::from(target.reference_sm_count());
    let c = GemmConfig::stream(8, 1, 8, 4);
    let tiles = c.tiles(m, key.n);
    let k_blocks = u64::from(key.k.div_ceil(32));
    let min_share = if tiles < 32 { 4 } else { 8 };
    let mut best = c;
    for split_k in [2u32, 4, 8] {
        if tiles * u64::from(best.split_k) * 10 >= 24 * sms {
            break;
        }
        let s = GemmConfig { split_k, ..c };
        if k_blocks < min_share * 8 * u64::from(split_k) || !split_allowed(target, key, m, &s) {
            break;
        }
        best = s;
    }
    // The splits as one cluster (summed through distributed shared memory, not the
    // workspace's round trips through L2).
    if best.split_k > 1 {
        best.cluster = best.split_k;
    }
    (fits(target, key, &best) && split_allowed(target, key, m, &best)).then_some(best)
}

/// The portable (mma.sync) default: what every NVIDIA target from sm_80 runs, and
/// sm_90 for layout nn.
pub fn portable_default(target: Target, key: &GemmKey, m: u64) -> GemmConfig {
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
        block_n: block_n.min(block_cap(key.n)),
        block_k: block_k.min(block_cap(key.k)),
        warps_m,
        warps_n,
        stages: 4,
        split_k: 1,
        group_m: 8,
        vec: 8,
        cluster: 1,
        epilogue: Epilogue::Direct,
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
