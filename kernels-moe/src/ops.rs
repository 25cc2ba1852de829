//! The fused-MoE ops on every backend: routing ([`route`]) and the fused MoE
//! ([`fused_moe`], or [`prepare`] once and [`MoePrepared::launch`] per call, which
//! compiles, resolves and allocates nothing: CUDA-graph capturable). Also the
//! [`Tunable`] implementation `kernels tune moe` searches with. The safe ops on cudarc
//! buffers are in `crate::cuda` (feature `cuda`).

use std::sync::Arc;

use kernels_core::{
    launch::{encode, pseudo_random},
    Backend, Error, LoadedKernel, PlannedKernel, Result, Runtime, Tunable, TunableDyn,
};
use tuned::{DType, Resolved};

use crate::plan::{
    routing_args, routing_variant, step_args, step_variant, MoeProblem, RoutingProblem, Step, SOURCE,
};
use crate::{reference, Moe, MoeConfig, MoeKey};

/// A resolved config with the loaded kernel of each step: what a fused-MoE launch
/// needs, made once per (key, tokens) at start-up.
pub struct MoePrepared<B: Backend> {
    /// The config and where it came from.
    pub resolved: Resolved<MoeConfig>,
    key: MoeKey,
    align: Arc<B::Kernel>,
    /// The tuned call's kernels ([`crate::plan::TUNED_STEPS`]).
    call: Arc<[Arc<B::Kernel>]>,
}

/// Resolves the config for `tokens` of `key` under the runtime's policy and loads the
/// kernels of every step (compiling on a first call; refused while `stream` captures).
pub fn prepare<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    key: &MoeKey,
    tokens: u64,
) -> Result<MoePrepared<B>> {
    let p = rt.resolve::<Moe>(stream, key, tokens)?;
    Ok(MoePrepared {
        align: rt.kernel(
            stream,
            &SOURCE,
            &step_variant(key, &p.resolved.config, Step::Align),
        )?,
        call: p.kernels,
        resolved: p.resolved,
        key: *key,
    })
}

/// [`prepare`] with an explicit `config` instead of the policy's (tests, benchmarks,
/// A/B runs); its source reads `Default`. A config the space does not accept on this
/// device is an error naming `config`.
pub fn prepare_config<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    key: &MoeKey,
    config: MoeConfig,
) -> Result<MoePrepared<B>> {
    if !crate::space::fits(rt.info().tuning_target(), key, &config) {
        return Err(Error::invalid(
            "config",
            format!("{config} does not fit {key:?} on {}", rt.info().name),
        ));
    }
    Ok(MoePrepared {
        align: rt.kernel(stream, &SOURCE, &step_variant(key, &config, Step::Align))?,
        call: rt.kernels::<Moe>(stream, key, &config)?,
        resolved: Resolved {
            config,
            source: tuned::Source::Default,
        },
        key: *key,
    })
}

impl<B: Backend> MoePrepared<B> {
    /// Enqueues align, then the tuned call (gate-up GEMM, down GEMM, combine) for
    /// `problem` on `stream`. Every step's arguments are checked before the first
    /// launch, so an error (naming the argument) launches nothing. The problem's key must be the prepared one
    /// (its tokens may differ).
    pub fn launch(&self, stream: &B::Stream, problem: &MoeProblem<'_>) -> Result<()> {
        if problem.key() != self.key {
            return Err(Error::invalid(
                "problem",
                format!("key {:?} differs from the prepared {:?}", problem.key(), self.key),
            ));
        }
        let c = &self.resolved.config;
        let info = self.align.info();
        let (dims, args) = step_args(info, c, problem, Step::Align)?;
        let call = <Moe as PlannedKernel>::launches(info, c, problem)?;
        // SAFETY: each plan matches its step's entry point and stays within the
        // problem's buffers (validated when the problem was built); the call's kernels
        // are its variants in order.
        unsafe {
            B::launch(&self.align, stream, dims, &args)?;
            kernels_core::launch_planned::<B>(&self.call, stream, &call)
        }
    }
}

/// Fused MoE on `stream` with the config the runtime's policy resolves: resolves and
/// loads (memoized after the first call), then [`MoePrepared::launch`].
pub fn fused_moe<B: Backend>(
    rt: &Runtime<B>,
    stream: &B::Stream,
    problem: &MoeProblem<'_>,
) -> Result<Resolved<MoeConfig>> {
    let p = prepare(rt, stream, &problem.key(), problem.tokens())?;
    p.launch(stream, problem)?;
    Ok(p.resolved)
}

/// Routing on `stream`: `topk_ids` and `topk_weights` from router logits.
pub fn route<B: Backend>(rt: &Runtime<B>, stream: &B::Stream, problem: &RoutingProblem<'_>) -> Result<()> {
    let kernel = rt.kernel(
        stream,
        &SOURCE,
        &routing_variant(problem.logits_dtype, &problem.scoring),
    )?;
    let (dims, args) = routing_args(kernel.info(), problem)?;
    // SAFETY: the plan matches the routing entry point and stays within the problem's
    // buffers.
    unsafe { B::launch(&kernel, stream, dims, &args) }
}

/// The routing the tuner times: each token's topk distinct experts drawn uniformly
/// ([`uniform_routing`], seeded by the token count), equal weights. Uniform draws touch as
/// many experts as a real router's batch does (Qwen3-30B-A3B at 16 tokens: about 84 of
/// 128); consecutive experts from evenly spread starts touched 108 there, and the tuner
/// then timed 29% more weight traffic than the bench's routings carry.
pub(crate) fn tuning_routing(key: &MoeKey, tokens: u64) -> Vec<i32> {
    uniform_routing(tokens, key.experts, key.topk, tokens)
}

/// `tokens` rows of `topk` distinct expert ids in `[0, experts)` (at most `experts` a row),
/// each drawn uniformly from a fixed xorshift stream seeded by `seed`: the same ids for the
/// same arguments on every machine. For benches and tuning.
pub fn uniform_routing(tokens: u64, experts: u32, topk: u32, seed: u64) -> Vec<i32> {
    let (e, topk) = (u64::from(experts.max(1)), topk as usize);
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out = Vec::with_capacity(tokens as usize * topk);
    for _ in 0..tokens {
        let row = out.len();
        // Distinct: at most `experts` a row, so the draws end.
        while out.len() - row < topk.min(e as usize) {
            let x = (next() % e) as i32;
            if !out[row..].contains(&x) {
                out.push(x);
            }
        }
    }
    out
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// Safety: the inputs are hidden, w13, w2, ids, weights, out and the workspace, in the
// order `plan::tuning_problem` reads their addresses, with the lengths it assumes; the
// workspace holds the alignment of the ids, as the align step would write it.
unsafe impl Tunable for Moe {
    fn tuning_inputs(key: &MoeKey, tokens: u64) -> Vec<Vec<u8>> {
        let (t, e, n, k, topk) = (
            tokens as usize,
            key.experts as usize,
            key.n as usize,
            key.k as usize,
            key.topk as usize,
        );
        let ids = tuning_routing(key, tokens);
        let (offsets, sorted) = reference::align(&ids, e);
        let layout = crate::plan::WorkspaceLayout::of(key, tokens);
        let mut ws = vec![0u8; layout.map_or(16, |l| l.bytes.max(16))];
        if let Some(l) = layout {
            let o = i32_bytes(&offsets);
            ws[l.offsets..l.offsets + o.len()].copy_from_slice(&o);
            let s = i32_bytes(&sorted);
            ws[l.sorted..l.sorted + s.len()].copy_from_slice(&s);
        }
        let dt = key.dtype;
        vec![
            encode(dt, &pseudo_random(t * k, 41, 1.0, 0.0)),
            encode(
                dt,
                &pseudo_random(e * 2 * n * k, 42, 1.0 / (k as f32).sqrt(), 0.0),
            ),
            encode(dt, &pseudo_random(e * k * n, 43, 1.0 / (n as f32).sqrt(), 0.0)),
            i32_bytes(&ids),
            encode(DType::F32, &vec![1.0 / topk as f32; t * topk]),
            vec![0u8; t * k * dt.size()], // zeros are all-zero bits in every dtype
            ws,
        ]
    }

    fn tuning_problem<'a>(key: &MoeKey, tokens: u64, at: &'a [u64]) -> MoeProblem<'a> {
        crate::plan::tuning_problem(*key, tokens, at)
    }

    /// Tokens whose CPU reference stays within 2^30 multiply-adds (about a second): each
    /// token runs topk experts' gate, up and down products of n x k.
    fn check_batch(key: &MoeKey, tokens: u64) -> u64 {
        let per_token = 3 * u64::from(key.topk) * u64::from(key.n) * u64::from(key.k);
        tokens.min(((1u64 << 30) / per_token.max(1)).max(1))
    }
}

/// The `kernels tune` view of [`Moe`], on every backend. It times the whole layer
/// after the alignment: both grouped GEMMs and the combine ([`crate::plan::TUNED_STEPS`]).
pub static MOE_TUNABLE: TunableDyn<Moe> = TunableDyn::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tuning_routing_is_uniform_distinct_and_fixed() {
        let qwen3 = MoeKey {
            dtype: DType::Bf16,
            experts: 128,
            n: 768,
            k: 2048,
            topk: 8,
        };
        for tokens in [1u64, 16, 300] {
            let ids = tuning_routing(&qwen3, tokens);
            assert_eq!(ids.len(), tokens as usize * 8);
            assert_eq!(ids, tuning_routing(&qwen3, tokens), "the same routing every time");
            for row in ids.chunks(8) {
                let mut r = row.to_vec();
                r.sort();
                r.dedup();
                assert_eq!(r.len(), 8, "distinct experts in a token: {row:?}");
                assert!(row.iter().all(|&x| (0..128).contains(&x)));
            }
        }
        // 16 tokens touch about as many experts as uniform draws do (expected
        // 128 * (1 - (120/128)^16) = 83), not the 108 of spread consecutive runs.
        let mut touched = tuning_routing(&qwen3, 16);
        touched.sort();
        touched.dedup();
        assert!((70..=96).contains(&touched.len()), "{} experts", touched.len());
    }

    /// The served check runs Mixtral (2 x 3 products of 14336 x 4096 a token) on 3 tokens,
    /// Qwen3-30B-A3B on 28, and never more tokens than were served.
    #[test]
    fn the_served_check_bounds_its_reference_work() {
        let mixtral = MoeKey {
            dtype: DType::Bf16,
            experts: 8,
            n: 14336,
            k: 4096,
            topk: 2,
        };
        let qwen3 = MoeKey {
            experts: 128,
            n: 768,
            k: 2048,
            topk: 8,
            ..mixtral
        };
        assert_eq!(Moe::check_batch(&mixtral, 8192), 3);
        assert_eq!(Moe::check_batch(&qwen3, 8192), 28);
        assert_eq!(Moe::check_batch(&qwen3, 16), 16);
        assert_eq!(Moe::check_batch(&mixtral, 1), 1);
    }
}
