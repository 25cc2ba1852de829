//! Every kernel call of one transformer layer of a model, resolved as the serving
//! path resolves it. GPU-free.

use tuned::{DType, Resolution, StaticKey, Target, Value};

use crate::catalog::{Model, ModelKind};

/// One kernel call of a layer.
#[derive(Clone, Debug)]
pub struct PlannedCall {
    /// Where in the layer (`input_norm`, `qkv_proj`, ...).
    pub step: &'static str,
    pub resolution: Resolution,
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
    match model.kind {
        ModelKind::Dense {
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
        } => {
            calls.push(("post_attn_norm", "fused_add_rmsnorm", vec![d.clone(), i(h)]));
            calls.push((
                "router",
                "gemm",
                vec![d.clone(), Value::str("nt"), i(experts), i(h)],
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

    calls
        .into_iter()
        .map(|(step, kernel, key)| {
            let k = kernels::kernel(kernel)
                .ok_or_else(|| PlanError(format!("kernel `{kernel}` is not registered")))?;
            let key = StaticKey::new(k.schema(), key).map_err(PlanError)?;
            let resolution = k
                .resolve(target, &key, tokens)
                .map_err(|e| PlanError(format!("{step}: {e}")))?;
            Ok(PlannedCall { step, resolution })
        })
        .collect()
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
                assert_eq!(calls[0].resolution.kernel, "rmsnorm");
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
        let key = |step: &str| {
            calls
                .iter()
                .find(|c| c.step == step)
                .unwrap()
                .resolution
                .static_key
                .to_string()
        };
        assert_eq!(key("qkv_proj"), "dtype=bf16,layout=nt,n=6144,k=4096");
        assert_eq!(key("down_proj"), "dtype=bf16,layout=nt,n=4096,k=14336");
        assert_eq!(key("sampling_softmax"), "dtype=bf16,cols=128256");
    }
}
