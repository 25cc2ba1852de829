//! GPU benchmark of the GEMM on LLM projection shapes (../shared/models.json:
//! Llama-3.1-8B at tp 1 and Llama-3.1-70B at tp 8; qkv, o, gate_up, down, lm_head) at
//! m = 1..8192 tokens, with the config the serve policy resolves (baked table, else
//! the analytic default). Each point is the median over graph replays of back-to-back
//! launches rotating over copies of the operands (working set at least 2x L2, as the
//! tuner times), so decode points are weight streams from HBM, not from L2.
//! Beside each point it times cuBLAS (`cublasGemmEx`, bf16 in and out, fp32 compute, loaded
//! at run time through cudarc) on the same buffers, rotated and graph-timed the same way
//! (`cublas` rows), and checks that the two agree on the point's first rows (`agree`
//! records: largest difference over the largest magnitude; each alternative timed is
//! checked the same way over up to 256 rows, `alt_check` records, and a difference above
//! 1e-2 is printed as a mismatch); where libcublas cannot be
//! loaded it says so once and times ours alone. scripts/gemm_peers.py times cuBLAS through
//! torch's F.linear the same way, from Python.
//!
//! `cargo bench -p benches --bench gemm`; `KERNELS_BENCH_OUT=FILE.jsonl` also writes
//! one JSON object per point; `GEMM_BENCH_M=1,16,...` picks the m values;
//! `GEMM_BENCH_ALTS=1` also times a few alternatives to the served config per point
//! (other tiles, splits and paths of the search space, marked `alt`;
//! `GEMM_BENCH_ALTS=clusters`, `splits` or `pingpong` only that family of the prefill
//! tiles with TMA stores of C, beside the plain tile; `widths` the tiles of widths between
//! powers of two beside the others; `cluster_splits` each split of 2, 3, 4, 6 or 8
//! of the search space through the workspace and as one cluster; `rings` the deep rings of narrow tiles for few rows;
//! any other value but 0 is refused), and
//! `GEMM_BENCH_MATCH="block_m=128 cluster=2"` times only the configs with every setting
//! named: those alternatives, and the served config where it has them (one kernel a point,
//! for a profiler); `GEMM_BENCH_SHAPES=qkv,o,...` keeps the layers named (`70B-tp8:qkv`:
//! that layer of the models whose name contains `70B-tp8` only);
//! `GEMM_BENCH_CONFIG="<config>; <config>"` also times those configs (the display form, as
//! `kernels plan` prints them; source `config`) at every point whose shape they fit, in the
//! search space or not, checked against cuBLAS like the alternatives;
//! `GEMM_BENCH_EXTRA=8192x64,8192x1024` adds weights of those n x k (model `custom`, layer
//! `NxK`), served by the same lookup; `GEMM_BENCH_COPIES=N` rotates over N
//! copies of the operands instead of the tuner's count (to see what the reuse distance does to
//! a point); `GEMM_BENCH_ROUNDS=N` (1 to 9, default 3) times the served config and cuBLAS
//! in turn N times per point and reports each side's median round; `GEMM_BENCH_PDL=1` also times the
//! served config launched with programmatic dependent launch (`pdl`);
//! `GEMM_BENCH_TABLE=<dir>/gemm/<target>.json` serves from that table file instead of the
//! baked one, by the same lookup rule (a table a tuning run has just written, timed in the
//! same device call before it is landed and baked; refused unless it was tuned against
//! this binary's kernel source and target, unless `GEMM_BENCH_ANY_SOURCE=1`: two builds
//! of a kernel-source change timed on the same configs before a retune, compared by
//! `scripts/gemm_report.py A.jsonl --against B.jsonl`; its sources read
//! `file:table-exact` and so on). Per shape it first times a
//! plain read of the weight, rotated and graph-timed the same way: the floor of a
//! decode point's weight stream (`read_floor` records), and a copy of the weight's bytes
//! (`copy_floor`: the device's own bandwidth at that size, the bound against which a
//! small weight's stream is judged). Last, it prints the host time
//! of one launch (plan, tensor-map encoding, enqueue) of the served config at decode
//! and prefill. Without a GPU it says so in one line and exits cleanly.

use std::io::Write;
use std::sync::Arc;

use cudarc::cublas::{result as cublas_result, sys as cublas_sys, CudaBlas};
use kernels::core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels::core::{
    backend::cuda::{time_graph_runs, RawStream},
    tune::{graph_launches, rotation, TimingOptions},
    CudaDevice, CudaRuntime, KernelArgs, KernelSource, LaunchDims, RuntimeOptions, Variant,
};
use kernels::gemm::plan::{GemmProblem, Operand};
use kernels::gemm::schema::SPLIT_CLUSTERS;
use kernels::gemm::{Epilogue, Gemm, GemmConfig, GemmKey, Layout, Path};
use tuned::{resolve_in_entries, resolve_serve, DType, ServeError, ServedTable, TableFile, Target};

type BoxError = Box<dyn std::error::Error>;

/// `GEMM_BENCH_TABLE`'s table file, to serve by the baked lookup rule; `None` where the
/// variable is unset. Refuses a file of another kernel or target, or tuned against another
/// kernel source than this binary's unless `GEMM_BENCH_ANY_SOURCE=1`
/// ([`TableFile::to_serve`]).
fn table_from_env(target: Target) -> Result<Option<ServedTable>, BoxError> {
    let Some(path) = std::env::var_os("GEMM_BENCH_TABLE") else {
        return Ok(None);
    };
    let any_source = std::env::var_os("GEMM_BENCH_ANY_SOURCE").is_some_and(|v| v == "1");
    let table = TableFile::to_serve(
        std::path::Path::new(&path),
        &kernels::gemm::schema::GEMM,
        target,
        kernels::gemm::SOURCE_FINGERPRINT,
        any_source,
    )
    .map_err(|e| match e {
        ServeError::OtherSource(what) => format!(
            "GEMM_BENCH_TABLE: {what} (GEMM_BENCH_ANY_SOURCE=1 serves it anyway, to compare two builds on the same configs)"
        ),
        ServeError::File(e) => format!("GEMM_BENCH_TABLE: {e}"),
    })?;
    if let Some(what) = &table.other_source {
        println!("GEMM_BENCH_ANY_SOURCE: {what}; its configs are served on code they were not tuned on");
    }
    let h = &table.header;
    println!(
        "serving from {} (tuned {} on {}), not the baked table",
        std::path::Path::new(&path).display(),
        h.tuned_at,
        h.device
    );
    Ok(Some(table))
}

/// cuBLAS's workspace: 32 MiB, what NVIDIA advises on Hopper. Given to the handle up front
/// so that no launch allocates while a graph is captured.
const CUBLAS_WORKSPACE: usize = 32 << 20;

/// Rows of C compared between ours and cuBLAS at each point.
const AGREE_ROWS: usize = 16;

/// A cuBLAS handle on the bench's stream with its own workspace.
struct Cublas {
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
}

impl Cublas {
    /// `None`, after one line saying why, where libcublas cannot be loaded or set up.
    fn new(stream: &Arc<CudaStream>) -> Option<Self> {
        // SAFETY: only tries to open the library.
        if !unsafe { cublas_sys::is_culib_present() } {
            println!("cuBLAS: libcublas not found on the loader path (LD_LIBRARY_PATH); cublas rows skipped");
            return None;
        }
        let setup = || -> Result<Self, BoxError> {
            let blas = CudaBlas::new(stream.clone())?;
            let workspace = stream.alloc_zeros::<u8>(CUBLAS_WORKSPACE)?;
            let ptr = workspace.device_ptr(stream).0;
            // SAFETY: the workspace holds CUBLAS_WORKSPACE bytes and lives as long as the handle.
            unsafe { cublas_sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, CUBLAS_WORKSPACE) }
                .result()?;
            Ok(Self {
                blas,
                _workspace: workspace,
            })
        };
        match setup() {
            Ok(c) => Some(c),
            Err(e) => {
                println!("cuBLAS: could not be set up ({e}); cublas rows skipped");
                None
            }
        }
    }

    /// C[m, n] = A[m, k] W[n, k]^T, all row-major bf16 with leading dimensions k, k and n
    /// (column-major to cuBLAS: C^T = op_T(W) A^T).
    ///
    /// # Safety
    /// `a`, `w` and `c` hold m x k, n x k and m x n elements.
    unsafe fn linear(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: u64,
        w: u64,
        c: u64,
    ) -> kernels::core::Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let dim = |x: usize| {
            i32::try_from(x).map_err(|_| kernels::core::Error::InvalidArgument {
                name: "cublas dims".into(),
                reason: format!("{x} exceeds i32"),
            })
        };
        unsafe {
            cublas_result::gemm_ex(
                *self.blas.handle(),
                cublas_sys::cublasOperation_t::CUBLAS_OP_T,
                cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                dim(n)?,
                dim(m)?,
                dim(k)?,
                (&alpha as *const f32).cast(),
                w as *const _,
                cublas_sys::cudaDataType::CUDA_R_16BF,
                dim(k)?,
                a as *const _,
                cublas_sys::cudaDataType::CUDA_R_16BF,
                dim(k)?,
                (&beta as *const f32).cast(),
                c as *mut _,
                cublas_sys::cudaDataType::CUDA_R_16BF,
                dim(n)?,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| kernels::core::Error::Driver {
            call: "cublasGemmEx",
            message: e.to_string(),
        })
    }
}

/// The first `rows` rows of a row-major bf16 matrix of `n` columns, as f32.
fn head_rows(
    stream: &Arc<CudaStream>,
    c: &CudaSlice<u8>,
    rows: usize,
    n: usize,
) -> Result<Vec<f32>, BoxError> {
    let bytes = stream.clone_dtoh(&c.slice(0..rows * n * 2))?;
    Ok(bytes
        .chunks_exact(2)
        .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
        .collect())
}

/// Largest |x - y| over the largest |y|: how far two results of one product are apart.
fn rel_diff(x: &[f32], y: &[f32]) -> f64 {
    let scale = y.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let diff = x.iter().zip(y).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    f64::from(diff / scale)
}

/// Fills 16-bit elements with values in [-1, 1) from an integer hash (bf16 bits).
static FILL: KernelSource = KernelSource::new(
    "gemm_bench_fill",
    "extern \"C\" __global__ void fill(unsigned short* p, long long n, unsigned seed) {\n\
       for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n\
         unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;\n\
         float v = (float)(h & 0xffffff) / 8388608.0f - 1.0f;\n\
         p[i] = (unsigned short)(__float_as_uint(v) >> 16);\n\
       }\n\
     }",
    "fnv1a64:2",
);

/// Reads `n16` 16-byte vectors and writes one word per block: the floor of streaming a
/// weight once, timed like the GEMM (the bound the decode points are held to).
static READ: KernelSource = KernelSource::new(
    "gemm_bench_read",
    "extern \"C\" __global__ void read_all(const uint4* p, long long n16, unsigned* out) {\n\
       unsigned acc = 0;\n\
       for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += (long long)gridDim.x * blockDim.x) {\n\
         const uint4 v = __ldcs(p + i); acc ^= v.x ^ v.y ^ v.z ^ v.w;\n\
       }\n\
       acc = __reduce_xor_sync(0xffffffffu, acc);\n\
       if (threadIdx.x % 32 == 0) atomicXor(out + blockIdx.x, acc);\n\
     }",
    "fnv1a64:3",
);

const SHAPES: &[(&str, &str, u32, u32)] = &[
    ("Llama-3.1-8B", "qkv", 6144, 4096),
    ("Llama-3.1-8B", "o", 4096, 4096),
    ("Llama-3.1-8B", "gate_up", 28672, 4096),
    ("Llama-3.1-8B", "down", 4096, 14336),
    ("Llama-3.1-8B", "lm_head", 128256, 4096),
    ("Llama-3.1-70B-tp8", "qkv", 1280, 8192),
    ("Llama-3.1-70B-tp8", "o", 8192, 1024),
    ("Llama-3.1-70B-tp8", "gate_up", 7168, 8192),
    ("Llama-3.1-70B-tp8", "down", 8192, 3584),
];

fn filled(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    elems: usize,
    seed: u32,
) -> Result<CudaSlice<u8>, BoxError> {
    let buf = stream.alloc_zeros::<u8>(elems * 2)?;
    let k = rt.kernel(stream, &FILL, &Variant::new("fill"))?;
    let mut args = KernelArgs::new();
    args.ptr(buf.device_ptr(stream).0).i64(elems as i64).u32(seed);
    unsafe { k.launch_raw(RawStream::of(stream), LaunchDims::linear(1024, 256), &args) }?;
    Ok(buf)
}

/// The alternatives `GEMM_BENCH_ALTS=1` times beside the served config: the portable
/// default, and for the wgmma paths other splits, tiles and consumer counts, (decode)
/// stages of 64 and 128 k and splits of 2, 3, 4, 6 and 8 as clusters, and (prefill) clusters of 2, splits
/// along k (those also as clusters), TMA stores of C,
/// the pingpong schedule and widths between powers of two, and (up to 256 rows) the space's deep rings of narrow
/// tiles and its splits of those sizes (swapped or not), each where it lies in the space (TMA stores at the deepest ring that fits beside their staging buffers).
fn alternatives(key: &GemmKey, m: u64, served: &GemmConfig) -> Vec<GemmConfig> {
    let target = tuned::Target::Sm90;
    let mut out = Vec::new();
    if m <= 64 {
        for (block_n, warps_n) in [(64, 4), (128, 4), (128, 8), (256, 8)] {
            for split_k in [1, 2, 3, 4, 6, 8, 12, 16] {
                for (stages, block_k) in [(6, 64), (8, 64), (4, 128), (6, 128)] {
                    let c = GemmConfig {
                        path: Path::WgmmaSwap,
                        block_m: served.block_m.clamp(16, 64),
                        block_n,
                        block_k,
                        warps_m: 1,
                        warps_n,
                        stages,
                        split_k,
                        group_m: 8,
                        vec: 8,
                        cluster: 1,
                        epilogue: Epilogue::Direct,
                    };
                    out.push(c);
                    if SPLIT_CLUSTERS.contains(&i64::from(split_k)) {
                        out.push(GemmConfig {
                            cluster: split_k,
                            ..c
                        });
                    }
                }
            }
        }
    } else {
        for (block_m, block_n, warps_m) in [
            (128, 256, 8),
            (128, 128, 8),
            (64, 128, 4),
            (256, 128, 8),
            (128, 128, 4),
            (64, 256, 4),
        ] {
            for stages in [3, 4, 5, 6] {
                for group_m in [8, 16] {
                    for cluster in [1, 2] {
                        for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                            // Split along k without a cluster (kept where the space
                            // allows it: few tiles, 64 accumulators a thread).
                            let splits: &[u32] = if cluster == 1 { &[1, 2, 3, 4, 6, 8] } else { &[1] };
                            for &split_k in splits {
                                let c = GemmConfig {
                                    group_m,
                                    cluster,
                                    epilogue,
                                    split_k,
                                    ..GemmConfig::wgmma(block_m, block_n, warps_m, stages)
                                };
                                out.push(c);
                                if SPLIT_CLUSTERS.contains(&i64::from(split_k)) {
                                    out.push(GemmConfig {
                                        cluster: split_k,
                                        ..c
                                    });
                                }
                            }
                            if cluster == 1 && block_m <= 128 {
                                out.push(GemmConfig {
                                    group_m,
                                    epilogue,
                                    ..GemmConfig::pingpong(block_m, block_n, stages)
                                });
                            }
                        }
                    }
                }
            }
        }
        // Widths between the powers of two where they fill the last wave better.
        for block_m in [64u32, 128, 256] {
            for block_n in kernels::gemm::space::extra_widths(target, key, m, block_m) {
                for stages in [3, 4, 5, 6] {
                    for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                        for warps_m in [4, 8] {
                            out.push(GemmConfig {
                                epilogue,
                                ..GemmConfig::wgmma(block_m, block_n, warps_m, stages)
                            });
                        }
                        if block_m <= 128 {
                            out.push(GemmConfig {
                                epilogue,
                                ..GemmConfig::pingpong(block_m, block_n, stages)
                            });
                        }
                    }
                }
            }
        }
    }
    // The deep rings of narrow unswapped tiles the space holds for few rows, and up to
    // 256 rows its splits of the cluster sizes, through the workspace and as clusters.
    out.extend(
        kernels::gemm::space::search_space(target, key, m)
            .into_iter()
            .filter(|c| {
                (c.path == Path::Wgmma && c.stages > 6)
                    || (m <= 256 && SPLIT_CLUSTERS.contains(&i64::from(c.split_k)))
            }),
    );
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| {
        seen.insert(*c)
            && c != served
            && kernels::gemm::space::fits(target, key, c)
            && kernels::gemm::space::split_allowed(target, key, m, c)
    });
    // The deepest fitting ring of each tile only, for prefill.
    if m > 64 {
        let mut best: Vec<GemmConfig> = Vec::new();
        for c in out {
            match best.iter_mut().find(|b| {
                (
                    b.path, b.block_m, b.block_n, b.warps_m, b.group_m, b.cluster, b.epilogue, b.split_k,
                ) == (
                    c.path, c.block_m, c.block_n, c.warps_m, c.group_m, c.cluster, c.epilogue, c.split_k,
                )
            }) {
                Some(b) if b.stages < c.stages => *b = c,
                Some(_) => {}
                None => best.push(c),
            }
        }
        out = best;
    }
    out
}

fn main() -> Result<(), BoxError> {
    let dev = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("gemm bench: no CUDA GPU ({e}); nothing measured");
            return Ok(());
        }
    };
    // Plain launches, and with GEMM_BENCH_PDL=1 a second runtime launching the served
    // config with programmatic dependent launch (`pdl` rows).
    let rt = CudaRuntime::with_options(dev.clone(), RuntimeOptions::default())?;
    let rt_pdl = if std::env::var("GEMM_BENCH_PDL").is_ok_and(|v| v == "1") {
        Some(CudaRuntime::with_options(
            dev,
            RuntimeOptions {
                pdl: true,
                ..RuntimeOptions::default()
            },
        )?)
    } else {
        None
    };
    let stream = rt.device().new_stream()?;
    let cublas = Cublas::new(&stream);
    let info = rt.device().info().clone();
    let target = info.tuning_target();
    let file_table = table_from_env(target)?;
    let ms: Vec<u64> = std::env::var("GEMM_BENCH_M")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 64, 256, 1024, 4096, 8192]);
    let mut out = std::env::var("KERNELS_BENCH_OUT")
        .ok()
        .map(std::fs::File::create)
        .transpose()?;
    let opts = TimingOptions {
        warmup: 2,
        reps: 10,
        ..TimingOptions::default()
    };
    println!(
        "device: {} ({} SMs, L2 {} MiB)",
        info.name,
        info.sm_count,
        info.l2_bytes >> 20
    );
    println!(
        "{:<18} {:<8} {:>6} {:>6} {:>5} {:>10} {:>9} {:>8}  config (source)",
        "model", "layer", "n", "k", "m", "us", "TFLOP/s", "W TB/s"
    );
    // GEMM_BENCH_ALTS: 1 (every alternative), or one family beside its plain tile, each
    // with TMA stores of C and group_m 8: `clusters` (without and with a cluster of 2),
    // `splits` (split along k, 1 included), `pingpong` (cooperative and pingpong),
    // `widths` (cooperative and pingpong, either epilogue: the tiles of widths between
    // powers of two beside the others), `cluster_splits` (splits of 2, 3, 4, 6 or 8
    // through the workspace and as one cluster; unswapped with TMA stores and group_m 8), `rings`
    // (the space's deep rings of narrow unswapped tiles, m <= 256).
    let alts_var = std::env::var("GEMM_BENCH_ALTS").unwrap_or_default();
    // The values `family` below knows (and 1: every alternative); any other but 0 is refused.
    const FAMILIES: &[&str] = &[
        "1",
        "clusters",
        "splits",
        "pingpong",
        "widths",
        "cluster_splits",
        "rings",
    ];
    let alts_asked = !alts_var.is_empty() && alts_var != "0";
    if alts_asked && !FAMILIES.contains(&alts_var.as_str()) {
        return Err(format!("GEMM_BENCH_ALTS: `{alts_var}` is none of {FAMILIES:?} (or 0)").into());
    }
    let family = |c: &GemmConfig| -> bool {
        let plain = c.epilogue == Epilogue::Tma && c.group_m == 8;
        match alts_var.as_str() {
            "clusters" => plain && c.path == Path::Wgmma && c.split_k == 1,
            "splits" => plain && c.path == Path::Wgmma && c.cluster == 1,
            "widths" => {
                matches!(c.path, Path::Wgmma | Path::WgmmaPingpong)
                    && c.group_m == 8
                    && c.cluster == 1
                    && c.split_k == 1
            }
            "rings" => c.path == Path::Wgmma && c.stages > 6,
            "cluster_splits" => {
                matches!(c.path, Path::WgmmaSwap | Path::Wgmma)
                    && SPLIT_CLUSTERS.contains(&i64::from(c.split_k))
                    && (c.path == Path::WgmmaSwap || plain)
            }
            "pingpong" => {
                plain
                    && matches!(c.path, Path::Wgmma | Path::WgmmaPingpong)
                    && c.cluster == 1
                    && c.split_k == 1
            }
            _ => true,
        }
    };
    // GEMM_BENCH_MATCH="block_m=128 cluster=2 ...": only the alternatives (of the family
    // GEMM_BENCH_ALTS names, or all of them) whose config has every one of these
    // settings, and not the served config: one kernel a point, for a profiler.
    let matching: Option<Vec<String>> = std::env::var("GEMM_BENCH_MATCH")
        .ok()
        .map(|s| s.split_whitespace().map(str::to_string).collect());
    let matches_all = |c: &GemmConfig| {
        let text = c.to_string();
        let settings: Vec<&str> = text.split_whitespace().collect();
        matching
            .as_ref()
            .is_none_or(|m| m.iter().all(|t| settings.contains(&t.as_str())))
    };
    // GEMM_BENCH_CONFIG="<config>; <config>": those configs too (display form, as the bench
    // and `kernels plan` print them), at every point whose shape they fit, in the search
    // space or not: a config the space leaves out, timed without a rebuild.
    let extra_configs: Vec<GemmConfig> = match std::env::var("GEMM_BENCH_CONFIG") {
        Ok(v) => v
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<GemmConfig>()
                    .map_err(|e| format!("GEMM_BENCH_CONFIG: `{s}`: {e}"))
            })
            .collect::<Result<_, _>>()?,
        Err(_) => Vec::new(),
    };
    let alts = matching.is_some() || alts_asked;
    let every_alt = alts_var == "1";
    let only: Option<Vec<String>> = std::env::var("GEMM_BENCH_SHAPES")
        .ok()
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
    let rounds = match std::env::var("GEMM_BENCH_ROUNDS") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(r) if (1..=9).contains(&r) => r,
            _ => return Err(format!("GEMM_BENCH_ROUNDS: `{v}` is not a count from 1 to 9").into()),
        },
        Err(_) => 3,
    };
    let copies_override = match std::env::var("GEMM_BENCH_COPIES") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(c) if (1..=64).contains(&c) => Some(c),
            _ => return Err(format!("GEMM_BENCH_COPIES: `{v}` is not a count from 1 to 64").into()),
        },
        Err(_) => None,
    };
    // GEMM_BENCH_EXTRA=NxK,...: weights of n x k beside the catalog's (model `custom`, layer
    // `NxK`; GEMM_BENCH_SHAPES filters them as it does the others), served by the same lookup
    // (a key the table lacks takes the analytic default), e.g. a sweep of k at one n.
    let mut shapes: Vec<(String, String, u32, u32)> = SHAPES
        .iter()
        .map(|&(m, l, n, k)| (m.to_string(), l.to_string(), n, k))
        .collect();
    if let Ok(v) = std::env::var("GEMM_BENCH_EXTRA") {
        for item in v.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let dims = item
                .split_once('x')
                .and_then(|(n, k)| Some((n.trim().parse::<u32>().ok()?, k.trim().parse::<u32>().ok()?)))
                .filter(|&(n, k)| n > 0 && k > 0);
            let Some((n, k)) = dims else {
                return Err(format!("GEMM_BENCH_EXTRA: `{item}` is not NxK with n and k above 0").into());
            };
            shapes.push(("custom".to_string(), format!("{n}x{k}"), n, k));
        }
    }
    let mut overhead_problem = None;
    for (model, layer, n, k) in &shapes {
        let (model, layer, n, k) = (model.as_str(), layer.as_str(), *n, *k);
        let picked = |l: &String| match l.split_once(':') {
            Some((m, l)) => model.contains(m) && l == layer,
            None => l == layer,
        };
        if only.as_ref().is_some_and(|o| !o.iter().any(picked)) {
            continue;
        }
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n,
            k,
        };
        let mut key_buf = tuned::KeyBuf::new();
        tuned::write_canonical(
            &kernels::gemm::schema::GEMM,
            <Gemm as tuned::TunedKernel>::key_values(&key).as_slice(),
            &mut key_buf,
        )?;
        let key_text = key_buf.as_str();
        let w_elems = n as usize * k as usize;
        let max_m = *ms.iter().max().unwrap_or(&1) as usize;
        let per_call_max = (w_elems + max_m * (k as usize + n as usize)) as u64 * 2;
        let copies =
            copies_override.unwrap_or_else(|| rotation(per_call_max.min(w_elems as u64 * 2), info.l2_bytes));
        let mut ws_bytes = 16;
        for &m in &ms {
            ws_bytes = ws_bytes.max(kernels::gemm::workspace_bytes(target, &key, m));
        }
        let mut sets = Vec::new();
        for i in 0..copies {
            let w = filled(&rt, &stream, w_elems, 1 + i as u32)?;
            let a = filled(&rt, &stream, max_m * k as usize, 100 + i as u32)?;
            let c = stream.alloc_zeros::<u8>(max_m * n as usize * 2)?;
            let ws = stream.alloc_zeros::<u8>(ws_bytes)?;
            sets.push((a, w, c, ws));
        }
        stream.synchronize()?;
        floors(
            &rt,
            &stream,
            &opts,
            (model, layer, n, k),
            &sets,
            w_elems,
            out.as_mut(),
        )?;
        for &m in &ms {
            let mu = m as usize;
            let resolved = match &file_table {
                Some(t) => resolve_in_entries::<Gemm>(target, &key, t.key_entries(key_text), m),
                None => resolve_serve::<Gemm>(target, &key, m),
            };
            let source_text = match &file_table {
                Some(_) => format!("file:{}", resolved.source),
                None => resolved.source.to_string(),
            };
            let problems: Vec<GemmProblem<'_>> = sets
                .iter()
                .map(|(a, w, c, ws)| {
                    let p = |s: &CudaSlice<u8>| s.device_ptr(&stream).0;
                    // SAFETY: the buffers hold the lengths given and outlive the problems.
                    unsafe {
                        GemmProblem::raw(
                            DType::Bf16,
                            Layout::Nt,
                            mu,
                            n as usize,
                            k as usize,
                            Operand::new(p(a), mu * k as usize, k as usize),
                            Operand::new(p(w), w_elems, k as usize),
                            Operand::new(p(c), mu * n as usize, n as usize),
                            DType::Bf16,
                            None,
                            Some((p(ws), ws_bytes)),
                        )
                    }
                })
                .collect::<Result<_, _>>()?;
            let bytes = (w_elems + mu * (k as usize + n as usize)) as u64 * 2;
            let launches = graph_launches(bytes, problems.len());
            let mut configs = Vec::new();
            if matching.is_none() {
                configs.push((resolved.config, source_text.clone()));
                if rt_pdl.is_some() {
                    configs.push((resolved.config, "pdl".to_string()));
                }
            }
            // Under GEMM_BENCH_MATCH the served config is timed too where it matches (the
            // alternatives leave it out), as one more row.
            if matching.is_some() && matches_all(&resolved.config) {
                configs.push((resolved.config, source_text));
            }
            if alts {
                if every_alt {
                    let portable = kernels::gemm::heuristic::portable_default(target, &key, m);
                    configs.push((portable, "alt".to_string()));
                }
                configs.extend(
                    alternatives(&key, m, &resolved.config)
                        .into_iter()
                        .filter(|c| family(c) && matches_all(c))
                        .map(|c| (c, "alt".to_string())),
                );
            }
            configs.extend(
                extra_configs
                    .iter()
                    .filter(|c| kernels::gemm::space::fits(target, &key, c))
                    .map(|c| (*c, "config".to_string())),
            );
            let point = Point {
                model,
                layer,
                n,
                k,
                m,
                copies: problems.len(),
            };
            let (nu, ku) = (n as usize, k as usize);
            let ptrs: Vec<(u64, u64, u64)> = sets
                .iter()
                .map(|(a, w, c, _)| {
                    let p = |s: &CudaSlice<u8>| s.device_ptr(&stream).0;
                    (p(a), p(w), p(c))
                })
                .collect();
            // SAFETY: each set holds max_m x k, n x k and max_m x n elements, m <= max_m.
            let gemm = |cb: &Cublas, i: usize| {
                let (a, w, c) = ptrs[i];
                unsafe { cb.linear(mu, nu, ku, a, w, c) }
            };
            // The served config and cuBLAS take turns for `rounds` rounds and each reports
            // its median round, so a drift of the device's clocks during a point falls on
            // both sides alike (single rounds moved by 5-15% from run to run on the H100's
            // longest points). Alternatives run once, in round 0.
            // Alternatives are checked against cuBLAS on the first operand set, up to 256
            // rows (`alt_check` records): an alternative outside the space has not been
            // through the GPU tests.
            let alt_rows = mu.min(256);
            let reference = match cublas.as_ref() {
                Some(cb) if configs.len() > 1 || matching.is_some() => {
                    gemm(cb, 0)?;
                    Some(head_rows(&stream, &sets[0].2, alt_rows, nu)?)
                }
                _ => None,
            };
            let mut served_us = Vec::new();
            let mut cublas_us = Vec::new();
            for round in 0..rounds {
                for (idx, (config, source)) in configs.iter().enumerate() {
                    let served = idx == 0 && matching.is_none();
                    if round > 0 && !served {
                        continue;
                    }
                    let runtime = match (&rt_pdl, source.as_str()) {
                        (Some(pdl), "pdl") => pdl,
                        _ => &rt,
                    };
                    let t = match time_graph_runs(&stream, &opts, launches, problems.len(), &mut |i| {
                        runtime.launch_config::<Gemm>(&stream, config, &problems[i])
                    }) {
                        Ok(t) => t,
                        Err(e) => {
                            println!(
                                "{model:<18} {layer:<8} {n:>6} {k:>6} {m:>5} failed: {e}  {config} ({source})"
                            );
                            continue;
                        }
                    };
                    if served {
                        served_us.push(t.median_us);
                        continue;
                    }
                    point.report(out.as_mut(), t.median_us, &config.to_string(), source)?;
                    if let Some(reference) = reference.as_ref() {
                        runtime.launch_config::<Gemm>(&stream, config, &problems[0])?;
                        let got = head_rows(&stream, &sets[0].2, alt_rows, nu)?;
                        let rel = rel_diff(&got, reference);
                        if rel > 1e-2 {
                            println!("{model:<18} {layer:<8} {n:>6} {k:>6} {m:>5} MISMATCH {rel:.2e} over {alt_rows} rows: {config}");
                        }
                        if let Some(f) = out.as_mut() {
                            writeln!(
                                f,
                                "{{\"kind\":\"alt_check\",\"model\":\"{model}\",\"layer\":\"{layer}\",\"n\":{n},\"k\":{k},\"m\":{m},\"rows\":{alt_rows},\"rel_diff\":{rel:.3e},\"config\":\"{config}\"}}"
                            )?;
                        }
                    }
                }
                if let Some(cb) = cublas.as_ref() {
                    match time_graph_runs(&stream, &opts, launches, ptrs.len(), &mut |i| gemm(cb, i)) {
                        Ok(t) => cublas_us.push(t.median_us),
                        Err(e) => println!("{model:<18} {layer:<8} {n:>6} {k:>6} {m:>5} cublas failed: {e}"),
                    }
                }
            }
            if let Some(us) = median(&mut served_us) {
                let (config, source) = &configs[0];
                point.report(out.as_mut(), us, &config.to_string(), source)?;
            }
            if let Some(us) = median(&mut cublas_us) {
                point.report(out.as_mut(), us, "cublasGemmEx", "cublas")?;
            }
            if let Some(cb) = cublas.as_ref() {
                // Both on the first set, one after the other into its C.
                let rows = mu.min(AGREE_ROWS);
                rt.launch_config::<Gemm>(&stream, &resolved.config, &problems[0])?;
                let ours = head_rows(&stream, &sets[0].2, rows, nu)?;
                gemm(cb, 0)?;
                let theirs = head_rows(&stream, &sets[0].2, rows, nu)?;
                let rel = rel_diff(&ours, &theirs);
                println!("{model:<18} {layer:<8} {n:>6} {k:>6} {m:>5} agree: max |ours - cublas| / max |cublas| = {rel:.2e} over {rows} rows");
                if let Some(f) = out.as_mut() {
                    writeln!(
                        f,
                        "{{\"kind\":\"agree\",\"model\":\"{model}\",\"layer\":\"{layer}\",\"n\":{n},\"k\":{k},\"m\":{m},\"rows\":{rows},\"rel_diff\":{rel:.3e}}}"
                    )?;
                }
            }
            if overhead_problem.is_none() && layer == "qkv" {
                overhead_problem = Some(());
                launch_overhead(&rt, &stream, &key, &problems[0], m)?;
            }
        }
    }
    Ok(())
}

/// The median of `v` (the upper one of an even count); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// A point of the bench: a projection at m rows, timed over `copies` operand copies.
struct Point<'a> {
    model: &'a str,
    layer: &'a str,
    n: u32,
    k: u32,
    m: u64,
    copies: usize,
}

impl Point<'_> {
    /// Prints one timed row (us, TFLOP/s, weight TB/s) and writes its JSON record.
    fn report(
        &self,
        out: Option<&mut std::fs::File>,
        us: f64,
        config: &str,
        source: &str,
    ) -> Result<(), BoxError> {
        let Point {
            model,
            layer,
            n,
            k,
            m,
            copies,
        } = *self;
        let tflops = 2.0 * m as f64 * f64::from(n) * f64::from(k) / us / 1e6;
        let w_tbs = 2.0 * f64::from(n) * f64::from(k) / us / 1e6;
        println!(
            "{model:<18} {layer:<8} {n:>6} {k:>6} {m:>5} {us:>10.1} {tflops:>9.1} {w_tbs:>8.2}  {config} ({source})"
        );
        if let Some(f) = out {
            writeln!(
                f,
                "{{\"model\":\"{model}\",\"layer\":\"{layer}\",\"n\":{n},\"k\":{k},\"m\":{m},\"us\":{us:.3},\"tflops\":{tflops:.2},\"weight_tbs\":{w_tbs:.3},\"copies\":{copies},\"config\":\"{config}\",\"source\":\"{source}\"}}"
            )?;
        }
        Ok(())
    }
}

/// One rotation copy of a point's operands: A, the weight, C and the workspace.
type OperandSet = (CudaSlice<u8>, CudaSlice<u8>, CudaSlice<u8>, CudaSlice<u8>);

/// Times and prints the two floors of a decode point's weight stream, each over every copy
/// of the rotation in turn as the GEMM runs: a plain read of the weight (`read_floor`, what
/// a decode GEMM's weight stream is held to) and a copy of its bytes, its first half onto its
/// second with the row-kernel bench's copy kernel (`copy_floor`: the device's own bandwidth at
/// this size, the bound against the 1 GiB copy figure, which small copies do not reach).
fn floors(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    opts: &TimingOptions,
    (model, layer, n, k): (&str, &str, u32, u32),
    sets: &[OperandSet],
    w_elems: usize,
    mut out: Option<&mut std::fs::File>,
) -> Result<(), BoxError> {
    let sms = rt.device().info().sm_count as usize;
    let sink = stream.alloc_zeros::<u32>(sms * 8)?;
    let read = rt.kernel(stream, &READ, &Variant::new("read_all"))?;
    let copy = rt.kernel(stream, &benches::COPY, &Variant::new("copy_kernel"))?;
    let bytes = w_elems * 2;
    let half = bytes / 2 / 16 * 16;
    let (copy_blocks, copy_threads) = benches::copy_launch(half, (half / 16) as i64, sms as i64);
    let weight = |set: &OperandSet| set.1.device_ptr(stream).0;
    let read_args = sets.iter().map(|set| {
        let mut a = KernelArgs::new();
        a.ptr(weight(set))
            .i64((bytes / 16) as i64)
            .ptr(sink.device_ptr(stream).0);
        a
    });
    let copy_args = sets.iter().map(|set| {
        let mut a = KernelArgs::new();
        a.ptr(weight(set))
            .ptr(weight(set) + half as u64)
            .i64((half / 16) as i64);
        a
    });
    // (record kind, label, what it is, bytes moved, kernel, launch, arguments per copy)
    let ways = [
        (
            "read_floor",
            "read",
            "the weight read once (floor)",
            bytes,
            &read,
            LaunchDims::linear(sms as u32 * 8, 512),
            read_args.collect::<Vec<_>>(),
        ),
        (
            "copy_floor",
            "copy",
            "a copy of the weight's bytes, half each way (bound)",
            2 * half,
            &copy,
            LaunchDims::linear(copy_blocks, copy_threads),
            copy_args.collect::<Vec<_>>(),
        ),
    ];
    for (kind, label, what, moved, kernel, dims, args) in ways {
        let launches = graph_launches(bytes as u64, args.len());
        let t = time_graph_runs(stream, opts, launches, args.len(), &mut |i| {
            // SAFETY: each weight holds `bytes` bytes (the copy's halves do not overlap)
            // and the sink one word per block.
            unsafe { kernel.launch_raw(RawStream::of(stream), dims, &args[i]) }
        })?;
        let tbs = moved as f64 / t.median_us / 1e6;
        println!(
            "{model:<18} {layer:<8} {n:>6} {k:>6} {label:<5} {:>10.1} {:>9} {tbs:>8.2}  {what}",
            t.median_us, ""
        );
        if let Some(f) = out.as_mut() {
            writeln!(
                f,
                "{{\"kind\":\"{kind}\",\"model\":\"{model}\",\"layer\":\"{layer}\",\"n\":{n},\"k\":{k},\"us\":{:.3},\"weight_tbs\":{tbs:.3}}}",
                t.median_us
            )?;
        }
    }
    Ok(())
}

/// Host microseconds per launch of the served config for `p` (plan, tensor maps
/// encoded, enqueue), over 200 launches (fewer than the launch queue holds), beside the portable default's.
fn launch_overhead(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    key: &GemmKey,
    p: &GemmProblem<'_>,
    m: u64,
) -> Result<(), BoxError> {
    let target = rt.device().info().tuning_target();
    let served = resolve_serve::<Gemm>(target, key, m).config;
    let portable = kernels::gemm::heuristic::portable_default(target, key, m);
    for config in [served, portable] {
        rt.launch_config::<Gemm>(stream, &config, p)?;
        stream.synchronize()?;
        let reps = 200;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            rt.launch_config::<Gemm>(stream, &config, p)?;
        }
        let host_us = start.elapsed().as_secs_f64() * 1e6 / f64::from(reps);
        stream.synchronize()?;
        println!("launch overhead: m={m} {host_us:.2} us host per launch  {config}");
    }
    Ok(())
}
