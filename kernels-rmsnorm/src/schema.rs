//! The RMSNorm table contracts (plain and fused residual-add): key fields,
//! parameters and their domains. Both kernels share parameters and rules.
//!
//! Self-contained (it uses only `tuned`) because `build.rs` includes it too, to
//! check committed configs against the search space before baking them.

use tuned::{int_param, param_index, Field, KernelSchema, Value};

const KEY: &[Field] = &[Field::dtype("dtype"), Field::int("cols")];
const PARAMS: &[Field] = &[
    Field::int("threads"),
    Field::int("vec"),
    Field::int("rows"),
    Field::int("occ"),
    Field::int("splits"),
    Field::int("late"),
];

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
/// Resident blocks per SM the launch allows (0: as many as registers and threads
/// allow). A cap n > 0 gives each block enough dynamic shared memory that only n fit
/// in Hopper's 196 KiB shared memory carveout, which the launch asks for (the rest of
/// the SM's 256 KiB, 60 KiB, is L1). Fewer rows in flight per SM measured faster at
/// large batches on the H200: rmsnorm 32768 x 4096 bf16 ran 127.8 us with 128 x 8 at
/// 6 blocks per SM against 130.5 uncapped (docs/results/rmsnorm.md).
pub const OCCS: &[i64] = &[0, 3, 6];
/// Resident threads per SM a cap must leave (24 warps) and may ask for (the SM's 2048).
pub const OCC_MIN_THREADS: i64 = 768;
pub const OCC_MAX_THREADS: i64 = 2048;

/// Whether a cap of `occ` blocks of `block_threads` threads leaves a resident thread
/// count in [`OCC_MIN_THREADS`]`..=`[`OCC_MAX_THREADS`] (no cap, `occ` 0, always does).
pub fn occ_leaves_enough_threads(block_threads: i64, occ: i64) -> bool {
    occ == 0 || (OCC_MIN_THREADS..=OCC_MAX_THREADS).contains(&(block_threads * occ))
}
/// Blocks per row: 1, or (sm90) a thread-block cluster of that many blocks sharing one
/// row held in registers, which adds their sums of squares over distributed shared
/// memory. For few rows, where one block per row leaves most SMs idle: on the H200,
/// fused add RMSNorm over 1 x 8192 bf16 ran 1.54 us on a cluster of 8 blocks of 128
/// threads against 2.03 for one block of 512 (docs/results/rmsnorm.md).
/// A cluster config has one row per block and no blocks-per-SM cap.
pub const SPLITS: &[i64] = &[1, 2, 4, 8, 16];
/// Where the fused kernel stores the updated residual: 0, as soon as each vector of it
/// is summed (before the row's reduction); 1, after the reduction, next to the output.
/// Storing late keeps the writes of a row together and the loads of the row alone in
/// flight, which measured faster with 128-thread blocks on the H200: fused add RMSNorm
/// over 4096 x 2048 bf16 ran 17.67 us against 18.00 (128 x 8), but 34.53 against 34.35
/// over 4096 x 4096 at 64 x 8 (docs/results/rmsnorm.md). It needs the
/// row in registers (at most `MAX_ITERS` vectors a thread); the plain kernel has no
/// residual and takes 0 only.
pub const LATES: &[i64] = &[0, 1];
/// Most vectors one thread holds in registers between the reduction and the write;
/// longer rows are read a second time (from L2).
pub const MAX_ITERS: i64 = 16;

pub const THREADS_AT: usize = param_index(&RMSNORM, "threads");
pub const VEC_AT: usize = param_index(&RMSNORM, "vec");
pub const ROWS_AT: usize = param_index(&RMSNORM, "rows");
pub const OCC_AT: usize = param_index(&RMSNORM, "occ");
pub const SPLITS_AT: usize = param_index(&RMSNORM, "splits");
pub const LATE_AT: usize = param_index(&RMSNORM, "late");

/// Checks a plain RMSNorm config: [`check_config`], and `late` 0 (no residual).
pub fn check_rmsnorm_config(values: &[Value]) -> Result<(), String> {
    check_config(values)?;
    match values.get(LATE_AT).and_then(Value::as_int) {
        Some(0) => Ok(()),
        _ => Err("late = 1 (the residual stored after the reduction) is for fused_add_rmsnorm only; rmsnorm has no residual".into()),
    }
}

/// Checks a config's values against the parameter domains and the rules that tie
/// parameters together (independent of the problem). A fused add RMSNorm config.
pub fn check_config(values: &[Value]) -> Result<(), String> {
    let threads = int_param(&RMSNORM, values, THREADS_AT, THREADS)?;
    int_param(&RMSNORM, values, VEC_AT, VECS)?;
    let rows = int_param(&RMSNORM, values, ROWS_AT, ROWS)?;
    let occ = int_param(&RMSNORM, values, OCC_AT, OCCS)?;
    let splits = int_param(&RMSNORM, values, SPLITS_AT, SPLITS)?;
    int_param(&RMSNORM, values, LATE_AT, LATES)?;
    if splits > 1 && (rows != 1 || occ != 0) {
        return Err(format!(
            "splits = {splits} (a cluster per row) needs rows = 1 and occ = 0, not rows = {rows}, occ = {occ}"
        ));
    }
    if threads * rows > 1024 {
        return Err(format!(
            "threads * rows = {} exceeds 1024 threads per block",
            threads * rows
        ));
    }
    if !occ_leaves_enough_threads(threads * rows, occ) {
        return Err(format!(
            "occ = {occ} blocks of {} threads is {} threads per SM; a cap must leave \
             {OCC_MIN_THREADS}..={OCC_MAX_THREADS}",
            threads * rows,
            threads * rows * occ
        ));
    }
    Ok(())
}
