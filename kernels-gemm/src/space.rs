//! The GEMM search space and the rules that prune it for one problem.

use tuned::{Target, Vendor};

use crate::config::{Epilogue, GemmConfig, GemmKey, Layout, Path};
use crate::schema::{check_config, BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, SPLIT_CLUSTERS, SPLIT_K, WARPS};

/// Shared memory one block may use on `target`, in bytes (opt-in maximum), less 1 KiB
/// kept for the kernel's static shared memory.
pub fn smem_limit(target: Target) -> usize {
    let optin = match target {
        Target::Sm90 => 227 * 1024,
        Target::Sm80 => 163 * 1024,
        Target::Gfx950 => 160 * 1024,
        Target::Gfx90a | Target::Gfx942 => 64 * 1024,
    };
    optin - 1024
}

/// Most fp32 accumulators per thread: 128 (a 64x64 warp tile) spilled 160 bytes
/// under NVRTC 13 at 255 registers, 64 spills nothing.
pub const MAX_ACCUMULATORS: u32 = 64;

/// Most fp32 accumulators per consumer thread on the wgmma paths: a 64x256 product
/// per warpgroup (128) compiles without spills under the 168-register cap of a
/// 384-thread block. 160 and 192 compile too (consumers at 232 registers), but on the H100
/// none of their tiles beat the served configs of the keys they reach (gemm.md).
pub const MAX_WGMMA_ACCUMULATORS: u32 = 128;

/// Most fp32 accumulators per consumer thread over three consumer warpgroups: 512
/// threads leave 128 registers a thread, where 96 (192 x 192 tiles) compiled with 125
/// and no spills under NVRTC 13.5, and 128 (192 x 256) did not compile.
pub const MAX_THREE_CONSUMER_ACCUMULATORS: u32 = 96;

/// Tile widths up to this are allowed whatever n and k are.
pub const MIN_BLOCK_CAP: u32 = 64;

/// The widest tile side a dimension of `len` takes: `len` rounded up to a power of two,
/// at least [`MIN_BLOCK_CAP`] (lengths past 2^31, which the op refuses, cap at 2^31).
pub fn block_cap(len: u32) -> u32 {
    len.min(1 << 31).next_power_of_two().max(MIN_BLOCK_CAP)
}

/// Whether a wgmma-path config's shape is one the kernel takes: sm_90 and layout nt
/// (both operands K-major, as wgmma reads them from shared memory without transposes;
/// nn stays on the mma path), k steps of 64 (one 128-byte swizzle row; swapped operands
/// also 128, two such boxes a stage), 16-byte loads
/// (TMA), consumer warps stacked along wgmma's 64-row side only, 64 or 128 rows per
/// consumer warpgroup, and split-K with swapped operands, or unswapped without a cluster
/// (or as one) at [`MAX_ACCUMULATORS`] a thread at most (see `SPLITS` in `cuda/gemm.cu`) on a tile
/// width that is a power of two (the mma stand-in of a wider-than-64 width other than a
/// power of two takes a narrower tile, whose split-K workspace could be larger).
/// Clusters need no rule of their own here: the schema keeps clusters of 2 to `wgmma`,
/// where any tile splits into two B halves of whole swizzle atoms (8+ rows), and
/// swapped clusters to `split_k` blocks, whose partial tile counts in `smem_bytes`. Nor
/// does a `tma` epilogue: the schema keeps it to the unswapped paths with block_n a
/// multiple of 64, and its staging buffers count in `smem_bytes`. `wgmma_pingpong` has
/// two consumer warpgroups, each holding a whole tile of 64 or 128 rows.
fn wgmma_shape_fits(target: Target, key: &GemmKey, c: &GemmConfig) -> bool {
    let (x_rows, _) = c.wgmma_tile();
    let (along, across) = match c.path {
        Path::WgmmaSwap => (c.warps_n, c.warps_m),
        _ => (c.warps_m, c.warps_n),
    };
    let rows_per_consumer = match c.path {
        Path::WgmmaPingpong if along == 8 => x_rows,
        Path::WgmmaPingpong => 0,
        _ => x_rows * 4 / along,
    };
    target == Target::Sm90
        && key.layout == Layout::Nt
        && (c.block_k == 64 || (c.block_k == 128 && c.path == Path::WgmmaSwap))
        && c.vec == 8
        && across == 1
        && matches!(rows_per_consumer, 64 | 128)
        && (c.split_k == 1
            || c.path == Path::WgmmaSwap
            || (c.path == Path::Wgmma
                && (c.cluster == 1 || c.cluster_splits())
                && c.block_n.is_power_of_two()
                && c.accumulators() <= MAX_ACCUMULATORS))
        && c.accumulators() <= MAX_WGMMA_ACCUMULATORS
        && (c.consumers() != 3 || c.accumulators() <= MAX_THREE_CONSUMER_ACCUMULATORS)
}

/// Whether `c` can run any problem of `key` on `target`: n and k within `i32::MAX`; the
/// config passes the schema; the target is NVIDIA sm_80 or newer (mma.sync on bf16; AMD has no GEMM kernel yet);
/// on the mma path the warp tile keeps at most [`MAX_ACCUMULATORS`] per thread, on the
/// wgmma paths the rules of their kernel hold (sm_90, layout nt, ...); the pipeline
/// fits shared memory; with split-K every split gets at least two k steps; and block_n and
/// block_k stay within the problem's n and k rounded up to a power of two (or
/// [`MIN_BLOCK_CAP`], so tiny problems still have a 4-warp tile).
pub fn fits(target: Target, key: &GemmKey, c: &GemmConfig) -> bool {
    // n or k past the op's 32-bit dimensions (`plan::GemmProblem::raw` refuses them).
    let too_large = key.n > i32::MAX as u32 || key.k > i32::MAX as u32;
    if too_large || check_config(&c.values()).is_err() || target.vendor() != Vendor::Nvidia {
        return false;
    }
    let k_steps = key.k.div_ceil(c.block_k);
    let path_fits = match c.path {
        Path::Mma => c.accumulators() <= MAX_ACCUMULATORS,
        // The weight's rows stream as [n, k] rows: layout nt only; clusters from sm_90.
        Path::Stream => key.layout == Layout::Nt && (c.cluster == 1 || target == Target::Sm90),
        Path::Wgmma | Path::WgmmaSwap | Path::WgmmaPingpong => wgmma_shape_fits(target, key, c),
    };
    path_fits
        && c.smem_bytes(key.layout) <= smem_limit(target)
        && (c.split_k == 1 || k_steps >= 2 * c.split_k)
        && c.block_n <= block_cap(key.n)
        && c.block_k <= block_cap(key.k)
}

/// The warp grid of a `block_m` x `block_n` tile with `warps` warps: the one whose warp
/// tile is closest to square (ties: taller), or none when no grid gives 16x16 multiples.
pub fn warp_grid(block_m: u32, block_n: u32, warps: u32) -> Option<(u32, u32)> {
    let mut best: Option<(u32, u32)> = None;
    let mut wm = 1;
    while wm <= warps {
        let wn = warps / wm;
        if block_m.is_multiple_of(16 * wm) && block_n.is_multiple_of(16 * wn) {
            let skew = |(m, n): (u32, u32)| (block_m / m).abs_diff(block_n / n);
            if best.is_none_or(|b| skew((wm, wn)) < skew(b)) {
                best = Some((wm, wn));
            }
        }
        wm *= 2;
    }
    best
}

/// Tile widths besides the powers of two for unswapped wgmma tiles (wgmma's N side takes
/// any multiple of 8 up to 256). Searched where one divides n and fills the SMs' last wave
/// better than the next power of two above it: 70B-tp8 qkv (n = 1280) at m = 1024 makes
/// 80 tiles of 128 x 128 for 132 SMs (0.61 of a wave) but 128 of 128 x 80 (0.97).
pub const EXTRA_BLOCK_N: &[u32] = &[80, 96, 112, 160, 192, 224];

/// The share of the last wave's SMs `tiles` tiles keep busy over whole waves of `sms`.
fn wave_fill(tiles: u64, sms: u64) -> f64 {
    tiles as f64 / (tiles.div_ceil(sms).max(1) * sms) as f64
}

/// The [`EXTRA_BLOCK_N`] widths searched for `block_m`-row tiles of `m` rows of `key`:
/// those that divide n and whose tiles fill whole waves at least 0.05 better than the
/// next power of two above.
pub fn extra_widths(target: Target, key: &GemmKey, m: u64, block_m: u32) -> Vec<u32> {
    let sms = u64::from(target.reference_sm_count());
    let fill = |bn: u32| {
        wave_fill(
            m.div_ceil(u64::from(block_m)) * u64::from(key.n).div_ceil(u64::from(bn)),
            sms,
        )
    };
    EXTRA_BLOCK_N
        .iter()
        .copied()
        .filter(|&w| key.n.is_multiple_of(w) && fill(w) >= fill(w.next_power_of_two()) + 0.05)
        .collect()
}

/// Whether split-K may be used for `m` rows: where the output tiles leave SMs idle and
/// the split grid stays within two waves (which also bounds the workspace), or, for a
/// swapped cluster split of 16-token tiles ([`wave_split`]), where the tiles' last wave
/// would leave SMs idle.
pub fn split_allowed(target: Target, key: &GemmKey, m: u64, c: &GemmConfig) -> bool {
    let sms = u64::from(target.reference_sm_count());
    let tiles = c.tiles(m, key.n);
    if c.path == Path::Stream {
        return c.split_k == 1 || stream_split(target, key, m, c);
    }
    c.split_k == 1
        || (tiles < sms && tiles * u64::from(c.split_k) <= 2 * sms)
        || wave_split(target, key, m, c)
}

/// Whether `c` is a swapped cluster split of 16-token tiles (decode) whose tiles number
/// at least the SMs, and fill the clusters' waves at least 0.05 better than unsplit tiles
/// fill the SMs' (the split grid within 8 waves). 8B gate_up (n = 28672) at m = 1 makes
/// 224 tiles of 128 weight rows: 1.7 waves of 132 SMs, 0.85 of the second busy, as our
/// time against cuBLAS's was; as clusters of 4, at most 33 of which run at once, 6.8
/// waves (0.97). The tiles stay 16 tokens wide so the mma stand-in's workspace (where TMA
/// cannot run) stays as small as the two-wave rule's.
pub fn wave_split(target: Target, key: &GemmKey, m: u64, c: &GemmConfig) -> bool {
    let sms = u64::from(target.reference_sm_count());
    let tiles = c.tiles(m, key.n);
    let cluster = u64::from(c.cluster);
    c.cluster_splits()
        && c.path == Path::WgmmaSwap
        && c.block_m == 16
        && tiles >= sms
        && tiles * cluster <= 8 * sms
        && wave_fill(tiles, sms / cluster) >= wave_fill(tiles, sms) + 0.05
}

/// Whether a `stream` config may split k for `m` rows: where its tiles number fewer than
/// half of [`STREAM_BLOCKS_PER_SM`] blocks an SM and the split grid at most that many. Its blocks
/// are small (4-8 warps, no shared-memory ring), so several run on each SM at once: 70B-tp8
/// qkv (n = 1280, k = 8192) at m = 1 streams fastest in 80 tiles of 16 rows split 4 ways
/// (320 blocks), 8B o (n = 4096) in 256 tiles split 2 ways (the decode probe in gemm.md).
pub fn stream_split(target: Target, key: &GemmKey, m: u64, c: &GemmConfig) -> bool {
    let sms = u64::from(target.reference_sm_count());
    let tiles = c.tiles(m, key.n);
    c.path == Path::Stream
        && tiles < STREAM_BLOCKS_PER_SM * sms / 2
        && tiles * u64::from(c.split_k) <= STREAM_BLOCKS_PER_SM * sms
}

/// Blocks an SM the `stream` split grid may reach (see [`stream_split`]).
pub const STREAM_BLOCKS_PER_SM: u64 = 8;

/// Token counts up to which the `stream` path is searched (a weight stream: every extra
/// 8 tokens add two products a k block for each 16-byte weight load).
pub const STREAM_MAX_M: u64 = 16;

/// `stream` warp grids searched, as (`warps_n`, `warps_m`): rows a block by warps
/// splitting its k, 8 warps a block (the schema also takes 4; in the decode probe on the
/// H100, at m = 1-16 on five Llama shapes, neither 4-warp grid it tried was fastest on any).
pub const STREAM_WARPS: &[(u32, u32)] = &[(8, 1), (4, 2), (2, 4), (1, 8)];

/// Blocks of 32 k each `stream` warp loads before their products (the probe tried 4 and 8:
/// 4 won 19 of its 20 points).
pub const STREAM_STAGES: &[u32] = &[4, 8];

/// The `stream` configs a search for `m` rows of `key` times (m up to [`STREAM_MAX_M`],
/// layout nt, sm_80 and newer): the token tile of 8 or 16 that covers m, every warp grid
/// of [`STREAM_WARPS`] and depth of [`STREAM_STAGES`], every split of k [`stream_split`]
/// allows, through the workspace and (sm_90, [`SPLIT_CLUSTERS`]) as one cluster, where
/// `fits`.
fn stream_space(target: Target, key: &GemmKey, m: u64, out: &mut Vec<GemmConfig>) {
    if m > STREAM_MAX_M || key.layout != Layout::Nt || target.vendor() != Vendor::Nvidia {
        return;
    }
    let block_m = if m <= 8 { 8 } else { 16 };
    for &(warps_n, warps_m) in STREAM_WARPS {
        for &stages in STREAM_STAGES {
            for &split_k in SPLIT_K {
                let c = GemmConfig {
                    split_k: split_k as u32,
                    ..GemmConfig::stream(block_m, warps_n, warps_m, stages)
                };
                // The same splits as one cluster, rank 0 adding the others' partials from
                // their shared memory: no trip through L2 and no tile counter.
                let twin = GemmConfig {
                    cluster: c.split_k,
                    ..c
                };
                let twin = SPLIT_CLUSTERS.contains(&split_k).then_some(twin);
                for c in std::iter::once(c).chain(twin) {
                    if fits(target, key, &c) && split_allowed(target, key, m, &c) {
                        out.push(c);
                    }
                }
            }
        }
    }
}

/// Pipeline depths a search tries on the mma path (the schema allows 2..=8).
pub const SEARCH_STAGES: &[i64] = &[3, 4, 6];

/// Ring depths a search tries on the wgmma paths: the weight stream (swapped operands)
/// wants 64-128 KiB in flight per SM; prefill tiles fill shared memory at 4-6.
pub const SEARCH_STAGES_SWAP: &[u32] = &[4, 6, 8];
pub const SEARCH_STAGES_WGMMA: &[u32] = &[3, 4, 5, 6];
/// Ring depths of the deep rings searched on narrow unswapped tiles for few rows
/// (see `wgmma_space`); `fits` drops those that do not fit.
pub const DEEP_STAGES: &[u32] = &[8, 12, 16];

/// Whether the sm_90 space holds only tiles of at least 128 x 128 outputs at `m` rows:
/// from 256 rows, where 128 x 128 tiles make at least four waves of the 132 SMs. Of
/// 18816 smaller tiles timed there in the H100 and H200 tunings (208 searches), the
/// closest was 13.4% behind its shape's best, and they took 57% of those searches'
/// timed launches.
pub fn only_large_tiles(key: &GemmKey, m: u64) -> bool {
    m >= 256 && m.div_ceil(128) * u64::from(key.n).div_ceil(128) >= 4 * 132
}

/// The wgmma configs a search for `m` rows of `key` on `target` times (none off
/// sm_90 or for layout nn): swapped operands up to 64 rows, with 16..=64 token columns and
/// stages of 64 or 128 k
/// up to `m` rounded up, 64..=256 weight rows, 1 or 2 consumers, every split-K
/// [`split_allowed`] (from 65 to 256 rows, 64 or 128 token columns), splits of 2, 3, 4,
/// 6 and 8 also as one cluster where their partial tile fits beside the ring (splits of 2 then
/// only so); unswapped from 17
/// rows, tiles of 64..=256 (up to `m` rounded up) by 64, 128, 256 and the
/// [`extra_widths`] of the problem, 1 or 2 consumers, grouped
/// rasters where there are tile rows to group, split-K without a cluster where
/// [`split_allowed`] and `fits` (64 accumulators a thread; splits of 2, 3, 4, 6 and 8
/// also as one cluster where the partial tile fits, raster groups of 8), clusters of 2 where there are two tile
/// rows to pair (power-of-two widths), C stored directly or by TMA (whose staging buffers may leave room for
/// fewer ring stages: `fits` drops the deepest rings that no longer fit); and the
/// pingpong schedule on the tiles of 64 or 128 rows, stored either way; from
/// [`THREE_CONSUMER_ROWS`] where [`only_large_tiles`], 192 x 128 and 192 x 192 tiles
/// over three consumers, rings of 3 to 5, with and without a cluster of 2, stored either
/// way; above 256 rows, rings of [`NARROW_WIDE_STAGES`] for the 128-row tiles of those
/// widths under 128 columns.
fn wgmma_space(target: Target, key: &GemmKey, m: u64, out: &mut Vec<GemmConfig>) {
    if target != Target::Sm90 || key.layout != Layout::Nt {
        return;
    }
    let m_cap = m.next_power_of_two().max(16);
    let many_tiles = only_large_tiles(key, m);
    let mut push = |c: GemmConfig| {
        let small = c.block_m * c.block_n < 128 * 128;
        if !(many_tiles && small) && fits(target, key, &c) && split_allowed(target, key, m, &c) {
            out.push(c);
        }
    };
    for consumers in [1u32, 2] {
        // From 256 rows the unswapped tiles take two consumers: of 8316 one-consumer
        // configs timed in the H200 tuning there, none was its shape's best and five came
        // within 3% of it.
        let cooperative = consumers == 2 || m < 256;
        if m <= 256 {
            // Above 64 tokens, swapped tiles split along k where n is narrow and the
            // unswapped tiles leave SMs idle (70B-tp8 qkv, n = 1280: 20 tiles of 128x64
            // at m = 256, about 0.6x cuBLAS with the best unswapped config).
            let token_tiles: &[u32] = if m <= 64 { &[16, 32, 64] } else { &[64, 128] };
            for bm in token_tiles.iter().copied().filter(|&b| u64::from(b) <= m_cap) {
                // Stages of 128 k (two boxes of each operand) for the weight stream up to
                // 64 tokens: longer reads per weight row, twice the bytes in flight.
                let block_ks: &[u32] = if m <= 64 { &[64, 128] } else { &[64] };
                for (bn, &block_k) in [64u32, 128, 256]
                    .into_iter()
                    .flat_map(|bn| block_ks.iter().map(move |bk| (bn, bk)))
                {
                    for &stages in SEARCH_STAGES_SWAP {
                        for &split_k in SPLIT_K {
                            let c = GemmConfig {
                                path: Path::WgmmaSwap,
                                block_m: bm,
                                block_n: bn,
                                block_k,
                                warps_m: 1,
                                warps_n: 4 * consumers,
                                stages,
                                split_k: split_k as u32,
                                group_m: 8,
                                vec: 8,
                                cluster: 1,
                                epilogue: Epilogue::Direct,
                            };
                            // At most 64 accumulators a thread where the token tile
                            // grows: the split-K reduction holds them all.
                            if m <= 64 || c.accumulators() <= 64 {
                                // The same splits as one cluster, summed through
                                // distributed shared memory (no workspace round trip).
                                // A split of 2 only so where that fits: of 254 such pairs
                                // timed on the H200 at m = 1, 16 and 64, the cluster was
                                // faster at 248.
                                let twin = GemmConfig {
                                    cluster: c.split_k,
                                    ..c
                                };
                                if !(c.split_k == 2 && fits(target, key, &twin)) {
                                    push(c);
                                }
                                if SPLIT_CLUSTERS.contains(&i64::from(c.split_k)) {
                                    push(twin);
                                }
                            }
                        }
                    }
                }
            }
        }
        if m > 16 {
            for bm in [64u32, 128, 256]
                .into_iter()
                .filter(|&b| u64::from(b) <= m_cap.max(64))
            {
                let widths = [64u32, 128, 256]
                    .into_iter()
                    .chain(extra_widths(target, key, m, bm));
                // Not 256 x 64 (128 x 64 a consumer): of 4540 such configs timed from
                // m = 256 in the H200 and H100 tunings, the closest was 9.0% behind its
                // shape's best, and they were 9% of the prefill screening.
                for bn in widths.filter(|&bn| !(bm == 256 && bn == 64)) {
                    for &stages in SEARCH_STAGES_WGMMA {
                        // Three stages only where four do not fit (`fits` with the
                        // cooperative tile's staging of C, the larger): of 5342 such
                        // configs timed in the H200 tuning from m = 256, one came within
                        // 3% of its shape's best.
                        let deeper = GemmConfig {
                            epilogue: if bn % 64 == 0 {
                                Epilogue::Tma
                            } else {
                                Epilogue::Direct
                            },
                            ..GemmConfig::wgmma(bm, bn, 4 * consumers, 4)
                        };
                        if stages == 3 && fits(target, key, &deeper) {
                            continue;
                        }
                        for &group_m in GROUP_M {
                            let tile_rows = m.div_ceil(u64::from(bm));
                            let grouping = tile_rows > 1 || group_m == 8;
                            if !grouping || group_m == 4 {
                                continue;
                            }
                            let clusters = [1u32, 2].into_iter().filter(|&c| {
                                cooperative && (c == 1 || (tile_rows > 1 && bn.is_power_of_two()))
                            });
                            for cluster in clusters {
                                for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                                    // Split along k without a cluster, where the tiles
                                    // leave SMs idle (`split_allowed`) and a thread holds
                                    // at most 64 accumulators (`fits`); not up to 64 rows,
                                    // where the swapped split wins (of 426 unswapped splits
                                    // timed at m = 64 in the H200 tuning, the closest was
                                    // 5.0% behind its shape's best).
                                    let splits: &[i64] = if cluster == 1 && m > 64 { SPLIT_K } else { &[1] };
                                    for &split_k in splits {
                                        let c = GemmConfig {
                                            group_m: group_m as u32,
                                            cluster,
                                            epilogue,
                                            split_k: split_k as u32,
                                            ..GemmConfig::wgmma(bm, bn, 4 * consumers, stages)
                                        };
                                        push(c);
                                        // The same splits as one cluster, on the plain
                                        // raster: a split runs where the tiles number
                                        // fewer than the SMs, so their order hardly moves
                                        // which of them share L2 at a time.
                                        if SPLIT_CLUSTERS.contains(&split_k) && group_m == 8 {
                                            push(GemmConfig {
                                                cluster: c.split_k,
                                                ..c
                                            });
                                        }
                                    }
                                }
                            }
                            // Two consumers on tiles of their own, taken in turn, on
                            // rings of 4 or more (of 958 three-stage ones timed in the
                            // H200 tuning, the closest was 4.0% behind its shape's best).
                            if consumers == 2 && bm <= 128 && stages >= 4 {
                                for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                                    push(GemmConfig {
                                        group_m: group_m as u32,
                                        epilogue,
                                        ..GemmConfig::pingpong(bm, bn, stages)
                                    });
                                }
                            }
                        }
                    }
                }
            }
            // Deep rings of narrow tiles for few rows, as cuBLAS runs them on the H200
            // (gemm.md, its kernels at the lagging points: 64 x 32-64 tiles of 12-16 stages
            // at m = 64, 128 x 64 of 8 at 256): more of the weight in flight per SM than
            // the rings of 3-6 above. 64-row tiles on one consumer up to 64 rows, 128-row
            // tiles on two from 65 to 256.
            let deep = if consumers == 1 {
                m <= 64
            } else {
                m > 64 && m <= 256
            };
            if deep {
                let (bm, widths): (u32, &[u32]) = if consumers == 1 {
                    (64, &[32, 64])
                } else {
                    (128, &[64])
                };
                let tile_rows = m.div_ceil(u64::from(bm));
                for &bn in widths {
                    for &stages in DEEP_STAGES {
                        for cluster in [1u32, 2].into_iter().filter(|&c| c == 1 || tile_rows > 1) {
                            for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                                push(GemmConfig {
                                    cluster,
                                    epilogue,
                                    ..GemmConfig::wgmma(bm, bn, 4 * consumers, stages)
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    // Rings of 8 for the widths under 128 that fill the last wave better (`extra_widths`)
    // above 256 rows: at 70B-tp8 qkv, m = 1024, 128 x 80 took 31.7 µs against 33.7 with
    // the ring of 6 (the pingpong twin 32.3; H100, cuBLAS 30.3 with 8-stage 80 x 128 tiles).
    if m > 256 {
        for bn in extra_widths(target, key, m, 128)
            .into_iter()
            .filter(|&bn| bn < 128)
        {
            push(GemmConfig::wgmma(128, bn, 8, NARROW_WIDE_STAGES));
            push(GemmConfig::pingpong(128, bn, NARROW_WIDE_STAGES));
        }
    }
    // Three consumer warpgroups, 64 rows each of a 192-row tile (512 threads, so at most
    // 128 registers a thread: 192 x 256 does not compile), for large prefill: the tile
    // family cuBLAS runs at 8B lm_head, m = 8192 (192 x 192, ring of 4, pairs of blocks).
    // Only where 128 x 128 tiles make four waves (`only_large_tiles`): timed on the H100
    // at 15 points, at each of the four below that (70B-tp8 qkv at m = 1024 and 4096, 8B
    // qkv and 70B-tp8 down at 1024) the served config took 0.58-0.96 of their best time.
    if m >= THREE_CONSUMER_ROWS && many_tiles {
        for bn in [128u32, 192] {
            for stages in [3u32, 4, 5] {
                for cluster in [1u32, 2] {
                    for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                        push(GemmConfig {
                            cluster,
                            epilogue,
                            ..GemmConfig::wgmma(192, bn, 12, stages)
                        });
                    }
                }
            }
        }
    }
}

/// The ring depth searched above 256 rows for 128-row tiles narrower than 128 columns of
/// a width other than a power of two (the rings of [`SEARCH_STAGES_WGMMA`] beside it).
pub const NARROW_WIDE_STAGES: u32 = 8;

/// The most rows a GEMM takes (`plan::GemmProblem::raw` refuses more: the kernels index
/// rows with 32-bit integers).
pub const MAX_ROWS: u64 = i32::MAX as u64;

/// The fewest rows a search tries 192-row tiles over three consumer warpgroups for.
pub const THREE_CONSUMER_ROWS: u64 = 1024;

/// The configs a search for `m` rows of `key` on `target` times: every tile of
/// 32..=128 rows (16 too for m <= 16) and 32..=256 columns with its squarest warp
/// grid, 16-byte loads, 3, 4 or 6 stages where they fit, k steps of 64 or 128 up to 64
/// rows (a weight stream wants long steps) and of 32 or 64 above, split-K where
/// [`split_allowed`], grouping only where there are tile rows to group. Tiles taller
/// than `m` (rounded up to a power of two) are left out: they only add rows of zeros.
/// On sm_90 with layout nt the search is the wgmma configs of `wgmma_space` alone
/// (the mma configs where it has none): on the H200 no mma config beat the wgmma
/// paths in full searches of n=6144 k=4096 at m=1 (98 candidates) and m=256 (580),
/// and screening hundreds of them at every shape costs more device time than the
/// tables can afford. Where TMA cannot run, `plan::fit` still moves a wgmma config
/// to its mma stand-in. Up to [`STREAM_MAX_M`] rows either set is joined by the
/// `stream` configs (`stream_space`), which run on sm_80 and sm_90 alike. Rows past
/// [`MAX_ROWS`] are searched as that many.
pub fn search_space(target: Target, key: &GemmKey, m: u64) -> Vec<GemmConfig> {
    // Tile counts and the power-of-two cap of m would overflow near u64::MAX.
    let m = m.min(MAX_ROWS);
    let mut wgmma = Vec::new();
    wgmma_space(target, key, m, &mut wgmma);
    if !wgmma.is_empty() {
        stream_space(target, key, m, &mut wgmma);
        return wgmma;
    }
    let mut out = Vec::new();
    let m_cap = m.next_power_of_two().max(16);
    let block_ks: &[i64] = if m <= 64 { &BLOCK_K[1..] } else { &BLOCK_K[..2] };
    for &bm in BLOCK_M
        .iter()
        .filter(|&&b| b as u64 <= m_cap && b <= 128 && (b > 16 || m <= 16))
    {
        for &bn in BLOCK_N
            .iter()
            .filter(|&&b| b >= 32 && (b as u64).is_power_of_two())
        {
            for &bk in block_ks {
                for &warps in WARPS {
                    let Some((wm, wn)) = warp_grid(bm as u32, bn as u32, warps as u32) else {
                        continue;
                    };
                    for &stages in SEARCH_STAGES {
                        for &split_k in SPLIT_K {
                            for &group_m in GROUP_M {
                                let c = GemmConfig {
                                    path: Path::Mma,
                                    block_m: bm as u32,
                                    block_n: bn as u32,
                                    block_k: bk as u32,
                                    warps_m: wm,
                                    warps_n: wn,
                                    stages: stages as u32,
                                    split_k: split_k as u32,
                                    group_m: group_m as u32,
                                    vec: 8,
                                    cluster: 1,
                                    epilogue: Epilogue::Direct,
                                };
                                let tiles_m = m.div_ceil(bm as u64);
                                let grouping = if tiles_m > 1 { true } else { group_m == 8 };
                                if grouping && fits(target, key, &c) && split_allowed(target, key, m, &c) {
                                    out.push(c);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    stream_space(target, key, m, &mut out);
    out
}
