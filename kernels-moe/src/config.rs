//! The fused-MoE key and launch configuration.

use tuned::{DType, Value};

use crate::schema::{check_config, MOE};

/// The static part of a fused-MoE problem, fixed by the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MoeKey {
    pub dtype: DType,
    pub experts: u32,
    /// Intermediate size per expert (after tensor parallelism).
    pub n: u32,
    /// Hidden size.
    pub k: u32,
    pub topk: u32,
}

impl MoeKey {
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        let dtype = tuned::dtype_key(&MOE, values, "dtype")?;
        let experts = tuned::int_key(&MOE, values, "experts", 1, 4096)? as u32;
        let n = tuned::int_key(&MOE, values, "n", 1, i32::MAX as i64)? as u32;
        let k = tuned::int_key(&MOE, values, "k", 1, i32::MAX as i64)? as u32;
        let topk = tuned::int_key(&MOE, values, "topk", 1, experts as i64)? as u32;
        Ok(MoeKey {
            dtype,
            experts,
            n,
            k,
            topk,
        })
    }
}

/// A fused-MoE launch configuration, shared by both grouped GEMMs: `block_m` rows of
/// one expert's pairs by `block_n` output columns per block, `block_k` per pipeline
/// step, `warps` warps, `stages` shared-memory stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MoeConfig {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub warps: u32,
    pub stages: u32,
}

impl MoeConfig {
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        check_config(values)?;
        let v = |i: usize| values[i].as_int().unwrap_or(0) as u32;
        Ok(MoeConfig {
            block_m: v(0),
            block_n: v(1),
            block_k: v(2),
            warps: v(3),
            stages: v(4),
        })
    }

    pub fn values(&self) -> Vec<Value> {
        [self.block_m, self.block_n, self.block_k, self.warps, self.stages]
            .into_iter()
            .map(|x| Value::Int(x as i64))
            .collect()
    }

    /// Warps along m: two once a tile has 64 rows or more, so each warp's rows stay
    /// at 16-32 and its accumulators in registers.
    pub fn warps_m(&self) -> u32 {
        if self.block_m >= 64 {
            2
        } else {
            1
        }
    }

    /// Warps along n.
    pub fn warps_n(&self) -> u32 {
        self.warps / self.warps_m()
    }

    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.warps * 32
    }

    /// Dynamic shared memory of the gate-up GEMM (two weight tiles per stage; the down
    /// GEMM takes less): rows padded by 8 elements.
    pub fn smem_bytes(&self, dtype: DType) -> usize {
        self.stage_bytes(dtype, 2) * self.stages as usize
    }

    /// One pipeline stage with `weight_tiles` weight tiles.
    pub fn stage_bytes(&self, dtype: DType, weight_tiles: u32) -> usize {
        let rows = (self.block_m + weight_tiles * self.block_n) as usize;
        rows * (self.block_k as usize + 8) * dtype.size()
    }

    /// fp32 accumulators per thread in the gate-up GEMM (gate and up).
    pub fn accumulators(&self) -> u32 {
        let mi = self.block_m / self.warps_m() / 16;
        let nj = self.block_n / self.warps_n().max(1) / 8;
        2 * mi * nj * 4
    }
}

impl std::fmt::Display for MoeConfig {
    /// The parameters by name, as `kernels plan` prints them:
    /// `block_m=64 block_n=128 block_k=64 warps=4 stages=3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        tuned::write_config(f, MOE.param_names().zip(&self.values()))
    }
}

#[cfg(test)]
mod display_tests {
    use tuned::{resolve_serve, DynKernel, StaticKey, Target};

    use super::*;
    use crate::{Moe, MOE as MOE_KERNEL};

    #[test]
    fn a_config_displays_as_kernels_plan_prints_it() {
        let c = MoeConfig {
            block_m: 64,
            block_n: 128,
            block_k: 64,
            warps: 4,
            stages: 3,
        };
        assert_eq!(
            c.to_string(),
            "block_m=64 block_n=128 block_k=64 warps=4 stages=3"
        );
        // What `kernels plan` prints for a call (the resolution by name) is the resolved
        // config's Display.
        for tokens in [1, 64, 4096] {
            let key = MoeKey {
                dtype: DType::Bf16,
                experts: 256,
                n: 256,
                k: 7168,
                topk: 8,
            };
            let pairs = [
                ("dtype", "bf16"),
                ("experts", "256"),
                ("n", "256"),
                ("k", "7168"),
                ("topk", "8"),
            ];
            let by_name = StaticKey::from_pairs(&MOE, pairs).unwrap();
            let plan = MOE_KERNEL.resolve(Target::Sm90, &by_name, tokens).unwrap();
            let config = resolve_serve::<Moe>(Target::Sm90, &key, tokens).config;
            assert_eq!(config.to_string(), plan.config_text(), "tokens {tokens}");
        }
    }
}
