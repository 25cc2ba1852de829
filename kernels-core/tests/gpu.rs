//! GPU tests. Each looks for a GPU first: where none is found it prints
//! "skipped: no CUDA GPU found" and returns, unless `KERNELS_REQUIRE_GPU=1`, where it
//! fails. Run them one at a time (`--test-threads=1`) so timings are not disturbed.
//!
//! Two test kernel families are defined here, with deliberately good and bad configs:
//! `test_scale` (`x = x * a + b` in place: a `Restore` buffer) and `test_hist` (an
//! atomic histogram: a `Zero` buffer).

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, PushKernelArg};
use kernels_core::{
    backend::cuda::RawStream,
    tune::{
        parse_shapes, tune_table, TableJob, Timing, TimingMethod, TimingOptions, TuneOptions, TuneReport,
    },
    BufferRole, CudaDevice, CudaRuntime, DeviceInfo, DiskCache, DynTunable, Error, Expected, KernelArgs,
    KernelSource, LaunchDims, ModuleOrigin, PlannedKernel, Policy, RuntimeOptions, Tunable, TunableDyn,
    TuneBuffer, Variant,
};
use tuned::{
    int_key, int_param, BakedTable, Field, KernelSchema, KeyValues, Source, Target, TunedKernel, Value,
};

// ---- harness ------------------------------------------------------------------------

fn gpu(test: &str) -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(e) => {
            kernels_core::testing::skip_or_fail(test, &format!("no CUDA GPU found ({e})"));
            None
        }
    }
}

fn runtime(dev: &CudaDevice, policy: Policy, cache: DiskCache) -> CudaRuntime {
    CudaRuntime::with_options(
        dev.clone(),
        RuntimeOptions {
            policy,
            cache,
            tune: TuneOptions::default(),
            pdl: false,
        },
    )
    .expect("a GPU machine must have NVRTC")
}

/// The GPU (or the skip, as [`gpu`]), a runtime on it with `policy` and no disk cache,
/// and a new stream: what most tests start with.
fn setup(test: &str, policy: Policy) -> Option<(CudaDevice, CudaRuntime, Arc<CudaStream>)> {
    let dev = gpu(test)?;
    let rt = runtime(&dev, policy, DiskCache::disabled());
    let stream = dev.new_stream().unwrap();
    Some((dev, rt, stream))
}

/// Prints each candidate of `report`: `timed`'s line for a timing, else the first line
/// of its error.
fn print_candidates<C: std::fmt::Debug>(report: &TuneReport<C>, timed: impl Fn(&Timing) -> String) {
    for c in &report.candidates {
        match &c.outcome {
            Ok(t) => println!("  {:?}: {}", c.config, timed(t)),
            Err(e) => println!("  {:?}: FAILED {}", c.config, e.lines().next().unwrap_or("")),
        }
    }
}

/// `test_scale`'s search beat its deliberately bad default by half (a coalesced
/// config that compiles and launches); returns (chosen, default) microseconds.
fn beats_the_bad_default(report: &TuneReport<ScaleConfig>) -> (f64, f64) {
    let default_us = report.default_us().expect("the default runs");
    let chosen_us = report.chosen_us().expect("a candidate wins");
    println!(
        "chosen {:?}: {chosen_us:.1} us vs deliberately bad default {default_us:.1} us ({:.1}x)",
        report.chosen,
        default_us / chosen_us
    );
    assert!(!report.chosen.strided && !report.chosen.broken && report.chosen.threads <= 1024);
    assert!(
        chosen_us * 1.5 < default_us,
        "not measurably faster: {chosen_us} vs {default_us}"
    );
    (chosen_us, default_us)
}

/// The errors of `test_scale`'s three failing candidates (the block too large to
/// launch, the variant that does not compile, and the fast one that computes the wrong
/// result, rejected by the output check before it is timed), recorded while the search
/// and its final plain run went on.
fn three_failed(report: &TuneReport<ScaleConfig>) -> Vec<&String> {
    let failed: Vec<&String> = report
        .candidates
        .iter()
        .filter_map(|c| c.outcome.as_ref().err())
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(failed.iter().any(|e| e.contains("`block`")), "{failed:?}");
    let wrong: Vec<_> = report
        .candidates
        .iter()
        .filter(|c| {
            c.outcome
                .as_ref()
                .is_err_and(|e| e.starts_with(kernels_core::tune::WRONG_OUTPUT))
        })
        .collect();
    assert_eq!(wrong.len(), 1, "{failed:?}");
    assert!(wrong[0].config.wrong, "{:?}", wrong[0]);
    assert!(report.failure.is_none());
    assert_eq!(report.final_run, Ok(()));
    failed
}

/// `x` holds exactly one plain run of `test_scale` over `host`.
fn assert_one_plain_run(stream: &Arc<CudaStream>, x: &CudaSlice<f32>, host: &[f32]) {
    let got = stream.clone_dtoh(x).unwrap();
    let bad = got.iter().zip(host).filter(|(g, h)| **g != scaled(**h)).count();
    assert_eq!(bad, 0, "{bad} elements differ from one plain run");
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kernels-core-gpu-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs one `#[ignore]`d test of this binary in a child process with `envs`, and
/// returns its `CHILD ...` line.
fn child(test: &str, envs: &[(&str, String)]) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([test, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("spawn child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {test} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // libtest prints `test name ... ` before the test's own output on the same line.
    stdout
        .lines()
        .find_map(|l| l.find("CHILD ").map(|i| l[i..].to_string()))
        .unwrap_or_else(|| panic!("child {test} printed no CHILD line:\n{stdout}"))
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no `{name}` in `{line}`"))
}

// ---- the test kernels ---------------------------------------------------------------

const TEST_CU: &str = r#"
#ifndef BROKEN
#define BROKEN 0
#endif
#if BROKEN
#error "deliberately broken variant"
#endif
#ifndef SALT
#define SALT 0
#endif

// x[i] = x[i] * a + b over n floats, in place; every element exactly once.
extern "C" __global__ void scale_inplace(float* x, unsigned long long n, float a, float b) {
    unsigned long long t = (unsigned long long)blockIdx.x * THREADS + threadIdx.x + SALT * 0;
    if (t >= n) return;
#if WRONG
    // Deliberately wrong: the offset subtracted; a search must reject it unmeasured.
    x[t] = x[t] * a - b;
    return;
#endif
#if STRIDED
    // Deliberately bad: neighbouring threads touch elements n/32 apart (a permutation
    // of the coalesced order), so every warp access splits into 32 transactions.
    unsigned long long rows = n / 32;
    unsigned long long i = t < rows * 32 ? (t % 32) * rows + t / 32 : t;
#else
    unsigned long long i = t;
#endif
    x[i] = x[i] * a + b;
}

// hist[x[i] % bins] += 1, accumulated with atomics (hist must start at zero).
extern "C" __global__ void histogram(const unsigned int* x, unsigned long long n,
                                     unsigned int* hist, unsigned int bins) {
    unsigned long long stride = (unsigned long long)gridDim.x * THREADS;
    for (unsigned long long i = (unsigned long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride)
        atomicAdd(&hist[x[i] % bins], 1u);
}
"#;

static SOURCE: KernelSource = KernelSource::new("test_kernels", TEST_CU, "fnv1a64:test-kernels-v1");

// test_scale: key cols, batch rows.
static SCALE_SCHEMA: KernelSchema = KernelSchema {
    kernel: "test_scale",
    key: &[Field::int("cols")],
    params: &[
        Field::int("threads"),
        Field::int("strided"),
        Field::int("broken"),
        Field::int("wrong"),
    ],
};

struct Scale;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ScaleKey {
    cols: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ScaleConfig {
    threads: u32,
    strided: bool,
    broken: bool,
    wrong: bool,
}

const A: f32 = 1.5;
const B: f32 = 0.25;

impl TunedKernel for Scale {
    type Key = ScaleKey;
    type Config = ScaleConfig;
    const SCHEMA: &'static KernelSchema = &SCALE_SCHEMA;
    const SOURCE_FINGERPRINT: &'static str = "fnv1a64:test-kernels-v1";

    fn key_values(key: &ScaleKey) -> KeyValues {
        KeyValues::new().push(key.cols as i64)
    }
    fn key_from_values(values: &[Value]) -> Result<ScaleKey, String> {
        Ok(ScaleKey {
            cols: int_key(&SCALE_SCHEMA, values, "cols", 32, 1 << 24)? as u32,
        })
    }
    fn config_from_values(values: &[Value]) -> Result<ScaleConfig, String> {
        Ok(ScaleConfig {
            threads: int_param(&SCALE_SCHEMA, values, 0, &[32, 128, 256, 512, 2048])? as u32,
            strided: int_param(&SCALE_SCHEMA, values, 1, &[0, 1])? == 1,
            broken: int_param(&SCALE_SCHEMA, values, 2, &[0, 1])? == 1,
            wrong: int_param(&SCALE_SCHEMA, values, 3, &[0, 1])? == 1,
        })
    }
    fn config_values(c: &ScaleConfig) -> Vec<Value> {
        vec![
            Value::Int(c.threads as i64),
            Value::Int(c.strided as i64),
            Value::Int(c.broken as i64),
            Value::Int(c.wrong as i64),
        ]
    }
    /// Deliberately bad (one warp per block, uncoalesced), so the tuner has
    /// something to beat.
    fn analytic_default(_: Target, _: &ScaleKey, _: u64) -> ScaleConfig {
        ScaleConfig {
            threads: 32,
            strided: true,
            broken: false,
            wrong: false,
        }
    }
    fn baked_table(_: Target) -> Option<&'static BakedTable> {
        None
    }
}

struct ScaleProblem<'a> {
    x: u64,
    len: usize,
    rows: u64,
    cols: u32,
    _x: std::marker::PhantomData<&'a mut [f32]>,
}

/// The problem of `x`, `rows` x `cols`.
fn scale_problem(x: &mut CudaSlice<f32>, rows: u64, cols: u32) -> ScaleProblem<'_> {
    let (ptr, _record) = x.device_ptr(x.stream());
    ScaleProblem {
        x: ptr,
        len: x.len(),
        rows,
        cols,
        _x: std::marker::PhantomData,
    }
}

fn scale_variant(c: &ScaleConfig) -> Variant {
    Variant::new("scale_inplace")
        .define("THREADS", c.threads)
        .define("STRIDED", c.strided as u32)
        .define("BROKEN", c.broken as u32)
        .define("WRONG", c.wrong as u32)
}

// SAFETY: `buffers` lists `x`, the only buffer the plan touches, with its real length.
unsafe impl PlannedKernel for Scale {
    type Problem<'a> = ScaleProblem<'a>;
    const SOURCE: &'static KernelSource = &SOURCE;

    fn search_space(_: &DeviceInfo, _: &ScaleKey, _: u64) -> Vec<ScaleConfig> {
        let good = |threads| ScaleConfig {
            threads,
            strided: false,
            broken: false,
            wrong: false,
        };
        vec![
            good(128),
            good(256),
            good(512),
            // Deliberately failing candidates: a block too large to launch, and a
            // variant that does not compile. Both must be recorded and skipped.
            good(2048),
            ScaleConfig {
                threads: 256,
                strided: false,
                broken: true,
                wrong: false,
            },
            // Deliberately wrong, and fast: the output check rejects it untimed.
            ScaleConfig {
                threads: 512,
                strided: false,
                broken: false,
                wrong: true,
            },
        ]
    }
    fn variant(_: &DeviceInfo, _: &ScaleKey, c: &ScaleConfig) -> Variant {
        scale_variant(c)
    }
    fn problem_shape(p: &ScaleProblem<'_>) -> (ScaleKey, u64) {
        (ScaleKey { cols: p.cols }, p.rows)
    }
    fn buffers(p: &ScaleProblem<'_>) -> Vec<TuneBuffer> {
        vec![TuneBuffer {
            name: "x",
            ptr: p.x,
            bytes: p.len * 4,
            role: BufferRole::Restore,
        }]
    }
    fn launch_args(
        _: &DeviceInfo,
        c: &ScaleConfig,
        p: &ScaleProblem<'_>,
    ) -> kernels_core::Result<(LaunchDims, KernelArgs)> {
        let n = p.rows * p.cols as u64;
        if p.len as u64 != n {
            return Err(Error::invalid(
                "x",
                format!("has {} elements, rows*cols = {n}", p.len),
            ));
        }
        let mut args = KernelArgs::new();
        args.ptr(p.x).u64(n).f32(A).f32(B);
        Ok((
            LaunchDims::linear(n.div_ceil(c.threads as u64) as u32, c.threads),
            args,
        ))
    }
    fn reference(_: &ScaleProblem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
        Some(vec![floats(&before[0]).into_iter().map(scaled).collect()])
    }
    /// Exact: one fma per element, the same on the GPU, in every run and on the CPU.
    fn check_outputs(
        _: &ScaleProblem<'_>,
        _: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> Result<(), String> {
        let want = match expected {
            Expected::Run(w) => floats(&w[0]),
            Expected::Reference(w) => w[0].clone(),
        };
        exactly(&floats(&got[0]), &want)
    }
}

// SAFETY: the problem's one buffer is the uploaded input.
unsafe impl Tunable for Scale {
    fn tuning_inputs(key: &ScaleKey, batch: u64) -> Vec<Vec<u8>> {
        let host = scale_input(batch as usize * key.cols as usize);
        vec![host.iter().flat_map(|v| v.to_le_bytes()).collect()]
    }
    fn tuning_problem<'a>(key: &ScaleKey, batch: u64, at: &'a [u64]) -> ScaleProblem<'a> {
        ScaleProblem {
            x: at[0],
            len: batch as usize * key.cols as usize,
            rows: batch,
            cols: key.cols,
            _x: std::marker::PhantomData,
        }
    }
}

/// Little-endian f32s.
fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|v| f32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        .collect()
}

/// Equal element for element, or the first that is not.
fn exactly(got: &[f32], want: &[f32]) -> Result<(), String> {
    match got.iter().zip(want).position(|(g, w)| g.to_bits() != w.to_bits()) {
        None if got.len() == want.len() => Ok(()),
        None => Err(format!("{} values, want {}", got.len(), want.len())),
        Some(i) => Err(format!("element {i} is {}, want {}", got[i], want[i])),
    }
}

fn scale_input(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.5).collect()
}

fn scaled(x: f32) -> f32 {
    // fma, as the GPU contracts x * a + b
    x.mul_add(A, B)
}

// test_hist: key bins, batch n.
static HIST_SCHEMA: KernelSchema = KernelSchema {
    kernel: "test_hist",
    key: &[Field::int("bins")],
    params: &[Field::int("threads"), Field::int("blocks_per_sm")],
};

struct Hist;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct HistConfig {
    threads: u32,
    blocks_per_sm: u32,
}

impl TunedKernel for Hist {
    type Key = u32;
    type Config = HistConfig;
    const SCHEMA: &'static KernelSchema = &HIST_SCHEMA;
    const SOURCE_FINGERPRINT: &'static str = "fnv1a64:test-kernels-v1";

    fn key_values(bins: &u32) -> KeyValues {
        KeyValues::new().push(*bins as i64)
    }
    fn key_from_values(values: &[Value]) -> Result<u32, String> {
        Ok(int_key(&HIST_SCHEMA, values, "bins", 1, 1 << 20)? as u32)
    }
    fn config_from_values(values: &[Value]) -> Result<HistConfig, String> {
        Ok(HistConfig {
            threads: int_param(&HIST_SCHEMA, values, 0, &[128, 256, 512])? as u32,
            blocks_per_sm: int_param(&HIST_SCHEMA, values, 1, &[1, 4, 16])? as u32,
        })
    }
    fn config_values(c: &HistConfig) -> Vec<Value> {
        vec![Value::Int(c.threads as i64), Value::Int(c.blocks_per_sm as i64)]
    }
    fn analytic_default(_: Target, _: &u32, _: u64) -> HistConfig {
        HistConfig {
            threads: 128,
            blocks_per_sm: 1,
        }
    }
    fn baked_table(_: Target) -> Option<&'static BakedTable> {
        None
    }
}

struct HistProblem<'a> {
    x: u64,
    n: usize,
    hist: u64,
    bins: usize,
    _b: std::marker::PhantomData<&'a mut [u32]>,
}

/// The problem of `x` into `hist`.
fn hist_problem<'a>(x: &'a CudaSlice<u32>, hist: &'a mut CudaSlice<u32>) -> HistProblem<'a> {
    let (xp, _r1) = x.device_ptr(x.stream());
    let (hp, _r2) = hist.device_ptr(hist.stream());
    HistProblem {
        x: xp,
        n: x.len(),
        hist: hp,
        bins: hist.len(),
        _b: std::marker::PhantomData,
    }
}

// SAFETY: `buffers` lists both buffers the plan touches, with their real lengths.
unsafe impl PlannedKernel for Hist {
    type Problem<'a> = HistProblem<'a>;
    const SOURCE: &'static KernelSource = &SOURCE;

    fn search_space(_: &DeviceInfo, _: &u32, _: u64) -> Vec<HistConfig> {
        let mut v = Vec::new();
        for threads in [128, 256, 512] {
            for blocks_per_sm in [1, 4, 16] {
                v.push(HistConfig {
                    threads,
                    blocks_per_sm,
                });
            }
        }
        v
    }
    fn variant(_: &DeviceInfo, _: &u32, c: &HistConfig) -> Variant {
        Variant::new("histogram")
            .define("THREADS", c.threads)
            .define("STRIDED", 0)
    }
    fn problem_shape(p: &HistProblem<'_>) -> (u32, u64) {
        (p.bins as u32, p.n as u64)
    }
    fn buffers(p: &HistProblem<'_>) -> Vec<TuneBuffer> {
        let (x, h) = (p.x, p.hist);
        vec![
            TuneBuffer {
                name: "x",
                ptr: x,
                bytes: p.n * 4,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "hist",
                ptr: h,
                bytes: p.bins * 4,
                role: BufferRole::Zero,
            },
        ]
    }
    fn launch_args(
        device: &DeviceInfo,
        c: &HistConfig,
        p: &HistProblem<'_>,
    ) -> kernels_core::Result<(LaunchDims, KernelArgs)> {
        let n = p.n as u64;
        let grid = (device.sm_count * c.blocks_per_sm).min(n.div_ceil(c.threads as u64).max(1) as u32);
        let mut args = KernelArgs::new();
        args.ptr(p.x).u64(n).ptr(p.hist).u32(p.bins as u32);
        Ok((LaunchDims::linear(grid, c.threads), args))
    }
    fn reference(p: &HistProblem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
        let mut hist = vec![0f32; p.bins];
        for v in before[0].chunks_exact(4) {
            hist[u32::from_le_bytes([v[0], v[1], v[2], v[3]]) as usize % p.bins] += 1.0;
        }
        let x = before[0]
            .chunks_exact(4)
            .map(|v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]) as f32);
        Some(vec![x.collect(), hist])
    }
    /// Exact counts.
    fn check_outputs(
        _: &HistProblem<'_>,
        _: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> Result<(), String> {
        let counts = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]) as f32)
                .collect()
        };
        let want = match expected {
            Expected::Run(w) => counts(&w[1]),
            Expected::Reference(w) => w[1].clone(),
        };
        exactly(&counts(&got[1]), &want)
    }
}

// SAFETY: the problem's buffers are the uploaded input and histogram.
unsafe impl Tunable for Hist {
    fn tuning_inputs(bins: &u32, batch: u64) -> Vec<Vec<u8>> {
        let bytes = |v: &[u32]| v.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        vec![
            bytes(&hist_input(batch as usize)),
            bytes(&vec![0; *bins as usize]),
        ]
    }
    fn tuning_problem<'a>(bins: &u32, batch: u64, at: &'a [u64]) -> HistProblem<'a> {
        HistProblem {
            x: at[0],
            n: batch as usize,
            hist: at[1],
            bins: *bins as usize,
            _b: std::marker::PhantomData,
        }
    }
}

fn hist_input(n: usize) -> Vec<u32> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u32)
        .collect()
}

// ---- tests --------------------------------------------------------------------------

#[test]
fn compile_and_launch_with_buffers_and_raw_pointers() {
    let Some((dev, rt, stream)) = setup("compile_and_launch_with_buffers_and_raw_pointers", Policy::Serve)
    else {
        return;
    };
    println!(
        "device {} cc {:?} arch {} SMs {} L2 {} MiB smem opt-in {} KiB regs/SM {}; {}; driver {:?}",
        dev.info().name,
        dev.info().compute_capability,
        rt.arch(),
        dev.info().sm_count,
        dev.info().l2_bytes >> 20,
        dev.info().max_smem_per_block_optin >> 10,
        dev.info().regs_per_sm,
        rt.compiler().id(),
        CudaDevice::driver_version()
    );
    let good = ScaleConfig {
        threads: 256,
        strided: false,
        broken: false,
        wrong: false,
    };
    let (k, origin) = rt
        .kernel_with_origin(&stream, &SOURCE, &scale_variant(&good))
        .unwrap();
    assert_eq!(origin, ModuleOrigin::Compiled);
    let (_, origin) = rt
        .kernel_with_origin(&stream, &SOURCE, &scale_variant(&good))
        .unwrap();
    assert_eq!(
        origin,
        ModuleOrigin::Memo,
        "second request must come from the memo"
    );

    let n = (1 << 20) + 3; // not a multiple of the block
    let host = scale_input(n);
    let mut x = stream.clone_htod(&host).unwrap();
    let n64 = n as u64;
    {
        let mut l = k
            .builder(&stream, LaunchDims::linear((n as u32).div_ceil(256), 256))
            .unwrap();
        l.arg(&mut x).arg(&n64).arg(&A).arg(&B);
        unsafe { l.launch() }.unwrap();
    }
    let once = stream.clone_dtoh(&x).unwrap();
    assert!(
        once.iter().zip(&host).all(|(g, h)| *g == scaled(*h)),
        "cudarc-buffer launch is wrong"
    );

    // The raw entry point: device pointer, scalars, raw stream.
    {
        let (ptr, _rec) = x.device_ptr(&stream);
        let mut args = KernelArgs::new();
        args.ptr(ptr).u64(n64).f32(A).f32(B);
        let raw = unsafe { RawStream::from_raw(stream.cu_stream() as *mut std::ffi::c_void) };
        unsafe { k.launch_raw(raw, LaunchDims::linear((n as u32).div_ceil(256), 256), &args) }.unwrap();
    }
    let twice = stream.clone_dtoh(&x).unwrap();
    assert!(
        twice.iter().zip(&once).all(|(g, h)| *g == scaled(*h)),
        "raw launch is wrong"
    );

    // Bad dimensions are refused before launch, naming the argument.
    let e = k
        .builder(&stream, LaunchDims::linear(1, 2048))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`block`"), "{e}");

    // A compile error returns NVRTC's log and the variant.
    let broken = ScaleConfig { broken: true, ..good };
    match rt.kernel(&stream, &SOURCE, &scale_variant(&broken)) {
        Err(Error::Compile {
            variant, log, arch, ..
        }) => {
            assert!(variant.contains("BROKEN=1"), "{variant}");
            assert!(log.contains("deliberately broken"), "{log}");
            assert_eq!(arch, rt.arch());
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

const CHILD_CACHE: &str = "KERNELS_TEST_CHILD_CACHE";

/// Child half of `second_process_uses_the_caches_without_compiling`.
#[test]
#[ignore = "helper process, run by second_process_uses_the_caches_without_compiling"]
fn child_resolves_from_cache() {
    let Ok(dir) = std::env::var(CHILD_CACHE) else {
        return;
    };
    let dev = CudaDevice::open(0).expect("child: GPU");
    let rt = runtime(&dev, Policy::Online, DiskCache::at(dir));
    let stream = dev.new_stream().unwrap();
    let t = Instant::now();
    let p = rt
        .resolve::<Scale>(&stream, &ScaleKey { cols: 4096 }, 1024)
        .unwrap();
    let resolve_ms = t.elapsed().as_secs_f64() * 1e3;
    let s = rt.stats();
    println!(
        "CHILD source={} compiled={} disk_hits={} searches={} resolve_ms={resolve_ms:.3} config={:?}",
        p.resolved.source.name(),
        s.compiled,
        s.disk_hits,
        s.searches,
        p.resolved.config
    );
}

#[test]
fn second_process_uses_the_caches_without_compiling() {
    let Some(dev) = gpu("second_process_uses_the_caches_without_compiling") else {
        return;
    };
    let dir = temp_dir("second-process");
    let stream = dev.new_stream().unwrap();
    let parent_config = {
        let rt = runtime(&dev, Policy::Online, DiskCache::at(&dir));
        let p = rt
            .resolve::<Scale>(&stream, &ScaleKey { cols: 4096 }, 1024)
            .unwrap();
        assert_eq!(p.resolved.source, Source::OnlineSearch);
        assert!(p.search_failure.is_none(), "{:?}", p.search_failure);
        assert!(
            !p.resolved.config.strided,
            "the search should beat the strided default"
        );
        let s = rt.stats();
        assert_eq!(s.searches, 1);
        assert!(s.compiled >= 3, "the search compiles its candidates: {s:?}");
        println!("parent: online search chose {:?}; stats {s:?}", p.resolved.config);
        p.resolved.config
    };
    let line = child(
        "child_resolves_from_cache",
        &[(CHILD_CACHE, dir.display().to_string())],
    );
    println!("{line}");
    assert_eq!(field(&line, "source"), "online-cache");
    assert_eq!(
        field(&line, "compiled"),
        "0",
        "the second process compiled: {line}"
    );
    assert_eq!(field(&line, "searches"), "0");
    assert_eq!(field(&line, "disk_hits"), "1");
    assert!(line.contains(&format!("{parent_config:?}")), "{line}");

    // Corrupt every cached module: a new runtime detects it and recompiles.
    let modules = dir.join("v1").join("modules");
    let mut corrupted = 0;
    for f in std::fs::read_dir(&modules).unwrap() {
        let p = f.unwrap().path();
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes.truncate(n - n / 3);
        std::fs::write(&p, bytes).unwrap();
        corrupted += 1;
    }
    assert!(corrupted >= 3);
    let rt = runtime(&dev, Policy::Online, DiskCache::at(&dir));
    let p = rt
        .resolve::<Scale>(&stream, &ScaleKey { cols: 4096 }, 1024)
        .unwrap();
    let s = rt.stats();
    assert_eq!(p.resolved.source, Source::OnlineCache);
    assert_eq!((s.compiled, s.corrupt_files, s.disk_hits), (1, 1, 0), "{s:?}");
    let (_, origin) = rt
        .kernel_with_origin(&stream, &SOURCE, &scale_variant(&p.resolved.config))
        .unwrap();
    assert_eq!(origin, ModuleOrigin::Memo);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tuner_beats_a_deliberately_bad_default_and_restores_in_place_buffers() {
    let Some((_dev, rt, stream)) = setup(
        "tuner_beats_a_deliberately_bad_default_and_restores_in_place_buffers",
        Policy::Online,
    ) else {
        return;
    };
    // 256 MiB: over twice the L2, timed from memory without a flush.
    let (rows, cols) = (16384u64, 4096u32);
    let host = scale_input(rows as usize * cols as usize);
    let mut x = stream.clone_htod(&host).unwrap();
    let problem = scale_problem(&mut x, rows, cols);
    let report = rt.tune::<Scale>(&stream, &problem, &TuneOptions::default());
    print_candidates(&report, |t| {
        format!(
            "median {:.1} us (min {:.1}, max {:.1}, {} reps, L2 flushed: {})",
            t.median_us, t.min_us, t.max_us, t.reps, t.l2_flushed
        )
    });
    beats_the_bad_default(&report);
    assert_eq!(report.candidates.len(), 7, "default + 6 space configs");
    // The two failing candidates are recorded with their reasons and skipped.
    let failed = three_failed(&report);
    assert!(
        failed.iter().any(|e| e.contains("deliberately broken")),
        "{failed:?}"
    );
    assert!(!report.candidates[0].outcome.as_ref().unwrap().l2_flushed);

    // ~175 runs happened; the buffer holds exactly one run's result.
    assert_one_plain_run(&stream, &x, &host);
}

#[test]
fn graph_timed_tuning_rotates_problems_and_restores_the_callers_buffer() {
    let Some((dev, rt, stream)) = setup(
        "graph_timed_tuning_rotates_problems_and_restores_the_callers_buffer",
        Policy::Online,
    ) else {
        return;
    };
    // 16 MiB per problem, three copies: graph replays of back-to-back launches.
    let (rows, cols) = (1024u64, 4096u32);
    let host = scale_input(rows as usize * cols as usize);
    // The test kernel launches through cudarc's builder, whose per-buffer event
    // tracking (waits on events recorded outside the capture) would invalidate the
    // graph capture; the library's ops launch with raw pointers. So these buffers are
    // allocated untracked (one stream uses them; tracking is back on after).
    let ctx = dev.context();
    // SAFETY: only `stream` touches these buffers, and they are dropped after it syncs.
    unsafe { ctx.disable_event_tracking() };
    let mut owned: Vec<CudaSlice<f32>> = (0..3).map(|_| stream.clone_htod(&host).unwrap()).collect();
    // SAFETY: only slices created from here on are tracked again.
    unsafe { ctx.enable_event_tracking() };
    let problems: Vec<ScaleProblem<'_>> = owned.iter_mut().map(|x| scale_problem(x, rows, cols)).collect();
    let opts = TuneOptions {
        timing: TimingOptions {
            method: TimingMethod::Graph,
            ..TimingOptions::default()
        },
        ..TuneOptions::default()
    };
    let report = rt.tune_rotating::<Scale>(&stream, &problems[0], &problems[1..], &opts);
    print_candidates(&report, |t| {
        format!("median {:.2} us per launch ({} reps)", t.median_us, t.reps)
    });
    let (_, default_us) = beats_the_bad_default(&report);
    // The candidates that cannot compile or launch are recorded; the rest still time.
    three_failed(&report);
    for c in &report.candidates {
        if let Ok(t) = &c.outcome {
            assert!(!t.l2_flushed, "graph timing rotates copies instead of flushing");
            assert!(t.median_us > 0.0 && t.median_us < default_us * 10.0);
        }
    }
    // The caller's buffer holds exactly one plain run's result; the rotation copies
    // were launched on (scaled many times over, so no longer the input).
    drop(problems);
    assert_one_plain_run(&stream, &owned[0], &host);
    for x in &owned[1..] {
        let got = stream.clone_dtoh(x).unwrap();
        assert!(
            got.iter().zip(&host).filter(|(g, h)| g != h).count() > got.len() / 2,
            "a rotation copy was never launched on"
        );
    }
}

#[test]
fn online_run_on_callers_buffers_and_zeroed_accumulators() {
    let Some((_dev, rt, stream)) = setup(
        "online_run_on_callers_buffers_and_zeroed_accumulators",
        Policy::Online,
    ) else {
        return;
    };

    // In place through Runtime::run: the first call searches on the caller's buffer
    // (4 MiB: the L2 is flushed between reps) and leaves exactly one run's result; the
    // second call launches from the memo.
    let (rows, cols) = (256u64, 4096u32);
    let host = scale_input(rows as usize * cols as usize);
    let mut x = stream.clone_htod(&host).unwrap();
    let p1 = rt
        .run::<Scale>(&stream, &scale_problem(&mut x, rows, cols))
        .unwrap();
    assert_eq!(p1.resolved.source, Source::OnlineSearch);
    let once = stream.clone_dtoh(&x).unwrap();
    assert!(
        once.iter().zip(&host).all(|(g, h)| *g == scaled(*h)),
        "first run is not one plain run"
    );
    let searches = rt.stats().searches;
    let p2 = rt
        .run::<Scale>(&stream, &scale_problem(&mut x, rows, cols))
        .unwrap();
    assert_eq!(p2.resolved, p1.resolved);
    assert_eq!(
        rt.stats().searches,
        searches,
        "the memo must answer the second call"
    );
    let twice = stream.clone_dtoh(&x).unwrap();
    assert!(
        twice.iter().zip(&once).all(|(g, h)| *g == scaled(*h)),
        "second run is not one more run"
    );

    // Accumulation: the caller's histogram starts dirty; after tuning it holds exactly
    // one zero-then-run histogram, however many runs the search made.
    let n = 1usize << 22;
    let bins = 1000u32;
    let xs = hist_input(n);
    let mut want = vec![0u32; bins as usize];
    for v in &xs {
        want[(*v % bins) as usize] += 1;
    }
    let xd = stream.clone_htod(&xs).unwrap();
    let mut hist = stream.clone_htod(&vec![7u32; bins as usize]).unwrap();
    let problem = hist_problem(&xd, &mut hist);
    let report = rt.tune::<Hist>(&stream, &problem, &TuneOptions::default());
    let timed = report.candidates.iter().filter(|c| c.outcome.is_ok()).count();
    println!(
        "hist: {timed} of {} candidates timed, chosen {:?} at {:.1} us (default {:.1} us), L2 flushed: {}",
        report.candidates.len(),
        report.chosen,
        report.chosen_us().unwrap_or(f64::NAN),
        report.default_us().unwrap_or(f64::NAN),
        report.candidates[0]
            .outcome
            .as_ref()
            .map(|t| t.l2_flushed)
            .unwrap_or(false)
    );
    assert_eq!(timed, 9);
    assert_eq!(report.final_run, Ok(()));
    assert!(report.candidates[0].outcome.as_ref().unwrap().l2_flushed);
    assert_eq!(
        stream.clone_dtoh(&hist).unwrap(),
        want,
        "accumulator is not one zeroed run"
    );
}

#[test]
fn graph_capture_refuses_to_compile_and_replays_memoized_kernels() {
    let Some((_dev, rt, stream)) = setup(
        "graph_capture_refuses_to_compile_and_replays_memoized_kernels",
        Policy::Serve,
    ) else {
        return;
    };
    let cfg = ScaleConfig {
        threads: 128,
        strided: false,
        broken: false,
        wrong: false,
    };
    let warmed = rt.kernel(&stream, &SOURCE, &scale_variant(&cfg)).unwrap();
    let n = 1u64 << 16;
    let host = scale_input(n as usize);
    let x = stream.clone_htod(&host).unwrap();
    let (ptr, rec) = x.device_ptr(&stream);
    drop(rec);
    stream.synchronize().unwrap();

    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    assert!(CudaDevice::is_capturing(&stream).unwrap());
    let cold = ScaleConfig { threads: 512, ..cfg };
    let refused = rt.kernel(&stream, &SOURCE, &scale_variant(&cold));
    let warm = rt.kernel(&stream, &SOURCE, &scale_variant(&cfg));
    let mut args = KernelArgs::new();
    args.ptr(ptr).u64(n).f32(A).f32(B);
    let launched = warm.as_ref().map(|k| unsafe {
        k.launch_raw(
            RawStream::of(&stream),
            LaunchDims::linear((n / 128) as u32, 128),
            &args,
        )
    });
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph");
    assert!(
        matches!(refused, Err(Error::CompileWhileCapturing { .. })),
        "a cold kernel during capture must be refused: {refused:?}"
    );
    assert!(Arc::ptr_eq(warm.as_ref().unwrap(), &warmed));
    launched.unwrap().unwrap();
    graph.launch().unwrap();
    graph.launch().unwrap();
    stream.synchronize().unwrap();
    let got = stream.clone_dtoh(&x).unwrap();
    assert!(
        got.iter().zip(&host).all(|(g, h)| *g == scaled(scaled(*h))),
        "graph replay is wrong"
    );
}

/// A kernel that takes NVRTC a while (unrolled full-precision math), so precompile
/// timings measure compiling rather than fixed costs.
static HEAVY: KernelSource = KernelSource::new(
    "test_heavy",
    r#"
extern "C" __global__ void heavy(float* x) {
    float a = x[threadIdx.x];
#pragma unroll
    for (int i = 0; i < UNROLL; ++i) a = sinf(a * (1.0f + i * 1e-3f)) + expf(-a) * SALT;
    x[threadIdx.x] = a;
}
"#,
    "fnv1a64:test-heavy-v1",
);

#[test]
fn parallel_precompile_and_warm_start() {
    let Some(dev) = gpu("parallel_precompile_and_warm_start") else {
        return;
    };
    let jobs: Vec<(KernelSource, Variant)> = (0..32)
        .map(|i| {
            (
                HEAVY,
                Variant::new("heavy")
                    .define("UNROLL", 32)
                    .define("SALT", format!("{i}.0f")),
            )
        })
        .collect();
    let ok_compiled = |rs: &[kernels_core::Result<ModuleOrigin>]| {
        assert!(
            rs.iter().all(|r| matches!(r, Ok(ModuleOrigin::Compiled))),
            "{rs:?}"
        )
    };
    // Compile and load, no disk cache: serial, then on every core.
    let t = Instant::now();
    let serial = runtime(&dev, Policy::Serve, DiskCache::disabled()).precompile_with(&jobs, 1);
    let serial_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let parallel = runtime(&dev, Policy::Serve, DiskCache::disabled()).precompile(&jobs);
    let parallel_s = t.elapsed().as_secs_f64();
    ok_compiled(&serial);
    ok_compiled(&parallel);
    // The same, also writing every module to the disk cache (temp file, fsync, rename).
    let dir = temp_dir("precompile");
    let t = Instant::now();
    let cached = runtime(&dev, Policy::Serve, DiskCache::at(&dir)).precompile(&jobs);
    let cached_s = t.elapsed().as_secs_f64();
    ok_compiled(&cached);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "precompile 32 variants: serial {serial_s:.2} s, parallel {parallel_s:.2} s on {cores} cores ({:.1}x); \
         parallel with cache writes {cached_s:.2} s",
        serial_s / parallel_s
    );
    if cores >= 4 {
        assert!(parallel_s < serial_s, "parallel precompile was not faster");
    }

    // Warm start: a fresh runtime loads every module from the disk cache.
    let warm_rt = runtime(&dev, Policy::Serve, DiskCache::at(&dir));
    let stream = dev.new_stream().unwrap();
    let t = Instant::now();
    for (s, v) in &jobs {
        let (_, origin) = warm_rt.kernel_with_origin(&stream, s, v).unwrap();
        assert_eq!(origin, ModuleOrigin::Disk);
    }
    let per_kernel_ms = t.elapsed().as_secs_f64() * 1e3 / jobs.len() as f64;
    assert_eq!(warm_rt.stats().compiled, 0);
    println!("warm start from the module cache: {per_kernel_ms:.3} ms per kernel");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tune_command_path_writes_a_table_and_resumes() {
    let Some(dev) = gpu("tune_command_path_writes_a_table_and_resumes") else {
        return;
    };
    static SCALE_DYN: TunableDyn<Scale> = TunableDyn::new();
    let registry: [&dyn DynTunable<kernels_core::Cuda>; 1] = [&SCALE_DYN];
    let k = registry
        .iter()
        .find(|k| k.schema().kernel == "test_scale")
        .expect("registered");
    let dir = temp_dir("tune-table");
    let rt = runtime(&dev, Policy::Serve, DiskCache::at(dir.join("cache")));
    let stream = dev.new_stream().unwrap();
    let shapes = parse_shapes(k.schema(), r#"[{"cols": 4096, "batch": [512, 4096]}]"#, "shapes").unwrap();
    let target = dev.info().target().unwrap_or(Target::Sm90);
    let tables = dir.join("tables");
    let job = TableJob {
        schema: k.schema(),
        target,
        source_fingerprint: k.source_fingerprint(),
        device: &dev.info().name,
        compiler: &rt.compiler().id(),
        tables_dir: &tables,
        retune: false,
        timing: kernels_core::tune::TimingMethod::Single,
        deadline: None,
        carried: None,
    };
    let key_for = |key: &tuned::StaticKey, batch: u64| {
        rt.tuning_key(
            k.schema().kernel,
            k.source_fingerprint(),
            key.as_str(),
            batch,
            kernels_core::cache::AlignClass::A16,
            &k.candidates(dev.info(), key, batch),
        )
    };
    let opts = TuneOptions::default();
    let mut searched = 0;
    let out = tune_table(
        &job,
        &shapes,
        rt.cache(),
        &key_for,
        &mut |key, batch| {
            searched += 1;
            k.search(&rt, &stream, key, batch, &opts)
        },
        &mut |p| println!("  {p:?}"),
    )
    .unwrap();
    assert_eq!((searched, out.tuned, out.cached), (2, 2, 0), "{out:?}");
    assert!(out.written);
    let table = tuned::TableFile::read(&out.path, Some(k.schema())).unwrap();
    assert_eq!(table.entries.len(), 2);
    for e in &table.entries {
        assert!(e.us <= e.default_us, "{e:?}");
    }
    println!("{}", table.to_json_string());

    // Run again: everything comes from the cache (resumable), the table is unchanged.
    let out2 = tune_table(
        &job,
        &shapes,
        rt.cache(),
        &key_for,
        &mut |_, _| panic!("searched again"),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((out2.tuned, out2.cached), (0, 2));
    assert_eq!(out2.merge.kept.len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
