//! The fused-MoE table contract: key fields, parameters and their domains.
//!
//! Self-contained (it uses only `tuned`) because `build.rs` includes it too.

use tuned::{int_param, name_param, param_index, Field, KernelSchema, Value};

/// Fused MoE expert GEMMs: key (dtype, experts, n = intermediate, k = hidden, topk),
/// batch = tokens. The parameters are the kernel path, the tile of both grouped GEMMs
/// (rows of expert-grouped pairs, output columns, k step), the warps of a block and the
/// depth of the shared-memory pipeline.
pub static MOE: KernelSchema = KernelSchema {
    kernel: "moe",
    key: &[
        Field::dtype("dtype"),
        Field::int("experts"),
        Field::int("n"),
        Field::int("k"),
        Field::int("topk"),
    ],
    params: &[
        Field::name("path"),
        Field::int("block_m"),
        Field::int("block_n"),
        Field::int("block_k"),
        Field::int("warps"),
        Field::int("stages"),
    ],
};

/// `mma`: warp-level tensor-core products (mma.sync m16n8k16) fed by a cp.async ring
/// that every warp fills; sm_80 and newer.
/// `wgmma`: Hopper warpgroup products (wgmma m64nNk16) from 128-byte-swizzled shared
/// memory: a producer warpgroup loads the weight tiles by TMA and gathers the pairs'
/// activation rows by cp.async into an mbarrier ring, 1-2 consumer warpgroups (`warps`
/// 4 or 8) own `block_m` / consumers pair rows each (64 or 128) on wgmma's 64-row side
/// and `block_n` weight rows on its N side; `block_k` is 64 (one swizzle row); sm_90a.
/// `wgmma_swap`: the same with the operands swapped, for few pairs per expert: each
/// consumer owns `block_n` / consumers weight rows (64 or 128) on the 64-row side and
/// the tile's `block_m` pairs (16-128) sit on the N side, so weights stream at full
/// width however few pairs an expert has.
pub const PATHS: &[&str] = &["mma", "wgmma", "wgmma_swap"];
pub const BLOCK_M: &[i64] = &[16, 32, 64, 128];
pub const BLOCK_N: &[i64] = &[32, 64, 128, 256];
pub const BLOCK_K: &[i64] = &[32, 64, 128];
pub const WARPS: &[i64] = &[4, 8];
pub const STAGES: &[i64] = &[2, 3, 4, 5, 6, 7, 8];

pub const PATH_AT: usize = param_index(&MOE, "path");
pub const BLOCK_M_AT: usize = param_index(&MOE, "block_m");
pub const BLOCK_N_AT: usize = param_index(&MOE, "block_n");
pub const BLOCK_K_AT: usize = param_index(&MOE, "block_k");
pub const WARPS_AT: usize = param_index(&MOE, "warps");
pub const STAGES_AT: usize = param_index(&MOE, "stages");

/// Checks a config's values against the parameter domains.
pub fn check_config(values: &[Value]) -> Result<(), String> {
    let s = &MOE;
    name_param(s, values, PATH_AT, PATHS)?;
    int_param(s, values, BLOCK_M_AT, BLOCK_M)?;
    int_param(s, values, BLOCK_N_AT, BLOCK_N)?;
    int_param(s, values, BLOCK_K_AT, BLOCK_K)?;
    int_param(s, values, WARPS_AT, WARPS)?;
    int_param(s, values, STAGES_AT, STAGES)?;
    Ok(())
}
