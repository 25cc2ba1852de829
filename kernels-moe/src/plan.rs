//! Backend-neutral launches of fused MoE: the problems as device addresses
//! ([`MoeProblem`], [`RoutingProblem`], validated when built), the caller's workspace
//! ([`WorkspaceLayout`]) and the launch plans of each step (align, gate-up GEMM, down
//! GEMM, combine; the two routing kernels).

use std::marker::PhantomData;

use kernels_core::launch::{TensorMap2d, TmaElement, TmaSwizzle};
use kernels_core::{
    cache::AlignClass, check_disjoint, dtype_define, BufferRole, DeviceInfo, Error, Expected, KernelArgs,
    KernelSource, LaunchDims, LaunchPlan, Launches, PlannedKernel, Result, TuneBuffer, Variant,
};
use tuned::{DType, Target, Vendor};

use crate::config::{MoeConfig, MoeKey, Path};
use crate::{space, Moe};

/// The device source: `cuda/moe.cu`, compiled after the shared prelude and
/// kernels-gemm's PTX and wgmma wrappers ([`kernels_gemm::plan::PTX`],
/// [`kernels_gemm::plan::WGMMA`]; the Hopper ones only where a variant defines WGMMA).
pub static SOURCE: KernelSource =
    KernelSource::new("moe", include_str!("../cuda/moe.cu"), crate::SOURCE_FINGERPRINT)
        .with_preamble(&[
            kernels_core::PRELUDE,
            kernels_gemm::plan::PTX,
            kernels_gemm::plan::WGMMA,
        ])
        .with_files(crate::SOURCE_FILES)
        .programmatic_launch();

/// The most experts a problem may have (the align kernel counts them in shared memory).
pub const MAX_EXPERTS: u32 = 4096;
/// Threads of the align kernel (one block).
const ALIGN_THREADS: u32 = 1024;
/// Tokens per block of the routing kernels (a warp each).
const ROUTE_WARPS: u32 = 4;
/// Threads per block of the combine kernel.
const COMBINE_THREADS: u32 = 256;
/// Workspace regions start on this many bytes.
const REGION_ALIGN: usize = 256;
/// i32 counters after the prefix in `offsets`: (next item, finished blocks) of each
/// wgmma GEMM step, zeroed by `moe_align` (`COUNTERS` in `cuda/moe.cu`).
const WORK_COUNTERS: u128 = 4;

/// One device buffer: address and length in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub ptr: u64,
    pub len: usize,
}

impl Buffer {
    pub const fn new(ptr: u64, len: usize) -> Buffer {
        Buffer { ptr, len }
    }
}

/// Where each intermediate lives in the caller's workspace (byte offsets), for `pairs
/// = tokens * topk` token-expert pairs:
///
/// - `offsets`: `experts + 1` i32, the exclusive prefix of pairs per expert, then 4 i32
///   work counters of the wgmma GEMM steps (zeroed by the align step);
/// - `sorted`: `pairs` i32, pair indices grouped by expert;
/// - `intermediate`: `[pairs, n]` of the dtype, `silu(gate) * up` per pair;
/// - `down`: `[pairs, k]` of the dtype, each pair's weighted expert output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceLayout {
    pub offsets: usize,
    pub sorted: usize,
    pub intermediate: usize,
    pub down: usize,
    /// Total bytes.
    pub bytes: usize,
}

impl WorkspaceLayout {
    /// The layout for `tokens` of `key`; `None` when it would not fit in memory.
    pub fn of(key: &MoeKey, tokens: u64) -> Option<WorkspaceLayout> {
        let e = key.dtype.size() as u128;
        // u128 holds every product of 32-bit sizes and a 64-bit token count but one:
        // pairs (96 bits) times a row's bytes (34 bits), checked like the rest.
        let pairs = tokens as u128 * key.topk as u128;
        let region = |rows: u128, row_bytes: u128| {
            rows.checked_mul(row_bytes)?
                .checked_next_multiple_of(REGION_ALIGN as u128)
        };
        let offsets = 0u128;
        let sorted = offsets + region(key.experts as u128 + 1 + WORK_COUNTERS, 4)?;
        let intermediate = sorted.checked_add(region(pairs, 4)?)?;
        let down = intermediate.checked_add(region(pairs, key.n as u128 * e)?)?;
        let bytes = down.checked_add(region(pairs, key.k as u128 * e)?)?;
        let c = |v: u128| usize::try_from(v).ok();
        Some(WorkspaceLayout {
            offsets: c(offsets)?,
            sorted: c(sorted)?,
            intermediate: c(intermediate)?,
            down: c(down)?,
            bytes: c(bytes)?,
        })
    }
}

/// Made-up device buffers of a problem of `dims` (tokens, experts, n, k, topk) in `dtype`:
/// hidden, w13, w2, topk ids, topk weights and out, each at its own multiple of `at`, then
/// the workspace, for tests that plan launches without a device.
#[cfg(test)]
pub(crate) fn made_up_buffers(
    dtype: DType,
    dims: (usize, usize, usize, usize, usize),
    at: u64,
) -> ([Buffer; 6], (u64, usize)) {
    let (t, e, n, k, topk) = dims;
    let key = MoeKey {
        dtype,
        experts: e as u32,
        n: n as u32,
        k: k as u32,
        topk: topk as u32,
    };
    (
        [
            Buffer::new(at, t * k),
            Buffer::new(2 * at, e * 2 * n * k),
            Buffer::new(3 * at, e * k * n),
            Buffer::new(4 * at, t * topk),
            Buffer::new(5 * at, t * topk),
            Buffer::new(6 * at, t * k),
        ],
        (7 * at, crate::workspace_bytes(&key, t as u64)),
    )
}

/// One fused-MoE call as device addresses: `out[T, k] = sum over the topk choices of
/// weight * w2_e · (silu(gate_e · x) * (up_e · x))`. Build it with
/// [`MoeProblem::raw`].
#[derive(Clone, Copy, Debug)]
pub struct MoeProblem<'a> {
    pub(crate) key: MoeKey,
    pub(crate) tokens: u64,
    pub(crate) hidden: u64,
    pub(crate) w13: u64,
    pub(crate) w2: u64,
    pub(crate) ids: u64,
    pub(crate) weights: u64,
    pub(crate) out: u64,
    pub(crate) ws: u64,
    pub(crate) layout: WorkspaceLayout,
    pub(crate) _buffers: PhantomData<&'a mut [u8]>,
}

fn check_dim(name: &str, v: usize, max: usize) -> Result<u64> {
    if v == 0 || v > max {
        return Err(Error::invalid(name, format!("{v} is outside 1..={max}")));
    }
    Ok(v as u64)
}

fn need(name: &str, b: &Buffer, elems: u128, what: &str) -> Result<()> {
    if (b.len as u128) < elems {
        return Err(Error::invalid(
            name,
            format!("holds {} elements; {what} needs {elems}", b.len),
        ));
    }
    Ok(())
}

fn aligned(name: &str, ptr: u64, bytes: u64, why: &str) -> Result<()> {
    if ptr == 0 {
        return Err(Error::invalid(name, "is a null device pointer"));
    }
    if !ptr.is_multiple_of(bytes) {
        return Err(Error::invalid(
            name,
            format!("address {ptr:#x} is not {bytes}-byte aligned, which {why} needs"),
        ));
    }
    Ok(())
}

impl<'a> MoeProblem<'a> {
    /// Fused MoE over device addresses, in SGLang's and vLLM's layout:
    ///
    /// - `hidden` `[tokens, k]`, `w13` `[experts, 2n, k]` (gate rows then up rows,
    ///   `nn.Linear` layout), `w2` `[experts, k, n]`, `out` `[tokens, k]`, all of
    ///   `dtype` (bf16 or f16), 16-byte aligned, `n` and `k` multiples of 8;
    /// - `topk_ids` `[tokens, topk]` i32 and `topk_weights` `[tokens, topk]` f32, from
    ///   [`RoutingProblem`] or the engine's own routing;
    /// - `workspace`: `(address, bytes)`, at least [`crate::workspace_bytes`], 256-byte
    ///   aligned, used by one stream at a time.
    ///
    /// Errors name the argument: `dtype`, `tokens`, `experts`, `n`, `k`, `topk`,
    /// `hidden`, `w13`, `w2`, `topk_ids`, `topk_weights`, `out`, `workspace`. Ids are
    /// read on the device: one outside `[0, experts)` is dropped there (see the crate
    /// docs); [`crate::check_ids`] checks ids held on the host.
    ///
    /// # Safety
    /// Every address must be a device allocation of the runtime's context holding the
    /// lengths given, valid for `'a`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn raw(
        dtype: DType,
        (tokens, experts, n, k, topk): (usize, usize, usize, usize, usize),
        hidden: Buffer,
        w13: Buffer,
        w2: Buffer,
        topk_ids: Buffer,
        topk_weights: Buffer,
        out: Buffer,
        workspace: (u64, usize),
    ) -> Result<MoeProblem<'a>> {
        if !matches!(dtype, DType::Bf16 | DType::F16) {
            return Err(Error::invalid(
                "dtype",
                format!("{dtype}: fused MoE takes bf16 or f16"),
            ));
        }
        let max = i32::MAX as usize;
        let t = check_dim("tokens", tokens, max)?;
        let e = check_dim("experts", experts, MAX_EXPERTS as usize)?;
        let n64 = check_dim("n", n, max / 2)?;
        let k64 = check_dim("k", k, max)?;
        let topk64 = check_dim("topk", topk, experts)?;
        for (name, v) in [("n", n64), ("k", k64)] {
            if v % 8 != 0 {
                return Err(Error::invalid(
                    name,
                    format!("{v} is not a multiple of 8 (rows move in 16-byte pieces)"),
                ));
            }
        }
        let pairs = t * topk64;
        if pairs > max as u64 {
            return Err(Error::invalid(
                "tokens",
                format!("{tokens} tokens x topk {topk} exceeds {max} pairs"),
            ));
        }
        let (t, e, n, k, p) = (t as u128, e as u128, n64 as u128, k64 as u128, pairs as u128);
        need("hidden", &hidden, t * k, "[tokens, k]")?;
        need("w13", &w13, e * 2 * n * k, "[experts, 2n, k]")?;
        need("w2", &w2, e * k * n, "[experts, k, n]")?;
        need("topk_ids", &topk_ids, p, "[tokens, topk]")?;
        need("topk_weights", &topk_weights, p, "[tokens, topk]")?;
        need("out", &out, t * k, "[tokens, k]")?;
        for (name, b) in [("hidden", &hidden), ("w13", &w13), ("w2", &w2), ("out", &out)] {
            aligned(name, b.ptr, 16, "16-byte row loads")?;
        }
        aligned("topk_ids", topk_ids.ptr, 4, "i32 elements")?;
        aligned("topk_weights", topk_weights.ptr, 4, "f32 elements")?;
        let key = MoeKey {
            dtype,
            experts: e as u32,
            n: n64 as u32,
            k: k64 as u32,
            topk: topk64 as u32,
        };
        let layout = WorkspaceLayout::of(&key, t as u64)
            .ok_or_else(|| Error::invalid("tokens", "the workspace would exceed the address space"))?;
        let (ws, ws_bytes) = workspace;
        aligned("workspace", ws, REGION_ALIGN as u64, "its regions")?;
        if ws_bytes < layout.bytes {
            return Err(Error::invalid(
                "workspace",
                format!(
                    "holds {ws_bytes} bytes; {} are needed (size it with kernels_moe::workspace_bytes)",
                    layout.bytes
                ),
            ));
        }
        let es = dtype.size() as u128;
        let range = |ptr: u64, bytes: u128| (ptr, ptr.saturating_add(bytes.min(u64::MAX as u128) as u64));
        let inputs = [
            ("hidden", range(hidden.ptr, t * k * es)),
            ("w13", range(w13.ptr, e * 2 * n * k * es)),
            ("w2", range(w2.ptr, e * k * n * es)),
            ("topk_ids", range(topk_ids.ptr, p * 4)),
            ("topk_weights", range(topk_weights.ptr, p * 4)),
        ];
        let out_range = ("out", range(out.ptr, t * k * es));
        let ws_range = ("workspace", range(ws, layout.bytes as u128));
        for input in inputs {
            check_disjoint(input, out_range)?;
            check_disjoint(input, ws_range)?;
        }
        check_disjoint(out_range, ws_range)?;
        Ok(MoeProblem {
            key,
            tokens: t as u64,
            hidden: hidden.ptr,
            w13: w13.ptr,
            w2: w2.ptr,
            ids: topk_ids.ptr,
            weights: topk_weights.ptr,
            out: out.ptr,
            ws,
            layout,
            _buffers: PhantomData,
        })
    }

    /// The static key (dtype, experts, n, k, topk).
    pub fn key(&self) -> MoeKey {
        self.key
    }

    /// Tokens (rows of `hidden` and `out`).
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    pub(crate) fn pairs(&self) -> u64 {
        self.tokens * self.key.topk as u64
    }

    fn at(&self, offset: usize) -> u64 {
        self.ws + offset as u64
    }
}

/// How routing scores experts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scoring {
    /// Softmax over the logits, the topk largest; `renormalize` rescales the chosen
    /// weights to sum to 1 (Mixtral, Qwen3-MoE).
    Softmax { renormalize: bool },
    /// DeepSeek-V3: sigmoid scores plus a correction bias (`bias`: `(address, experts)`
    /// f32, or none) choose; groups of `experts / n_group` experts are ranked by the
    /// sum of their two best choice scores, the `topk_group` best kept, and the topk
    /// best experts among them chosen. Weights are the sigmoid scores, rescaled to sum
    /// to 1 when `renormalize`, then multiplied by `scale` (the routed scaling factor).
    Grouped {
        n_group: u32,
        topk_group: u32,
        renormalize: bool,
        scale: f32,
        bias: Option<Buffer>,
    },
}

/// One routing call: `topk_ids` and `topk_weights` `[tokens, topk]` from router logits
/// `[tokens, experts]`.
#[derive(Clone, Copy, Debug)]
pub struct RoutingProblem<'a> {
    pub(crate) logits_dtype: DType,
    pub(crate) tokens: u32,
    pub(crate) experts: u32,
    pub(crate) topk: u32,
    pub(crate) logits: u64,
    pub(crate) ids: u64,
    pub(crate) weights: u64,
    pub(crate) scoring: Scoring,
    pub(crate) _buffers: PhantomData<&'a mut [u8]>,
}

impl<'a> RoutingProblem<'a> {
    /// Routing over device addresses: `logits` `[tokens, experts]` of `logits_dtype`
    /// (f32, bf16 or f16), outputs `topk_ids` (i32) and `topk_weights` (f32), each
    /// `[tokens, topk]`. Ties go to the lower expert index. Errors name the argument:
    /// `logits_dtype`, `tokens`, `experts`, `topk`, `logits`, `topk_ids`,
    /// `topk_weights`, `n_group`, `topk_group`, `scale`, `bias`.
    ///
    /// # Safety
    /// As for [`MoeProblem::raw`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn raw(
        logits_dtype: DType,
        tokens: usize,
        experts: usize,
        topk: usize,
        logits: Buffer,
        topk_ids: Buffer,
        topk_weights: Buffer,
        scoring: Scoring,
    ) -> Result<RoutingProblem<'a>> {
        if !matches!(logits_dtype, DType::F32 | DType::Bf16 | DType::F16) {
            return Err(Error::invalid(
                "logits_dtype",
                format!("{logits_dtype}: f32, bf16 or f16"),
            ));
        }
        let t = check_dim("tokens", tokens, i32::MAX as usize)? as u128;
        let e = check_dim("experts", experts, MAX_EXPERTS as usize)? as u128;
        let topk64 = check_dim("topk", topk, experts.min(64))? as u128;
        if t * topk64 > i32::MAX as u128 {
            return Err(Error::invalid("tokens", "tokens x topk exceeds i32"));
        }
        need("logits", &logits, t * e, "[tokens, experts]")?;
        need("topk_ids", &topk_ids, t * topk64, "[tokens, topk]")?;
        need("topk_weights", &topk_weights, t * topk64, "[tokens, topk]")?;
        aligned("logits", logits.ptr, logits_dtype.size() as u64, "its elements")?;
        aligned("topk_ids", topk_ids.ptr, 4, "i32 elements")?;
        aligned("topk_weights", topk_weights.ptr, 4, "f32 elements")?;
        let es = logits_dtype.size() as u128;
        let r = |ptr: u64, bytes: u128| (ptr, ptr.saturating_add(bytes as u64));
        let logits_r = ("logits", r(logits.ptr, t * e * es));
        let ids_r = ("topk_ids", r(topk_ids.ptr, t * topk64 * 4));
        let w_r = ("topk_weights", r(topk_weights.ptr, t * topk64 * 4));
        check_disjoint(logits_r, ids_r)?;
        check_disjoint(logits_r, w_r)?;
        check_disjoint(ids_r, w_r)?;
        if let Scoring::Grouped {
            n_group,
            topk_group,
            scale,
            bias,
            ..
        } = scoring
        {
            let g = n_group as usize;
            if g == 0 || g > 32 || !experts.is_multiple_of(g) {
                return Err(Error::invalid(
                    "n_group",
                    format!("{n_group}: 1..=32 groups that divide {experts} experts"),
                ));
            }
            if topk_group == 0 || topk_group > n_group || topk > topk_group as usize * (experts / g) {
                return Err(Error::invalid(
                    "topk_group",
                    format!("{topk_group}: 1..={n_group} groups holding at least topk {topk} experts"),
                ));
            }
            if !scale.is_finite() {
                return Err(Error::invalid("scale", format!("{scale} is not finite")));
            }
            if let Some(b) = bias {
                need("bias", &b, e, "[experts]")?;
                aligned("bias", b.ptr, 4, "f32 elements")?;
                let b_r = ("bias", r(b.ptr, e * 4));
                check_disjoint(b_r, ids_r)?;
                check_disjoint(b_r, w_r)?;
            }
        }
        Ok(RoutingProblem {
            logits_dtype,
            tokens: t as u32,
            experts: e as u32,
            topk: topk64 as u32,
            logits: logits.ptr,
            ids: topk_ids.ptr,
            weights: topk_weights.ptr,
            scoring,
            _buffers: PhantomData,
        })
    }
}

/// The steps of a fused-MoE call, in launch order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Pairs grouped by expert (`moe_align`).
    Align,
    /// `silu(gate) * up` per pair (`moe_gemm`, UP=1).
    GateUp,
    /// The weighted down projection per pair (`moe_gemm`, UP=0).
    Down,
    /// The fixed-order sum over each token's choices (`moe_combine`).
    Combine,
}

impl Step {
    pub const ALL: [Step; 4] = [Step::Align, Step::GateUp, Step::Down, Step::Combine];
}

fn gemm_variant(key: &MoeKey, c: &MoeConfig, up: bool) -> Variant {
    if c.path.is_wgmma() {
        return Variant::new("moe_gemm")
            .define("STEP", if up { 4 } else { 5 })
            .define("DTYPE", dtype_define(key.dtype))
            .define("WGMMA", if c.path == Path::WgmmaSwap { 2 } else { 1 })
            .define("BM", c.block_m)
            .define("BN", c.step_block_n(up))
            .define("CONSUMERS", c.consumers())
            .define("STAGES", c.stages)
            .define("UP", u32::from(up));
    }
    Variant::new("moe_gemm")
        .define("STEP", if up { 4 } else { 5 })
        .define("DTYPE", dtype_define(key.dtype))
        .define("BM", c.block_m)
        .define("BN", c.block_n)
        .define("BK", c.block_k)
        .define("WM", c.warps_m())
        .define("WN", c.warps_n())
        .define("STAGES", c.stages)
        .define("UP", u32::from(up))
}

/// The compiled variant of `step` for `key` under `config` (align and combine depend
/// on the dtype alone).
pub fn step_variant(key: &MoeKey, c: &MoeConfig, step: Step) -> Variant {
    match step {
        Step::Align => Variant::new("moe_align")
            .define("STEP", 3)
            .define("DTYPE", dtype_define(key.dtype)),
        // Each step after the align follows a kernel of the layer's own call (align and
        // the GEMM steps let their dependents start): chained, so on sm_90+ it launches
        // while the step before finishes, whatever `RuntimeOptions::pdl` says.
        Step::GateUp => gemm_variant(key, c, true).chained(),
        Step::Down => gemm_variant(key, c, false).chained(),
        Step::Combine => Variant::new("moe_combine")
            .define("STEP", 6)
            .define("DTYPE", dtype_define(key.dtype))
            .chained(),
    }
}

/// The variant of a routing kernel for logits of `logits_dtype`.
pub fn routing_variant(logits_dtype: DType, scoring: &Scoring) -> Variant {
    let (entry, step) = match scoring {
        Scoring::Softmax { .. } => ("moe_topk_softmax", 1),
        Scoring::Grouped { .. } => ("moe_grouped_topk", 2),
    };
    Variant::new(entry)
        .define("STEP", step)
        .define("DTYPE", dtype_define(logits_dtype))
}

/// Row-tile slots a GEMM launches: the most tiles any routing of `pairs` pairs over
/// `experts` experts can need (each non-empty expert adds at most one partial tile).
pub fn row_tile_slots(pairs: u64, experts: u32, block_m: u32) -> u64 {
    let bm = block_m as u64;
    let nonempty = pairs.min(experts as u64);
    pairs.min((pairs + nonempty * (bm - 1)) / bm)
}

/// The mma-path config standing in for a wgmma config where wgmma cannot run: the
/// sm_80 analytic default for the rows per expert the config's tile was made for (its
/// `block_m`), which fits every key on every NVIDIA target the kernels take. The
/// workspace does not depend on the config, so any caller's workspace still fits.
pub fn portable(key: &MoeKey, c: &MoeConfig) -> MoeConfig {
    let tokens = (u64::from(c.block_m) * u64::from(key.experts)).div_ceil(u64::from(key.topk.max(1)));
    crate::heuristic::analytic_default(Target::Sm80, key, tokens.max(1))
}

fn check_device(device: &DeviceInfo) -> Result<()> {
    if device.amd_arch.is_some() || device.compute_capability < (8, 0) {
        return Err(Error::invalid(
            "device",
            format!(
                "{}: the MoE kernels need an NVIDIA GPU of compute capability 8.0 or newer",
                device.name
            ),
        ));
    }
    Ok(())
}

/// The wgmma paths run on sm_90a alone (wgmma, setmaxnreg).
fn check_wgmma_device(device: &DeviceInfo) -> Result<()> {
    if device.compute_capability != (9, 0) {
        return Err(Error::invalid(
            "device",
            format!(
                "{}: the wgmma paths run on compute capability 9.0 (sm_90a) only",
                device.name
            ),
        ));
    }
    Ok(())
}

/// The TMA map of a wgmma GEMM's weights, all experts as one matrix of k columns:
/// w13 as `[experts * 2n, k]` (expert e's gate rows from `e * 2n`, its up rows from
/// `e * 2n + n`), w2 as `[experts * k, n]`; boxes of 64 columns (one 128-byte swizzle
/// row) by the step's weight tile rows (`MoeConfig::step_block_n`). A box that runs past
/// an expert's rows
/// reads rows of the next one (or zeros past the last): they feed only output columns
/// past n, which are never stored.
fn weight_map(p: &MoeProblem<'_>, c: &MoeConfig, up: bool) -> Result<TensorMap2d> {
    let key = &p.key;
    let element = match key.dtype {
        DType::F16 => TmaElement::F16,
        _ => TmaElement::Bf16,
    };
    let e = key.dtype.size() as u64;
    let experts = u64::from(key.experts);
    let (ptr, rows, cols, name) = if up {
        (p.w13, experts * 2 * u64::from(key.n), u64::from(key.k), "w13")
    } else {
        (p.w2, experts * u64::from(key.k), u64::from(key.n), "w2")
    };
    let map = TensorMap2d {
        ptr,
        element,
        cols,
        rows,
        row_bytes: cols * e,
        box_cols: 64,
        box_rows: c.step_block_n(up),
        swizzle: TmaSwizzle::B128,
    };
    map.check(name)?;
    if rows > i32::MAX as u64 {
        return Err(Error::invalid(
            name,
            format!("{rows} rows exceed TMA's i32 coordinates"),
        ));
    }
    Ok(map)
}

fn grid_u32(name: &str, v: u64) -> Result<u32> {
    u32::try_from(v)
        .ok()
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or_else(|| Error::invalid(name, format!("{v} blocks exceed one launch")))
}

/// The dimensions and arguments of `step` of `p` under `c` on `device`.
pub fn step_args(
    device: &DeviceInfo,
    c: &MoeConfig,
    p: &MoeProblem<'_>,
    step: Step,
) -> Result<(LaunchDims, KernelArgs)> {
    check_device(device)?;
    let key = &p.key;
    let l = &p.layout;
    let pairs = p.pairs();
    let mut args = KernelArgs::new();
    let dims = match step {
        Step::Align => {
            args.ptr(p.ids)
                .i32(pairs as i32)
                .i32(key.experts as i32)
                .ptr(p.at(l.offsets))
                .ptr(p.at(l.sorted));
            LaunchDims::linear(1, ALIGN_THREADS).with_smem(key.experts * 4)
        }
        Step::GateUp | Step::Down => {
            let up = step == Step::GateUp;
            let (a, w, out, n, k) = if up {
                (p.hidden, p.w13, p.at(l.intermediate), key.n, key.k)
            } else {
                (p.at(l.intermediate), p.w2, p.at(l.down), key.k, key.n)
            };
            if c.path.is_wgmma() {
                check_wgmma_device(device)?;
                args.tensor_map(weight_map(p, c, up)?).ptr(a);
            } else {
                args.ptr(a).ptr(w);
            }
            args.ptr(out)
                .ptr(p.at(l.offsets))
                .ptr(p.at(l.sorted))
                .ptr(if up { 0 } else { p.weights })
                .i32(key.experts as i32)
                .i32(key.topk as i32)
                .i32(n as i32)
                .i32(k as i32);
            let slots = grid_u32("tokens", row_tile_slots(pairs, key.experts, c.block_m))?;
            let tiles_n = n.div_ceil(c.step_block_n(up));
            let smem = c.gemm_smem_bytes(key.dtype, c.step_weight_tiles(up));
            let smem = u32::try_from(smem)
                .map_err(|_| Error::invalid("config", "the pipeline exceeds shared memory"))?;
            if c.path.is_wgmma() {
                // As many blocks as are resident walk the (row tile, column tile) items, taking
                // each next one from the step's counter. Once items came from a counter in bands
                // of row tiles, long-k steps ran no slower this way than a block an item (Mixtral
                // 2-5% faster on the H200), so one rule serves every k.
                let items = u64::from(slots) * u64::from(tiles_n);
                let blocks = persistent_blocks(device, c, c.step_weight_tiles(up), smem).min(items.max(1));
                LaunchDims::linear(grid_u32("tokens", blocks)?, c.threads()).with_smem(smem)
            } else {
                let mut d = LaunchDims::linear(slots, c.threads()).with_smem(smem);
                d.grid.1 = tiles_n;
                d
            }
        }
        Step::Combine => {
            args.ptr(p.at(l.down))
                .ptr(p.ids)
                .ptr(p.out)
                .i32(p.tokens as i32)
                .i32(key.topk as i32)
                .i32(key.experts as i32)
                .i32(key.k as i32);
            LaunchDims::linear(grid_u32("tokens", p.tokens)?, COMBINE_THREADS)
        }
    };
    Ok((dims, args))
}

/// Blocks of a wgmma GEMM step resident at once on `device`: one an SM, two where the
/// step's kernel asks for two (one consumer of at most 64 accumulators a thread over its
/// `weight_tiles` weight tiles, `MIN_BLOCKS` in `cuda/moe.cu`) and two rings of `smem`
/// bytes fit an SM's shared memory.
pub fn persistent_blocks(device: &DeviceInfo, c: &MoeConfig, weight_tiles: u32, smem: u32) -> u64 {
    // `accumulators` counts the gate-up step's two weight tiles.
    let per_thread = c.accumulators() / 2 * weight_tiles;
    let two = c.consumers() == 1 && per_thread <= 64 && 2 * (u64::from(smem) + 2048) <= 228 * 1024;
    u64::from(device.sm_count.max(1)) * if two { 2 } else { 1 }
}

/// The whole launch plan of `step` (variant, dimensions, arguments).
pub fn step_plan(device: &DeviceInfo, c: &MoeConfig, p: &MoeProblem<'_>, step: Step) -> Result<LaunchPlan> {
    let (dims, args) = step_args(device, c, p, step)?;
    Ok(LaunchPlan {
        variant: step_variant(&p.key, c, step),
        dims,
        args,
    })
}

/// The launch of a routing problem.
pub fn routing_args(device: &DeviceInfo, p: &RoutingProblem<'_>) -> Result<(LaunchDims, KernelArgs)> {
    check_device(device)?;
    let mut args = KernelArgs::new();
    args.ptr(p.logits);
    match p.scoring {
        Scoring::Softmax { renormalize } => {
            args.i32(p.tokens as i32)
                .i32(p.experts as i32)
                .i32(p.topk as i32)
                .i32(i32::from(renormalize));
        }
        Scoring::Grouped {
            n_group,
            topk_group,
            renormalize,
            scale,
            bias,
        } => {
            args.ptr(bias.map_or(0, |b| b.ptr))
                .i32(p.tokens as i32)
                .i32(p.experts as i32)
                .i32(n_group as i32)
                .i32(topk_group as i32)
                .i32(p.topk as i32)
                .i32(i32::from(renormalize))
                .f32(scale);
        }
    }
    args.ptr(p.ids).ptr(p.weights);
    let blocks = (p.tokens as u64).div_ceil(ROUTE_WARPS as u64);
    Ok((
        LaunchDims::linear(grid_u32("tokens", blocks)?, ROUTE_WARPS * 32),
        args,
    ))
}

/// The problem the tuner makes (see `Tunable`): contiguous buffers, the workspace's
/// offsets and sorted pairs already filled.
pub(crate) fn tuning_problem<'a>(key: MoeKey, tokens: u64, at: &[u64]) -> MoeProblem<'a> {
    MoeProblem {
        key,
        tokens,
        hidden: at[0],
        w13: at[1],
        w2: at[2],
        ids: at[3],
        weights: at[4],
        out: at[5],
        ws: at[6],
        layout: WorkspaceLayout::of(&key, tokens).unwrap_or(WorkspaceLayout {
            offsets: 0,
            sorted: 0,
            intermediate: 0,
            down: 0,
            bytes: 0,
        }),
        _buffers: PhantomData,
    }
}

/// The steps of the call the runtime compiles, times and launches for a config: the
/// two grouped GEMMs and the combine. The align step is left out: it depends on the
/// dtype alone, so it would add the same time to every candidate; the tuner's problem
/// holds its result ([`Tunable::tuning_inputs`](kernels_core::Tunable)) and the ops
/// launch it before the call ([`crate::ops::MoePrepared::launch`]).
pub const TUNED_STEPS: [Step; 3] = [Step::GateUp, Step::Down, Step::Combine];

// Safety: the planned launches are the gate-up GEMM (reads hidden, w13 and the
// workspace's offsets and sorted pairs, writes the intermediate rows of the pairs listed
// there), the down GEMM (reads those rows, w2, the weights and the routing region,
// writes the down rows of the same pairs) and the combine (reads the down rows and the
// ids, writes `out`), all within the buffers `buffers` lists.
unsafe impl PlannedKernel for Moe {
    type Problem<'a> = MoeProblem<'a>;
    const SOURCE: &'static KernelSource = &SOURCE;

    fn search_space(device: &DeviceInfo, key: &MoeKey, batch: u64) -> Vec<MoeConfig> {
        space::search_space(device.tuning_target(), key, batch)
    }

    fn variant(_device: &DeviceInfo, key: &MoeKey, c: &MoeConfig) -> Variant {
        step_variant(key, c, TUNED_STEPS[0])
    }

    /// A wgmma config becomes [`portable`]'s on a device other than compute capability
    /// 9.0 (sm_90a code runs there only): a Blackwell part is served from the sm90
    /// table and must not be refused for it.
    fn fit_alignment(device: &DeviceInfo, key: &MoeKey, c: MoeConfig, _align: AlignClass) -> MoeConfig {
        if c.path.is_wgmma() && device.compute_capability != (9, 0) {
            portable(key, &c)
        } else {
            c
        }
    }

    fn variants(_device: &DeviceInfo, key: &MoeKey, c: &MoeConfig) -> Vec<Variant> {
        TUNED_STEPS.iter().map(|&s| step_variant(key, c, s)).collect()
    }

    fn problem_shape(p: &MoeProblem<'_>) -> (MoeKey, u64) {
        (p.key, p.tokens)
    }

    fn buffers(p: &MoeProblem<'_>) -> Vec<TuneBuffer> {
        let key = &p.key;
        let es = key.dtype.size();
        let (t, e, n, k) = (
            p.tokens as usize,
            key.experts as usize,
            key.n as usize,
            key.k as usize,
        );
        let pairs = p.pairs() as usize;
        let l = &p.layout;
        vec![
            TuneBuffer {
                name: "hidden",
                ptr: p.hidden,
                bytes: t * k * es,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "w13",
                ptr: p.w13,
                bytes: e * 2 * n * k * es,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "w2",
                ptr: p.w2,
                bytes: e * k * n * es,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "topk_ids",
                ptr: p.ids,
                bytes: pairs * 4,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "topk_weights",
                ptr: p.weights,
                bytes: pairs * 4,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "out",
                ptr: p.out,
                bytes: t * k * es,
                role: BufferRole::Write,
            },
            TuneBuffer {
                name: "workspace.routing",
                ptr: p.at(l.offsets),
                bytes: l.intermediate,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "workspace.activations",
                ptr: p.at(l.intermediate),
                bytes: l.bytes - l.intermediate,
                role: BufferRole::Write,
            },
        ]
    }

    fn launch_args(
        device: &DeviceInfo,
        c: &MoeConfig,
        p: &MoeProblem<'_>,
    ) -> Result<(LaunchDims, KernelArgs)> {
        step_args(device, c, p, TUNED_STEPS[0])
    }

    fn launches(device: &DeviceInfo, c: &MoeConfig, p: &MoeProblem<'_>) -> Result<Launches> {
        let mut launches = Launches::new();
        for step in TUNED_STEPS {
            let (dims, args) = step_args(device, c, p, step)?;
            launches.push(dims, args)?;
        }
        Ok(launches)
    }

    fn reference(p: &MoeProblem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
        Some(crate::check::reference(p, before))
    }

    fn check_outputs(
        p: &MoeProblem<'_>,
        before: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> std::result::Result<(), String> {
        crate::check::check(p, before, got, expected)
    }
}

/// Whether `target` has the MoE kernels (NVIDIA sm_80 and newer).
pub fn has_kernel(target: Target) -> bool {
    target.vendor() == Vendor::Nvidia
}

#[cfg(test)]
mod tests {
    //! Argument checks run before anything touches a device, so they are tested here
    //! with made-up (never dereferenced) device addresses.
    use super::*;

    const GB: u64 = 1 << 30;
    const T: usize = 5;
    const E: usize = 8;
    const N: usize = 64;
    const K: usize = 128;
    const TOPK: usize = 2;

    struct Args {
        dtype: DType,
        dims: (usize, usize, usize, usize, usize),
        bufs: [Buffer; 6],
        ws: (u64, usize),
    }

    fn ok() -> Args {
        args((T, E, N, K, TOPK), GB)
    }

    /// Valid bf16 arguments of `dims` (tokens, experts, n, k, topk), each buffer at its own
    /// multiple of `at`.
    fn args(dims: (usize, usize, usize, usize, usize), at: u64) -> Args {
        let (bufs, ws) = made_up_buffers(DType::Bf16, dims, at);
        Args {
            dtype: DType::Bf16,
            dims,
            bufs,
            ws,
        }
    }

    fn build(a: &Args) -> Result<MoeProblem<'static>> {
        let [h, w13, w2, ids, w, out] = a.bufs;
        unsafe { MoeProblem::raw(a.dtype, a.dims, h, w13, w2, ids, w, out, a.ws) }
    }

    fn bad_arg(a: &Args) -> String {
        match build(a) {
            Err(Error::InvalidArgument { name, .. }) => name,
            Err(e) => panic!("not an argument error: {e}"),
            Ok(_) => panic!("bad input was accepted"),
        }
    }

    #[test]
    fn each_bad_argument_is_named() {
        assert!(build(&ok()).is_ok());
        let with = |f: &dyn Fn(&mut Args)| {
            let mut a = ok();
            f(&mut a);
            bad_arg(&a)
        };
        assert_eq!(with(&|a| a.dtype = DType::F32), "dtype");
        assert_eq!(with(&|a| a.dims.0 = 0), "tokens");
        assert_eq!(with(&|a| a.dims.1 = 0), "experts");
        assert_eq!(with(&|a| a.dims.1 = 5000), "experts");
        assert_eq!(with(&|a| a.dims.2 = 60), "n");
        assert_eq!(with(&|a| a.dims.3 = 0), "k");
        assert_eq!(with(&|a| a.dims.4 = 9), "topk");
        let names = ["hidden", "w13", "w2", "topk_ids", "topk_weights", "out"];
        for (i, name) in names.iter().enumerate() {
            assert_eq!(with(&|a| a.bufs[i].len -= 1), *name);
            assert_eq!(with(&|a| a.bufs[i].ptr += 2), *name, "misaligned {name}");
            assert_eq!(with(&|a| a.bufs[i].ptr = 0), *name, "null {name}");
        }
        assert_eq!(with(&|a| a.ws.1 -= 1), "workspace");
        assert_eq!(with(&|a| a.ws.0 += 16), "workspace");
        // out over an input, the workspace over out.
        assert_eq!(with(&|a| a.bufs[5].ptr = GB + 16), "out");
        assert_eq!(with(&|a| a.ws.0 = 6 * GB), "workspace");
    }

    #[test]
    fn routing_arguments_are_checked() {
        let r = |topk: usize, scoring: Scoring| unsafe {
            RoutingProblem::raw(
                DType::F32,
                T,
                64,
                topk,
                Buffer::new(GB, T * 64),
                Buffer::new(2 * GB, T * topk),
                Buffer::new(3 * GB, T * topk),
                scoring,
            )
        };
        let grouped = |n_group, topk_group| Scoring::Grouped {
            n_group,
            topk_group,
            renormalize: true,
            scale: 2.5,
            bias: Some(Buffer::new(4 * GB, 64)),
        };
        assert!(r(8, Scoring::Softmax { renormalize: true }).is_ok());
        assert!(r(8, grouped(8, 4)).is_ok());
        let name = |x: Result<RoutingProblem<'static>>| match x {
            Err(Error::InvalidArgument { name, .. }) => name,
            _ => panic!("accepted"),
        };
        assert_eq!(name(r(0, Scoring::Softmax { renormalize: true })), "topk");
        assert_eq!(name(r(8, grouped(7, 4))), "n_group");
        assert_eq!(name(r(8, grouped(8, 0))), "topk_group");
        // Two groups of 8 experts cannot hold 20 choices.
        assert_eq!(name(r(20, grouped(8, 2))), "topk_group");
    }

    #[test]
    fn the_steps_carry_the_kernel_abi_and_spare_slots_cover_any_routing() {
        let p = build(&ok()).unwrap();
        let info = DeviceInfo::nominal(Target::Sm90).unwrap();
        // The mma path's ABI (sm90's default takes the wgmma paths, tested below).
        let c = crate::analytic_default(Target::Sm80, &p.key, T as u64);
        let up = step_plan(&info, &c, &p, Step::GateUp).unwrap();
        assert!(up
            .variant
            .to_string()
            .starts_with("moe_gemm -DSTEP=4 -DDTYPE=2 -DBM=16"));
        let ws = 7 * GB;
        let l = p.layout;
        assert_eq!(
            up.args.slots(),
            &[
                GB,
                2 * GB,
                ws + l.intermediate as u64,
                ws,
                ws + l.sorted as u64,
                0,
                8,
                2,
                64,
                128
            ]
        );
        // 10 pairs over 8 experts in tiles of 16: at most 8 tiles; 64 / 64 column tiles.
        assert_eq!(up.dims.grid, (8, 1, 1));
        let down = step_plan(&info, &c, &p, Step::Down).unwrap();
        assert_eq!(down.dims.grid, (8, 2, 1));
        assert_eq!(down.args.slots()[5], 5 * GB);
        let combine = step_plan(&info, &c, &p, Step::Combine).unwrap();
        assert_eq!(combine.dims.grid, (T as u32, 1, 1));
        // The slots bound every routing: tiles summed over experts never exceed it.
        for (pairs, experts, bm) in [
            (1u64, 8u32, 16u32),
            (10, 8, 16),
            (64, 128, 16),
            (4096, 8, 128),
            (300, 256, 64),
        ] {
            let slots = row_tile_slots(pairs, experts, bm);
            // Worst case: as many experts as possible hold one pair, the rest on one.
            let nonempty = pairs.min(experts as u64);
            let worst = (nonempty - 1) + (pairs - (nonempty - 1)).div_ceil(bm as u64);
            assert!(slots >= worst, "{pairs} {experts} {bm}: {slots} < {worst}");
        }
        // AMD devices are refused.
        let mi300 = DeviceInfo {
            amd_arch: Some("gfx942".into()),
            ..info
        };
        assert!(step_plan(&mi300, &c, &p, Step::Align).is_err());
    }

    /// The align step follows whatever kernel the engine ran before the layer, so it
    /// launches as `RuntimeOptions::pdl` says; every later step follows one of the
    /// layer's own kernels and is chained.
    #[test]
    fn steps_after_the_align_are_chained() {
        let key = MoeKey {
            dtype: DType::Bf16,
            experts: 8,
            n: 256,
            k: 512,
            topk: 2,
        };
        let c = crate::heuristic::analytic_default(Target::Sm90, &key, 1);
        assert!(!step_variant(&key, &c, Step::Align).is_chained());
        for s in [Step::GateUp, Step::Down, Step::Combine] {
            assert!(step_variant(&key, &c, s).is_chained(), "{s:?}");
        }
    }

    /// SOURCE is marked for programmatic dependent launch: every entry point (routing,
    /// align, both GEMM paths, combine) waits for the previous grid before it touches
    /// global memory (its pointer parameters, the helpers that read them, cp.async and TMA).
    #[test]
    fn every_entry_point_waits_before_touching_memory() {
        assert!(SOURCE.pdl);
        let src = include_str!("../cuda/moe.cu");
        let bodies = kernels_core::testing::entry_bodies(src);
        assert_eq!(bodies.len(), 6, "two routings, align, two GEMM paths, combine");
        const ACCESSES: &[&str] = &[
            "row[",
            "ids[",
            "offsets[",
            "sorted[",
            "weights[",
            "out[",
            "y +",
            "find_row_tile(",
            "total_row_tiles(",
            "cp_async16(",
            "tma_load_2d(",
            "load_vec",
        ];
        for (i, b) in bodies.iter().enumerate() {
            let wait = b
                .find("kd::pdl_wait();")
                .unwrap_or_else(|| panic!("entry point {i}: no wait"));
            if let Some((at, a)) = ACCESSES.iter().filter_map(|a| b.find(a).map(|at| (at, a))).min() {
                assert!(wait < at, "entry point {i}: `{a}` comes before kd::pdl_wait()");
            }
        }
    }

    #[test]
    fn wgmma_steps_run_on_persistent_blocks_whatever_their_k() {
        let info = DeviceInfo::nominal(Target::Sm90).unwrap();
        let sms = u64::from(info.sm_count);
        let c = MoeConfig::wgmma(Path::Wgmma, 128, 128, 8, 4);
        // (tokens, experts, n, k, topk): Qwen3-30B-A3B (k 2048 then 768) and Mixtral-8x7B
        // (k 4096 then 14336).
        for (t, e, n, k, topk) in [(4096, 128, 768, 2048, 8), (4096, 8, 14336, 4096, 2)] {
            let p = build(&args((t, e, n, k, topk), 1 << 40)).unwrap();
            let slots = row_tile_slots((t * topk) as u64, e as u32, 128);
            for (step, reduce, cols) in [(Step::GateUp, k, n), (Step::Down, n, k)] {
                let plan = step_plan(&info, &c, &p, step).unwrap();
                let items = slots * cols.div_ceil(128) as u64;
                let want = sms.min(items);
                assert_eq!(plan.dims.grid, (want as u32, 1, 1), "{step:?} of k {reduce}");
            }
        }
    }

    #[test]
    fn the_unswapped_down_step_takes_weight_tiles_as_wide_as_gate_and_up_together() {
        let p = build(&ok()).unwrap();
        let info = DeviceInfo::nominal(Target::Sm90).unwrap();
        // (path, block_m, block_n, warps): the down step's weight rows per tile.
        for (path, bm, bn, warps, down_rows) in [
            (Path::Wgmma, 64, 64, 4, 128),
            (Path::Wgmma, 128, 128, 8, 256),
            (Path::WgmmaSwap, 16, 64, 4, 64),
        ] {
            let c = MoeConfig::wgmma(path, bm, bn, warps, 4);
            assert!(space::fits(Target::Sm90, &p.key, &c), "{c}");
            let up = step_plan(&info, &c, &p, Step::GateUp).unwrap();
            let down = step_plan(&info, &c, &p, Step::Down).unwrap();
            let v = down.variant.to_string();
            assert!(v.contains(&format!(" -DBN={down_rows} ")), "{v}");
            let (_, map) = down.args.tensor_maps().next().unwrap();
            assert_eq!(map.box_rows, down_rows, "{c}");
            let (_, map) = up.args.tensor_maps().next().unwrap();
            assert_eq!(map.box_rows, bn, "{c}: the gate-up step keeps block_n");
            if down_rows == 2 * bn {
                // Same ring as the gate-up step: as many weight rows a stage.
                assert_eq!(down.dims.smem_bytes, up.dims.smem_bytes, "{c}");
            } else {
                assert!(down.dims.smem_bytes < up.dims.smem_bytes, "{c}");
            }
        }
    }

    #[test]
    fn a_wgmma_step_takes_the_weights_as_a_tensor_map_on_sm90_only() {
        let p = build(&ok()).unwrap();
        let info = DeviceInfo::nominal(Target::Sm90).unwrap();
        let c = MoeConfig {
            path: Path::WgmmaSwap,
            block_m: 16,
            block_n: 64,
            block_k: 64,
            warps: 4,
            stages: 4,
        };
        assert!(space::fits(Target::Sm90, &p.key, &c));
        let ws = 7 * GB;
        let l = p.layout;
        for (step, w, rows, cols, n, k, weights, tiles_n, weight_tiles) in [
            (Step::GateUp, 2 * GB, E * 2 * N, K, N, K, 0, 1, 2),
            (Step::Down, 3 * GB, E * K, N, K, N, 5 * GB, 2, 1),
        ] {
            let plan = step_plan(&info, &c, &p, step).unwrap();
            let v = plan.variant.to_string();
            assert!(v.starts_with("moe_gemm -DSTEP="), "{v}");
            assert!(
                v.contains("-DWGMMA=2 -DBM=16 -DBN=64 -DCONSUMERS=1 -DSTAGES=4 -DUP="),
                "{v}"
            );
            let maps: Vec<_> = plan.args.tensor_maps().collect();
            assert_eq!(maps.len(), 1);
            let (at, map) = maps[0];
            assert_eq!(at, 0, "the map is the first parameter");
            assert_eq!(
                (map.ptr, map.rows, map.cols, map.row_bytes),
                (w, rows as u64, cols as u64, cols as u64 * 2)
            );
            assert_eq!(
                (map.box_cols, map.box_rows, map.swizzle),
                (64, 64, TmaSwizzle::B128)
            );
            let (a, out) = if step == Step::GateUp {
                (GB, ws + l.intermediate as u64)
            } else {
                (ws + l.intermediate as u64, ws + l.down as u64)
            };
            assert_eq!(
                &plan.args.slots()[1..],
                &[
                    a,
                    out,
                    ws,
                    ws + l.sorted as u64,
                    weights,
                    8,
                    2,
                    n as u64,
                    k as u64
                ]
            );
            // 10 pairs in tiles of 16 over 8 experts: at most 8 row tiles, each with its
            // column tiles: fewer items than resident blocks, one block an item.
            assert_eq!(plan.dims.grid, (8 * tiles_n, 1, 1));
            assert_eq!(plan.dims.block.0, 256, "a consumer and the producer warpgroup");
            assert_eq!(
                plan.dims.smem_bytes as usize,
                4 * (16 + weight_tiles * 64) * 128 + 1024
            );
        }
        // Persistent: never more blocks than are resident at once (two an SM for one
        // consumer of few accumulators, one for two consumers).
        let sms = u64::from(info.sm_count);
        assert_eq!(persistent_blocks(&info, &c, 2, 64 * 1024), 2 * sms);
        assert_eq!(persistent_blocks(&info, &c, 2, 120 * 1024), sms);
        let two = MoeConfig {
            path: Path::Wgmma,
            block_m: 128,
            block_n: 128,
            warps: 8,
            ..c
        };
        assert_eq!(persistent_blocks(&info, &two, 1, 64 * 1024), sms);
        // An sm_80 device, or a later arch without wgmma, is refused by name.
        for cc in [(8, 0), (10, 0)] {
            let other = DeviceInfo {
                compute_capability: cc,
                ..info.clone()
            };
            match step_plan(&other, &c, &p, Step::GateUp) {
                Err(Error::InvalidArgument { name, .. }) => assert_eq!(name, "device"),
                r => panic!("{cc:?}: {:?}", r.map(|p| p.variant.to_string())),
            }
            // What the runtime launches there instead: the mma stand-in, which plans.
            let fitted = Moe::fit_alignment(&other, &p.key, c, AlignClass::A16);
            assert_eq!(fitted.path, Path::Mma, "{cc:?}");
            assert!(space::fits(Target::Sm80, &p.key, &fitted), "{cc:?}: {fitted:?}");
            assert!(step_plan(&other, &fitted, &p, Step::GateUp).is_ok(), "{cc:?}");
        }
        assert_eq!(Moe::fit_alignment(&info, &p.key, c, AlignClass::A16), c);
    }
}
