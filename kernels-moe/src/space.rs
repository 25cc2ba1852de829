//! The fused-MoE search space and the rules that prune it for one problem.

use tuned::{Target, Vendor};

use crate::config::{MoeConfig, MoeKey, Path};
use crate::schema::{BLOCK_K, BLOCK_M, BLOCK_N, WARPS};

/// Shared memory one block may use on `target`, in bytes.
pub fn smem_limit(target: Target) -> usize {
    match target {
        Target::Sm90 => 227 * 1024,
        Target::Sm80 => 163 * 1024,
        Target::Gfx950 => 160 * 1024,
        Target::Gfx90a | Target::Gfx942 => 64 * 1024,
    }
}

/// Static shared memory of the wgmma kernel besides the ring: two items' pair indices
/// and routing weights (up to 128 each), the mbarriers (2 per stage, up to 8 stages, and
/// 4 for the items), two items' tile records and a paired tile's up accumulators (64
/// threads x 16).
const WGMMA_STATIC_SMEM: usize = 2 * 128 * (4 + 4) + 16 * 8 + 4 * 8 + 2 * 16 + 64 * 16 * 4;

/// Whether `config` fits `key` on `target`. Only NVIDIA targets have the kernels.
///
/// mma path: every warp owns whole 16x16 fragments; the gate-up GEMM's accumulators
/// stay at or under 128 registers a thread (beyond that they spill); the pipeline fits
/// shared memory; a k step is not longer than k rounded up to 32.
///
/// wgmma paths (sm90 only): a k step of 64 (one 128-byte swizzle row), 1 or 2
/// consumer warpgroups each owning 64 or 128 rows of wgmma's M side, an N side that is
/// a width the wgmma wrappers have (16, 32, 64, 128, 256), at most 128 accumulators a
/// consumer thread, the ring within shared memory; the weight tensor maps' rows
/// (experts x 2n, experts x k) within TMA's i32 coordinates. A paired swapped tile
/// (`block_n = 32`, gate and up rows on one 64-row side) takes one consumer and at most
/// 32 pairs.
pub fn fits(target: Target, key: &MoeKey, c: &MoeConfig) -> bool {
    if target.vendor() != Vendor::Nvidia || c.smem_bytes(key.dtype) > smem_limit(target) {
        return false;
    }
    if c.path.is_wgmma() {
        return fits_wgmma(target, key, c);
    }
    let (wm, wn) = (c.warps_m(), c.warps_n());
    wm * wn == c.warps
        && c.block_m.is_multiple_of(16 * wm)
        && c.block_n.is_multiple_of(16 * wn)
        && c.accumulators() <= 128
        && c.block_k <= (key.k.saturating_add(31) / 32 * 32).max(32)
}

fn fits_wgmma(target: Target, key: &MoeKey, c: &MoeConfig) -> bool {
    let (x, y) = c.wgmma_tile();
    let consumers = c.consumers();
    let per_consumer = x / consumers.max(1);
    let rows = |cols: u32| u64::from(key.experts) * u64::from(cols);
    target == Target::Sm90
        && c.block_k == 64
        && (consumers == 1 || consumers == 2)
        && consumers * 4 == c.warps
        && (!c.paired() || (consumers == 1 && c.block_m <= 32))
        && (per_consumer == 64 || per_consumer == 128)
        && x == per_consumer * consumers
        && (16..=256).contains(&y)
        && y.is_power_of_two()
        && c.accumulators() <= 128
        && c.smem_bytes(key.dtype) + WGMMA_STATIC_SMEM <= smem_limit(target)
        && rows(key.n).saturating_mul(2) <= i32::MAX as u64
        && rows(key.k) <= i32::MAX as u64
}

/// Rows per expert under uniform routing: `tokens * topk / experts`, rounded up.
pub fn rows_per_expert(key: &MoeKey, tokens: u64) -> u64 {
    tokens
        .saturating_mul(u64::from(key.topk))
        .div_ceil(u64::from(key.experts.max(1)))
}

/// Pipeline depths the mma path searches (a cp.async ring every warp refills).
const MMA_STAGES: &[u32] = &[2, 3, 4, 5];
/// Ring depths the wgmma paths search: their stages are smaller than the mma path's
/// (no padding; one k step of 64), so deeper rings keep more bytes in flight.
const WGMMA_STAGES: &[u32] = &[3, 4, 5, 6, 8];

/// Every config of the space that fits `key` on `target` for `tokens`. Tiles of more
/// rows than twice the rows an expert gets under uniform routing are pruned (beyond
/// that they compute padding), keeping 16 always. On sm90 the space is the wgmma paths
/// alone (`wgmma` with 64-128 pair rows and 64-256 weight rows per tile, `wgmma_swap` with
/// 16-128 pairs and 64-256 weight rows, or 16-32 pairs and 32 weight rows paired), the
/// mma path only where none fits: in the H200
/// tuning of Qwen3-30B-A3B and Mixtral-8x7B (13 shapes, T = 1-8192) the fastest mma config
/// was 5-125% behind the fastest wgmma one on every shape, and it was three quarters of
/// the configs screened.
///
/// Two wgmma families are left out as well: tiles of 64 or more pairs on the swapped path
/// with one consumer warpgroup, and unswapped tiles of 128 pair rows on one consumer. In
/// the H200 tuning of the 4 catalog keys at T = 1-8192 (28 searches, 968 configs timed)
/// they were 17% of the configs and never within 3% of a search's best (the closest 6%
/// behind on the swapped path, 19% on the unswapped one), while tiles of as many pairs
/// on two consumers won searches.
pub fn search_space(target: Target, key: &MoeKey, tokens: u64) -> Vec<MoeConfig> {
    let all = full_space(target, key, tokens);
    if target == Target::Sm90 {
        let wgmma: Vec<MoeConfig> = all
            .iter()
            .filter(|c| c.path.is_wgmma() && !never_won(c))
            .copied()
            .collect();
        if !wgmma.is_empty() {
            return wgmma;
        }
    }
    all
}

/// The wgmma families [`search_space`] leaves out: many pairs on one consumer warpgroup.
fn never_won(c: &MoeConfig) -> bool {
    c.consumers() == 1
        && ((c.path == Path::WgmmaSwap && c.block_m >= 64) || (c.path == Path::Wgmma && c.block_m >= 128))
}

/// Every config of every path that fits `key` on `target` for `tokens`.
fn full_space(target: Target, key: &MoeKey, tokens: u64) -> Vec<MoeConfig> {
    let rows = rows_per_expert(key, tokens);
    let mut out = Vec::new();
    let mut push = |c: MoeConfig| {
        if fits(target, key, &c) {
            out.push(c);
        }
    };
    for &block_m in BLOCK_M {
        if block_m > 16 && block_m as u64 > rows.saturating_mul(2) {
            continue;
        }
        for &block_n in BLOCK_N {
            for &block_k in BLOCK_K {
                for &warps in WARPS {
                    for &stages in MMA_STAGES {
                        push(MoeConfig {
                            path: Path::Mma,
                            block_m: block_m as u32,
                            block_n: block_n as u32,
                            block_k: block_k as u32,
                            warps: warps as u32,
                            stages,
                        });
                    }
                }
            }
        }
        if target != Target::Sm90 {
            continue;
        }
        for path in [Path::Wgmma, Path::WgmmaSwap] {
            for &block_n in BLOCK_N {
                // The unswapped tile's weight side below 64 rows wastes its pair rows.
                if path == Path::Wgmma && block_n < 64 {
                    continue;
                }
                for &warps in WARPS {
                    for &stages in WGMMA_STAGES {
                        push(MoeConfig::wgmma(
                            path,
                            block_m as u32,
                            block_n as u32,
                            warps as u32,
                            stages,
                        ));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tuned::DType;

    use super::*;

    const QWEN3: MoeKey = MoeKey {
        dtype: DType::Bf16,
        experts: 128,
        n: 768,
        k: 2048,
        topk: 8,
    };

    /// The space, the default, the lookup and the workspace size take any key and token
    /// count a caller may pass without overflowing (the op itself refuses more than
    /// `i32::MAX` pairs, and keys past its limits).
    #[test]
    fn any_token_count_is_planned_without_overflow() {
        for t in [Target::Sm80, Target::Sm90] {
            assert!(!search_space(t, &QWEN3, u64::MAX).is_empty(), "{t}");
            let c = crate::analytic_default(t, &QWEN3, u64::MAX);
            assert!(fits(t, &QWEN3, &c), "{t}: {c}");
        }
        assert_eq!(rows_per_expert(&QWEN3, u64::MAX), u64::MAX.div_ceil(128));
        assert_eq!(crate::workspace_bytes(&QWEN3, u64::MAX), usize::MAX);
        // Keys past what the op takes (it refuses them), planned without overflow too.
        let max = u32::MAX;
        for (experts, n, k, topk) in [
            (0, 8, 8, 0),
            (max, max, max, max),
            (8, max, 64, 2),
            (8, 64, max, 2),
        ] {
            let key = MoeKey {
                dtype: DType::Bf16,
                experts,
                n,
                k,
                topk,
            };
            for tokens in [0, 1, u64::MAX] {
                for t in [Target::Sm80, Target::Sm90] {
                    tuned::resolve_serve::<crate::Moe>(t, &key, tokens);
                    search_space(t, &key, tokens);
                }
                crate::workspace_bytes(&key, tokens);
            }
        }
        assert_eq!(
            crate::workspace_bytes(&MoeKey { topk: max, ..QWEN3 }, u64::MAX),
            usize::MAX
        );
    }

    #[test]
    fn the_wgmma_paths_are_sm90_only_and_follow_the_tile_rules() {
        for tokens in [1, 64, 4096] {
            let sm80 = search_space(Target::Sm80, &QWEN3, tokens);
            assert!(sm80.iter().all(|c| c.path == Path::Mma), "{tokens}");
            let sm90 = search_space(Target::Sm90, &QWEN3, tokens);
            assert!(sm90.iter().any(|c| c.path == Path::WgmmaSwap), "{tokens}");
            // The mma path is left to the targets and keys wgmma cannot take.
            assert!(sm90.iter().all(|c| c.path.is_wgmma()), "{tokens}");
            for c in sm90.iter().filter(|c| c.path.is_wgmma()) {
                assert!(!fits(Target::Sm80, &QWEN3, c), "{c}");
                assert_eq!(c.block_k, 64);
                assert_eq!(c.threads(), 128 * (c.consumers() + 1));
                let (x, y) = c.wgmma_tile();
                assert!([64, 128].contains(&(x / c.consumers())), "{c}");
                assert!(y.is_power_of_two() && (16..=256).contains(&y), "{c}");
                assert!(c.accumulators() <= 128, "{c}");
                assert!(c.smem_bytes(QWEN3.dtype) <= smem_limit(Target::Sm90), "{c}");
            }
        }
        // Prefill: the unswapped tiles too.
        let prefill = search_space(Target::Sm90, &QWEN3, 4096);
        assert!(prefill
            .iter()
            .any(|c| c.path == Path::Wgmma && c.consumers() == 2));
        // Many pairs on one consumer never won a search: left out, while they fit and the
        // same tiles on two consumers stay.
        for (path, block_m, block_n) in [
            (Path::WgmmaSwap, 64, 64),
            (Path::WgmmaSwap, 128, 64),
            (Path::Wgmma, 128, 64),
        ] {
            let one = MoeConfig::wgmma(path, block_m, block_n, 4, 4);
            assert!(fits(Target::Sm90, &QWEN3, &one), "{one}");
            assert!(!prefill.contains(&one), "{one}");
            let two = MoeConfig { warps: 8, ..one };
            assert!(
                prefill.contains(&two) || !fits(Target::Sm90, &QWEN3, &two),
                "{two}"
            );
        }
        assert!(prefill.contains(&MoeConfig::wgmma(Path::WgmmaSwap, 128, 128, 8, 4)));
        assert!(prefill.contains(&MoeConfig::wgmma(Path::Wgmma, 64, 64, 4, 3)));

        // Paired tiles of 32 weight rows: one consumer, at most 32 pairs, in the decode
        // space; the down step takes 64-row tiles.
        let paired = MoeConfig::wgmma(Path::WgmmaSwap, 16, 32, 4, 6);
        assert!(paired.paired() && fits(Target::Sm90, &QWEN3, &paired));
        assert_eq!(paired.wgmma_tile(), (64, 16));
        assert_eq!((paired.step_block_n(true), paired.step_block_n(false)), (32, 64));
        assert!(search_space(Target::Sm90, &QWEN3, 1).contains(&paired));
        assert!(!fits(
            Target::Sm90,
            &QWEN3,
            &MoeConfig {
                block_m: 64,
                ..paired
            }
        ));
        assert!(!fits(Target::Sm90, &QWEN3, &MoeConfig { warps: 8, ..paired }));

        let ok = MoeConfig::wgmma(Path::WgmmaSwap, 16, 64, 4, 4);
        assert!(fits(Target::Sm90, &QWEN3, &ok));
        assert_eq!(ok.accumulators(), 16);
        assert!(!fits(Target::Sm90, &QWEN3, &MoeConfig { block_k: 128, ..ok }));
        // 64 weight rows cannot be split over two consumers of 64.
        assert!(!fits(Target::Sm90, &QWEN3, &MoeConfig { warps: 8, ..ok }));
        // Unswapped, the pairs fill wgmma's 64-row side: at least 64 of them.
        assert!(!fits(
            Target::Sm90,
            &QWEN3,
            &MoeConfig::wgmma(Path::Wgmma, 32, 128, 4, 4)
        ));
        // Gate and up of 128 pair rows x 128 columns on one consumer: 256 accumulators.
        let big = MoeConfig::wgmma(Path::Wgmma, 128, 128, 4, 3);
        assert_eq!(big.accumulators(), 256);
        assert!(!fits(Target::Sm90, &QWEN3, &big));
        assert!(fits(Target::Sm90, &QWEN3, &MoeConfig { warps: 8, ..big }));
        // The ring: 3 stages of 16 pair rows and 2 x 256 weight rows fit, 4 do not.
        let wide = MoeConfig::wgmma(Path::WgmmaSwap, 16, 256, 8, 3);
        assert!(fits(Target::Sm90, &QWEN3, &wide));
        assert!(!fits(Target::Sm90, &QWEN3, &MoeConfig { stages: 4, ..wide }));
        // TMA's i32 row coordinates over all experts' rows.
        let huge = MoeKey {
            experts: 4096,
            n: 1 << 18,
            ..QWEN3
        };
        assert!(!fits(Target::Sm90, &huge, &ok));
        let fallback = search_space(Target::Sm90, &huge, 64);
        assert!(!fallback.is_empty() && fallback.iter().all(|c| c.path == Path::Mma));
        assert!(fits(
            Target::Sm90,
            &huge,
            &MoeConfig {
                path: Path::Mma,
                block_k: 64,
                ..ok
            }
        ));
    }
}
