//! GPU benchmark of softmax, RMSNorm and fused add RMSNorm over the shape set
//! (`benches/shapes/norm_softmax.json`), as criterion benches: for each shape the
//! tuned-table config (`tuned`), the analytic default (`default`, where it differs)
//! and the peer, a device-to-device copy moving the same bytes (`copy`). Every
//! iteration is one launch of a CUDA graph of at least 20 back-to-back launches over
//! rotating buffer sets (working set at least 2x L2), so criterion's time is kernel
//! time per launch, not CPU launch overhead, and its throughput is bytes moved per
//! second. After criterion, a side-by-side table: ours against the analytic default,
//! the same-size copy and the 1 GiB copy bandwidth, plus an empty kernel's time for
//! the decode batches. Each shape is also measured with programmatic dependent launch
//! (`pdl`: the tuned config, launched by a runtime with `RuntimeOptions::pdl`), next
//! to an empty kernel launched the same way.
//!
//! `cargo bench -p benches --bench kernels` (criterion's options after `--`, e.g. a
//! filter: `-- softmax`); `KERNELS_BENCH_OUT=FILE.jsonl` also writes the table as
//! JSON lines (scripts/report.py reads them); `KERNELS_BENCH_ONLY=KERNEL/ROWSxCOLS,...`
//! (e.g. `fused_add_rmsnorm/16384x5121`) measures only the shapes named. Without a GPU
//! it says so in one line and exits cleanly.

use std::cell::RefCell;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use benches::{copy_launch, COPY};
use criterion::{BenchmarkId, Criterion, Throughput};
use kernels::core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels::core::{
    backend::cuda::{GraphTimer, RawStream},
    launch::alloc_random,
    tune::{time_runs, TimingOptions},
    CudaDevice, CudaRuntime, KernelArgs, KernelSource, LaunchDims, Rows, RuntimeOptions, Tunable, Variant,
};
use kernels::rmsnorm::ops::NormProblem;
use kernels::rmsnorm::{FusedAddRmsNorm, RmsNorm, RmsNormKey};
use kernels::softmax::ops::SoftmaxProblem;
use kernels::softmax::{Softmax, SoftmaxKey};
use tuned::{resolve_serve, DType, Source};

type BoxError = Box<dyn std::error::Error>;

static EMPTY: KernelSource = KernelSource::new(
    "empty",
    "extern \"C\" __global__ void empty_kernel() {}",
    "fnv1a64:0",
);

/// The empty kernel for programmatic dependent launch: it waits for the previous
/// grid, as our kernels do, and so may be launched with the attribute.
static EMPTY_PDL: KernelSource = KernelSource::new(
    "empty_pdl",
    "extern \"C\" __global__ void empty_kernel() {\n\
     #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n\
       asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n\
     #endif\n\
     }",
    "fnv1a64:1",
)
.programmatic_launch();

fn main() {
    let dev = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("kernels bench: skipped: no CUDA GPU found ({e})");
            return;
        }
    };
    // Short runs by default (31 shapes x 3 benches); criterion's own options override.
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10)
        .configure_from_args();
    let out_path = std::env::var("KERNELS_BENCH_OUT").ok();
    if let Err(e) = run(&mut c, dev, out_path) {
        eprintln!("kernels bench: {e}");
        std::process::exit(1);
    }
    c.final_summary();
}

struct Row {
    kernel: &'static str,
    rows: usize,
    cols: usize,
    bytes: f64,
    /// Per launch, median of criterion's samples.
    tuned_us: f64,
    default_us: f64,
    /// A device-to-device copy of the same bytes (read + written), timed the same way.
    copy_us: f64,
    /// One launch between events with the L2 flushed (no graph).
    tuned_single: f64,
    /// The tuned config with programmatic dependent launch, timed as `tuned_us`.
    pdl_us: f64,
    source: Source,
}

/// A graph of at least 20 back-to-back launches over `nbuf` rotating buffer sets
/// (kernels-core's graph timer, which `kernels tune` times candidates with), warmed
/// by 3 plain launches first.
fn capture(
    stream: &Arc<CudaStream>,
    nbuf: usize,
    launch: &mut dyn FnMut(usize) -> Result<(), kernels::core::Error>,
) -> Result<GraphTimer, BoxError> {
    for i in 0..3 {
        launch(i % nbuf)?;
    }
    let g = GraphTimer::capture(stream, nbuf.max(20), nbuf, launch)?;
    stream.synchronize()?;
    Ok(g)
}

/// Time of `iters` launches: whole replays between events, scaled to `iters`.
fn time(g: &GraphTimer, iters: u64) -> Result<Duration, BoxError> {
    let replays = iters.div_ceil(g.launches() as u64).max(1);
    let per_launch_s = g.time_us(replays)? * 1e-6;
    Ok(Duration::from_secs_f64(per_launch_s * iters as f64))
}

/// Runs one criterion bench over `g` and returns the median time per launch (us)
/// over criterion's samples. A CUDA error inside criterion's loop is kept and
/// returned after it.
fn bench(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    g: &GraphTimer,
) -> Result<f64, BoxError> {
    let samples = RefCell::new(Vec::new());
    let error = RefCell::new(None);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| match time(g, iters) {
            Ok(d) => {
                samples.borrow_mut().push(d.as_secs_f64() * 1e6 / iters as f64);
                d
            }
            Err(e) => {
                error.borrow_mut().get_or_insert(e.to_string());
                Duration::from_nanos(1)
            }
        })
    });
    if let Some(e) = error.into_inner() {
        return Err(e.into());
    }
    let mut v = samples.into_inner();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2)
        .copied()
        .ok_or_else(|| "criterion took no samples".into())
}

/// One shape: the tuned config, the default (where it differs) and the same-size copy.
struct Shape<'a> {
    kernel: &'static str,
    rows: usize,
    cols: usize,
    bytes: f64,
    nbuf: usize,
    launch_tuned: &'a mut dyn FnMut(usize) -> Result<(), kernels::core::Error>,
    launch_default: Option<&'a mut dyn FnMut(usize) -> Result<(), kernels::core::Error>>,
    /// The tuned config, launched with programmatic dependent launch.
    launch_pdl: &'a mut dyn FnMut(usize) -> Result<(), kernels::core::Error>,
    source: Source,
}

/// Measures kernel `K` on one shape of `rows` x `cols`, moving `bytes` per launch over
/// `problems` (its rotating buffer sets), with `measure`: the config the tables serve
/// and, where it is another config, the analytic default, each compiled for the device
/// and launched through `K`'s own launch; and the tuned config loaded by `rt_pdl`
/// (programmatic dependent launch).
#[allow(clippy::too_many_arguments)]
fn measure_served<K: Tunable>(
    rt: &CudaRuntime,
    rt_pdl: &CudaRuntime,
    stream: &Arc<CudaStream>,
    key: &K::Key,
    rows: usize,
    cols: usize,
    bytes: f64,
    problems: &[K::Problem<'_>],
    measure: &mut dyn FnMut(Shape<'_>) -> Result<Row, BoxError>,
) -> Result<Row, BoxError>
where
    K::Config: PartialEq,
{
    let info = rt.device().info();
    let target = info.tuning_target();
    let tuned = resolve_serve::<K>(target, key, rows as u64);
    let default = K::analytic_default(target, key, rows as u64);
    let load = |c: &K::Config| rt.kernels::<K>(stream, key, c);
    let (kt, kd) = (load(&tuned.config)?, load(&default)?);
    let kp = rt_pdl.kernels::<K>(stream, key, &tuned.config)?;
    let mut lt =
        |i: usize| kernels::core::launch::<kernels::core::Cuda, K>(&kt, stream, &tuned.config, &problems[i]);
    let mut ld =
        |i: usize| kernels::core::launch::<kernels::core::Cuda, K>(&kd, stream, &default, &problems[i]);
    let mut lp =
        |i: usize| kernels::core::launch::<kernels::core::Cuda, K>(&kp, stream, &tuned.config, &problems[i]);
    measure(Shape {
        kernel: K::SCHEMA.kernel,
        rows,
        cols,
        bytes,
        nbuf: problems.len(),
        launch_tuned: &mut lt,
        launch_default: if default == tuned.config {
            None
        } else {
            Some(&mut ld)
        },
        launch_pdl: &mut lp,
        source: tuned.source,
    })
}

fn run(c: &mut Criterion, dev: CudaDevice, out_path: Option<String>) -> Result<(), BoxError> {
    // Plain launches whatever KERNELS_PDL says, and a second runtime with programmatic
    // dependent launch for the `pdl` column.
    let mut options = RuntimeOptions::from_env()?;
    options.pdl = false;
    let rt = CudaRuntime::with_options(dev.clone(), options.clone())?;
    options.pdl = true;
    let rt_pdl = CudaRuntime::with_options(dev, options)?;
    let stream = rt.device().new_stream()?;
    let info = rt.device().info().clone();
    let flush = kernels::core::tune::L2Flush::<kernels::core::Cuda>::new(&stream, &info)?;
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
    let t = time_runs::<kernels::core::Cuda>(&stream, &opts, None, &mut || Ok(()), &mut || {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(|e| kernels::core::Error::kernel("copy", e.to_string()))
    })?;
    let copy_tbs = 2.0 * n as f64 / (t.median_us * 1e-6) / 1e12;
    drop((src, dst));
    println!(
        "{} ({} SMs): device-to-device copy of 1 GiB {copy_tbs:.3} TB/s",
        info.name, info.sm_count
    );
    emit(serde_json::json!({"kind": "copy", "tbs": copy_tbs, "device": info.name}));

    let empty = rt.kernel(&stream, &EMPTY, &Variant::new("empty_kernel"))?;
    let empty_pdl = rt_pdl.kernel(&stream, &EMPTY_PDL, &Variant::new("empty_kernel"))?;
    let copy = rt.kernel(&stream, &COPY, &Variant::new("copy_kernel"))?;
    // One block of 32 threads of an empty kernel, launched as `k` launches.
    let launch_one = |k: &kernels::core::backend::cuda::CudaKernel| unsafe {
        k.launch_raw(
            RawStream::of(&stream),
            LaunchDims::linear(1, 32),
            &KernelArgs::new(),
        )
    };
    // Its time per launch in a graph, as criterion group `group`.
    let empty_graph_us = |c: &mut Criterion,
                          k: &kernels::core::backend::cuda::CudaKernel,
                          group: &str|
     -> Result<f64, BoxError> {
        let g = capture(&stream, 1, &mut |_| launch_one(k))?;
        let mut group = c.benchmark_group(group);
        let us = bench(&mut group, BenchmarkId::new("kernel", "1 block"), &g)?;
        group.finish();
        Ok(us)
    };
    let empty_single =
        time_runs::<kernels::core::Cuda>(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || {
            launch_one(&empty)
        })?
        .median_us;
    let empty_us = empty_graph_us(c, &empty, "empty")?;
    println!("empty kernel: {empty_us:.2} us per launch in a graph, {empty_single:.2} us alone");
    emit(serde_json::json!({"kind": "empty_graph", "us": empty_us}));
    emit(serde_json::json!({"kind": "empty", "us": empty_single}));
    let pdl_on = empty_pdl.programmatic_launch();
    let empty_pdl_us = empty_graph_us(c, &empty_pdl, "empty_pdl")?;
    println!(
        "empty kernel with programmatic dependent launch{}: {empty_pdl_us:.2} us per launch in a graph",
        if pdl_on {
            ""
        } else {
            " (not supported here: plain launches)"
        }
    );
    emit(serde_json::json!({"kind": "empty_graph_pdl", "us": empty_pdl_us, "pdl": pdl_on}));

    let shapes: serde_json::Value = serde_json::from_str(include_str!("../shapes/norm_softmax.json"))?;
    // KERNELS_BENCH_ONLY=kernel/ROWSxCOLS,... keeps the shapes named (all when unset).
    let only: Option<Vec<String>> = std::env::var("KERNELS_BENCH_ONLY").ok().map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
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
                    .filter(|(r, c)| only.as_ref().is_none_or(|o| o.contains(&format!("{k}/{r}x{c}"))))
                    .collect()
            })
            .unwrap_or_default()
    };
    let dtype = DType::Bf16;
    let l2 = info.l2_bytes as usize;
    // Buffer sets of `n` elements in and out, as many as rotating `bytes` a launch
    // over at least twice the L2 takes.
    let rotating = |n: usize, bytes: f64| -> Result<Vec<_>, kernels::core::Error> {
        (0..kernels::core::tune::rotation(bytes as u64, l2 as u64))
            .map(|_| buffers(&stream, dtype, n))
            .collect()
    };
    let mut rows_out = Vec::new();

    // Measures one shape: criterion benches for tuned, default and copy, then the
    // single-launch time of the tuned config.
    let measure = |c: &mut Criterion, s: Shape<'_>| -> Result<Row, BoxError> {
        let name = format!("{}/{}x{}", s.kernel, s.rows, s.cols);
        let mut group = c.benchmark_group(&name);
        group.throughput(Throughput::Bytes(s.bytes as u64));
        let tuned_graph = capture(&stream, s.nbuf, s.launch_tuned)?;
        let tuned_us = bench(&mut group, BenchmarkId::from_parameter("tuned"), &tuned_graph)?;
        drop(tuned_graph);
        let default_us = match s.launch_default {
            Some(l) => {
                let g = capture(&stream, s.nbuf, l)?;
                bench(&mut group, BenchmarkId::from_parameter("default"), &g)?
            }
            None => tuned_us,
        };
        // The peer: copying the same bytes (half read, half written), rotated too.
        let half = (s.bytes as usize / 2).max(16) / 16 * 16;
        let copies = s.nbuf;
        let src = stream.alloc_zeros::<u8>(half * copies)?;
        let dst = stream.alloc_zeros::<u8>(half * copies)?;
        let (sp, dp) = (src.device_ptr(&stream).0, dst.device_ptr(&stream).0);
        stream.synchronize()?;
        // An SM copy kernel over raw pointers (cudarc's tracked copies would wait on
        // events recorded outside the capture, which a graph capture refuses).
        let vectors = (half / 16) as i64;
        let (blocks, threads) = copy_launch(half, vectors, info.sm_count as i64);
        let mut launch_copy = |i: usize| {
            let off = (i * half) as u64;
            let mut args = KernelArgs::new();
            args.ptr(sp + off).ptr(dp + off).i64(vectors);
            // Safe: both ranges lie inside the allocations above, which outlive the graph.
            unsafe { copy.launch_raw(RawStream::of(&stream), LaunchDims::linear(blocks, threads), &args) }
        };
        let g = capture(&stream, copies, &mut launch_copy)?;
        let copy_us = bench(&mut group, BenchmarkId::from_parameter("copy"), &g)?;
        drop(g);
        let g = capture(&stream, s.nbuf, s.launch_pdl)?;
        let pdl_us = bench(&mut group, BenchmarkId::from_parameter("pdl"), &g)?;
        drop(g);
        group.finish();
        let tuned_single =
            time_runs::<kernels::core::Cuda>(&stream, &opts, Some(&flush), &mut || Ok(()), &mut || {
                (s.launch_tuned)(0)
            })?
            .median_us;
        Ok(Row {
            kernel: s.kernel,
            rows: s.rows,
            cols: s.cols,
            bytes: s.bytes,
            tuned_us,
            default_us,
            copy_us,
            tuned_single,
            pdl_us,
            source: s.source,
        })
    };

    for (rows, cols) in list("softmax") {
        let key = SoftmaxKey {
            dtype,
            cols: cols as u32,
        };
        let n = rows * cols;
        let bytes = 2.0 * (n * 2) as f64;
        let bufs = rotating(n, bytes)?;
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
            .collect::<Result<Vec<_>, _>>()?;
        let row = measure_served::<Softmax>(
            &rt,
            &rt_pdl,
            &stream,
            &key,
            rows,
            cols,
            bytes,
            &problems,
            &mut |s| measure(c, s),
        )?;
        rows_out.push(row);
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
            let bufs = rotating(n, bytes)?;
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
                .collect::<Result<Vec<_>, _>>()?;
            // In place (fused): each run normalises the previous run's output, the same
            // amount of work on well-scaled data.
            let mut m = |s: Shape<'_>| measure(c, s);
            let row = if fused {
                measure_served::<FusedAddRmsNorm>(
                    &rt, &rt_pdl, &stream, &key, rows, cols, bytes, &problems, &mut m,
                )?
            } else {
                measure_served::<RmsNorm>(&rt, &rt_pdl, &stream, &key, rows, cols, bytes, &problems, &mut m)?
            };
            rows_out.push(row);
        }
    }

    println!();
    println!(
        "per launch, graph-timed medians of the criterion samples above; `copy us` copies the same bytes; \
         `single` is one launch between events with the L2 flushed; `pdl us` launches with programmatic \
         dependent launch, `pdl-empty` subtracts the empty kernel launched so ({empty_pdl_us:.2} us)"
    );
    println!(
        "{:<18} {:>6} {:>7} {:>9} {:>7} {:>9} {:>8} {:>10} {:>8} {:>9} {:>12} {:>8} {:>9} {:<14}",
        "kernel",
        "rows",
        "cols",
        "us",
        "TB/s",
        "x copy1G",
        "copy us",
        "default us",
        "/default",
        "single us",
        "single-empty",
        "pdl us",
        "pdl-empty",
        "source"
    );
    for r in &rows_out {
        let tbs = r.bytes / (r.tuned_us * 1e-6) / 1e12;
        println!(
            "{:<18} {:>6} {:>7} {:>9.2} {:>7.3} {:>9.3} {:>8.2} {:>10.2} {:>8.2} {:>9.2} {:>+12.2} {:>8.2} {:>+9.2} {:<14}",
            r.kernel,
            r.rows,
            r.cols,
            r.tuned_us,
            tbs,
            tbs / copy_tbs,
            r.copy_us,
            r.default_us,
            r.default_us / r.tuned_us,
            r.tuned_single,
            r.tuned_single - empty_single,
            r.pdl_us,
            r.pdl_us - empty_pdl_us,
            r.source.name()
        );
        emit(serde_json::json!({
            "kind": "ours", "kernel": r.kernel, "rows": r.rows, "cols": r.cols, "bytes": r.bytes,
            "us": r.tuned_us, "tbs": tbs, "ratio_copy": tbs / copy_tbs, "default_us": r.default_us,
            "copy_same_bytes_us": r.copy_us,
            "single_us": r.tuned_single, "single_minus_empty_us": r.tuned_single - empty_single,
            "pdl_us": r.pdl_us, "pdl_minus_empty_pdl_us": r.pdl_us - empty_pdl_us,
            "source": r.source.name(),
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
