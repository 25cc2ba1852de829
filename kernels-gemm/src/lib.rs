//! GEMM for LLM linear layers: key, launch configuration, analytic default, search
//! space and baked tables.
//!
//! Status: the GEMM device kernel has not landed yet. This crate resolves configs
//! (baked table, else the analytic default) for planning and lookups; it launches
//! nothing.
//!
//! ```
//! use kernels_gemm::{Gemm, GemmKey, Layout};
//! use tuned::{resolve_serve, DType, Target};
//! let key = GemmKey { dtype: DType::Bf16, layout: Layout::Nt, n: 6144, k: 4096 };
//! let r = resolve_serve::<Gemm>(Target::Sm90, &key, 16);
//! assert_eq!(r.config.block_m, 16);
//! ```

pub mod config;
pub mod heuristic;
pub mod schema;
pub mod space;

pub use config::{GemmConfig, GemmKey, Layout};
pub use heuristic::analytic_default;

use tuned::{BakedTable, KernelSchema, KeyValues, Target, TunedKernel, Value};

mod baked {
    include!(concat!(env!("OUT_DIR"), "/tuned_tables.rs"));
}

pub use baked::SOURCE_FINGERPRINT;

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

#[cfg(test)]
mod tests {
    use super::*;
    use tuned::DType;

    #[test]
    fn default_fits_model_shapes() {
        for t in Target::ALL {
            for (n, k) in [
                (6144, 4096),
                (4096, 4096),
                (28672, 4096),
                (4096, 14336),
                (128256, 4096),
                (16, 16),
            ] {
                for m in [1, 16, 17, 100, 1024, 8192] {
                    let key = GemmKey {
                        dtype: DType::Bf16,
                        layout: Layout::Nt,
                        n,
                        k,
                    };
                    let c = analytic_default(t, &key, m);
                    assert!(schema::check_config(&c.values()).is_ok(), "{c:?}");
                    assert!(space::fits(t, &key, &c), "{t} n={n} k={k} m={m}: {c:?}");
                }
            }
        }
    }
}
