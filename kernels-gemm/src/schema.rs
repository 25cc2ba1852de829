//! The GEMM table contract: key fields, parameters and their domains.
//!
//! Self-contained (it uses only `tuned`) because `build.rs` includes it too.

use tuned::{int_param, param_index, Field, KernelSchema, Value};

/// `C[m, n] = A[m, k] · op(B)`: key (dtype, layout, n, k), batch = m (tokens).
/// Layout `nt`: B is `[n, k]` row-major (a linear layer's weight); `nn`: B is `[k, n]`.
pub static GEMM: KernelSchema = KernelSchema {
    kernel: "gemm",
    key: &[
        Field::dtype("dtype"),
        Field::name("layout"),
        Field::int("n"),
        Field::int("k"),
    ],
    params: &[
        Field::int("block_m"),
        Field::int("block_n"),
        Field::int("block_k"),
        Field::int("warps"),
        Field::int("stages"),
        Field::int("split_k"),
        Field::int("group_m"),
    ],
};

pub const LAYOUTS: &[&str] = &["nt", "nn"];
pub const BLOCK_M: &[i64] = &[16, 32, 64, 128, 256];
pub const BLOCK_N: &[i64] = &[16, 32, 64, 128, 256];
pub const BLOCK_K: &[i64] = &[16, 32, 64, 128, 256];
pub const WARPS: &[i64] = &[4, 8];
pub const STAGES: &[i64] = &[2, 3, 4, 5];
pub const SPLIT_K: &[i64] = &[1, 2, 4, 8, 16];
pub const GROUP_M: &[i64] = &[1, 4, 8, 16, 32];

pub const BLOCK_M_AT: usize = param_index(&GEMM, "block_m");
pub const BLOCK_N_AT: usize = param_index(&GEMM, "block_n");
pub const BLOCK_K_AT: usize = param_index(&GEMM, "block_k");
pub const WARPS_AT: usize = param_index(&GEMM, "warps");
pub const STAGES_AT: usize = param_index(&GEMM, "stages");
pub const SPLIT_K_AT: usize = param_index(&GEMM, "split_k");
pub const GROUP_M_AT: usize = param_index(&GEMM, "group_m");

/// Checks a config's values against the parameter domains.
pub fn check_config(values: &[Value]) -> Result<(), String> {
    let s = &GEMM;
    int_param(s, values, BLOCK_M_AT, BLOCK_M)?;
    int_param(s, values, BLOCK_N_AT, BLOCK_N)?;
    int_param(s, values, BLOCK_K_AT, BLOCK_K)?;
    int_param(s, values, WARPS_AT, WARPS)?;
    int_param(s, values, STAGES_AT, STAGES)?;
    int_param(s, values, SPLIT_K_AT, SPLIT_K)?;
    int_param(s, values, GROUP_M_AT, GROUP_M)?;
    Ok(())
}
