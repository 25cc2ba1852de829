//! GPU benchmark of softmax, RMSNorm and fused add RMSNorm over the shape set
//! (`benches/shapes/norm_softmax.json`): the tuned-table config against the analytic
//! default and against the device's own device-to-device copy bandwidth, measured in
//! the same run with the one timing routine (CUDA events, warm-up, median, L2 flushed
//! for working sets under 2x L2). Also an empty kernel's time, for decode batches.
//!
//! `cargo bench -p benches --bench kernels [-- --out FILE.jsonl]`. Without a GPU it
//! says so in one line and exits cleanly.

use std::io::Write;
use std::sync::Arc;

use kernels::core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels::core::{
    alloc_random, time_runs, Device, KernelArgs, KernelSource, L2Flush, LaunchDims, RawStream, Rows, Runtime,
    TimingOptions, Tunable, Variant,
};
use kernels::rmsnorm::ops::{self as norm_ops, NormProblem};
use kernels::rmsnorm::{FusedAddRmsNorm, RmsNorm, RmsNormConfig, RmsNormKey};
use kernels::softmax::ops::{self as sm_ops, SoftmaxProblem};
use kernels::softmax::{Softmax, SoftmaxConfig, SoftmaxKey};
use tuned::{resolve_serve, DType, Source, TunedKernel};

static EMPTY: KernelSource = KernelSource::new(
    "empty",
    "extern \"C\" __global__ void empty_kernel() {}",
    "fnv1a64:0",
);

fn main() {
    let out_path = std::env::args().skip_while(|a| a != "--out").nth(1);
    let dev = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("kernels bench: skipped: no CUDA GPU found ({e})");
            return;
        }
    };
    if let Err(e) = run(dev, out_path) {
        eprintln!("kernels bench: {e}");
        std::process::exit(1);
    }
}

struct Row {
    kernel: &'static str,
    rows: usize,
    cols: usize,
    bytes: f64,
    /// Graph-timed, per launch.
    tuned_us: f64,
    /// One launch between events, L2 flushed.
    tuned_single: f64,
    source: Source,
    default_us: f64,
}

fn run(dev: Device, out_path: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::new(dev)?;
    let stream = rt.device().new_stream()?;
    let info = rt.device().info().clone();
    let target = info.tuning_target();
    let flush = L2Flush::new(&stream, &info)?;
    let opts = TimingOptions {
        warmup: 5,
        reps: 30,
        ..TimingOptions::default()
    };
    let mut out: Option<std::fs::File> = out_path.as_deref().map(std::fs::File::create).transpose()?;
    let mut emit = |v: serde_json::Value| {
        if let Some(f) = out.as_mut() {
            let _ = writeln!(f, "{v}");
        }
    };

    // Copy bandwidth: 1 GiB device to device, bytes read + written.
    let n = 1usize << 30;
    let src = stream.alloc_zeros::<u8>(n)?;
    let mut dst = stream.alloc_zeros::<u8>(n)?;
    let t = time_runs(&stream, &opts, None, &mut || Ok(()), &mut || {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(|e| kernels::core::Error::kernel("copy", e.to_string()))
    })?;
    let copy_tbs = 2.0 * n as f64 / (t.median_us * 1e-6) / 1e12;
    drop((src, dst));
    println!(
        "{} ({} SMs): device-to-device copy {copy_tbs:.3} TB/s",
        info.name, info.sm_count
    );
    emit(serde_json::json!({"kind": "copy", "tbs": copy_tbs, "device": info.name}));

    let empty = rt.kernel(&stream, &EMPTY, &Variant::new("empty_kernel"))?;
    let t = time_runs(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || unsafe {
        empty.launch_raw(
            RawStream::of(&stream),
            LaunchDims::linear(1, 32),
            &KernelArgs::new(),
        )
    })?;
    let empty_us = t.median_us;
    println!("empty kernel: {empty_us:.2} us (same timing routine)");
    emit(serde_json::json!({"kind": "empty", "us": empty_us}));

    let shapes: serde_json::Value = serde_json::from_str(include_str!("../shapes/norm_softmax.json"))?;
    let list = |k: &str| -> Vec<(usize, usize)> {
        shapes[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        (
                            s[0].as_u64().unwrap_or(1) as usize,
                            s[1].as_u64().unwrap_or(1) as usize,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let dtype = DType::Bf16;
    let l2 = info.l2_bytes as usize;
    let mut rows_out = Vec::new();

    // The empty kernel in a graph: the decode floor for graph-timed numbers.
    let empty_graph_us = graph_us(&stream, 1, &mut |_| unsafe {
        empty.launch_raw(
            RawStream::of(&stream),
            LaunchDims::linear(1, 32),
            &KernelArgs::new(),
        )
    })?;
    println!("empty kernel in a CUDA graph: {empty_graph_us:.2} us per launch");
    emit(serde_json::json!({"kind": "empty_graph", "us": empty_graph_us}));

    for (rows, cols) in list("softmax") {
        let key = SoftmaxKey {
            dtype,
            cols: cols as u32,
        };
        let n = rows * cols;
        let bytes = 2.0 * (n * 2) as f64;
        let nb = rotation(bytes as usize, l2);
        let bufs: Vec<_> = (0..nb)
            .map(|_| buffers(&stream, dtype, n))
            .collect::<Result<_, _>>()?;
        let shape = Rows::contiguous(rows, cols);
        let problems: Vec<_> = bufs
            .iter()
            .map(|(x, y)| unsafe {
                SoftmaxProblem::raw(
                    dtype,
                    x.device_ptr(&stream).0,
                    n,
                    shape,
                    y.device_ptr(&stream).0,
                    n,
                    shape,
                    1.0,
                )
            })
            .collect::<Result<_, _>>()?;
        let tuned = resolve_serve::<Softmax>(target, &key, rows as u64);
        let default = Softmax::analytic_default(target, &key, rows as u64);
        let time = |c: &SoftmaxConfig| -> Result<(f64, f64), Box<dyn std::error::Error>> {
            let kernel = rt.kernel(&stream, &sm_ops::SOURCE, &Softmax::variant(&info, &key, c))?;
            let mut launch = |i: usize| <Softmax as Tunable>::launch(&kernel, &stream, c, &problems[i]);
            let single =
                time_runs(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || launch(0))?.median_us;
            let graph = graph_us(&stream, nb, &mut launch)?;
            Ok((single, graph))
        };
        let (tuned_single, tuned_us) = time(&tuned.config)?;
        let default_us = if default == tuned.config {
            tuned_us
        } else {
            time(&default)?.1
        };
        rows_out.push(Row {
            kernel: "softmax",
            rows,
            cols,
            bytes,
            tuned_us,
            tuned_single,
            source: tuned.source,
            default_us,
        });
    }
    for kernel in ["rmsnorm", "fused_add_rmsnorm"] {
        for (rows, cols) in list(kernel) {
            let key = RmsNormKey {
                dtype,
                cols: cols as u32,
            };
            let fused = kernel == "fused_add_rmsnorm";
            let n = rows * cols;
            let bytes = (n * 2) as f64 * if fused { 4.0 } else { 2.0 };
            let nb = rotation(bytes as usize, l2);
            let bufs: Vec<_> = (0..nb)
                .map(|_| buffers(&stream, dtype, n))
                .collect::<Result<_, _>>()?;
            let w = alloc_random(&stream, dtype, cols, 4, 0.5, 1.0)?;
            let wp = w.device_ptr(&stream).0;
            let shape = Rows::contiguous(rows, cols);
            let problems: Vec<_> = bufs
                .iter()
                .map(|(x, out)| {
                    let (xp, op) = (x.device_ptr(&stream).0, out.device_ptr(&stream).0);
                    unsafe {
                        if fused {
                            NormProblem::fused_add_rmsnorm_raw(
                                dtype, xp, n, shape, op, n, shape, wp, cols, 1e-6,
                            )
                        } else {
                            NormProblem::rmsnorm_raw(dtype, xp, n, shape, wp, cols, op, n, shape, 1e-6)
                        }
                    }
                })
                .collect::<Result<_, _>>()?;
            let (tuned, default) = if fused {
                (
                    resolve_serve::<FusedAddRmsNorm>(target, &key, rows as u64),
                    FusedAddRmsNorm::analytic_default(target, &key, rows as u64),
                )
            } else {
                (
                    resolve_serve::<RmsNorm>(target, &key, rows as u64),
                    RmsNorm::analytic_default(target, &key, rows as u64),
                )
            };
            // In place (fused): each run normalises the previous run's output, the same
            // amount of work on well-scaled data.
            let time = |c: &RmsNormConfig| -> Result<(f64, f64), Box<dyn std::error::Error>> {
                let variant = if fused {
                    FusedAddRmsNorm::variant(&info, &key, c)
                } else {
                    RmsNorm::variant(&info, &key, c)
                };
                let k = rt.kernel(&stream, &norm_ops::SOURCE, &variant)?;
                let mut launch = |i: usize| {
                    if fused {
                        <FusedAddRmsNorm as Tunable>::launch(&k, &stream, c, &problems[i])
                    } else {
                        <RmsNorm as Tunable>::launch(&k, &stream, c, &problems[i])
                    }
                };
                let single =
                    time_runs(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || launch(0))?.median_us;
                let graph = graph_us(&stream, nb, &mut launch)?;
                Ok((single, graph))
            };
            let (tuned_single, tuned_us) = time(&tuned.config)?;
            let default_us = if default == tuned.config {
                tuned_us
            } else {
                time(&default)?.1
            };
            rows_out.push(Row {
                kernel,
                rows,
                cols,
                bytes,
                tuned_us,
                tuned_single,
                source: tuned.source,
                default_us,
            });
        }
    }

    println!();
    println!("graph-timed per launch (as the peer script times torch and Liger); `single` is one launch between events with the L2 flushed");
    println!(
        "{:<18} {:>6} {:>7} {:>9} {:>7} {:>7} {:>10} {:>9} {:>12} {:<14}",
        "kernel", "rows", "cols", "us", "TB/s", "x copy", "default us", "single us", "single-empty", "source"
    );
    for r in &rows_out {
        let tbs = r.bytes / (r.tuned_us * 1e-6) / 1e12;
        println!(
            "{:<18} {:>6} {:>7} {:>9.2} {:>7.3} {:>7.3} {:>10.2} {:>9.2} {:>+12.2} {:<14}",
            r.kernel,
            r.rows,
            r.cols,
            r.tuned_us,
            tbs,
            tbs / copy_tbs,
            r.default_us,
            r.tuned_single,
            r.tuned_single - empty_us,
            r.source.name()
        );
        emit(serde_json::json!({
            "kind": "ours", "kernel": r.kernel, "rows": r.rows, "cols": r.cols, "bytes": r.bytes,
            "us": r.tuned_us, "tbs": tbs, "ratio_copy": tbs / copy_tbs, "default_us": r.default_us,
            "single_us": r.tuned_single, "single_minus_empty_us": r.tuned_single - empty_us,
            "source": r.source.name(),
        }));
    }
    Ok(())
}

/// Median microseconds per launch of `launch(i)` (i cycles over `nbuf` buffer sets),
/// captured at least 20 times in one CUDA graph and replayed: the way the peer script
/// times torch and Liger, so the two compare like for like.
fn graph_us(
    stream: &Arc<CudaStream>,
    nbuf: usize,
    launch: &mut dyn FnMut(usize) -> Result<(), kernels::core::Error>,
) -> Result<f64, Box<dyn std::error::Error>> {
    use kernels::core::cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
    let launches = nbuf.max(20);
    for i in 0..3 {
        launch(i % nbuf)?;
    }
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let mut captured = Ok(());
    for i in 0..launches {
        captured = captured.and_then(|_| launch(i % nbuf));
    }
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))?
        .ok_or("empty graph")?;
    captured?;
    graph.launch()?;
    stream.synchronize()?;
    let ctx = stream.context();
    let mut times = Vec::new();
    for _ in 0..7 {
        let a = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let b = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        a.record(stream)?;
        graph.launch()?;
        b.record(stream)?;
        b.synchronize()?;
        times.push(a.elapsed_ms(&b)? as f64 * 1000.0 / launches as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Buffer sets to rotate over so the working set is at least 2x L2.
fn rotation(bytes_per_call: usize, l2: usize) -> usize {
    (2 * l2).div_ceil(bytes_per_call.max(1)).clamp(1, 64)
}

fn buffers(
    stream: &Arc<CudaStream>,
    dtype: DType,
    n: usize,
) -> Result<(CudaSlice<u8>, CudaSlice<u8>), kernels::core::Error> {
    Ok((
        alloc_random(stream, dtype, n, 21, 4.0, 0.0)?,
        alloc_random(stream, dtype, n, 22, 4.0, 0.0)?,
    ))
}
