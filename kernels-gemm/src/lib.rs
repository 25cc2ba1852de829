//! GEMM for LLM linear layers, `C[m, n] = A[m, k] · op(B) (+ bias[n])`, bf16 or f16
//! in, fp32 accumulation, C in the input type or f32, with launch configurations from
//! tuned tables baked into the binary.
//!
//! The layout of one kernel family: [`schema`] (table contract and parameter
//! domains), [`config`] (key and config types), [`heuristic`] (analytic default),
//! [`space`] (search space and pruning), the device code in `cuda/`; [`plan`] (the
//! problem and its backend-neutral launch plan), [`ops`] (the op, generic over
//! `kernels_core::Backend`, and the `Tunable`), `cuda` (the safe op on cudarc views and
//! the raw-stream launch, feature `cuda`) and [`mod@reference`] (the CPU reference).
//!
//! Split-K configs need a workspace the caller allocates once, [`workspace_bytes`]
//! bytes, zeroed before its first use.
//!
//! ```
//! use kernels_gemm::{Gemm, GemmKey, Layout};
//! use tuned::{resolve_serve, DType, Target};
//! let key = GemmKey { dtype: DType::Bf16, layout: Layout::Nt, n: 6144, k: 4096 };
//! let r = resolve_serve::<Gemm>(Target::Sm90, &key, 16);
//! assert_eq!(r.config.block_m, 16);
//! ```

pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod heuristic;
pub mod ops;
pub mod plan;
pub mod reference;
pub mod schema;
pub mod space;

pub use config::{Epilogue, GemmConfig, GemmKey, Layout, Path};
pub use heuristic::analytic_default;

use tuned::{BakedTable, KernelSchema, KeyValues, Target, TunedKernel, Value};

mod baked {
    include!(concat!(env!("OUT_DIR"), "/tuned_tables.rs"));
}

pub use baked::{SOURCE_FILES, SOURCE_FINGERPRINT};

/// The folder of this crate's committed tables in the source tree it was built from
/// (`<kernel>/<target>.json` below it), where `build.rs` bakes them from and
/// `kernels tune` writes them. A path only: nothing reads it at run time.
pub const TABLES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tables");

/// The GEMM kernel family.
pub struct Gemm;

impl TunedKernel for Gemm {
    type Key = GemmKey;
    type Config = GemmConfig;
    const SCHEMA: &'static KernelSchema = &schema::GEMM;
    const SOURCE_FINGERPRINT: &'static str = baked::SOURCE_FINGERPRINT;

    fn key_values(key: &GemmKey) -> KeyValues {
        KeyValues::new()
            .push(key.dtype.name())
            .push(key.layout.name())
            .push(key.n as i64)
            .push(key.k as i64)
    }

    fn key_from_values(values: &[Value]) -> Result<GemmKey, String> {
        GemmKey::from_values(values)
    }

    fn config_from_values(values: &[Value]) -> Result<GemmConfig, String> {
        GemmConfig::from_values(values)
    }

    fn config_values(config: &GemmConfig) -> Vec<Value> {
        config.values()
    }

    fn analytic_default(target: Target, key: &GemmKey, batch: u64) -> GemmConfig {
        heuristic::analytic_default(target, key, batch)
    }

    fn baked_table(target: Target) -> Option<&'static BakedTable> {
        baked::gemm_table(target)
    }

    fn accepts(target: Target, key: &GemmKey, _batch: u64, config: &GemmConfig) -> bool {
        space::fits(target, key, config)
    }
}

/// The [`tuned::DynKernel`] of GEMM.
pub static GEMM: tuned::Dyn<Gemm> = tuned::Dyn::new();

/// Workspace bytes a GEMM of `m` rows of `key` on `target` may need: the most any
/// config the runtime can pick for it takes (the baked table's or the analytic default
/// under the serve policy, any config of the search space under the online policy),
/// each as it runs on 16-byte aligned operands or, where TMA cannot load them, as its
/// mma stand-in ([`plan::portable`]: a cluster split then splits through the
/// workspace). 0 when none splits k. Allocate it once per stream, zeroed. `m` past the
/// op's limit ([`space::MAX_ROWS`], which [`plan::GemmProblem::raw`] refuses beyond) is
/// sized as that limit.
///
/// ```
/// use kernels_gemm::{workspace_bytes, GemmKey, Layout};
/// use tuned::{DType, Target};
/// let o_proj = GemmKey { dtype: DType::Bf16, layout: Layout::Nt, n: 4096, k: 4096 };
/// assert!(workspace_bytes(Target::Sm90, &o_proj, 1) > 0); // decode splits k
/// ```
pub fn workspace_bytes(target: Target, key: &GemmKey, m: u64) -> usize {
    // The heuristic's and the space's tile counts would overflow near u64::MAX.
    let m = m.min(space::MAX_ROWS);
    let served = tuned::resolve_serve::<Gemm>(target, key, m).config;
    space::search_space(target, key, m)
        .iter()
        .chain([&served, &heuristic::analytic_default(target, key, m)])
        .flat_map(|c| [*c, if c.path.is_wgmma() { plan::portable(c) } else { *c }])
        .map(|c| c.workspace_bytes(m, key.n))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuned::DType;

    /// Planning never overflows on a key or row count a caller may pass (keys past what
    /// the op takes included): beyond the op's rows the workspace is the limit's, and
    /// the space and the default still answer.
    #[test]
    fn planning_takes_any_key_and_row_count() {
        use super::space_tests::key;
        for t in [Target::Sm80, Target::Sm90] {
            let o = key(4096, 4096);
            let at_limit = workspace_bytes(t, &o, space::MAX_ROWS);
            assert_eq!(workspace_bytes(t, &o, u64::MAX), at_limit, "{t}");
            assert_eq!(workspace_bytes(t, &o, 1 << 40), at_limit, "{t}");
            for (n, k) in [
                (4096, 4096),
                (1, 1),
                (u32::MAX, u32::MAX),
                (u32::MAX, 64),
                (64, u32::MAX),
            ] {
                for layout in [Layout::Nt, Layout::Nn] {
                    let key = GemmKey { layout, ..key(n, k) };
                    for m in [0, 1, 3000, u64::MAX] {
                        tuned::resolve_serve::<Gemm>(t, &key, m);
                        let space = space::search_space(t, &key, m);
                        let too_large = n > i32::MAX as u32 || k > i32::MAX as u32;
                        assert_eq!(space.is_empty(), too_large, "{t} {n}x{k} m={m}");
                        workspace_bytes(t, &key, m);
                    }
                }
            }
        }
    }

    #[test]
    fn default_fits_model_shapes() {
        for t in [Target::Sm80, Target::Sm90] {
            for (n, k) in [
                (1, 1),
                (17, 33),
                (1280, 8192),
                (6144, 4096),
                (4096, 4096),
                (28672, 4096),
                (4096, 14336),
                (128256, 4096),
                (16, 16),
            ] {
                for m in [1, 3, 16, 17, 64, 100, 256, 1024, 8192, 16384] {
                    for layout in [Layout::Nt, Layout::Nn] {
                        let key = GemmKey {
                            dtype: DType::Bf16,
                            layout,
                            n,
                            k,
                        };
                        let c = analytic_default(t, &key, m);
                        assert!(schema::check_config(&c.values()).is_ok(), "{c:?}");
                        assert!(space::fits(t, &key, &c), "{t} n={n} k={k} m={m}: {c:?}");
                        assert!(
                            space::split_allowed(t, &key, m, &c),
                            "{t} n={n} k={k} m={m}: {c:?}"
                        );
                        assert!(c.workspace_bytes(m, n) <= workspace_bytes(t, &key, m));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod space_tests {
    use std::collections::BTreeSet;

    use super::*;
    use tuned::DType;

    /// The bf16 nt key of an `n` x `k` weight.
    pub(crate) fn key(n: u32, k: u32) -> GemmKey {
        GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n,
            k,
        }
    }

    /// The model shapes of ../shared/models.json at their tp degrees (n, k).
    pub(crate) const MODEL_SHAPES: &[(u32, u32)] = &[
        (6144, 4096),
        (4096, 4096),
        (28672, 4096),
        (4096, 14336),
        (128256, 4096),
        (1280, 8192),
        (8192, 1024),
        (7168, 8192),
        (8192, 3584),
    ];

    /// Every compiled variant a search over the model shapes at m on the log grid can
    /// time, on `target`, for both dtypes and layouts, with element loads too.
    pub(crate) fn reachable_variants(target: Target) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for dtype in [DType::Bf16, DType::F16] {
            for layout in [Layout::Nt, Layout::Nn] {
                for &(n, k) in MODEL_SHAPES.iter().chain(&[(17, 33), (1, 1)]) {
                    let key = GemmKey { dtype, layout, n, k };
                    for m in (0..=14).map(|e| 1u64 << e).chain([3, 17]) {
                        for c in space::search_space(target, &key, m)
                            .into_iter()
                            .chain([analytic_default(target, &key, m)])
                        {
                            for vec in [8, 1] {
                                let c = GemmConfig { vec, ..c };
                                out.insert(plan::variant(&key, &c).to_string());
                            }
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_space_is_valid_bounded_and_holds_the_default() {
        for t in [Target::Sm80, Target::Sm90] {
            for &(n, k) in MODEL_SHAPES {
                for m in [1, 16, 64, 256, 1024, 8192] {
                    let key = GemmKey {
                        dtype: DType::Bf16,
                        layout: Layout::Nt,
                        n,
                        k,
                    };
                    let space = space::search_space(t, &key, m);
                    assert!(
                        !space.is_empty() && space.len() <= 3000,
                        "{t} {key:?} m={m}: {}",
                        space.len()
                    );
                    for c in &space {
                        assert!(schema::check_config(&c.values()).is_ok(), "{c:?}");
                        assert_eq!(GemmConfig::from_values(&c.values()).unwrap(), *c);
                        assert!(Gemm::accepts(t, &key, m, c), "{c:?}");
                    }
                }
            }
        }
        // No AMD kernel: nothing fits there.
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 4096,
            k: 4096,
        };
        assert!(space::search_space(Target::Gfx942, &key, 16).is_empty());
        assert!(!plan::has_kernel(Target::Gfx942));
    }

    /// Split-K on the unswapped wgmma path is searched where the output tiles leave SMs
    /// idle (70B-tp8 qkv, n = 1280, at m = 256 and 1024), only without a cluster (or as
    /// one: see `cluster_splits_are_searched_beside_splits`) or pingpong
    /// and at 64 accumulators a thread at most, and not where the tiles fill the GPU (8B
    /// qkv at m = 4096).
    #[test]
    fn unswapped_split_k_is_searched_where_tiles_leave_sms_idle() {
        for m in [256, 1024] {
            let space = space::search_space(Target::Sm90, &key(1280, 8192), m);
            let split: Vec<_> = space
                .iter()
                .filter(|c| c.path == Path::Wgmma && c.split_k > 1)
                .collect();
            assert!(!split.is_empty(), "m={m}");
            for c in split {
                assert!(c.cluster == 1 || c.cluster_splits(), "{c}");
                assert!(c.accumulators() <= space::MAX_ACCUMULATORS, "{c}");
                assert!(space::split_allowed(Target::Sm90, &key(1280, 8192), m, c), "{c}");
            }
        }
        assert!(space::search_space(Target::Sm90, &key(6144, 4096), 4096)
            .iter()
            .all(|c| c.split_k == 1));
        assert!(space::search_space(Target::Sm90, &key(1280, 8192), 256)
            .iter()
            .all(|c| c.path != Path::WgmmaPingpong || c.split_k == 1));
    }

    /// Clusters of 2 are in the sm_90 space for the unswapped wgmma configs of every
    /// shape with two tile rows to pair, beside the same config without one (and not
    /// split along k, of a power-of-two width); the only other clusters are the swapped
    /// cluster splits; never in a default. The schema, `fits` and `plan::fit` agree.
    #[test]
    fn clusters_of_two_are_searched_on_unswapped_wgmma_only() {
        for &(n, k) in MODEL_SHAPES {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            for m in [1, 16, 17, 64, 65, 128, 129, 256, 1024, 8192] {
                for t in [Target::Sm80, Target::Sm90] {
                    let space = space::search_space(t, &key, m);
                    for c in space.iter().filter(|c| c.cluster != 1 && !c.cluster_splits()) {
                        assert_eq!(c.cluster, 2, "{c}");
                        assert_eq!((t, c.path), (Target::Sm90, Path::Wgmma), "{c}");
                        assert!(m > u64::from(c.block_m), "m={m}: nothing to pair in {c}");
                        assert!(space.contains(&GemmConfig { cluster: 1, ..*c }), "{c}");
                    }
                    // Three-consumer tiles pair at any width (their own test).
                    let pairs = space
                        .iter()
                        .filter(|c| {
                            c.path == Path::Wgmma
                                && c.cluster == 2
                                && !c.cluster_splits()
                                && c.consumers() != 3
                        })
                        .count();
                    let unswapped = space
                        .iter()
                        .filter(|c| c.path == Path::Wgmma && m > u64::from(c.block_m) && c.consumers() != 3);
                    assert_eq!(
                        pairs,
                        unswapped
                            .filter(|c| c.cluster == 1 && c.split_k == 1 && c.block_n.is_power_of_two())
                            .count(),
                        "{t} n={n} m={m}"
                    );
                    // Clusters of 2 take no split.
                    assert!(space
                        .iter()
                        .all(|c| c.cluster == 1 || c.split_k == 1 || c.cluster_splits()));
                    let d = analytic_default(t, &key, m);
                    assert!(d.cluster == 1 || d.cluster_splits(), "{t} n={n} m={m}: {d}");
                }
                let nn = GemmKey {
                    layout: Layout::Nn,
                    ..key
                };
                assert!(space::search_space(Target::Sm90, &nn, m)
                    .iter()
                    .all(|c| c.cluster == 1));
            }
        }
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 4096,
            k: 4096,
        };
        let two = GemmConfig {
            cluster: 2,
            ..GemmConfig::wgmma(128, 256, 8, 4)
        };
        assert!(space::fits(Target::Sm90, &key, &two));
        assert!(!space::fits(Target::Sm80, &key, &two));
        let nn = GemmKey {
            layout: Layout::Nn,
            ..key
        };
        assert!(!space::fits(Target::Sm90, &nn, &two));
        // Unswapped: sizes 1 and 2 on the `wgmma` path only, whatever the problem
        // (swapped: the splits, see `cluster_splits_are_searched_beside_swapped_splits`).
        let swap = GemmConfig {
            path: Path::WgmmaSwap,
            block_m: 16,
            block_n: 128,
            warps_m: 1,
            warps_n: 8,
            ..two
        };
        let mma = plan::portable(&two);
        assert_eq!(mma.cluster, 1);
        for bad in [
            swap,
            GemmConfig { cluster: 2, ..mma },
            GemmConfig { cluster: 4, ..two },
            GemmConfig { cluster: 0, ..two },
        ] {
            let e = schema::check_config(&bad.values()).unwrap_err();
            assert!(e.contains("cluster"), "{bad}: {e}");
            assert!(!space::fits(Target::Sm90, &key, &bad), "{bad}");
        }
        assert!(schema::check_config(&GemmConfig { cluster: 1, ..swap }.values()).is_ok());
        // Where TMA cannot run, the mma stand-in has no cluster.
        let fitted = plan::fit(two, kernels_core::cache::AlignClass::A2);
        assert_eq!((fitted.path, fitted.cluster), (Path::Mma, 1));
        assert!(space::fits(Target::Sm90, &key, &fitted));
        assert_eq!(plan::fit(two, kernels_core::cache::AlignClass::A16), two);
    }

    /// Every split of 2, 3, 4, 6 or 8 in the sm_90 space (swapped, or unswapped with raster
    /// groups of 8) has its cluster twin beside it where the partial tile fits beside the
    /// ring (and any staging of C), and every cluster split is such a twin; a swapped split
    /// of 2 runs only as its twin where that fits, in the space and in the default. The
    /// schema takes a swapped cluster only as large as the split; a cluster split needs
    /// no workspace, while its mma stand-in (where TMA cannot run) keeps the split and
    /// needs what `workspace_bytes` returns.
    #[test]
    fn cluster_splits_are_searched_beside_splits() {
        let (mut twins, mut waves) = (0, 0);
        for &(n, k) in MODEL_SHAPES {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            for m in [1, 3, 16, 17, 64, 65, 128, 256, 1024] {
                let space = space::search_space(Target::Sm90, &key, m);
                for c in space.iter().filter(|c| c.cluster_splits()) {
                    assert!(
                        matches!(c.path, Path::WgmmaSwap | Path::Wgmma | Path::Stream),
                        "{c}"
                    );
                    assert!(
                        schema::SPLIT_CLUSTERS.contains(&i64::from(c.cluster)) && c.cluster == c.split_k,
                        "{c}"
                    );
                    let unclustered = GemmConfig { cluster: 1, ..*c };
                    let replaced = c.path == Path::WgmmaSwap && c.split_k == 2;
                    if space::split_allowed(Target::Sm90, &key, m, &unclustered) {
                        assert_eq!(space.contains(&unclustered), !replaced, "{c}");
                    } else {
                        // Split for the waves alone, as a cluster only.
                        assert!(space::wave_split(Target::Sm90, &key, m, c), "{c}");
                        assert!(!space.contains(&unclustered), "{c}");
                        waves += 1;
                    }
                    assert!(space::fits(Target::Sm90, &key, &unclustered), "{c}");
                    assert_eq!(c.workspace_bytes(m, n), 0, "{c}");
                    if c.path == Path::Stream {
                        // No stand-in (no TMA to miss); the partial tile fits the shared
                        // memory the launch asks for.
                        assert!(
                            c.smem_bytes(Layout::Nt) >= (c.block_m * c.block_n * 4) as usize,
                            "{c}"
                        );
                        twins += 1;
                        continue;
                    }
                    let stand_in = plan::portable(c);
                    assert_eq!((stand_in.split_k, stand_in.cluster), (c.split_k, 1), "{c}");
                    assert!(stand_in.workspace_bytes(m, n) > 0, "{c}");
                    assert!(
                        workspace_bytes(Target::Sm90, &key, m) >= stand_in.workspace_bytes(m, n),
                        "{c}"
                    );
                    assert_eq!(
                        c.smem_bytes(Layout::Nt),
                        GemmConfig { cluster: 1, ..*c }.smem_bytes(Layout::Nt)
                            + (c.block_m * c.block_n * 4) as usize
                    );
                    twins += 1;
                }
                for c in space.iter().filter(|c| {
                    c.path != Path::Mma
                        && c.cluster == 1
                        && schema::SPLIT_CLUSTERS.contains(&i64::from(c.split_k))
                }) {
                    let twin = GemmConfig {
                        cluster: c.split_k,
                        ..*c
                    };
                    let grouped = c.path == Path::WgmmaSwap || c.group_m == 8;
                    assert_eq!(
                        space.contains(&twin),
                        grouped && space::fits(Target::Sm90, &key, &twin),
                        "n={n} m={m} {twin}"
                    );
                    if c.path == Path::WgmmaSwap && c.split_k == 2 {
                        assert!(!space::fits(Target::Sm90, &key, &twin), "{c}");
                    }
                }
                let d = analytic_default(Target::Sm90, &key, m);
                let twin = GemmConfig {
                    cluster: d.split_k,
                    ..d
                };
                // The stream default runs every split as one cluster.
                let clustered =
                    (d.path == Path::WgmmaSwap && d.split_k == 2 && space::fits(Target::Sm90, &key, &twin))
                        || (d.path == Path::Stream && d.split_k > 1);
                assert_eq!(d.cluster_splits(), clustered, "n={n} m={m}: {d}");
                assert!(space.contains(&d), "n={n} m={m}: {d}");
                assert!(space::search_space(Target::Sm80, &key, m)
                    .iter()
                    .all(|c| c.cluster == 1));
            }
        }
        assert!(twins > 100, "{twins} cluster splits over the model shapes");
        // 8B gate_up at m = 1 and 16 among them.
        assert!(
            waves > 0,
            "no cluster split for the waves alone over the model shapes"
        );
        let gate_up = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 28672,
            k: 4096,
        };
        let four = GemmConfig {
            split_k: 4,
            cluster: 4,
            ..GemmConfig::swapped(16, 128, 8, 6)
        };
        assert!(space::wave_split(Target::Sm90, &gate_up, 1, &four));
        assert!(space::search_space(Target::Sm90, &gate_up, 1).contains(&four));
        // Not through the workspace, not for 32-token tiles, not where the tiles fill
        // their waves already (lm_head, n = 152064: 1188 tiles of 128, 9 waves).
        let workspace = GemmConfig { cluster: 1, ..four };
        assert!(!space::split_allowed(Target::Sm90, &gate_up, 1, &workspace));
        assert!(!space::wave_split(
            Target::Sm90,
            &gate_up,
            32,
            &GemmConfig { block_m: 32, ..four }
        ));
        let lm_head = GemmKey { n: 152064, ..gate_up };
        assert!(!space::wave_split(Target::Sm90, &lm_head, 1, &four));
        let split = GemmConfig {
            split_k: 4,
            ..GemmConfig::swapped(16, 128, 4, 4)
        };
        assert!(schema::check_config(&GemmConfig { cluster: 4, ..split }.values()).is_ok());
        for bad in [
            GemmConfig { cluster: 2, ..split },
            GemmConfig {
                cluster: 4,
                split_k: 2,
                ..split
            },
            GemmConfig {
                cluster: 4,
                split_k: 1,
                ..split
            },
        ] {
            let e = schema::check_config(&bad.values()).unwrap_err();
            assert!(e.contains("cluster") && e.contains("split_k"), "{bad}: {e}");
        }
        // Unswapped: a pair unsplit, or the splits (cluster = split_k, 2, 3, 4, 6 or 8).
        let tile = GemmConfig::wgmma(128, 128, 8, 4);
        for ok in [(2, 1), (2, 2), (3, 3), (4, 4), (6, 6), (8, 8)] {
            let c = GemmConfig {
                cluster: ok.0,
                split_k: ok.1,
                ..tile
            };
            assert!(schema::check_config(&c.values()).is_ok(), "{c}");
            assert_eq!(c.cluster_splits(), ok.1 > 1, "{c}");
        }
        for bad in [(4, 1), (3, 1), (2, 4), (4, 2), (8, 1), (6, 3), (8, 6)] {
            let c = GemmConfig {
                cluster: bad.0,
                split_k: bad.1,
                ..tile
            };
            let e = schema::check_config(&c.values()).unwrap_err();
            assert!(
                e.contains("split_k") && e.contains("clusters of 2 only"),
                "{c}: {e}"
            );
        }
    }

    /// Where 128 x 128 tiles make four waves or more (from 256 rows), the sm_90 space
    /// holds no smaller tile of any wgmma path but still 128 x 128 and larger ones; where
    /// they make fewer, or below 256 rows, smaller tiles are searched as before.
    #[test]
    fn many_tiles_leave_only_large_ones_in_the_space() {
        let (mut pruned, mut kept) = (0, 0);
        for &(n, k) in MODEL_SHAPES {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            for m in [64, 255, 256, 1024, 4096, 8192] {
                let space = space::search_space(Target::Sm90, &key, m);
                let small = space.iter().filter(|c| c.block_m * c.block_n < 128 * 128).count();
                let tiles = m.div_ceil(128) * u64::from(n).div_ceil(128);
                let only_large = space::only_large_tiles(&key, m);
                assert_eq!(only_large, m >= 256 && tiles >= 528, "n={n} m={m}");
                if only_large {
                    pruned += 1;
                    assert_eq!(small, 0, "n={n} m={m}");
                    assert!(
                        space.iter().any(|c| c.block_m == 128 && c.block_n == 128),
                        "n={n} m={m}"
                    );
                } else {
                    kept += 1;
                    assert!(small > 0, "n={n} m={m}");
                }
            }
        }
        assert!(pruned > 0 && kept > 0, "{pruned} pruned, {kept} kept");
    }

    /// Deep rings (8, 12 and 16 stages) of narrow unswapped tiles are searched for few
    /// rows: 64-row tiles 32 or 64 wide from 17 to 64 rows, 128 x 64 from 65 to 256
    /// (unless the tiles are too many for any tile that small), each depth where it fits
    /// shared memory (16 stages of 64 x 32, not of 64 x 64); above 256 rows only rings of 8
    /// for 128-row tiles of the wave-filling widths under 128 (cooperative and pingpong);
    /// no other unswapped config rings deeper than 6.
    #[test]
    fn deep_rings_are_searched_for_few_rows_or_narrow_widths() {
        for &(n, k) in MODEL_SHAPES {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            for m in [1, 16, 17, 64, 65, 256, 257, 1024] {
                let space = space::search_space(Target::Sm90, &key, m);
                let deep: Vec<_> = space
                    .iter()
                    .filter(|c| c.path == Path::Wgmma && c.stages > 6)
                    .collect();
                for c in &deep {
                    let tile = (c.block_m, c.block_n, c.consumers());
                    let few = match tile {
                        (64, 32 | 64, 1) => (17..=64).contains(&m),
                        (128, 64, 2) => (65..=256).contains(&m),
                        // Above 256 rows: the narrow widths that fill the last wave.
                        (128, bn, 2) if !bn.is_power_of_two() => {
                            m > 256 && bn < 128 && c.stages == space::NARROW_WIDE_STAGES
                        }
                        _ => false,
                    };
                    assert!(few, "m={m}: {c}");
                    assert!(space::fits(Target::Sm90, &key, c), "{c}");
                }
                let has = |block_m, block_n, warps_m, stages| {
                    space.contains(&GemmConfig::wgmma(block_m, block_n, warps_m, stages))
                };
                match m {
                    17..=64 => {
                        assert!(has(64, 32, 4, 16) && has(64, 64, 4, 12), "n={n} m={m}");
                        assert!(!has(64, 64, 4, 16), "n={n} m={m}: 64 x 64 x 16 stages overflows");
                    }
                    65..=256 => assert_eq!(
                        has(128, 64, 8, 8),
                        !space::only_large_tiles(&key, m),
                        "n={n} m={m}"
                    ),
                    _ => {
                        let narrow: Vec<_> = space::extra_widths(Target::Sm90, &key, m, 128)
                            .into_iter()
                            .filter(|&bn| {
                                m > 256
                                    && bn < 128
                                    && space::fits(
                                        Target::Sm90,
                                        &key,
                                        &GemmConfig::wgmma(128, bn, 8, space::NARROW_WIDE_STAGES),
                                    )
                                    && !space::only_large_tiles(&key, m)
                            })
                            .collect();
                        assert_eq!(deep.len(), narrow.len(), "n={n} m={m}");
                        for bn in narrow {
                            assert!(
                                has(128, bn, 8, space::NARROW_WIDE_STAGES)
                                    && space.contains(&GemmConfig::pingpong(
                                        128,
                                        bn,
                                        space::NARROW_WIDE_STAGES
                                    )),
                                "n={n} m={m} bn={bn}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// TMA stores of C are in the sm_90 space beside every unswapped wgmma config whose
    /// staging buffers still fit, nowhere else, and in every unswapped default; the schema keeps
    /// them to `wgmma` and `wgmma_pingpong` with whole 64-column sub-tiles, `fits` counts their staging, and
    /// `plan::fit` takes them off where TMA cannot load A and B.
    #[test]
    fn tma_epilogues_are_searched_on_unswapped_wgmma_only() {
        for &(n, k) in MODEL_SHAPES {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            for m in [1, 16, 17, 64, 65, 128, 256, 1024, 8192] {
                for t in [Target::Sm80, Target::Sm90] {
                    let space = space::search_space(t, &key, m);
                    let tma: Vec<_> = space.iter().filter(|c| c.epilogue == Epilogue::Tma).collect();
                    for c in &tma {
                        assert_eq!(t, Target::Sm90, "{c}");
                        assert!(matches!(c.path, Path::Wgmma | Path::WgmmaPingpong), "{c}");
                        assert_eq!(c.block_n % 64, 0, "{c}");
                        let direct = GemmConfig {
                            epilogue: Epilogue::Direct,
                            ..**c
                        };
                        assert!(space.contains(&direct), "{c}");
                        assert_eq!(
                            c.smem_bytes(Layout::Nt),
                            direct.smem_bytes(Layout::Nt)
                                + c.consumers() as usize * config::TMA_STAGING_BYTES
                        );
                    }
                    // Every unswapped direct config has its tma twin wherever that fits.
                    let twins = space
                        .iter()
                        .filter(|c| {
                            matches!(c.path, Path::Wgmma | Path::WgmmaPingpong)
                                && c.epilogue == Epilogue::Direct
                        })
                        .map(|c| GemmConfig {
                            epilogue: Epilogue::Tma,
                            ..*c
                        })
                        .filter(|c| space::fits(t, &key, c))
                        .count();
                    assert_eq!(tma.len(), twins, "{t} n={n} m={m}");
                    if t == Target::Sm90 && m > 16 {
                        assert!(!tma.is_empty(), "n={n} m={m}");
                    }
                    // The default stores by TMA exactly where it is an unswapped
                    // wgmma tile of whole 64-column sub-tiles.
                    let d = analytic_default(t, &key, m);
                    let tma_tile = d.path == Path::Wgmma && d.block_n.is_multiple_of(64);
                    assert_eq!(d.epilogue == Epilogue::Tma, tma_tile, "{t} n={n} m={m}: {d}");
                    assert!(space.contains(&d), "{t} n={n} m={m}: {d}");
                }
            }
        }
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 4096,
            k: 4096,
        };
        let tma = GemmConfig {
            epilogue: Epilogue::Tma,
            ..GemmConfig::wgmma(128, 128, 8, 6)
        };
        assert!(space::fits(Target::Sm90, &key, &tma));
        assert!(!space::fits(Target::Sm80, &key, &tma));
        // 7 stages of 128x128 fit beside direct stores; the 32 KiB of staging of two
        // consumer warpgroups leave room for 6.
        let seven = GemmConfig { stages: 7, ..tma };
        assert!(!space::fits(Target::Sm90, &key, &seven));
        assert!(space::fits(
            Target::Sm90,
            &key,
            &GemmConfig {
                epilogue: Epilogue::Direct,
                ..seven
            }
        ));
        // 128x256 over two consumers keeps 4 stages.
        assert!(space::fits(
            Target::Sm90,
            &key,
            &GemmConfig {
                block_n: 256,
                stages: 4,
                ..tma
            }
        ));
        let nn = GemmKey {
            layout: Layout::Nn,
            ..key
        };
        assert!(!space::fits(Target::Sm90, &nn, &tma));
        let swap = GemmConfig {
            path: Path::WgmmaSwap,
            block_m: 16,
            block_n: 128,
            warps_m: 1,
            warps_n: 8,
            ..tma
        };
        let mma = GemmConfig {
            epilogue: Epilogue::Tma,
            ..plan::portable(&tma)
        };
        for bad in [
            swap,
            mma,
            GemmConfig {
                block_n: 32,
                warps_m: 4,
                block_m: 64,
                ..tma
            },
        ] {
            let e = schema::check_config(&bad.values()).unwrap_err();
            assert!(e.contains("epilogue"), "{bad}: {e}");
            assert!(!space::fits(Target::Sm90, &key, &bad), "{bad}");
        }
        assert!(schema::check_config(
            &GemmConfig {
                epilogue: Epilogue::Direct,
                ..swap
            }
            .values()
        )
        .is_ok());
        assert_eq!(GemmConfig::from_values(&tma.values()).unwrap(), tma);
        let mut unknown = tma.values();
        unknown[schema::EPILOGUE_AT] = tuned::Value::str("smem");
        assert!(GemmConfig::from_values(&unknown).is_err());
        // Where TMA cannot load A and B, the mma stand-in stores directly.
        let fitted = plan::fit(tma, kernels_core::cache::AlignClass::A8);
        assert_eq!((fitted.path, fitted.epilogue), (Path::Mma, Epilogue::Direct));
        assert!(space::fits(Target::Sm90, &key, &fitted));
        assert_eq!(plan::fit(tma, kernels_core::cache::AlignClass::A16), tma);
    }

    /// Widths other than powers of two: on the unswapped wgmma paths only, where they divide
    /// n and fill the last wave better than the next power of two (70B-tp8 qkv at m = 1024:
    /// 128 x 80), never split along k or clustered, refused by the schema on the mma and
    /// swapped paths; their mma stand-in takes the power of two below.
    #[test]
    fn widths_between_powers_of_two_fill_waves_on_unswapped_wgmma_only() {
        let qkv = key(1280, 8192);
        assert_eq!(space::extra_widths(Target::Sm90, &qkv, 1024, 128), vec![80, 160]);
        let space = space::search_space(Target::Sm90, &qkv, 1024);
        assert!(space
            .iter()
            .any(|c| c.path == Path::Wgmma && (c.block_m, c.block_n) == (128, 80)));
        assert!(space
            .iter()
            .any(|c| c.path == Path::WgmmaPingpong && (c.block_m, c.block_n) == (128, 80)));
        // With a ring of 8 too (cuBLAS's depth for its 80 x 128 tiles there).
        assert!(space.contains(&GemmConfig::wgmma(128, 80, 8, 8)));
        assert!(space.contains(&GemmConfig::pingpong(128, 80, 8)));
        // n = 4096 has no such divisor; n = 6144 at m = 1024 fills as well with 128 or 256.
        // (Three-consumer tiles take 192 columns wherever they are searched: their own test.)
        for (n, k) in [(4096, 4096), (8192, 1024)] {
            for m in [64, 256, 1024, 4096, 8192] {
                assert!(space::search_space(Target::Sm90, &key(n, k), m)
                    .iter()
                    .all(|c| c.block_n.is_power_of_two() || c.consumers() == 3));
            }
        }
        for &(n, k) in MODEL_SHAPES {
            for m in [1, 16, 64, 256, 1024, 4096, 8192] {
                for t in [Target::Sm80, Target::Sm90] {
                    for c in space::search_space(t, &key(n, k), m)
                        .iter()
                        .filter(|c| !c.block_n.is_power_of_two() && c.consumers() != 3)
                    {
                        assert!(matches!(c.path, Path::Wgmma | Path::WgmmaPingpong), "{c}");
                        assert_eq!((c.split_k, c.cluster), (1, 1), "{c}");
                        assert_eq!(n % c.block_n, 0, "{c}");
                        assert!(space::EXTRA_BLOCK_N.contains(&c.block_n), "{c}");
                        let p = plan::portable(c);
                        assert!(p.block_n.is_power_of_two() && p.block_n < c.block_n, "{p}");
                        assert!(space::fits(t, &key(n, k), &p), "{p}");
                    }
                    assert!(analytic_default(t, &key(n, k), m).block_n.is_power_of_two());
                }
            }
        }
        let c = GemmConfig::wgmma(128, 80, 8, 4);
        assert!(schema::check_config(&c.values()).is_ok());
        for path in [Path::Mma, Path::WgmmaSwap] {
            let err = schema::check_config(&GemmConfig { path, ..c }.values()).unwrap_err();
            assert!(err.contains("block_n=80"), "{err}");
        }
        assert!(!space::fits(Target::Sm90, &qkv, &GemmConfig { split_k: 2, ..c }));
        // TMA stores of C need whole 64-column sub-tiles: 192 yes, 80 no.
        assert!(schema::check_config(
            &GemmConfig {
                epilogue: Epilogue::Tma,
                ..c
            }
            .values()
        )
        .is_err());
        let wide = GemmConfig::wgmma(128, 192, 8, 4);
        assert!(schema::check_config(
            &GemmConfig {
                epilogue: Epilogue::Tma,
                ..wide
            }
            .values()
        )
        .is_ok());
    }

    /// 192-row tiles over three consumer warpgroups: searched on sm_90 from
    /// [`space::THREE_CONSUMER_ROWS`] rows only, where [`space::only_large_tiles`],
    /// 192 x 128 and 192 x 192 unsplit, with and without a cluster of 2, never in a
    /// default; the schema takes 192 rows and 12 warps only together on `wgmma`, and
    /// `fits` refuses more accumulators than 512 threads' registers hold.
    #[test]
    fn three_consumer_tiles_are_searched_for_large_prefill_on_sm90_only() {
        for &(n, k) in MODEL_SHAPES {
            let key = key(n, k);
            for m in [1, 64, 256, 1023, 1024, 4096, 8192] {
                for t in [Target::Sm80, Target::Sm90] {
                    let space = space::search_space(t, &key, m);
                    let three: Vec<_> = space.iter().filter(|c| c.consumers() == 3).collect();
                    for c in &three {
                        assert_eq!(
                            (c.path, c.block_m, c.warps_m, c.warps_n),
                            (Path::Wgmma, 192, 12, 1),
                            "{c}"
                        );
                        assert!(matches!(c.block_n, 128 | 192), "{c}");
                        assert_eq!(c.split_k, 1, "{c}");
                        assert!(
                            c.cluster == 1 || space.contains(&GemmConfig { cluster: 1, ..**c }),
                            "{c}"
                        );
                        assert!(c.accumulators() <= space::MAX_THREE_CONSUMER_ACCUMULATORS, "{c}");
                    }
                    let searched = t == Target::Sm90
                        && m >= space::THREE_CONSUMER_ROWS
                        && space::only_large_tiles(&key, m);
                    // 192 x 128 on rings of 3-5 (tma to 4), 192 x 192 of 3-4 (tma to 3),
                    // each with and without a cluster: 10 + 6.
                    assert_eq!(three.len(), if searched { 16 } else { 0 }, "{t} n={n} m={m}");
                    assert_ne!(analytic_default(t, &key, m).consumers(), 3);
                }
            }
        }
        // Where 128 x 128 tiles make fewer than four waves, none: 70B-tp8 qkv up to 4096
        // rows, where the served tiles took 0.58-0.93 of their time on the H100; 8B
        // lm_head from 1024.
        let three_at = |n, k, m| {
            space::search_space(Target::Sm90, &key(n, k), m)
                .iter()
                .filter(|c| c.consumers() == 3)
                .count()
        };
        assert_eq!(three_at(1280, 8192, 1024), 0);
        assert_eq!(three_at(1280, 8192, 4096), 0);
        assert_eq!(three_at(1280, 8192, 8192), 16);
        assert_eq!(three_at(128256, 4096, 1024), 16);
        let key = key(4096, 4096);
        let ok = GemmConfig::wgmma(192, 192, 12, 4);
        assert!(space::fits(Target::Sm90, &key, &ok));
        assert!(!space::fits(
            Target::Sm90,
            &key,
            &GemmConfig {
                block_n: 256,
                stages: 3,
                ..ok
            }
        ));
        for bad in [
            GemmConfig::wgmma(192, 128, 8, 4),
            GemmConfig::wgmma(128, 128, 12, 4),
            GemmConfig { warps_n: 2, ..ok },
            GemmConfig::pingpong(192, 128, 4),
            GemmConfig {
                path: Path::Mma,
                ..GemmConfig::wgmma(192, 128, 12, 4)
            },
            GemmConfig {
                path: Path::WgmmaSwap,
                ..GemmConfig::wgmma(192, 128, 12, 4)
            },
        ] {
            let e = schema::check_config(&bad.values()).unwrap_err();
            assert!(e.contains("block_m=192 and warps_m=12"), "{bad}: {e}");
        }
        // Where TMA cannot run, the mma stand-in takes 128 rows.
        let p = plan::portable(&ok);
        assert_eq!((p.path, p.block_m, p.block_n), (Path::Mma, 128, 128));
        assert!(space::fits(Target::Sm80, &key, &p), "{p}");
    }

    /// Narrow n at small prefill searches swapped tiles split along k (70B-tp8 qkv at
    /// m = 256 has 20 unswapped 128x64 tiles for 132 SMs); none are searched above 256.
    /// The pingpong schedule is searched on sm_90 for prefill beside the cooperative
    /// tiles: whole tiles of 64 or 128 rows per consumer warpgroup (at most
    /// [`space::MAX_WGMMA_ACCUMULATORS`] a thread), two consumers, no cluster, no split,
    /// never in a default; configs the kernel cannot take are refused by `fits`.
    #[test]
    fn pingpong_tiles_are_searched_for_prefill_on_sm90_only() {
        for &(n, k) in MODEL_SHAPES {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            for m in [1, 16, 17, 64, 65, 256, 1024, 8192] {
                for t in [Target::Sm80, Target::Sm90] {
                    let space = space::search_space(t, &key, m);
                    let pp: Vec<_> = space.iter().filter(|c| c.path == Path::WgmmaPingpong).collect();
                    for c in &pp {
                        assert_eq!(t, Target::Sm90, "{c}");
                        assert!(matches!(c.block_m, 64 | 128), "{c}");
                        assert_eq!((c.warps_m, c.warps_n, c.consumers()), (8, 1, 2), "{c}");
                        assert_eq!((c.cluster, c.split_k), (1, 1), "{c}");
                        assert_eq!(c.accumulators(), c.block_m * c.block_n / 128, "{c}");
                        assert!(c.accumulators() <= space::MAX_WGMMA_ACCUMULATORS, "{c}");
                    }
                    assert_eq!(!pp.is_empty(), t == Target::Sm90 && m > 16, "{t} n={n} m={m}");
                    assert_ne!(analytic_default(t, &key, m).path, Path::WgmmaPingpong);
                }
            }
        }
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 4096,
            k: 4096,
        };
        let ok = GemmConfig::pingpong(128, 128, 4);
        assert!(space::fits(Target::Sm90, &key, &ok));
        for bad in [
            GemmConfig::pingpong(128, 256, 3), // 256 accumulators a thread
            GemmConfig::pingpong(256, 64, 4),  // 256 rows a consumer
            GemmConfig { warps_m: 4, ..ok },   // one consumer
            GemmConfig { cluster: 2, ..ok },   // the schema's: no cluster
            GemmConfig { split_k: 2, ..ok },   // no split
        ] {
            assert!(!space::fits(Target::Sm90, &key, &bad), "{bad}");
        }
        assert!(!space::fits(Target::Sm80, &key, &ok));
    }

    #[test]
    fn narrow_n_at_small_prefill_searches_split_swapped_tiles() {
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 1280,
            k: 8192,
        };
        for m in [128, 256] {
            let split = space::search_space(Target::Sm90, &key, m)
                .into_iter()
                .filter(|c| c.path == Path::WgmmaSwap && c.split_k > 1)
                .count();
            assert!(split > 0, "m={m}");
        }
        assert!(space::search_space(Target::Sm90, &key, 512)
            .iter()
            .all(|c| c.path != Path::WgmmaSwap));
    }

    /// Writes the reachable variants as an `scripts/nvrtc_check.py` input list to the
    /// file named by GEMM_VARIANTS_JSON (for compiling them all without a GPU).
    #[test]
    fn reachable_variants_are_listed_for_nvrtc() {
        let all: BTreeSet<String> = reachable_variants(Target::Sm90)
            .into_iter()
            .chain(reachable_variants(Target::Sm80))
            .collect();
        assert!(all.len() > 10, "{}", all.len());
        let Ok(path) = std::env::var("GEMM_VARIANTS_JSON") else {
            return;
        };
        let items: Vec<String> = all
            .iter()
            .map(|v| {
                let mut parts = v.split(' ');
                let entry = parts.next().unwrap_or_default();
                // wgmma variants are sm_90a-only; the script's --arch list applies to the rest.
                let archs = if entry == "gemm_wgmma_kernel" {
                    ", \"archs\": [\"sm_90a\"]"
                } else {
                    ""
                };
                let defines: Vec<String> = parts
                    .filter_map(|d| d.strip_prefix("-D"))
                    .filter_map(|d| d.split_once('='))
                    .map(|(n, v)| format!("\"{n}\": {v}"))
                    .collect();
                format!(
                    "{{\"sources\": [\"kernels-prelude/cuda/prelude.cuh\", \"kernels-gemm/cuda/gemm_ptx.cuh\", \"kernels-gemm/cuda/gemm_wgmma.cuh\", \"kernels-gemm/cuda/gemm.cu\"], \"defines\": {{{}}}, \"kernels\": [\"{entry}\"]{archs}}}",
                    defines.join(", ")
                )
            })
            .collect();
        std::fs::write(&path, format!("[\n{}\n]\n", items.join(",\n"))).unwrap();
    }
}
