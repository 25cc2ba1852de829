//! The GEMM table contract: key fields, parameters and their domains.
//!
//! Self-contained (it uses only `tuned`) because `build.rs` includes it too, to check
//! committed configs before baking them.

use tuned::{int_param, name_param, param_index, Field, KernelSchema, Value};

/// `C[m, n] = A[m, k] · op(B) (+ bias)`: key (dtype, layout, n, k), batch = m (tokens).
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
        Field::name("path"),
        Field::int("block_m"),
        Field::int("block_n"),
        Field::int("block_k"),
        Field::int("warps_m"),
        Field::int("warps_n"),
        Field::int("stages"),
        Field::int("split_k"),
        Field::int("group_m"),
        Field::int("vec"),
        Field::int("cluster"),
        Field::name("epilogue"),
    ],
};

pub const LAYOUTS: &[&str] = &["nt", "nn"];
/// `mma`: warp-level tensor-core products (mma.sync m16n8k16) fed by a cp.async
/// multi-stage shared-memory pipeline; sm_80 and newer, both layouts, any alignment.
/// `wgmma`: Hopper warpgroup products (wgmma m64nNk16) fed by TMA through an mbarrier
/// ring, a producer warpgroup and 1-2 consumer warpgroups, persistent blocks; sm_90a,
/// layout nt, 16-byte aligned operands, block_k 64, no split-K; A's rows on wgmma's
/// 64-row side. `wgmma_swap`: the same kernel with the operands swapped (C^T = B . A^T)
/// so the weight's rows fill wgmma's 64-row side and the tokens its N side: for few
/// tokens, with split-K. `wgmma_pingpong`: `wgmma` with two consumer warpgroups taking
/// the block's tiles in turn, each holding a whole block_m x block_n tile (block_m 64
/// or 128), so one stores its C while the other computes; no cluster.
///
/// For both wgmma paths, `warps_m` x `warps_n` are the consumer warps (4 per
/// warpgroup), stacked along the side wgmma's 64 rows cover: `warps_m` for `wgmma`,
/// `warps_n` for `wgmma_swap`; the other is 1 (`wgmma_pingpong`: `warps_m` 8, two
/// warpgroups on separate tiles). A block has one more warpgroup, the producer.
///
/// `stream`: the decode path (sm_80+, layout nt): the weight's rows stream from global
/// memory straight into mma.sync m16n8k16 fragments, with no shared-memory ring.
/// `block_m` is 8 or 16 tokens, `warps_n` the warps along the weight's rows (16 rows
/// each: `block_n` = 16 `warps_n`), `warps_m` the warps splitting the block's share of k
/// (summed in shared memory in warp order), `block_k` 32 (one load of 16 bytes a lane
/// and row), `stages` the blocks of 32 k each warp loads before their products;
/// split-K through the workspace or, on sm_90, as one cluster of the splits (`cluster` =
/// `split_k`, summed through distributed shared memory); C stored directly.
pub const PATHS: &[&str] = &["mma", "wgmma", "wgmma_swap", "wgmma_pingpong", "stream"];
/// 8 on the `stream` path only; 192 on `wgmma` over three consumer warpgroups only.
pub const BLOCK_M: &[i64] = &[8, 16, 32, 64, 128, 192, 256];
/// Powers of two on every path; the widths between them on the unswapped wgmma paths only
/// (see `space::EXTRA_BLOCK_N`).
pub const BLOCK_N: &[i64] = &[16, 32, 64, 80, 96, 112, 128, 160, 192, 224, 256];
pub const BLOCK_K: &[i64] = &[32, 64, 128];
/// 12 for the three consumer warpgroups of a 192-row `wgmma` tile only.
pub const WARPS_M: &[i64] = &[1, 2, 4, 8, 12];
pub const WARPS_N: &[i64] = &[1, 2, 4, 8];
/// 2 to 8, and 12 and 16, which the search tries only for the deep rings of narrow
/// unswapped wgmma tiles (`space::DEEP_STAGES`).
pub const STAGES: &[i64] = &[2, 3, 4, 5, 6, 7, 8, 12, 16];
/// Splits of k; not only powers of two, so a weight of few tiles can be cut into about
/// one wave (70B-tp8 qkv at decode: 20 tiles of 64 rows, 6 splits make 120 units for
/// 132 SMs where 4 leave 52 idle and 8 need a second wave).
pub const SPLIT_K: &[i64] = &[1, 2, 3, 4, 6, 8, 12, 16];
pub const GROUP_M: &[i64] = &[1, 4, 8, 16];
/// Elements per global load: 8 (16-byte cp.async; A and B 16-byte aligned with
/// leading dimensions a multiple of 8) or 1 (element loads, any alignment).
pub const VECS: &[i64] = &[1, 8];
/// Warps per block: 4 or 8 (12 on three consumer warpgroups).
pub const WARPS: &[i64] = &[4, 8];
/// Blocks per thread-block cluster (sm_90a): 1; 2 on the `wgmma` path with `split_k` 1,
/// where the two blocks compute vertically adjacent tiles and share their B tile, each
/// loading half of it by TMA multicast into both; or one of [`SPLIT_CLUSTERS`] on the
/// `wgmma_swap` or `wgmma` path with `split_k` equal to it, where the blocks are the
/// splits of one tile and each rank sums its share of the tile from every rank's partial
/// (distributed shared memory, in split order) and stores that share, with no workspace.
pub const CLUSTERS: &[i64] = &[1, 2, 3, 4, 6, 8];
/// The splits a wgmma tile may run as one cluster (8 is the largest portable cluster).
/// With one block an SM, a cluster's blocks must find free SMs of one GPC at once: the
/// H200 holds 66 clusters of 2, 30 of 4 and 15 of 8 (the occupancy query in gemm.md),
/// so the larger clusters pay only where few tiles are split deep.
pub const SPLIT_CLUSTERS: &[i64] = &[2, 3, 4, 6, 8];
/// How C leaves the kernel: `direct` (each thread stores its accumulators) or `tma`
/// (the `wgmma` and `wgmma_pingpong` paths only, block_n a multiple of 64: each consumer warpgroup stages
/// 64-row sub-tiles in shared memory and the TMA unit stores them; where C's base or
/// row stride is not a multiple of 16 bytes the same variant stores directly).
pub const EPILOGUES: &[&str] = &["direct", "tma"];

pub const PATH_AT: usize = param_index(&GEMM, "path");
pub const BLOCK_M_AT: usize = param_index(&GEMM, "block_m");
pub const BLOCK_N_AT: usize = param_index(&GEMM, "block_n");
pub const BLOCK_K_AT: usize = param_index(&GEMM, "block_k");
pub const WARPS_M_AT: usize = param_index(&GEMM, "warps_m");
pub const WARPS_N_AT: usize = param_index(&GEMM, "warps_n");
pub const STAGES_AT: usize = param_index(&GEMM, "stages");
pub const SPLIT_K_AT: usize = param_index(&GEMM, "split_k");
pub const GROUP_M_AT: usize = param_index(&GEMM, "group_m");
pub const VEC_AT: usize = param_index(&GEMM, "vec");
pub const CLUSTER_AT: usize = param_index(&GEMM, "cluster");
pub const EPILOGUE_AT: usize = param_index(&GEMM, "epilogue");

/// Checks a config's values against the parameter domains and the rules that tie
/// parameters together (independent of the problem): 4 or 8 warps; on `stream` 8 or 16
/// tokens, 16 rows a warp along n and 32-wide k blocks; elsewhere each warp tile a
/// whole number of 16 x 16 products, clusters of 2 unsplit on the `wgmma` path and of
/// `split_k` ([`SPLIT_CLUSTERS`]) on `wgmma` and `wgmma_swap` only, TMA stores of
/// C on the unswapped wgmma paths only, with whole 64-column sub-tiles, block_n other than
/// a power of two on those paths only.
pub fn check_config(values: &[Value]) -> Result<(), String> {
    let s = &GEMM;
    let path = name_param(s, values, PATH_AT, PATHS)?;
    let bm = int_param(s, values, BLOCK_M_AT, BLOCK_M)?;
    let bn = int_param(s, values, BLOCK_N_AT, BLOCK_N)?;
    int_param(s, values, BLOCK_K_AT, BLOCK_K)?;
    let wm = int_param(s, values, WARPS_M_AT, WARPS_M)?;
    let wn = int_param(s, values, WARPS_N_AT, WARPS_N)?;
    int_param(s, values, STAGES_AT, STAGES)?;
    let split_k = int_param(s, values, SPLIT_K_AT, SPLIT_K)?;
    int_param(s, values, GROUP_M_AT, GROUP_M)?;
    int_param(s, values, VEC_AT, VECS)?;
    let cluster = int_param(s, values, CLUSTER_AT, CLUSTERS)?;
    match path {
        _ if cluster == 1 => {}
        "wgmma" if cluster == 2 && split_k == 1 => {}
        "stream" if cluster == split_k => {}
        "stream" => {
            return Err(format!(
                "cluster={cluster} on path stream needs split_k={cluster} (the cluster's blocks are the splits), got split_k={split_k}"
            ))
        }
        "wgmma" | "wgmma_swap" if cluster != split_k => {
            return Err(format!(
                "cluster={cluster} on path {path} needs split_k={cluster} (the cluster's blocks are the splits{}), got split_k={split_k}",
                if path == "wgmma" { "; unsplit, clusters of 2 only" } else { "" }
            ))
        }
        "wgmma" | "wgmma_swap" => {}
        _ => {
            return Err(format!(
                "cluster={cluster} needs path wgmma, wgmma_swap or stream, got {path}"
            ))
        }
    }
    let epilogue = name_param(s, values, EPILOGUE_AT, EPILOGUES)?;
    if epilogue == "tma" && !matches!(path, "wgmma" | "wgmma_pingpong") {
        return Err(format!(
            "epilogue=tma needs path wgmma or wgmma_pingpong, got {path}"
        ));
    }
    if !(bn as u64).is_power_of_two() && !matches!(path, "wgmma" | "wgmma_pingpong") {
        return Err(format!(
            "block_n={bn} (not a power of two) needs path wgmma or wgmma_pingpong, got {path}"
        ));
    }
    if epilogue == "tma" && bn % 64 != 0 {
        return Err(format!(
            "epilogue=tma needs block_n a multiple of 64 (whole 64-column sub-tiles), got {bn}"
        ));
    }
    // Three consumer warpgroups (512 threads): 64 rows each of a 192-row tile, as cuBLAS
    // runs 8B lm_head at m = 8192; the tile and the warps come only together.
    let three_consumers = path == "wgmma" && wm == 12 && wn == 1 && bm == 192;
    if (wm == 12 || bm == 192) && !three_consumers {
        return Err(format!(
            "block_m=192 and warps_m=12 (three consumer warpgroups) come together on path wgmma with warps_n=1, got path={path} block_m={bm} warps_m={wm} warps_n={wn}"
        ));
    }
    if !three_consumers && !WARPS.contains(&(wm * wn)) {
        return Err(format!("warps_m * warps_n = {} must be 4 or 8", wm * wn));
    }
    if path == "stream" {
        let bk = values[BLOCK_K_AT].as_int().unwrap_or(0);
        return if bm != 8 && bm != 16 {
            Err(format!("block_m={bm} on path stream must be 8 or 16 tokens"))
        } else if bn != 16 * wn {
            Err(format!(
                "block_n={bn} on path stream must be 16 rows a warp along n: 16 * warps_n = {}",
                16 * wn
            ))
        } else if bk != 32 {
            Err(format!("block_k={bk} on path stream must be 32"))
        } else {
            Ok(())
        };
    }
    if bm == 8 {
        return Err(format!("block_m=8 needs path stream, got {path}"));
    }
    // On `wgmma_pingpong` each of the two consumer warpgroups spans the whole tile.
    let wm = if path == "wgmma_pingpong" { wm / 2 } else { wm };
    if bm % (16 * wm) != 0 || bn % (16 * wn) != 0 {
        return Err(format!(
            "the warp tile {}x{} is not a multiple of 16x16",
            bm / wm,
            bn / wn
        ));
    }
    Ok(())
}
