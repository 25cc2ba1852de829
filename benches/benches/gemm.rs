//! GPU benchmark of the GEMM on LLM projection shapes (../shared/models.json:
//! Llama-3.1-8B at tp 1 and Llama-3.1-70B at tp 8; qkv, o, gate_up, down, lm_head) at
//! m = 1..8192 tokens, with the config the serve policy resolves (baked table, else
//! the analytic default). Each point is the median over graph replays of back-to-back
//! launches rotating over copies of the operands (working set at least 2x L2, as the
//! tuner times), so decode points are weight streams from HBM, not from L2.
//! scripts/gemm_peers.py times cuBLAS (torch F.linear) the same way.
//!
//! `cargo bench -p benches --bench gemm`; `KERNELS_BENCH_OUT=FILE.jsonl` also writes
//! one JSON object per point; `GEMM_BENCH_M=1,16,...` picks the m values. Without a GPU
//! it says so in one line and exits cleanly.

use std::io::Write;
use std::sync::Arc;

use kernels::core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels::core::{
    backend::cuda::{time_graph_runs, RawStream},
    tune::{graph_launches, rotation, TimingOptions},
    CudaDevice, CudaRuntime, KernelArgs, KernelSource, LaunchDims, RuntimeOptions, Variant,
};
use kernels::gemm::plan::{GemmProblem, Operand};
use kernels::gemm::{Gemm, GemmKey, Layout};
use tuned::{resolve_serve, DType};

type BoxError = Box<dyn std::error::Error>;

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

fn main() -> Result<(), BoxError> {
    let dev = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("gemm bench: no CUDA GPU ({e}); nothing measured");
            return Ok(());
        }
    };
    let rt = CudaRuntime::with_options(dev, RuntimeOptions::default())?;
    let stream = rt.device().new_stream()?;
    let info = rt.device().info().clone();
    let target = info.tuning_target();
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
    for &(model, layer, n, k) in SHAPES {
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n,
            k,
        };
        let w_elems = n as usize * k as usize;
        let max_m = *ms.iter().max().unwrap_or(&1) as usize;
        let per_call_max = (w_elems + max_m * (k as usize + n as usize)) as u64 * 2;
        let copies = rotation(per_call_max.min(w_elems as u64 * 2), info.l2_bytes);
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
        for &m in &ms {
            let mu = m as usize;
            let resolved = resolve_serve::<Gemm>(target, &key, m);
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
            let config = resolved.config;
            let bytes = (w_elems + mu * (k as usize + n as usize)) as u64 * 2;
            let launches = graph_launches(bytes, problems.len());
            let t = time_graph_runs(&stream, &opts, launches, problems.len(), &mut |i| {
                rt.launch_config::<Gemm>(&stream, &config, &problems[i])
            })?;
            let us = t.median_us;
            let tflops = 2.0 * m as f64 * n as f64 * k as f64 / us / 1e6;
            let w_tbs = (w_elems * 2) as f64 / us / 1e6;
            println!(
                "{model:<18} {layer:<8} {n:>6} {k:>6} {m:>5} {us:>10.1} {tflops:>9.1} {w_tbs:>8.2}  {config} ({})",
                resolved.source
            );
            if let Some(f) = out.as_mut() {
                writeln!(
                    f,
                    "{{\"model\":\"{model}\",\"layer\":\"{layer}\",\"n\":{n},\"k\":{k},\"m\":{m},\"us\":{us:.3},\"tflops\":{tflops:.2},\"weight_tbs\":{w_tbs:.3},\"config\":\"{config}\",\"source\":\"{}\"}}",
                    resolved.source
                )?;
            }
        }
    }
    Ok(())
}
