//! The softmax table contract: key fields, parameters and their domains.
//!
//! Self-contained (it uses only `tuned`) because `build.rs` includes it too, to
//! check committed configs against the search space before baking them.

use tuned::{int_param, name_param, param_index, Field, KernelSchema, Value};

/// Softmax over the last dimension: key (dtype, cols), batch = rows.
pub static SOFTMAX: KernelSchema = KernelSchema {
    kernel: "softmax",
    key: &[Field::dtype("dtype"), Field::int("cols")],
    params: &[
        Field::name("strategy"),
        Field::int("threads"),
        Field::int("vec"),
        Field::int("rows"),
        Field::int("splits"),
        Field::int("keep"),
    ],
};

/// `row`: a group of `threads` threads per row, the row held in registers (a warp per
/// row at threads = 32, a block per row at threads = 1024), `rows` rows per block.
/// `online`: one block per row streams it twice (online max/sum, then write), for rows
/// too long for registers. `cluster`: one row split over `splits` blocks of a Hopper
/// thread-block cluster that exchange max and sum through distributed shared memory
/// (16 is a non-portable cluster size, which the launch allows on the function).
/// `staged`: `splits` blocks per row (1, or a Hopper cluster of up to 8), each streams its slice
/// of the row into shared memory once and writes the result from there: one pass over
/// HBM for rows too long for registers, as long as a slice fits shared memory.
pub const STRATEGIES: &[&str] = &["row", "online", "cluster", "staged"];
pub const THREADS: &[i64] = &[32, 64, 128, 256, 512, 1024];
/// Elements per vector access (at most 16 bytes, which `space` checks per dtype).
pub const VECS: &[i64] = &[1, 2, 4, 8];
pub const ROWS: &[i64] = &[1, 2, 4, 8, 16];
pub const SPLITS: &[i64] = &[1, 2, 4, 8, 16];
/// `keep`: 1 keeps pass 1's exponentials in registers (fp32, one per element the
/// thread holds) so that pass 2, which waits on the row's (max, sum), only multiplies;
/// `row` and `cluster` only. It pays where that wait is the critical path (few rows:
/// 2 x 128256 bf16 on the H200, 3.10 to 2.81 us) and costs registers elsewhere
/// (256 x 128256: 37.1 to 42.7 us), so the tuner decides.
pub const KEEPS: &[i64] = &[0, 1];
/// Most vectors one thread holds in registers in the `row` and `cluster` strategies.
pub const MAX_ITERS: i64 = 16;

pub const STRATEGY_AT: usize = param_index(&SOFTMAX, "strategy");
pub const THREADS_AT: usize = param_index(&SOFTMAX, "threads");
pub const VEC_AT: usize = param_index(&SOFTMAX, "vec");
pub const ROWS_AT: usize = param_index(&SOFTMAX, "rows");
pub const SPLITS_AT: usize = param_index(&SOFTMAX, "splits");
pub const KEEP_AT: usize = param_index(&SOFTMAX, "keep");

/// Checks a config's values against the parameter domains and the rules that tie
/// parameters together (independent of the problem).
pub fn check_config(values: &[Value]) -> Result<(), String> {
    let s = &SOFTMAX;
    let strategy = name_param(s, values, STRATEGY_AT, STRATEGIES)?;
    let threads = int_param(s, values, THREADS_AT, THREADS)?;
    int_param(s, values, VEC_AT, VECS)?;
    let rows = int_param(s, values, ROWS_AT, ROWS)?;
    let splits = int_param(s, values, SPLITS_AT, SPLITS)?;
    let keep = int_param(s, values, KEEP_AT, KEEPS)?;
    if threads * rows > 1024 {
        return Err(format!(
            "threads * rows = {} exceeds 1024 threads per block",
            threads * rows
        ));
    }
    match strategy {
        "cluster" if splits < 2 => Err("strategy `cluster` needs splits >= 2".into()),
        "staged" if splits > 8 => Err("strategy `staged` takes splits <= 8 (a portable cluster)".into()),
        "cluster" | "online" | "staged" if rows != 1 => Err(format!("strategy `{strategy}` takes rows = 1")),
        "row" | "online" if splits != 1 => Err(format!("strategy `{strategy}` takes splits = 1")),
        "online" | "staged" if keep != 0 => Err(format!("strategy `{strategy}` takes keep = 0")),
        _ => Ok(()),
    }
}
