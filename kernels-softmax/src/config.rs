//! The softmax key and launch configuration.

use tuned::{DType, Target, Value};

use crate::schema::{check_config, KEEP_AT, ROWS_AT, SOFTMAX, SPLITS_AT, STRATEGY_AT, THREADS_AT, VEC_AT};

/// The static part of a softmax problem: element type and row length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SoftmaxKey {
    pub dtype: DType,
    pub cols: u32,
}

/// How rows are mapped onto threads. See [`crate::schema::STRATEGIES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    Row,
    Online,
    Cluster,
    Staged,
}

impl Strategy {
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::Row => "row",
            Strategy::Online => "online",
            Strategy::Cluster => "cluster",
            Strategy::Staged => "staged",
        }
    }
}

/// A softmax launch configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SoftmaxConfig {
    pub strategy: Strategy,
    /// Threads per row (per block for `online` and `cluster`).
    pub threads: u32,
    /// Elements per vector access.
    pub vec: u32,
    /// Rows per block (`row` only).
    pub rows: u32,
    /// Blocks per row (`cluster`; `staged`: 1 or a cluster).
    pub splits: u32,
    /// `row` and `cluster`: pass 1 keeps its exponentials in registers so pass 2 only
    /// scales them (softmax; log-softmax needs none). Always false for the others.
    pub keep: bool,
}

impl SoftmaxConfig {
    /// Decodes and checks a config (values in parameter order).
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        check_config(values)?;
        Self::decode(values).ok_or_else(|| "config does not decode".to_string())
    }

    /// Decodes values that already passed [`check_config`] (a baked entry).
    pub fn decode(values: &[Value]) -> Option<Self> {
        let int = |i: usize| values.get(i).and_then(Value::as_int).map(|v| v as u32);
        let strategy = match values.get(STRATEGY_AT)?.as_str()? {
            "row" => Strategy::Row,
            "online" => Strategy::Online,
            "cluster" => Strategy::Cluster,
            "staged" => Strategy::Staged,
            _ => return None,
        };
        Some(SoftmaxConfig {
            strategy,
            threads: int(THREADS_AT)?,
            vec: int(VEC_AT)?,
            rows: int(ROWS_AT)?,
            splits: int(SPLITS_AT)?,
            keep: int(KEEP_AT)? == 1,
        })
    }

    pub fn values(&self) -> Vec<Value> {
        vec![
            Value::str(self.strategy.name()),
            Value::Int(self.threads as i64),
            Value::Int(self.vec as i64),
            Value::Int(self.rows as i64),
            Value::Int(self.splits as i64),
            Value::Int(i64::from(self.keep)),
        ]
    }

    /// Threads per block.
    pub fn block_threads(&self) -> u32 {
        self.threads * self.rows
    }

    /// Vectors of a row each block owns: the row for `row` and `online`, 1/splits of
    /// it (rounded up; the last block's is shorter) for `cluster` and `staged`.
    pub fn slice_vectors(&self, key: &SoftmaxKey) -> u32 {
        (key.cols / self.vec.max(1)).div_ceil(self.splits.max(1))
    }

    /// Vectors of its slice a `staged` block holds in shared memory on `target`: the
    /// whole slice when it fits [`staged_smem_limit`], else as many whole rounds of
    /// `threads` vectors as fit; the device code holds the rest in registers (or reads
    /// it twice when long). 0 for the other strategies.
    pub fn stage_vectors(&self, target: Target, key: &SoftmaxKey) -> u32 {
        if self.strategy != Strategy::Staged {
            return 0;
        }
        let vec_bytes = self.vec * key.dtype.size() as u32;
        let slice = self.slice_vectors(key);
        let cap = (staged_smem_limit(target) / vec_bytes as u64) as u32;
        if slice <= cap {
            return slice;
        }
        (cap / self.threads) * self.threads
    }

    /// Dynamic shared memory per block on `target`, bytes (the staged stage; 0 for
    /// the other strategies).
    pub fn smem_bytes(&self, target: Target, key: &SoftmaxKey) -> u64 {
        self.stage_vectors(target, key) as u64 * self.vec as u64 * key.dtype.size() as u64
    }

    /// Vectors each thread handles per row (per split for `cluster`), at most: the
    /// row's `cols / vec` aligned vectors (fewer when the row has a head; see
    /// cuda/softmax.cu) over the threads, at least 1 as the device code sizes it.
    pub fn iters(&self, cols: u32) -> u32 {
        (cols / self.vec.max(1))
            .div_ceil(self.threads * self.splits)
            .max(1)
    }
}

impl SoftmaxKey {
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        let dtype = tuned::dtype_key(&SOFTMAX, values, "dtype")?;
        let cols = tuned::int_key(&SOFTMAX, values, "cols", 1, i32::MAX as i64)? as u32;
        Ok(SoftmaxKey { dtype, cols })
    }
}

/// Dynamic shared memory a staged block may take on `target`: the opt-in limit per
/// block (227 KiB on Hopper, 163 KiB on A100) less 1 KiB for the kernel's own
/// reduction slots. 0 where the strategy does not run (AMD).
pub const fn staged_smem_limit(target: Target) -> u64 {
    match target {
        Target::Sm90 => 232_448 - 1024,
        Target::Sm80 => 166_912 - 1024,
        _ => 0,
    }
}

impl std::fmt::Display for SoftmaxConfig {
    /// The parameters by name, as `kernels plan` prints them:
    /// `strategy=row threads=256 vec=8 rows=1 splits=1 keep=1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        tuned::write_config(f, SOFTMAX.param_names().zip(&self.values()))
    }
}

#[cfg(test)]
mod display_tests {
    use tuned::{resolve_serve, DynKernel, StaticKey};

    use super::*;
    use crate::{Softmax, SOFTMAX as SOFTMAX_KERNEL};

    #[test]
    fn a_config_displays_as_kernels_plan_prints_it() {
        let c = SoftmaxConfig {
            strategy: Strategy::Cluster,
            threads: 256,
            vec: 8,
            rows: 1,
            splits: 4,
            keep: true,
        };
        assert_eq!(
            c.to_string(),
            "strategy=cluster threads=256 vec=8 rows=1 splits=4 keep=1"
        );
        // What `kernels plan` prints for a call (the resolution by name) is the resolved
        // config's Display, table entries and defaults alike.
        for (cols, batch) in [(4096, 1), (128256, 7), (151936, 4096)] {
            let key = SoftmaxKey {
                dtype: DType::Bf16,
                cols,
            };
            let by_name =
                StaticKey::from_pairs(&SOFTMAX, [("dtype", "bf16"), ("cols", cols.to_string().as_str())])
                    .unwrap();
            let plan = SOFTMAX_KERNEL.resolve(Target::Sm90, &by_name, batch).unwrap();
            let config = resolve_serve::<Softmax>(Target::Sm90, &key, batch).config;
            assert_eq!(
                config.to_string(),
                plan.config_text(),
                "cols {cols} batch {batch}"
            );
        }
    }
}
