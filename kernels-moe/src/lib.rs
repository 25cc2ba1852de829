//! Fused mixture-of-experts GEMM: key, launch configuration, analytic default, search
//! space and baked tables.
//!
//! Status: the fused-MoE device kernel has not landed yet. This crate resolves configs
//! (baked table, else the analytic default) for planning and lookups; it launches
//! nothing.
//!
//! ```
//! use kernels_moe::{Moe, MoeKey};
//! use tuned::{resolve_serve, DType, Target};
//! let key = MoeKey { dtype: DType::Bf16, experts: 128, n: 768, k: 2048, topk: 8 };
//! let r = resolve_serve::<Moe>(Target::Sm90, &key, 64);
//! println!("{:?} from {}", r.config, r.source);
//! ```

pub mod config;
pub mod heuristic;
pub mod schema;
pub mod space;

pub use config::{MoeConfig, MoeKey};
pub use heuristic::analytic_default;

use tuned::{BakedTable, KernelSchema, KeyValues, Target, TunedKernel, Value};

mod baked {
    include!(concat!(env!("OUT_DIR"), "/tuned_tables.rs"));
}

pub use baked::SOURCE_FINGERPRINT;

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

#[cfg(test)]
mod tests {
    use super::*;
    use tuned::DType;

    #[test]
    fn default_fits_model_shapes() {
        for t in Target::ALL {
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
