//! The fused-MoE ops on CUDA (feature `cuda`): safe ops on cudarc views, what Rust
//! engines holding cudarc buffers call. Each validates its arguments, takes the
//! buffers' device addresses and keeps cudarc's stream-tracking guards until the
//! kernels are enqueued.
//!
//! In a CUDA-graph capture they need cudarc's event tracking off (CUDA does not let a
//! capture wait on the events cudarc recorded outside it); with tracking on they
//! refuse with an error naming `stream` and enqueue nothing
//! (`kernels_core::CudaDevice::check_capturable`). After `Runtime::warm`, a capture
//! compiles nothing, whatever the buffers' alignment.

use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{launch::Element, CudaRuntime, Result};
use tuned::Resolved;

use crate::plan::{Buffer, MoeProblem, RoutingProblem, Scoring};
use crate::MoeConfig;

/// Fused MoE: `out[tokens, k]` from `hidden[tokens, k]`, `w13[experts, 2n, k]`,
/// `w2[experts, k, n]` and the routing `topk_ids`/`topk_weights` `[tokens, topk]`,
/// with a `workspace` of [`crate::workspace_bytes`] bytes. `dims` is `(tokens,
/// experts, n, k, topk)`. Returns the config and where it came from; errors name the
/// argument and launch nothing.
#[allow(clippy::too_many_arguments)]
pub fn fused_moe<T: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    dims: (usize, usize, usize, usize, usize),
    hidden: &CudaView<'_, T>,
    w13: &CudaView<'_, T>,
    w2: &CudaView<'_, T>,
    topk_ids: &CudaView<'_, i32>,
    topk_weights: &CudaView<'_, f32>,
    out: &mut CudaViewMut<'_, T>,
    workspace: &mut CudaViewMut<'_, u8>,
) -> Result<Resolved<MoeConfig>> {
    kernels_core::CudaDevice::check_capturable(stream)?;
    let (out_len, ws_len) = (out.len(), workspace.len());
    let (hp, _gh) = hidden.device_ptr(stream);
    let (w13p, _g13) = w13.device_ptr(stream);
    let (w2p, _g2) = w2.device_ptr(stream);
    let (ip, _gi) = topk_ids.device_ptr(stream);
    let (wp, _gw) = topk_weights.device_ptr(stream);
    let (op, _go) = out.device_ptr_mut(stream);
    let (sp, _gs) = workspace.device_ptr_mut(stream);
    // SAFETY: the borrows keep the buffers alive and unaliased until the guards drop,
    // after the launches are enqueued.
    let p = unsafe {
        MoeProblem::raw(
            T::DTYPE,
            dims,
            Buffer::new(hp, hidden.len()),
            Buffer::new(w13p, w13.len()),
            Buffer::new(w2p, w2.len()),
            Buffer::new(ip, topk_ids.len()),
            Buffer::new(wp, topk_weights.len()),
            Buffer::new(op, out_len),
            (sp, ws_len),
        )
    }?;
    crate::ops::fused_moe(rt, stream, &p)
}

/// Routing: `topk_ids` and `topk_weights` `[tokens, topk]` from `logits[tokens,
/// experts]`. `bias` is the grouped scoring's correction bias (`[experts]` f32; its
/// `Scoring::Grouped::bias` is ignored here); errors name the argument.
#[allow(clippy::too_many_arguments)]
pub fn route<L: Element>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    (tokens, experts, topk): (usize, usize, usize),
    logits: &CudaView<'_, L>,
    scoring: Scoring,
    bias: Option<&CudaView<'_, f32>>,
    topk_ids: &mut CudaViewMut<'_, i32>,
    topk_weights: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    kernels_core::CudaDevice::check_capturable(stream)?;
    let (ids_len, w_len) = (topk_ids.len(), topk_weights.len());
    let (lp, _gl) = logits.device_ptr(stream);
    let bias_guard = bias.map(|b| (b.device_ptr(stream), b.len()));
    let (ip, _gi) = topk_ids.device_ptr_mut(stream);
    let (wp, _gw) = topk_weights.device_ptr_mut(stream);
    let scoring = match scoring {
        Scoring::Grouped {
            n_group,
            topk_group,
            renormalize,
            scale,
            ..
        } => Scoring::Grouped {
            n_group,
            topk_group,
            renormalize,
            scale,
            bias: bias_guard.as_ref().map(|((p, _), len)| Buffer::new(*p, *len)),
        },
        s => s,
    };
    // SAFETY: as in `fused_moe`.
    let p = unsafe {
        RoutingProblem::raw(
            L::DTYPE,
            tokens,
            experts,
            topk,
            Buffer::new(lp, logits.len()),
            Buffer::new(ip, ids_len),
            Buffer::new(wp, w_len),
            scoring,
        )
    }?;
    crate::ops::route(rt, stream, &p)
}
