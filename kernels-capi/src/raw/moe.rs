//! Fused MoE on raw addresses: the routing kernels (softmax top-k, DeepSeek's grouped
//! top-k), the fused experts on ids and weights from either or from the engine, the
//! workspace size and the warm-up.

use std::ffi::c_void;

use kernels::core::{Error, Result};
use kernels::moe::plan::{
    routing_variant, step_variant, Buffer, MoeProblem, RoutingProblem, Scoring, Step, SOURCE,
};
use kernels::moe::{self, Moe, MoeKey};
use kernels::DType;

use super::{on_stream, ordinal, positive, warmed_as, DTypeCode, Warmed};

/// Routing codes (`kernels_routing` in the C header): which routing kernel warm-up
/// prepares beside a fused-MoE shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum RoutingCode {
    /// The engine computes `topk_ids` and `topk_weights` itself.
    None = 0,
    /// Softmax over the logits, top-k (Mixtral, Qwen3-MoE).
    Softmax = 1,
    /// DeepSeek-V3's grouped top-k over sigmoid scores.
    Grouped = 2,
}

impl RoutingCode {
    /// Every code, in value order.
    pub const ALL: [RoutingCode; 3] = [RoutingCode::None, RoutingCode::Softmax, RoutingCode::Grouped];

    /// The constant's name in the C header.
    pub const fn c_name(self) -> &'static str {
        match self {
            RoutingCode::None => "KERNELS_ROUTING_NONE",
            RoutingCode::Softmax => "KERNELS_ROUTING_SOFTMAX",
            RoutingCode::Grouped => "KERNELS_ROUTING_GROUPED",
        }
    }

    /// The code `code`, or an error naming `name`.
    pub fn parse(name: &str, code: i32) -> Result<RoutingCode> {
        RoutingCode::ALL
            .into_iter()
            .find(|r| *r as i32 == code)
            .ok_or_else(|| {
                Error::invalid(
                    name,
                    format!("unknown routing code {code} (0 none, 1 softmax, 2 grouped)"),
                )
            })
    }

    /// A scoring of this kind, for its kernel's variant (which depends on the kind
    /// alone); `None` for engine routing.
    fn scoring(self) -> Option<Scoring> {
        match self {
            RoutingCode::None => None,
            RoutingCode::Softmax => Some(Scoring::Softmax { renormalize: false }),
            RoutingCode::Grouped => Some(Scoring::Grouped {
                n_group: 1,
                topk_group: 1,
                renormalize: false,
                scale: 1.0,
                bias: None,
            }),
        }
    }
}

/// `[tokens, experts, n, k, topk]` of a fused-MoE call as a foreign caller holds them:
/// `n` the intermediate size (w13 is `[experts, 2n, k]`), `k` the hidden size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub tokens: i64,
    pub experts: i64,
    pub n: i64,
    pub k: i64,
    pub topk: i64,
}

impl MoeShape {
    fn sizes(self) -> Result<(usize, usize, usize, usize, usize)> {
        Ok((
            positive("tokens", self.tokens)?,
            positive("experts", self.experts)?,
            positive("n", self.n)?,
            positive("k", self.k)?,
            positive("topk", self.topk)?,
        ))
    }
}

/// A buffer of `elems` elements at `ptr` (the caller's promise); a count past the
/// address space saturates, and the problem's own check then names the buffer.
fn buffer(ptr: u64, elems: u128) -> Buffer {
    Buffer::new(ptr, usize::try_from(elems).unwrap_or(usize::MAX))
}

/// The element type code of a fused-MoE call, bf16 or f16, named `name`.
fn moe_dtype(name: &str, code: i32) -> Result<DType> {
    let d = DTypeCode::parse(name, code)?.dtype();
    if !matches!(d, DType::Bf16 | DType::F16) {
        return Err(Error::invalid(name, format!("{d}: fused MoE takes bf16 or f16")));
    }
    Ok(d)
}

/// The static key of a shape, each bad field named as [`MoeProblem::raw`] names it.
fn key_of(shape: MoeShape, dtype: i32) -> Result<(MoeKey, u64)> {
    let dtype = moe_dtype("dtype", dtype)?;
    let (tokens, experts, n, k, topk) = shape.sizes()?;
    let max = i32::MAX as usize;
    let experts_max = moe::plan::MAX_EXPERTS as usize;
    for (name, v, most) in [
        ("tokens", tokens, max),
        ("experts", experts, experts_max),
        ("n", n, max / 2),
        ("k", k, max),
        ("topk", topk, experts),
    ] {
        if v > most {
            return Err(Error::invalid(name, format!("{v} is outside 1..={most}")));
        }
    }
    for (name, v) in [("n", n), ("k", k)] {
        if v % 8 != 0 {
            return Err(Error::invalid(
                name,
                format!("{v} is not a multiple of 8 (rows move in 16-byte pieces)"),
            ));
        }
    }
    Ok((
        MoeKey {
            dtype,
            experts: experts as u32,
            n: n as u32,
            k: k as u32,
            topk: topk as u32,
        },
        tokens as u64,
    ))
}

/// The workspace bytes a fused-MoE call of `shape` needs (any config, any device).
pub fn moe_workspace_bytes(shape: MoeShape, dtype: i32) -> Result<usize> {
    let (key, tokens) = key_of(shape, dtype)?;
    match moe::workspace_bytes(&key, tokens) {
        usize::MAX => Err(Error::invalid(
            "tokens",
            "the workspace would exceed the address space",
        )),
        bytes => Ok(bytes),
    }
}

/// Fused MoE on `stream` of device `device`: `out[tokens, k]` from `hidden[tokens, k]`,
/// `w13[experts, 2n, k]`, `w2[experts, k, n]` (all `dtype`, contiguous), `topk_ids`
/// (i32) and `topk_weights` (f32) `[tokens, topk]`, and a `workspace` of
/// [`moe_workspace_bytes`].
///
/// # Safety
/// Every address must be a device allocation of device `device` holding its operand,
/// alive until the kernels have run on `stream`; `stream` as for [`super::rmsnorm()`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn fused_moe(
    out: u64,
    hidden: u64,
    w13: u64,
    w2: u64,
    topk_ids: u64,
    topk_weights: u64,
    shape: MoeShape,
    dtype: i32,
    workspace: (u64, usize),
    device: i32,
    stream: *mut c_void,
) -> Result<()> {
    let dtype = moe_dtype("dtype", dtype)?;
    let dims = shape.sizes()?;
    let (t, e, n, k, topk) = (
        dims.0 as u128,
        dims.1 as u128,
        dims.2 as u128,
        dims.3 as u128,
        dims.4 as u128,
    );
    let device = ordinal(device)?;
    // SAFETY: the caller's promise on every address.
    let p = unsafe {
        MoeProblem::raw(
            dtype,
            dims,
            buffer(hidden, t * k),
            buffer(w13, e * 2 * n * k),
            buffer(w2, e * k * n),
            buffer(topk_ids, t * topk),
            buffer(topk_weights, t * topk),
            buffer(out, t * k),
            workspace,
        )
    }?;
    // SAFETY: the caller's promise on stream.
    unsafe { on_stream(device, stream, |rt, s| moe::ops::fused_moe(rt, s, &p).map(|_| ())) }
}

/// `[tokens, experts, topk]` of a routing call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutingShape {
    pub tokens: i64,
    pub experts: i64,
    pub topk: i64,
}

/// Routing on `stream` of device `device`: `topk_ids` (i32) and `topk_weights` (f32)
/// `[tokens, topk]` from `logits[tokens, experts]` of `logits_dtype`, scored by
/// `scoring` (a grouped scoring's `bias` is `(address, experts)` f32).
///
/// # Safety
/// As for [`fused_moe`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn route(
    topk_ids: u64,
    topk_weights: u64,
    logits: u64,
    shape: RoutingShape,
    logits_dtype: i32,
    scoring: Scoring,
    device: i32,
    stream: *mut c_void,
) -> Result<()> {
    let logits_dtype = DTypeCode::parse("logits_dtype", logits_dtype)?.dtype();
    let tokens = positive("tokens", shape.tokens)?;
    let experts = positive("experts", shape.experts)?;
    let topk = positive("topk", shape.topk)?;
    let (t, e, kk) = (tokens as u128, experts as u128, topk as u128);
    let device = ordinal(device)?;
    // SAFETY: the caller's promise on every address.
    let p = unsafe {
        RoutingProblem::raw(
            logits_dtype,
            tokens,
            experts,
            topk,
            buffer(logits, t * e),
            buffer(topk_ids, t * kk),
            buffer(topk_weights, t * kk),
            scoring,
        )
    }?;
    // SAFETY: the caller's promise on stream.
    unsafe { on_stream(device, stream, |rt, s| moe::ops::route(rt, s, &p)) }
}

/// The softmax top-k scoring, for [`route`].
pub fn softmax_scoring(renormalize: bool) -> Scoring {
    Scoring::Softmax { renormalize }
}

/// The grouped scoring of DeepSeek-V3 with its correction `bias` (0: none; else
/// `experts` f32), for [`route`]; `n_group` and `topk_group` are checked there.
pub fn grouped(
    n_group: i32,
    topk_group: i32,
    renormalize: bool,
    scale: f32,
    bias: u64,
    experts: i64,
) -> Result<Scoring> {
    let count = |name: &str, v: i32| {
        u32::try_from(v).map_err(|_| Error::invalid(name, format!("must not be negative, got {v}")))
    };
    Ok(Scoring::Grouped {
        n_group: count("n_group", n_group)?,
        topk_group: count("topk_group", topk_group)?,
        renormalize,
        scale,
        bias: (bias != 0).then(|| buffer(bias, experts.max(0) as u128)),
    })
}

/// One fused-MoE shape to warm, with the routing kernel to prepare beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeWarmShape {
    pub dtype: i32,
    pub routing: i32,
    pub logits_dtype: i32,
    pub topk: i32,
    pub tokens: i64,
    pub experts: i64,
    pub n: i64,
    pub k: i64,
}

/// Resolves and compiles every fused-MoE shape on device `device` (each step's kernel,
/// and the routing kernel each names; variants in parallel), so that a later call
/// with these tokens, and its CUDA-graph capture, compiles nothing. A bad shape is an
/// error naming `shapes[i].<field>`.
///
/// # Safety
/// `stream` as for [`super::rmsnorm()`].
pub unsafe fn warm_moe(shapes: &[MoeWarmShape], device: i32, stream: *mut c_void) -> Result<Vec<Warmed>> {
    super::check_count(shapes.len())?;
    let mut keys = Vec::with_capacity(shapes.len());
    let mut routings = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let at = |e| super::at_shape(i, e);
        let shape = MoeShape {
            tokens: s.tokens,
            experts: s.experts,
            n: s.n,
            k: s.k,
            topk: i64::from(s.topk),
        };
        keys.push(key_of(shape, s.dtype).map_err(at)?);
        if let Some(scoring) = RoutingCode::parse("routing", s.routing).map_err(at)?.scoring() {
            let logits = DTypeCode::parse("logits_dtype", s.logits_dtype)
                .map_err(at)?
                .dtype();
            routings.push(routing_variant(logits, &scoring));
        }
    }
    let device = ordinal(device)?;
    // SAFETY: the caller's promise on stream.
    unsafe {
        on_stream(device, stream, |rt, s| {
            // The tuned step (gate-up) first: that resolves each config.
            let warmed = rt.warm::<Moe>(s, &keys);
            let mut jobs = Vec::new();
            for ((key, _), p) in keys.iter().zip(&warmed) {
                if let Ok(p) = p {
                    for step in [Step::Align, Step::Down, Step::Combine] {
                        jobs.push((SOURCE, step_variant(key, &p.resolved.config, step)));
                    }
                }
            }
            jobs.extend(routings.iter().map(|v| (SOURCE, v.clone())));
            if let Some(Err(e)) = rt.precompile(&jobs).into_iter().find(Result::is_err) {
                return Err(e);
            }
            keys.iter()
                .zip(warmed)
                .map(|((key, tokens), p)| {
                    p?;
                    // Memo hits now: checks each step is loaded.
                    let prepared = moe::ops::prepare(rt, s, key, *tokens)?;
                    Ok(warmed_as("moe", &prepared.resolved))
                })
                .collect()
        })
    }
}
