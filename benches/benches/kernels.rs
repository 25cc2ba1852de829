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
    TimingOptions, Variant,
};
use kernels::rmsnorm::ops::{self as norm_ops, NormProblem};
use kernels::rmsnorm::{FusedAddRmsNorm, RmsNorm, RmsNormKey};
use kernels::softmax::ops::{self as sm_ops, SoftmaxProblem};
use kernels::softmax::{Softmax, SoftmaxKey};
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
    tuned_us: f64,
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
    let mut rows_out = Vec::new();

    for (rows, cols) in list("softmax") {
        let key = SoftmaxKey {
            dtype,
            cols: cols as u32,
        };
        let (x, y) = buffers(&stream, dtype, rows * cols)?;
        let shape = Rows::contiguous(rows, cols);
        let (xp, yp) = (x.device_ptr(&stream).0, y.device_ptr(&stream).0);
        let p = unsafe { SoftmaxProblem::raw(dtype, xp, rows * cols, shape, yp, rows * cols, shape, 1.0)? };
        let tuned = resolve_serve::<Softmax>(target, &key, rows as u64);
        let default = Softmax::analytic_default(target, &key, rows as u64);
        let time = |c: &kernels::softmax::SoftmaxConfig| {
            let kernel = rt.kernel(
                &stream,
                &sm_ops::SOURCE,
                &<Softmax as kernels::core::Tunable>::variant(&info, &key, c),
            )?;
            time_runs(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || {
                <Softmax as kernels::core::Tunable>::launch(&kernel, &stream, c, &p)
            })
            .map(|t| t.median_us)
        };
        let tuned_us = time(&tuned.config)?;
        let default_us = if default == tuned.config {
            tuned_us
        } else {
            time(&default)?
        };
        rows_out.push(Row {
            kernel: "softmax",
            rows,
            cols,
            bytes: 2.0 * (rows * cols * 2) as f64,
            tuned_us,
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
            let (x, out) = buffers(&stream, dtype, rows * cols)?;
            let w = alloc_random(&stream, dtype, cols, 4, 0.5, 1.0)?;
            let shape = Rows::contiguous(rows, cols);
            let (xp, op, wp) = (
                x.device_ptr(&stream).0,
                out.device_ptr(&stream).0,
                w.device_ptr(&stream).0,
            );
            let n = rows * cols;
            let fused = kernel == "fused_add_rmsnorm";
            let p = unsafe {
                if fused {
                    NormProblem::fused_add_rmsnorm_raw(dtype, xp, n, shape, op, n, shape, wp, cols, 1e-6)?
                } else {
                    NormProblem::rmsnorm_raw(dtype, xp, n, shape, wp, cols, op, n, shape, 1e-6)?
                }
            };
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
            let time = |c: &kernels::rmsnorm::RmsNormConfig| -> Result<f64, kernels::core::Error> {
                // In place: each timed run normalises the previous run's output, which is
                // the same amount of work on well-scaled data.
                if fused {
                    let k = rt.kernel(
                        &stream,
                        &norm_ops::SOURCE,
                        &<FusedAddRmsNorm as kernels::core::Tunable>::variant(&info, &key, c),
                    )?;
                    time_runs(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || {
                        <FusedAddRmsNorm as kernels::core::Tunable>::launch(&k, &stream, c, &p)
                    })
                    .map(|t| t.median_us)
                } else {
                    let k = rt.kernel(
                        &stream,
                        &norm_ops::SOURCE,
                        &<RmsNorm as kernels::core::Tunable>::variant(&info, &key, c),
                    )?;
                    time_runs(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || {
                        <RmsNorm as kernels::core::Tunable>::launch(&k, &stream, c, &p)
                    })
                    .map(|t| t.median_us)
                }
            };
            let tuned_us = time(&tuned.config)?;
            let default_us = if default == tuned.config {
                tuned_us
            } else {
                time(&default)?
            };
            let bytes = (n * 2) as f64 * if fused { 4.0 } else { 2.0 };
            rows_out.push(Row {
                kernel,
                rows,
                cols,
                bytes,
                tuned_us,
                source: tuned.source,
                default_us,
            });
        }
    }

    println!();
    println!(
        "{:<18} {:>6} {:>7} {:>10} {:>8} {:>7} {:>10} {:>9} {:<14}",
        "kernel", "rows", "cols", "tuned us", "TB/s", "x copy", "default us", "vs empty", "source"
    );
    for r in &rows_out {
        let tbs = r.bytes / (r.tuned_us * 1e-6) / 1e12;
        println!(
            "{:<18} {:>6} {:>7} {:>10.2} {:>8.3} {:>7.3} {:>10.2} {:>+9.2} {:<14}",
            r.kernel,
            r.rows,
            r.cols,
            r.tuned_us,
            tbs,
            tbs / copy_tbs,
            r.default_us,
            r.tuned_us - empty_us,
            r.source.name()
        );
        emit(serde_json::json!({
            "kind": "ours", "kernel": r.kernel, "rows": r.rows, "cols": r.cols, "bytes": r.bytes,
            "us": r.tuned_us, "tbs": tbs, "ratio_copy": tbs / copy_tbs, "default_us": r.default_us,
            "source": r.source.name(), "minus_empty_us": r.tuned_us - empty_us,
        }));
    }
    Ok(())
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
