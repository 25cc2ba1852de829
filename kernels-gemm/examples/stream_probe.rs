//! How fast the decode GEMM steps' weight loads can stream on this GPU, with no math: a
//! bf16 matrix of `STREAM_PROBE_ROWS` x `STREAM_PROBE_K` (default 12288 x 2048, 48 MiB:
//! Qwen3-30B-A3B's eight active experts' gate and up rows at T = 1) moved into shared
//! memory by TMA boxes through an mbarrier ring (`examples/stream_probe.cu`), for a set of
//! box shapes, ring depths and grid sizes, beside every SM reading the same bytes with
//! 16-byte loads. Four copies of the matrix rotate through the graph, so no launch finds
//! its bytes in L2. Prints one JSON line per point: microseconds per launch (graph-timed,
//! median of 7 replays), GB/s, and the fraction of the read bound.
//!
//! `cargo run --release -p kernels-gemm --example stream_probe` (with
//! `STREAM_PROBE_ROWS=16384 STREAM_PROBE_K=768`: the Qwen3 down step's 24 MiB at T = 1).
//! With `--variants` it prints the variants it compiles as `scripts/nvrtc_check.py` reads
//! them, and runs nothing.

use std::sync::Arc;

use kernels_core::backend::cuda::GraphTimer;
use kernels_core::backend::Backend;
use kernels_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels_core::launch::{encode, pseudo_random, TensorMap2d, TmaElement, TmaSwizzle};
use kernels_core::tuned::DType;
use kernels_core::{Cuda, CudaDevice, CudaRuntime, KernelArgs, KernelSource, LaunchDims, Result, Variant};

static SOURCE: KernelSource = KernelSource::new("stream_probe", include_str!("stream_probe.cu"), "probe")
    .with_preamble(&[
        kernels_core::PRELUDE,
        kernels_gemm::plan::PTX,
        kernels_gemm::plan::WGMMA,
    ]);

const COPIES: usize = 4;

/// One probe: box rows, boxes of adjacent columns a stage, ring stages, row tiles an item,
/// whether the producers also gather the activation tile and the consumers multiply, and
/// the dependent global loads before an item's first box.
#[derive(Clone, Copy)]
struct Shape {
    br: u32,
    nbox: u32,
    stages: u32,
    item: u32,
    gather: bool,
    mma: bool,
    start: u32,
}

const fn shape(br: u32, nbox: u32, stages: u32, item: u32, gather: bool, mma: bool) -> Shape {
    Shape {
        br,
        nbox,
        stages,
        item,
        gather,
        mma,
        start: 0,
    }
}

/// `s` with `hops` dependent loads before each item's first box.
const fn started(s: Shape, hops: u32) -> Shape {
    Shape { start: hops, ..s }
}

const SHAPES: &[Shape] = &[
    // The MoE gate-up step at decode: gate and up boxes of 64 rows, 6 stages; then with
    // its activation gather, its products, and both.
    shape(64, 1, 6, 2, false, false),
    shape(64, 1, 6, 2, true, false),
    shape(64, 1, 6, 2, false, true),
    shape(64, 1, 6, 2, true, true),
    // ... and three dependent loads before an item's first box (the decode steps read the
    // expert offsets, find their row tile, then read its pairs).
    started(shape(64, 1, 6, 2, true, true), 3),
    // The same bytes a stage as two k steps (measured 1.6-2.1x slower in the MoE steps).
    shape(64, 2, 3, 2, false, false),
    shape(64, 2, 3, 2, true, true),
    // Paired 32-row tiles.
    shape(32, 1, 6, 2, false, false),
    shape(32, 1, 6, 2, true, true),
    // One tile an item: narrower and wider boxes, deeper rings.
    shape(64, 1, 6, 1, false, false),
    shape(64, 1, 12, 1, false, false),
    shape(32, 1, 12, 1, false, false),
    shape(16, 1, 16, 1, false, false),
    shape(128, 1, 6, 1, false, false),
    shape(256, 1, 3, 1, false, false),
    shape(64, 4, 3, 1, false, false),
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn ptr(s: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    s.device_ptr(stream).0
}

/// The median of 7 replays of a graph of `launch` over the copies, about 2 ms each.
fn graph_us(stream: &Arc<CudaStream>, launch: &mut dyn FnMut(usize) -> Result<()>) -> Result<f64> {
    for c in 0..COPIES {
        launch(c)?;
    }
    Cuda::synchronize(stream)?;
    let once = GraphTimer::capture(stream, 2 * COPIES, COPIES, launch)?.time_us(2)?;
    let launches = COPIES * ((2000.0 / COPIES as f64 / once.max(1.0)).round() as usize).clamp(1, 20);
    let timer = GraphTimer::capture(stream, launches, COPIES, launch)?;
    let mut us: Vec<f64> = (0..7).map(|_| timer.time_us(1)).collect::<Result<_>>()?;
    us.sort_by(|a, b| a.total_cmp(b));
    Ok(us[us.len() / 2])
}

/// The variants, as `scripts/nvrtc_check.py` reads them (sources from the repository root).
fn print_variants() {
    let sources = r#"["kernels-prelude/cuda/prelude.cuh", "kernels-gemm/cuda/gemm_ptx.cuh", "kernels-gemm/cuda/gemm_wgmma.cuh", "kernels-gemm/examples/stream_probe.cu"]"#;
    let lines: Vec<String> = SHAPES
        .iter()
        .map(|&s| {
            let defines = probe_variant("stream_probe", s)
                .defines()
                .iter()
                .map(|(k, v)| format!("\"{k}\": {v}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                r#"{{"name": "{}", "sources": {sources}, "defines": {{{defines}}}, "archs": ["sm_90a"], "kernels": ["stream_probe", "read_probe"]}}"#,
                probe_variant("stream_probe", s)
            )
        })
        .collect();
    println!("[\n{}\n]", lines.join(",\n"));
}

fn main() -> Result<()> {
    if std::env::args().any(|a| a == "--variants") {
        print_variants();
        return Ok(());
    }
    let rows = env_usize("STREAM_PROBE_ROWS", 12288);
    let k = env_usize("STREAM_PROBE_K", 2048);
    let bytes = rows * k * 2;
    let dev = CudaDevice::open(0)?;
    let rt = CudaRuntime::new(dev)?;
    let stream = rt.device().new_stream()?;
    let sms = rt.info().sm_count;
    println!(
        "{{\"device\": \"{}\", \"sms\": {sms}, \"rows\": {rows}, \"k\": {k}, \"bytes\": {bytes}}}",
        rt.info().name
    );
    let mats: Vec<CudaSlice<u8>> = (0..COPIES)
        .map(|_| stream.alloc_zeros::<u8>(bytes).expect("alloc"))
        .collect();
    let sink = stream.alloc_zeros::<u8>(16).expect("alloc");
    // A decode step's activation tile: 16 rows of k, the first one live.
    let act = stream
        .clone_htod(&encode(DType::Bf16, &pseudo_random(16 * k, 7, 1.0, 0.0)))
        .expect("htod");
    // Raw addresses taken before any capture: cudarc's tracked pointers would wait on
    // events recorded outside it, which invalidates the capture.
    let mat_ptrs: Vec<u64> = mats.iter().map(|m| ptr(m, &stream)).collect();
    let sink_ptr = ptr(&sink, &stream);
    let act_ptr = ptr(&act, &stream);
    // A permutation of 0..256 for the dependent loads (`START`).
    let chain: Vec<u8> = (0..256u32)
        .flat_map(|i| ((i * 97 + 13) % 256).to_le_bytes())
        .collect();
    let chain = stream.clone_htod(&chain).expect("htod");
    let chain_ptr = ptr(&chain, &stream);

    // The read bound: every SM, 512 threads a block, four blocks an SM.
    let read = rt.kernel(&stream, &SOURCE, &probe_variant("read_probe", SHAPES[0]))?;
    let read_us = graph_us(&stream, &mut |c| {
        let mut args = KernelArgs::new();
        args.ptr(mat_ptrs[c]).i64((bytes / 16) as i64).ptr(sink_ptr);
        // SAFETY: the matrix holds `bytes / 16` 16-byte pieces; the sink 16 bytes.
        unsafe { Cuda::launch(&read, &stream, LaunchDims::linear(4 * sms, 512), &args) }
    })?;
    let read_gbps = bytes as f64 / read_us / 1e3;
    println!(
        "{{\"kernel\": \"read_probe\", \"grid\": {}, \"us\": {read_us:.2}, \"GBps\": {read_gbps:.0}}}",
        4 * sms
    );

    for &shape in SHAPES {
        let Shape {
            br,
            nbox,
            stages,
            item,
            gather,
            mma,
            start,
        } = shape;
        let v = probe_variant("stream_probe", shape);
        let kernel = match rt.kernel(&stream, &SOURCE, &v) {
            Ok(kernel) => kernel,
            Err(e) => {
                eprintln!("{v}: {e}");
                continue;
            }
        };
        let act_bytes = if gather || mma { nbox * 16 * 128 } else { 0 };
        let smem = stages * (nbox * item * br * 128 + act_bytes) + 1024;
        let items = (rows / (item * br) as usize) as u32;
        let maps: Vec<TensorMap2d> = mat_ptrs
            .iter()
            .map(|&m| TensorMap2d {
                ptr: m,
                element: TmaElement::Bf16,
                cols: k as u64,
                rows: rows as u64,
                row_bytes: k as u64 * 2,
                box_cols: 64,
                box_rows: br,
                swizzle: TmaSwizzle::B128,
            })
            .collect();
        // 96 blocks (the gate-up step's items at Qwen3 T = 1), one an SM, two an SM where two
        // rings fit; never more blocks than items (the down step at T = 1: 256 items).
        let mut grids: Vec<u32> = [96, sms, 2 * sms]
            .into_iter()
            .filter(|&g| g <= sms || 2 * (smem + 2048) <= 228 * 1024)
            .map(|g| g.min(items))
            .collect();
        grids.dedup();
        for grid in grids {
            let us = graph_us(&stream, &mut |c| {
                let mut args = KernelArgs::new();
                args.tensor_map(maps[c])
                    .i32(rows as i32)
                    .i32(k as i32)
                    .ptr(act_ptr)
                    .i32(1)
                    .ptr(chain_ptr)
                    .ptr(sink_ptr);
                // SAFETY: the map covers the matrix; the sink holds 16 bytes.
                unsafe {
                    Cuda::launch(
                        &kernel,
                        &stream,
                        LaunchDims::linear(grid, 256).with_smem(smem),
                        &args,
                    )
                }
            })?;
            let gbps = bytes as f64 / us / 1e3;
            println!(
                "{{\"kernel\": \"stream_probe\", \"box_rows\": {br}, \"boxes\": {nbox}, \"stages\": {stages}, \"item_tiles\": {item}, \"gather\": {gather}, \"mma\": {mma}, \"start_loads\": {start}, \"ring_KiB\": {}, \"grid\": {grid}, \"us\": {us:.2}, \"GBps\": {gbps:.0}, \"of_read\": {:.2}}}",
                (smem - 1024) / 1024,
                gbps / read_gbps
            );
        }
    }
    Ok(())
}

fn probe_variant(entry: &str, s: Shape) -> Variant {
    Variant::new(entry)
        .define("DTYPE", 2)
        .define("WGMMA", 1)
        .define("BR", s.br)
        .define("NBOX", s.nbox)
        .define("STAGES", s.stages)
        .define("ITEM", s.item)
        .define("GATHER", u32::from(s.gather))
        .define("MMA", u32::from(s.mma))
        .define("START", s.start)
}
