//! The RMSNorm key and launch configuration (shared by the plain and fused kernels).

use tuned::{DType, Value};

use crate::schema::{check_config, LATE_AT, OCC_AT, RMSNORM, ROWS_AT, SPLITS_AT, THREADS_AT, VEC_AT};

/// The static part of an RMSNorm problem: element type and hidden size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RmsNormKey {
    pub dtype: DType,
    pub cols: u32,
}

impl RmsNormKey {
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        let dtype = tuned::dtype_key(&RMSNORM, values, "dtype")?;
        let cols = tuned::int_key(&RMSNORM, values, "cols", 1, i32::MAX as i64)? as u32;
        Ok(RmsNormKey { dtype, cols })
    }
}

/// An RMSNorm launch configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RmsNormConfig {
    /// Threads per row.
    pub threads: u32,
    /// Elements per vector access.
    pub vec: u32,
    /// Rows per block.
    pub rows: u32,
    /// Resident blocks per SM the launch allows; 0: no cap (see `schema::OCCS`).
    pub occ: u32,
    /// Blocks per row: 1, or a thread-block cluster of that many (see `schema::SPLITS`).
    pub splits: u32,
    /// Fused: store the updated residual after the reduction (1) rather than as soon
    /// as it is summed (0); the plain kernel takes 0 (see `schema::LATES`).
    pub late: u32,
}

impl RmsNormConfig {
    /// Decodes and checks a config (values in parameter order).
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        check_config(values)?;
        Self::decode(values).ok_or_else(|| "config does not decode".to_string())
    }

    /// Decodes values that already passed [`check_config`] (a baked entry).
    pub fn decode(values: &[Value]) -> Option<Self> {
        let int = |i: usize| values.get(i).and_then(Value::as_int).map(|v| v as u32);
        Some(RmsNormConfig {
            threads: int(THREADS_AT)?,
            vec: int(VEC_AT)?,
            rows: int(ROWS_AT)?,
            occ: int(OCC_AT)?,
            splits: int(SPLITS_AT)?,
            late: int(LATE_AT)?,
        })
    }

    pub fn values(&self) -> Vec<Value> {
        vec![
            Value::Int(self.threads as i64),
            Value::Int(self.vec as i64),
            Value::Int(self.rows as i64),
            Value::Int(self.occ as i64),
            Value::Int(self.splits as i64),
            Value::Int(self.late as i64),
        ]
    }

    pub fn block_threads(&self) -> u32 {
        self.threads * self.rows
    }

    /// Threads sharing one row: `threads`, times `splits` blocks of a cluster.
    pub fn row_threads(&self) -> u32 {
        self.threads * self.splits
    }

    /// Vectors each thread handles per row, at most: the row's `cols / vec` aligned
    /// vectors (fewer when the row has a head; see cuda/rmsnorm.cu) over the row's
    /// threads, at least 1 as the device code sizes it.
    pub fn iters(&self, cols: u32) -> u32 {
        (cols / self.vec.max(1)).div_ceil(self.row_threads()).max(1)
    }
}

impl std::fmt::Display for RmsNormConfig {
    /// The parameters by name, as `kernels plan` prints them (plain and fused kernels
    /// alike): `threads=256 vec=2 rows=1 occ=0 splits=1 late=0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        tuned::write_config(f, RMSNORM.param_names().zip(&self.values()))
    }
}

#[cfg(test)]
mod display_tests {
    use tuned::{resolve_serve, DynKernel, StaticKey, Target};

    use super::*;
    use crate::{FusedAddRmsNorm, RmsNorm, FUSED_ADD_RMSNORM, RMSNORM as RMSNORM_KERNEL};

    #[test]
    fn a_config_displays_as_kernels_plan_prints_it() {
        let c = RmsNormConfig {
            threads: 256,
            vec: 2,
            rows: 1,
            occ: 0,
            splits: 1,
            late: 0,
        };
        assert_eq!(c.to_string(), "threads=256 vec=2 rows=1 occ=0 splits=1 late=0");
        // What `kernels plan` prints for a call (the resolution by name) is the resolved
        // config's Display, for both kernels, table entries and defaults alike.
        for (cols, batch) in [(4096, 1), (5120, 7), (7168, 4096)] {
            let key = RmsNormKey {
                dtype: DType::Bf16,
                cols,
            };
            let by_name =
                StaticKey::from_pairs(&RMSNORM, [("dtype", "bf16"), ("cols", cols.to_string().as_str())])
                    .unwrap();
            let plan = RMSNORM_KERNEL.resolve(Target::Sm90, &by_name, batch).unwrap();
            let config = resolve_serve::<RmsNorm>(Target::Sm90, &key, batch).config;
            assert_eq!(
                config.to_string(),
                plan.config_text(),
                "rmsnorm cols {cols} batch {batch}"
            );
            let plan = FUSED_ADD_RMSNORM.resolve(Target::Sm90, &by_name, batch).unwrap();
            let config = resolve_serve::<FusedAddRmsNorm>(Target::Sm90, &key, batch).config;
            assert_eq!(
                config.to_string(),
                plan.config_text(),
                "fused cols {cols} batch {batch}"
            );
        }
    }
}
