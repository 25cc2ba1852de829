//! The GEMM key and launch configuration.

use tuned::{DType, Value};

use crate::schema::{check_config, GEMM, LAYOUTS};

/// Operand layout. See [`crate::schema::GEMM`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Nt,
    Nn,
}

impl Layout {
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Nt => "nt",
            Layout::Nn => "nn",
        }
    }
}

/// The static part of a GEMM: dtype, layout and the weight's n and k.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmKey {
    pub dtype: DType,
    pub layout: Layout,
    pub n: u32,
    pub k: u32,
}

impl GemmKey {
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        let dtype = tuned::dtype_key(&GEMM, values, "dtype")?;
        let layout = match values.get(1).and_then(Value::as_str) {
            Some("nt") => Layout::Nt,
            Some("nn") => Layout::Nn,
            other => {
                return Err(format!(
                    "key field `layout` must be one of {LAYOUTS:?}, got `{}`",
                    other.unwrap_or("?")
                ))
            }
        };
        let n = tuned::int_key(&GEMM, values, "n", 1, i32::MAX as i64)? as u32;
        let k = tuned::int_key(&GEMM, values, "k", 1, i32::MAX as i64)? as u32;
        Ok(GemmKey { dtype, layout, n, k })
    }
}

/// A GEMM launch configuration: output tile, k step, warps, pipeline depth, split-K
/// and the tile-grouping factor along m (for L2 reuse).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmConfig {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub warps: u32,
    pub stages: u32,
    pub split_k: u32,
    pub group_m: u32,
}

impl GemmConfig {
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        check_config(values)?;
        let v = |i: usize| values[i].as_int().unwrap_or(0) as u32;
        Ok(GemmConfig {
            block_m: v(0),
            block_n: v(1),
            block_k: v(2),
            warps: v(3),
            stages: v(4),
            split_k: v(5),
            group_m: v(6),
        })
    }

    pub fn values(&self) -> Vec<Value> {
        [
            self.block_m,
            self.block_n,
            self.block_k,
            self.warps,
            self.stages,
            self.split_k,
            self.group_m,
        ]
        .into_iter()
        .map(|x| Value::Int(x as i64))
        .collect()
    }

    /// Shared memory the operand pipeline takes, in bytes.
    pub fn smem_bytes(&self, dtype: DType) -> usize {
        (self.block_m + self.block_n) as usize * self.block_k as usize * dtype.size() * self.stages as usize
    }
}

impl std::fmt::Display for GemmConfig {
    /// The parameters by name, as `kernels plan` prints them:
    /// `block_m=64 block_n=128 block_k=64 warps=4 stages=3 split_k=1 group_m=8`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        tuned::write_config(f, GEMM.param_names().zip(&self.values()))
    }
}

#[cfg(test)]
mod display_tests {
    use tuned::{resolve_serve, DynKernel, StaticKey, Target};

    use super::*;
    use crate::{Gemm, GEMM as GEMM_KERNEL};

    #[test]
    fn a_config_displays_as_kernels_plan_prints_it() {
        let c = GemmConfig {
            block_m: 64,
            block_n: 128,
            block_k: 64,
            warps: 4,
            stages: 3,
            split_k: 1,
            group_m: 8,
        };
        assert_eq!(
            c.to_string(),
            "block_m=64 block_n=128 block_k=64 warps=4 stages=3 split_k=1 group_m=8"
        );
        // What `kernels plan` prints for a call (the resolution by name) is the resolved
        // config's Display.
        for (n, k, m) in [(6144, 4096, 1), (4096, 4096, 16), (28672, 4096, 4096)] {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            let (n_text, k_text) = (n.to_string(), k.to_string());
            let pairs = [
                ("dtype", "bf16"),
                ("layout", "nt"),
                ("n", &n_text),
                ("k", &k_text),
            ];
            let by_name = StaticKey::from_pairs(&GEMM, pairs).unwrap();
            let plan = GEMM_KERNEL.resolve(Target::Sm90, &by_name, m).unwrap();
            let config = resolve_serve::<Gemm>(Target::Sm90, &key, m).config;
            assert_eq!(config.to_string(), plan.config_text(), "n {n} k {k} m {m}");
        }
    }
}
