//! The fused-MoE key and launch configuration.

use tuned::{DType, Value};

use crate::schema::{check_config, BLOCK_K_AT, BLOCK_M_AT, BLOCK_N_AT, MOE, PATH_AT, STAGES_AT, WARPS_AT};

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

/// The kernel a config runs: the GEMM's paths (mma.sync; wgmma with TMA; wgmma with
/// swapped operands), named as [`crate::schema::PATHS`] lists them.
pub use kernels_gemm::Path;

/// A fused-MoE launch configuration, shared by both grouped GEMMs: the kernel `path`,
/// `block_m` rows of one expert's pairs by `block_n` output columns per block,
/// `block_k` per pipeline step, `warps` warps (on the wgmma paths: consumer warps, a
/// producer warpgroup added), `stages` shared-memory stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MoeConfig {
    pub path: Path,
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub warps: u32,
    pub stages: u32,
}

/// Bytes of one 64-element (16-bit) row of a wgmma operand tile: one 128-byte swizzle
/// row.
const WGMMA_ROW_BYTES: usize = 128;

/// Shared memory of one consumer warpgroup's epilogue staging on the unswapped wgmma
/// path (`STAGING_BYTES` in `cuda/moe.cu`): 64 rows of 128 bytes.
pub const WGMMA_STAGING_BYTES: usize = 64 * WGMMA_ROW_BYTES;

impl MoeConfig {
    /// A config of the wgmma paths (`path` `wgmma` or `wgmma_swap`): `block_m` pairs by
    /// `block_n` weight rows, k steps of 64 (one 128-byte swizzle row), `warps` consumer
    /// warps (4 a warpgroup), a ring of `stages`.
    pub const fn wgmma(path: Path, block_m: u32, block_n: u32, warps: u32, stages: u32) -> MoeConfig {
        MoeConfig {
            path,
            block_m,
            block_n,
            block_k: 64,
            warps,
            stages,
        }
    }

    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        check_config(values)?;
        let v = |i: usize| values[i].as_int().unwrap_or(0) as u32;
        let path = match values[PATH_AT].as_str() {
            Some("mma") => Path::Mma,
            Some("wgmma") => Path::Wgmma,
            Some("wgmma_swap") => Path::WgmmaSwap,
            other => return Err(format!("unknown path {other:?}")),
        };
        Ok(MoeConfig {
            path,
            block_m: v(BLOCK_M_AT),
            block_n: v(BLOCK_N_AT),
            block_k: v(BLOCK_K_AT),
            warps: v(WARPS_AT),
            stages: v(STAGES_AT),
        })
    }

    pub fn values(&self) -> Vec<Value> {
        let mut v = vec![Value::str(self.path.name())];
        v.extend(
            [self.block_m, self.block_n, self.block_k, self.warps, self.stages]
                .into_iter()
                .map(|x| Value::Int(x as i64)),
        );
        v
    }

    /// Warps along m (mma path): two once a tile has 64 rows or more, so each warp's
    /// rows stay at 16-32 and its accumulators in registers.
    pub fn warps_m(&self) -> u32 {
        if self.block_m >= 64 {
            2
        } else {
            1
        }
    }

    /// Warps along n (mma path).
    pub fn warps_n(&self) -> u32 {
        self.warps / self.warps_m()
    }

    /// Consumer warpgroups of a wgmma config (4 warps each).
    pub fn consumers(&self) -> u32 {
        self.warps / 4
    }

    /// A wgmma config's operand tiles: (rows on wgmma's 64-row side, rows on its N
    /// side) per block. `wgmma`: pairs, then weight rows; `wgmma_swap`: weight rows, then
    /// pairs; [`paired`](Self::paired): the gate and up tiles together, then pairs.
    pub fn wgmma_tile(&self) -> (u32, u32) {
        match self.path {
            Path::WgmmaSwap if self.paired() => (2 * self.block_n, self.block_m),
            Path::WgmmaSwap => (self.block_n, self.block_m),
            _ => (self.block_m, self.block_n),
        }
    }

    /// The swapped path with weight tiles of 32 rows: the gate-up step's gate and up
    /// tiles form one 64-row product (32 output columns a tile, twice the items of a
    /// 64-row tile for decode steps with fewer items than SMs), and the down step takes
    /// tiles of 64 rows ([`step_block_n`](Self::step_block_n)).
    pub fn paired(&self) -> bool {
        self.path == Path::WgmmaSwap && self.block_n == 32
    }

    /// Weight rows of one weight tile of a GEMM step: `block_n`, except the down step
    /// of the unswapped wgmma path and of the paired swapped one, which take `2 *
    /// block_n` (one tile as wide as the
    /// gate-up step's gate and up tiles together). Its stage then holds as many bytes and
    /// a consumer as many accumulators as the gate-up step's, and each byte a block moves
    /// into shared memory feeds 2 * block_m * 2 block_n / (block_m + 2 block_n) FLOPs
    /// instead of 2 * block_m * block_n / (block_m + block_n): 85 against 64 a byte at
    /// 128 x 128, where the blocks' loads from L2, not the tensor cores, bound the step.
    pub fn step_block_n(&self, up: bool) -> u32 {
        if self.wide_down() && !up {
            2 * self.block_n
        } else {
            self.block_n
        }
    }

    /// Whether the down step takes the wide weight tile (`step_block_n`): the unswapped
    /// path and the paired swapped one.
    pub fn wide_down(&self) -> bool {
        self.path == Path::Wgmma || self.paired()
    }

    /// Weight tiles a stage of a GEMM step holds, counted in `block_n` rows: 2 for the
    /// gate-up step (gate and up) and for the wide down tile, else 1.
    pub fn step_weight_tiles(&self, up: bool) -> u32 {
        if up || self.wide_down() {
            2
        } else {
            1
        }
    }

    /// Threads per block (the wgmma paths add a producer warpgroup).
    pub fn threads(&self) -> u32 {
        if self.path.is_wgmma() {
            (self.warps + 4) * 32
        } else {
            self.warps * 32
        }
    }

    /// Dynamic shared memory of the gate-up GEMM (two weight tiles per stage; the down
    /// GEMM takes as much or less).
    pub fn smem_bytes(&self, dtype: DType) -> usize {
        self.gemm_smem_bytes(dtype, 2)
    }

    /// Dynamic shared memory of a grouped GEMM with `weight_tiles` weight tiles per
    /// stage: the ring, plus 1024 bytes on the wgmma paths to align it to the swizzle
    /// atom, plus on the unswapped wgmma path each consumer warpgroup's epilogue staging
    /// ([`WGMMA_STAGING_BYTES`]).
    pub fn gemm_smem_bytes(&self, dtype: DType, weight_tiles: u32) -> usize {
        let ring = self.stage_bytes(dtype, weight_tiles) * self.stages as usize;
        if self.path == Path::Wgmma {
            ring + 1024 + self.consumers() as usize * WGMMA_STAGING_BYTES
        } else if self.path.is_wgmma() {
            ring + 1024
        } else {
            ring
        }
    }

    /// One pipeline stage with `weight_tiles` weight tiles: on the mma path rows padded
    /// by 8 elements; on the wgmma paths rows of one 128-byte swizzle row.
    pub fn stage_bytes(&self, dtype: DType, weight_tiles: u32) -> usize {
        let rows = (self.block_m + weight_tiles * self.block_n) as usize;
        if self.path.is_wgmma() {
            rows * WGMMA_ROW_BYTES
        } else {
            rows * (self.block_k as usize + 8) * dtype.size()
        }
    }

    /// fp32 accumulators per thread in the gate-up GEMM (gate and up); on the wgmma
    /// paths per consumer thread (an m64 product of width N holds N / 2 a thread).
    pub fn accumulators(&self) -> u32 {
        if self.path.is_wgmma() {
            let (x, y) = self.wgmma_tile();
            let per_consumer = x / self.consumers().max(1);
            return 2 * (per_consumer / 64) * (y / 2);
        }
        let mi = self.block_m / self.warps_m() / 16;
        let nj = self.block_n / self.warps_n().max(1) / 8;
        2 * mi * nj * 4
    }
}

impl std::fmt::Display for MoeConfig {
    /// The parameters by name, as `kernels plan` prints them:
    /// `path=mma block_m=64 block_n=128 block_k=64 warps=4 stages=3`.
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
            path: Path::Mma,
            block_m: 64,
            block_n: 128,
            block_k: 64,
            warps: 4,
            stages: 3,
        };
        assert_eq!(
            c.to_string(),
            "path=mma block_m=64 block_n=128 block_k=64 warps=4 stages=3"
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
