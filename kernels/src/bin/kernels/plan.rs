//! Every kernel call of one transformer layer of a model, resolved as the serving
//! path resolves it. GPU-free.

use tuned::{DType, Resolution, StaticKey, Target, Value};

use crate::catalog::{Model, ModelKind, Routing};

/// One kernel call of a layer.
#[derive(Clone, Debug)]
pub struct PlannedCall {
    /// Where in the layer (`input_norm`, `qkv_proj`, ...).
    pub step: &'static str,
    pub launch: Launch,
}

/// What a call launches.
#[derive(Clone, Debug)]
pub enum Launch {
    /// A tuned kernel, with the config the serving path resolves.
    Tuned(Resolution),
    /// A launch with no tuned config (MoE routing: one warp a token): its entry point,
    /// what it is keyed by and its parameters in words.
    Fixed {
        kernel: &'static str,
        key: String,
        params: String,
    },
}

impl PlannedCall {
    /// The kernel (a tuned kernel's name, or a fixed launch's entry point).
    pub fn kernel(&self) -> &str {
        match &self.launch {
            Launch::Tuned(r) => r.kernel,
            Launch::Fixed { kernel, .. } => kernel,
        }
    }

    /// The static key in canonical form.
    pub fn key(&self) -> &str {
        match &self.launch {
            Launch::Tuned(r) => r.static_key.as_str(),
            Launch::Fixed { key, .. } => key,
        }
    }

    /// Where the config comes from (`fixed` for a launch without one).
    pub fn source(&self) -> &str {
        match &self.launch {
            Launch::Tuned(r) => r.source.name(),
            Launch::Fixed { .. } => "fixed",
        }
    }

    /// The config as `name=value` pairs.
    pub fn config_text(&self) -> String {
        match &self.launch {
            Launch::Tuned(r) => r.config_text(),
            Launch::Fixed { params, .. } => params.clone(),
        }
    }

    /// One JSON object: the resolution's (`Resolution::to_json`), or kernel, static_key,
    /// source `fixed` and params; and the step.
    pub fn to_json(&self) -> serde_json::Value {
        let mut o = match &self.launch {
            Launch::Tuned(r) => r.to_json(),
            Launch::Fixed { kernel, key, params } => serde_json::json!({
                "kernel": kernel, "static_key": key, "source": "fixed", "params": params,
            }),
        };
        o["step"] = self.step.into();
        o
    }
}

/// The routing call of an MoE layer: the router's logits (`dtype`) to each token's
/// `top_k` experts and weights.
fn routing_call(dtype: DType, experts: u32, top_k: u32, routing: &Routing) -> Launch {
    let key = format!("logits={},experts={experts},topk={top_k}", dtype.name());
    match *routing {
        Routing::Softmax { renormalize } => Launch::Fixed {
            kernel: "moe_topk_softmax",
            key,
            params: format!("renormalize={}", u8::from(renormalize)),
        },
        Routing::Grouped {
            n_group,
            topk_group,
            renormalize,
            scale,
        } => Launch::Fixed {
            kernel: "moe_grouped_topk",
            key,
            params: format!(
                "n_group={n_group} topk_group={topk_group} renormalize={} scale={scale}",
                u8::from(renormalize)
            ),
        },
    }
}

/// Why a plan could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError(pub String);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kernel calls of one layer of `model` (plus the final norm, LM head and
/// sampling softmax) at `tokens` tokens, tensor-parallel degree `tp`.
pub fn plan(
    model: &Model,
    target: Target,
    dtype: DType,
    tokens: u64,
    tp: u32,
) -> Result<Vec<PlannedCall>, PlanError> {
    if tokens == 0 {
        return Err(PlanError("--batch must be at least 1".into()));
    }
    let div = |what: &str, x: u32| -> Result<u32, PlanError> {
        if tp == 0 || !x.is_multiple_of(tp) {
            Err(PlanError(format!(
                "--tp {tp} does not divide {what} = {x} of {}",
                model.name
            )))
        } else {
            Ok(x / tp)
        }
    };
    let d = Value::str(dtype.name());
    let i = |x: u32| Value::Int(x as i64);
    let h = model.hidden;
    let mut calls: Vec<(&'static str, &'static str, Vec<Value>)> =
        vec![("input_norm", "rmsnorm", vec![d.clone(), i(h)])];
    // Fixed launches, by the index of the tuned call they follow.
    let mut fixed: Vec<(usize, PlannedCall)> = Vec::new();
    match &model.kind {
        &ModelKind::Dense {
            intermediate,
            heads,
            kv_heads,
            head_dim,
        } => {
            let qkv = div(
                "(heads + 2 kv_heads) * head_dim",
                (heads + 2 * kv_heads) * head_dim,
            )?;
            let o_k = div("heads * head_dim", heads * head_dim)?;
            calls.push((
                "qkv_proj",
                "gemm",
                vec![d.clone(), Value::str("nt"), i(qkv), i(h)],
            ));
            calls.push(("o_proj", "gemm", vec![d.clone(), Value::str("nt"), i(h), i(o_k)]));
            calls.push(("post_attn_norm", "fused_add_rmsnorm", vec![d.clone(), i(h)]));
            calls.push((
                "gate_up_proj",
                "gemm",
                vec![
                    d.clone(),
                    Value::str("nt"),
                    i(div("2 * intermediate", 2 * intermediate)?),
                    i(h),
                ],
            ));
            calls.push((
                "down_proj",
                "gemm",
                vec![
                    d.clone(),
                    Value::str("nt"),
                    i(h),
                    i(div("intermediate", intermediate)?),
                ],
            ));
        }
        ModelKind::Moe {
            moe_intermediate,
            experts,
            top_k,
            routing,
        } => {
            let (moe_intermediate, experts, top_k) = (*moe_intermediate, *experts, *top_k);
            calls.push(("post_attn_norm", "fused_add_rmsnorm", vec![d.clone(), i(h)]));
            calls.push((
                "router",
                "gemm",
                vec![d.clone(), Value::str("nt"), i(experts), i(h)],
            ));
            fixed.push((
                calls.len(),
                PlannedCall {
                    step: "routing",
                    launch: routing_call(dtype, experts, top_k, routing),
                },
            ));
            calls.push((
                "experts",
                "moe",
                vec![
                    d.clone(),
                    i(experts),
                    i(div("moe_intermediate", moe_intermediate)?),
                    i(h),
                    i(top_k),
                ],
            ));
        }
    }
    calls.push(("final_norm", "fused_add_rmsnorm", vec![d.clone(), i(h)]));
    calls.push((
        "lm_head",
        "gemm",
        vec![d.clone(), Value::str("nt"), i(div("vocab", model.vocab)?), i(h)],
    ));
    calls.push(("sampling_softmax", "softmax", vec![d, i(model.vocab)]));

    let mut out = Vec::new();
    for (index, (step, kernel, key)) in calls.into_iter().enumerate() {
        while let Some(at) = fixed.iter().position(|(i, _)| *i == index) {
            out.push(fixed.remove(at).1);
        }
        let k = kernels::kernel(kernel)
            .ok_or_else(|| PlanError(format!("kernel `{kernel}` is not registered")))?;
        let key = StaticKey::new(k.schema(), key).map_err(PlanError)?;
        let resolution = k
            .resolve(target, &key, tokens)
            .map_err(|e| PlanError(format!("{step}: {e}")))?;
        out.push(PlannedCall {
            step,
            launch: Launch::Tuned(resolution),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{find, models};

    #[test]
    fn every_model_plans_at_its_tp() {
        for m in models() {
            for &tp in &m.tp {
                let calls = plan(&m, Target::Sm90, DType::Bf16, 7, tp).unwrap();
                assert!(calls.len() >= 6, "{}", m.name);
                assert_eq!(calls[0].kernel(), "rmsnorm");
            }
        }
    }

    #[test]
    fn tp_that_does_not_divide_is_an_error() {
        let m = find("Qwen2.5-7B").unwrap();
        let e = plan(&m, Target::Sm90, DType::Bf16, 1, 3).unwrap_err();
        assert!(e.0.contains("--tp 3"), "{e}");
    }

    #[test]
    fn llama_8b_shapes() {
        let m = find("Llama-3.1-8B").unwrap();
        let calls = plan(&m, Target::Sm90, DType::Bf16, 16, 1).unwrap();
        let key = |step: &str| calls.iter().find(|c| c.step == step).unwrap().key().to_string();
        assert_eq!(key("qkv_proj"), "dtype=bf16,layout=nt,n=6144,k=4096");
        assert_eq!(key("down_proj"), "dtype=bf16,layout=nt,n=4096,k=14336");
        assert_eq!(key("sampling_softmax"), "dtype=bf16,cols=128256");
    }
}

#[cfg(test)]
mod moe_tests {
    use super::*;
    use crate::catalog::find;

    /// The MoE layer: the router GEMM, the routing launch, then the fused MoE with the
    /// config `kernels_moe` resolves for the model's key.
    #[test]
    fn an_moe_layer_routes_then_runs_the_fused_moe_with_its_resolved_config() {
        for (model, tp, routing, key) in [
            ("Mixtral-8x7B", 2, "moe_topk_softmax", (8, 7168, 4096, 2)),
            ("Qwen3-30B-A3B", 1, "moe_topk_softmax", (128, 768, 2048, 8)),
            ("DeepSeek-V3", 8, "moe_grouped_topk", (256, 256, 7168, 8)),
        ] {
            let m = find(model).unwrap();
            for tokens in [1, 64, 4096] {
                let calls = plan(&m, Target::Sm90, DType::Bf16, tokens, tp).unwrap();
                let steps: Vec<&str> = calls.iter().map(|c| c.step).collect();
                let at = steps.iter().position(|s| *s == "router").unwrap();
                assert_eq!(steps[at..at + 3], ["router", "routing", "experts"], "{model}");
                assert_eq!(calls[at + 1].kernel(), routing);
                assert_eq!(calls[at + 1].source(), "fixed");
                let (experts, n, k, topk) = key;
                let moe = kernels::moe::MoeKey {
                    dtype: DType::Bf16,
                    experts,
                    n,
                    k,
                    topk,
                };
                let want = kernels::resolve_serve::<kernels::moe::Moe>(Target::Sm90, &moe, tokens);
                assert_eq!(
                    calls[at + 2].config_text(),
                    want.config.to_string(),
                    "{model} {tokens}"
                );
                assert_eq!(calls[at + 2].source(), want.source.name());
            }
        }
        let ds = plan(&find("DeepSeek-V3").unwrap(), Target::Sm90, DType::Bf16, 1, 8).unwrap();
        let routing = ds.iter().find(|c| c.step == "routing").unwrap();
        assert_eq!(
            routing.config_text(),
            "n_group=8 topk_group=4 renormalize=1 scale=2.5"
        );
        assert_eq!(routing.to_json()["source"], "fixed");
    }

    /// tuned/shapes/moe.json holds the fused-MoE key of every MoE model of the catalog
    /// at each of its tp degrees, tokens on the log grid 1..16384.
    #[test]
    fn the_moe_shape_set_is_the_catalogs_moe_layers() {
        use std::collections::BTreeSet;
        let mut want = BTreeSet::new();
        for m in crate::catalog::models() {
            for &tp in &m.tp {
                for c in plan(&m, Target::Sm90, DType::Bf16, 1, tp).unwrap() {
                    if c.kernel() == "moe" {
                        for b in 0..15 {
                            want.insert((c.key().to_string(), 1u64 << b));
                        }
                    }
                }
            }
        }
        let path = crate::variants::default_shapes_dir().join("moe.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let schema = kernels::kernel("moe").unwrap().schema();
        let got: BTreeSet<(String, u64)> = kernels_core::tune::parse_shapes(schema, &text, "moe.json")
            .unwrap()
            .into_iter()
            .map(|(k, b)| (k.to_string(), b))
            .collect();
        assert_eq!(got, want);
        assert_eq!(want.len(), 4 * 15);
    }
}
