//! Fused mixture-of-experts with SiLU, as SGLang's and vLLM's `fused_moe`: routing,
//! expert alignment, two grouped GEMMs and a deterministic combine, bf16 or f16 with
//! fp32 accumulation, with launch configurations from tuned tables baked into the
//! binary.
//!
//! # Semantics
//!
//! For `hidden[T, H]`, `w13[E, 2I, H]` (gate rows `0..I`, up rows `I..2I`, the
//! `nn.Linear` layout), `w2[E, H, I]` and a routing `topk_ids[T, topk]` (i32) and
//! `topk_weights[T, topk]` (f32):
//!
//! `out[t] = sum over j = 0..topk of topk_weights[t, j] · w2[e] · (silu(gate_e · x_t) * (up_e · x_t))`
//! with `e = topk_ids[t, j]`.
//!
//! - **Routing** ([`ops::route`]): softmax over the logits then the topk largest,
//!   optionally renormalised (Mixtral, Qwen3-MoE); or DeepSeek-V3's grouped top-k
//!   (sigmoid scores plus a correction bias, `n_group` groups ranked by their two best
//!   scores, `topk_group` kept, weights renormalised then scaled by the routed scaling
//!   factor): [`plan::Scoring`]. Ties go to the lower expert index. Engines may pass
//!   their own ids and weights instead.
//! - **Alignment** (on the GPU): pairs `p = t * topk + j` are grouped by expert; each
//!   GEMM block takes `block_m` pairs of one expert, so an expert's group is padded to
//!   the tile (moe_align_block_size semantics) and experts with no pairs start no
//!   block and read none of their weights.
//! - **Ids outside `[0, E)`** from an engine's routing are dropped on the device: that
//!   choice adds nothing to its token and nothing is written outside the buffers.
//!   Where the ids are on the host, [`check_ids`] refuses them first.
//! - **Duplicate ids** within a token are two independent choices: each is computed
//!   and both weighted outputs are summed (as SGLang and vLLM do).
//! - **Combine**: each choice's weighted output is stored (`[T, topk, H]` in the
//!   workspace) and summed over `j = 0, 1, ...` in fp32 in that order: the same bits on
//!   every run, no float atomics.
//! - **Memory**: every intermediate lives in a caller workspace of
//!   [`workspace_bytes`] bytes ([`plan::WorkspaceLayout`]); after [`ops::prepare`], a
//!   call allocates, compiles and synchronises nothing, so it can be captured in a
//!   CUDA graph.
//!
//! # Layout
//!
//! [`schema`] (table contract), [`config`] (key and config), [`heuristic`] (analytic
//! default), [`space`] (search space and pruning), the device code in `cuda/moe.cu`;
//! [`plan`] (problems, workspace and launch plans of each step), [`ops`] (the ops,
//! generic over `kernels_core::Backend`, and the `Tunable`), `cuda` (safe ops on cudarc
//! views, feature `cuda`), [`mod@reference`] (the CPU reference), `check` (what the
//! tuner holds a call's buffers to).
//!
//! One config serves both grouped GEMMs. The tuner times it on the whole layer after
//! the alignment: gate-up GEMM, down GEMM and combine ([`plan::TUNED_STEPS`], one call
//! of `kernels_core::PlannedKernel`). The align step runs once outside the timed
//! region, since it takes the same time under every config.
//!
//! ```
//! use kernels_moe::{Moe, MoeKey};
//! use tuned::{resolve_serve, DType, Target};
//! let key = MoeKey { dtype: DType::Bf16, experts: 128, n: 768, k: 2048, topk: 8 };
//! let r = resolve_serve::<Moe>(Target::Sm90, &key, 64);
//! println!("{:?} from {}", r.config, r.source);
//! assert!(kernels_moe::workspace_bytes(&key, 64) > 0);
//! ```

mod check;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod heuristic;
pub mod ops;
pub mod plan;
pub mod reference;
pub mod schema;
pub mod space;

pub use config::{MoeConfig, MoeKey};
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

/// The fused-MoE kernel family.
pub struct Moe;

impl TunedKernel for Moe {
    type Key = MoeKey;
    type Config = MoeConfig;
    const SCHEMA: &'static KernelSchema = &schema::MOE;
    const SOURCE_FINGERPRINT: &'static str = baked::SOURCE_FINGERPRINT;

    fn key_values(key: &MoeKey) -> KeyValues {
        KeyValues::new()
            .push(key.dtype.name())
            .push(key.experts as i64)
            .push(key.n as i64)
            .push(key.k as i64)
            .push(key.topk as i64)
    }

    fn key_from_values(values: &[Value]) -> Result<MoeKey, String> {
        MoeKey::from_values(values)
    }

    fn config_from_values(values: &[Value]) -> Result<MoeConfig, String> {
        MoeConfig::from_values(values)
    }

    fn config_values(config: &MoeConfig) -> Vec<Value> {
        config.values()
    }

    fn analytic_default(target: Target, key: &MoeKey, batch: u64) -> MoeConfig {
        heuristic::analytic_default(target, key, batch)
    }

    fn baked_table(target: Target) -> Option<&'static BakedTable> {
        baked::moe_table(target)
    }

    fn accepts(target: Target, key: &MoeKey, _batch: u64, config: &MoeConfig) -> bool {
        space::fits(target, key, config)
    }
}

/// The [`tuned::DynKernel`] of fused MoE.
pub static MOE: tuned::Dyn<Moe> = tuned::Dyn::new();

/// Workspace bytes a fused-MoE call of `tokens` tokens of `key` needs (any config):
/// the routing's alignment, the intermediate and the weighted outputs of every
/// token-expert pair. Allocate it once for the most tokens a step can have; its
/// contents need no initialisation. `usize::MAX` when it cannot exist.
///
/// ```
/// use kernels_moe::{workspace_bytes, MoeKey};
/// use tuned::DType;
/// let qwen3 = MoeKey { dtype: DType::Bf16, experts: 128, n: 768, k: 2048, topk: 8 };
/// assert!(workspace_bytes(&qwen3, 1) < workspace_bytes(&qwen3, 2));
/// ```
pub fn workspace_bytes(key: &MoeKey, tokens: u64) -> usize {
    plan::WorkspaceLayout::of(key, tokens).map_or(usize::MAX, |l| l.bytes)
}

/// Checks routing ids held on the host: every id in `[0, experts)`. The error names
/// `topk_ids` with the first bad index and value.
pub fn check_ids(ids: &[i32], experts: u32) -> kernels_core::Result<()> {
    match ids.iter().position(|&e| e < 0 || e as u32 >= experts) {
        None => Ok(()),
        Some(i) => Err(kernels_core::Error::invalid(
            "topk_ids",
            format!("element {i} is {}, outside [0, {experts})", ids[i]),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuned::DType;

    #[test]
    fn default_fits_model_shapes() {
        for t in [Target::Sm80, Target::Sm90] {
            for (e, n, k, topk) in [(8, 14336, 4096, 2), (128, 768, 2048, 8), (256, 256, 7168, 8)] {
                for tokens in [1, 16, 64, 512, 8192] {
                    let key = MoeKey {
                        dtype: DType::Bf16,
                        experts: e,
                        n,
                        k,
                        topk,
                    };
                    let c = analytic_default(t, &key, tokens);
                    assert!(schema::check_config(&c.values()).is_ok(), "{c:?}");
                    assert!(space::fits(t, &key, &c), "{t} {key:?} tokens={tokens}: {c:?}");
                }
            }
        }
    }
}

#[cfg(test)]
mod space_tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::plan::{step_variant, Step};
    use tuned::DType;

    /// (experts, n, k, topk) of ../shared/models.json's MoE models, and small shapes.
    const MODEL_KEYS: &[(u32, u32, u32, u32)] = &[
        (8, 14336, 4096, 2),
        (8, 7168, 4096, 2),
        (128, 768, 2048, 8),
        (256, 2048, 7168, 8),
        (256, 256, 7168, 8),
        (128, 96, 128, 8),
        (8, 128, 256, 2),
    ];

    const TOKENS: &[u64] = &[1, 2, 4, 16, 64, 256, 1024, 4096, 8192];

    #[test]
    fn the_space_is_valid_bounded_and_holds_every_default() {
        for t in [Target::Sm80, Target::Sm90] {
            for &(experts, n, k, topk) in MODEL_KEYS {
                for dtype in [DType::Bf16, DType::F16] {
                    let key = MoeKey {
                        dtype,
                        experts,
                        n,
                        k,
                        topk,
                    };
                    for &tokens in TOKENS {
                        let space = space::search_space(t, &key, tokens);
                        assert!(
                            !space.is_empty() && space.len() <= 400,
                            "{t} {key:?} {tokens}: {}",
                            space.len()
                        );
                        for c in &space {
                            assert!(schema::check_config(&c.values()).is_ok(), "{c:?}");
                            assert_eq!(MoeConfig::from_values(&c.values()).unwrap(), *c);
                            assert!(Moe::accepts(t, &key, tokens, c));
                        }
                        let d = analytic_default(t, &key, tokens);
                        assert!(
                            space.contains(&d),
                            "{t} {key:?} tokens={tokens}: default {d} not in the space"
                        );
                    }
                }
            }
        }
        let key = MoeKey {
            dtype: DType::Bf16,
            experts: 8,
            n: 14336,
            k: 4096,
            topk: 2,
        };
        assert!(space::search_space(Target::Gfx942, &key, 16).is_empty());
        assert!(!plan::has_kernel(Target::Gfx942));
    }

    /// Every compiled variant a search over the model keys can time on sm_80 and sm_90,
    /// every step, both dtypes.
    fn reachable_variants() -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for t in [Target::Sm80, Target::Sm90] {
            for &(experts, n, k, topk) in MODEL_KEYS {
                for dtype in [DType::Bf16, DType::F16] {
                    let key = MoeKey {
                        dtype,
                        experts,
                        n,
                        k,
                        topk,
                    };
                    for c in space::search_space(t, &key, 1 << 20) {
                        for step in Step::ALL {
                            out.insert(step_variant(&key, &c, step).to_string());
                        }
                    }
                }
            }
        }
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for s in [
                plan::Scoring::Softmax { renormalize: true },
                plan::Scoring::Grouped {
                    n_group: 8,
                    topk_group: 4,
                    renormalize: true,
                    scale: 1.0,
                    bias: None,
                },
            ] {
                out.insert(plan::routing_variant(dtype, &s).to_string());
            }
        }
        out
    }

    /// Writes the reachable variants as an `scripts/nvrtc_check.py` input list to the
    /// file named by MOE_VARIANTS_JSON (for compiling them all without a GPU).
    #[test]
    fn reachable_variants_are_listed_for_nvrtc() {
        let all = reachable_variants();
        assert!(all.len() > 50, "{}", all.len());
        let Ok(path) = std::env::var("MOE_VARIANTS_JSON") else {
            return;
        };
        let items: Vec<String> = all
            .iter()
            .map(|v| {
                let mut parts = v.split(' ');
                let entry = parts.next().unwrap_or_default();
                let defines: Vec<String> = parts
                    .filter_map(|d| d.strip_prefix("-D"))
                    .filter_map(|d| d.split_once('='))
                    .map(|(n, v)| format!("\"{n}\": {v}"))
                    .collect();
                // The wgmma variants are sm_90a code; every other variant also builds for sm_80.
                let archs = if v.contains("-DWGMMA=") {
                    ", \"archs\": [\"sm_90a\"]"
                } else {
                    ", \"archs\": [\"sm_90a\", \"sm_80\"]"
                };
                format!(
                    "{{\"sources\": [\"kernels-prelude/cuda/prelude.cuh\", \"kernels-gemm/cuda/gemm_ptx.cuh\", \"kernels-gemm/cuda/gemm_wgmma.cuh\", \"kernels-moe/cuda/moe.cu\"], \"defines\": {{{}}}, \"kernels\": [\"{entry}\"]{archs}}}",
                    defines.join(", ")
                )
            })
            .collect();
        std::fs::write(&path, format!("[\n{}\n]\n", items.join(",\n"))).unwrap();
    }
}
