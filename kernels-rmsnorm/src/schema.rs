//! The RMSNorm table contracts (plain and fused residual-add): key fields,
//! parameters and their domains. Both kernels share parameters and rules.
//!
//! Self-contained (it uses only `tuned`) because `build.rs` includes it too, to
//! check committed configs against the search space before baking them.

use tuned::{int_param, param_index, Field, KernelSchema, Value};

const KEY: &[Field] = &[Field::dtype("dtype"), Field::int("cols")];
const PARAMS: &[Field] = &[Field::int("threads"), Field::int("vec"), Field::int("rows")];

/// `y = x / rms(x) * weight`: key (dtype, cols = hidden size), batch = rows (tokens).
pub static RMSNORM: KernelSchema = KernelSchema {
    kernel: "rmsnorm",
    key: KEY,
    params: PARAMS,
};

/// `residual += x; x = rmsnorm(residual) * weight`, in place.
pub static FUSED_ADD_RMSNORM: KernelSchema = KernelSchema {
    kernel: "fused_add_rmsnorm",
    key: KEY,
    params: PARAMS,
};

/// Threads per row.
pub const THREADS: &[i64] = &[32, 64, 128, 256, 512, 1024];
/// Elements per vector access (at most 16 bytes, which `space` checks per dtype).
pub const VECS: &[i64] = &[1, 2, 4, 8];
/// Rows per block, each handled by its own `threads` threads.
pub const ROWS: &[i64] = &[1, 2, 4, 8, 16];
/// Most vectors one thread holds in registers between the reduction and the write;
/// longer rows are read a second time (from L2).
pub const MAX_ITERS: i64 = 16;

pub const THREADS_AT: usize = param_index(&RMSNORM, "threads");
pub const VEC_AT: usize = param_index(&RMSNORM, "vec");
pub const ROWS_AT: usize = param_index(&RMSNORM, "rows");

/// Checks a config's values against the parameter domains and the rules that tie
/// parameters together (independent of the problem).
pub fn check_config(values: &[Value]) -> Result<(), String> {
    let threads = int_param(&RMSNORM, values, THREADS_AT, THREADS)?;
    int_param(&RMSNORM, values, VEC_AT, VECS)?;
    let rows = int_param(&RMSNORM, values, ROWS_AT, ROWS)?;
    if threads * rows > 1024 {
        return Err(format!(
            "threads * rows = {} exceeds 1024 threads per block",
            threads * rows
        ));
    }
    Ok(())
}
