//! The model catalog: public model dimensions (`models.json`, kept in this crate)
//! from which the kernel calls of a transformer layer are derived.

use serde_json::Value as Json;

const MODELS_JSON: &str = include_str!("../../../models.json");

/// One model's dimensions.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub name: String,
    pub hidden: u32,
    pub vocab: u32,
    /// Tensor-parallel degrees the model is served at.
    pub tp: Vec<u32>,
    pub kind: ModelKind,
}

/// What the feed-forward part of a layer is.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelKind {
    Dense {
        intermediate: u32,
        heads: u32,
        kv_heads: u32,
        head_dim: u32,
    },
    Moe {
        moe_intermediate: u32,
        experts: u32,
        top_k: u32,
        routing: Routing,
    },
}

/// How an MoE model's router picks its experts (`kernels_moe::plan::Scoring`).
#[derive(Clone, Debug, PartialEq)]
pub enum Routing {
    /// Softmax over the logits, then the top k; `renormalize` rescales their weights to
    /// sum to 1.
    Softmax { renormalize: bool },
    /// DeepSeek-V3's grouped top-k: `n_group` groups, the best `topk_group` kept,
    /// weights (renormalised) times `scale`.
    Grouped {
        n_group: u32,
        topk_group: u32,
        renormalize: bool,
        scale: f32,
    },
}

impl Routing {
    fn of(m: &Json) -> Routing {
        let r = &m["routing"];
        let renormalize = r["renormalize"].as_bool().unwrap_or(false);
        match r["scoring"].as_str() {
            Some("grouped") => Routing::Grouped {
                n_group: r["n_group"].as_u64().unwrap_or(1) as u32,
                topk_group: r["topk_group"].as_u64().unwrap_or(1) as u32,
                renormalize,
                scale: r["scale"].as_f64().unwrap_or(1.0) as f32,
            },
            _ => Routing::Softmax { renormalize },
        }
    }
}

/// Every model of the catalog.
pub fn models() -> Vec<Model> {
    let json: Json = serde_json::from_str(MODELS_JSON).expect("models.json is valid JSON (checked by tests)");
    let num = |m: &Json, f: &str| m[f].as_u64().unwrap_or(0) as u32;
    let tp = |m: &Json| -> Vec<u32> {
        m["tp"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32).collect())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for m in json["dense"].as_array().into_iter().flatten() {
        out.push(Model {
            name: m["name"].as_str().unwrap_or_default().to_string(),
            hidden: num(m, "hidden"),
            vocab: num(m, "vocab"),
            tp: tp(m),
            kind: ModelKind::Dense {
                intermediate: num(m, "intermediate"),
                heads: num(m, "heads"),
                kv_heads: num(m, "kv_heads"),
                head_dim: num(m, "head_dim"),
            },
        });
    }
    for m in json["moe"].as_array().into_iter().flatten() {
        out.push(Model {
            name: m["name"].as_str().unwrap_or_default().to_string(),
            hidden: num(m, "hidden"),
            vocab: num(m, "vocab"),
            tp: tp(m),
            kind: ModelKind::Moe {
                moe_intermediate: num(m, "moe_intermediate"),
                experts: num(m, "experts"),
                top_k: num(m, "top_k"),
                routing: Routing::of(m),
            },
        });
    }
    out
}

/// The model named `name` (case-insensitive).
pub fn find(name: &str) -> Option<Model> {
    models().into_iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_parses_every_model() {
        let ms = models();
        assert!(ms.len() >= 7);
        for m in &ms {
            assert!(m.hidden > 0 && m.vocab > 0 && !m.tp.is_empty(), "{m:?}");
        }
        assert!(find("llama-3.1-8b").is_some());
        assert!(matches!(
            find("DeepSeek-V3").unwrap().kind,
            ModelKind::Moe {
                experts: 256,
                routing: Routing::Grouped {
                    n_group: 8,
                    topk_group: 4,
                    ..
                },
                ..
            }
        ));
        assert!(matches!(
            find("Mixtral-8x7B").unwrap().kind,
            ModelKind::Moe {
                routing: Routing::Softmax { renormalize: true },
                ..
            }
        ));
    }
}
