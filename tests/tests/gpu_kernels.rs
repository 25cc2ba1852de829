//! Softmax, log-softmax, RMSNorm and fused residual-add RMSNorm on the GPU against the
//! CPU references, for EVERY config of each search space on awkward shapes: 1, odd
//! and prime columns, one row, row strides above cols, buffers not 16-byte aligned,
//! inf and NaN inputs, rows long enough for the streaming paths. Outputs are poisoned
//! before each run; padding between rows must come back untouched.
//!
//! Skips with a message where no GPU is found; fails there when KERNELS_REQUIRE_GPU=1.

use std::sync::Arc;

use kernels::core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels::core::testing::{compare_rows as compare, skip_or_fail};
use kernels::core::Rows;
use kernels::core::{
    cache::AlignClass,
    launch::{decode, encode, pseudo_random},
    tune::TuneOptions,
    CudaDevice, CudaRuntime, DiskCache, PlannedKernel, Policy, RuntimeOptions,
};
use kernels::rmsnorm::cuda as norm_ops;
use kernels::rmsnorm::ops::NormProblem;
use kernels::rmsnorm::{reference as norm_ref, FusedAddRmsNorm, RmsNorm, RmsNormKey};
use kernels::softmax::ops::SoftmaxProblem;
use kernels::softmax::{reference as sm_ref, LogSoftmax, Softmax, SoftmaxKey};
use tuned::{DType, Target, TunedKernel};

fn runtime(test: &str) -> Option<(CudaRuntime, Arc<CudaStream>)> {
    let dev = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            skip_or_fail(test, &format!("no CUDA GPU found ({e})"));
            return None;
        }
    };
    let opts = RuntimeOptions {
        policy: Policy::DefaultOnly,
        cache: DiskCache::from_env(),
        tune: TuneOptions::default(),
        pdl: false,
    };
    let rt = CudaRuntime::with_options(dev, opts).expect("runtime");
    let stream = rt.device().new_stream().expect("stream");
    Some((rt, stream))
}

/// A device buffer of `total` elements of `dtype` whose usable part starts `offset`
/// elements in (to make it not 16-byte aligned).
struct Buf {
    slice: CudaSlice<u8>,
    dtype: DType,
    offset: usize,
}

impl Buf {
    fn new(stream: &Arc<CudaStream>, dtype: DType, host: &[f32], offset: usize) -> Buf {
        let mut all = vec![0.0f32; offset];
        all.extend_from_slice(host);
        let slice = stream.clone_htod(&encode(dtype, &all)).expect("htod");
        Buf { slice, dtype, offset }
    }
    fn ptr(&self, stream: &CudaStream) -> u64 {
        self.slice.device_ptr(stream).0 + (self.offset * self.dtype.size()) as u64
    }
    fn write(&mut self, stream: &Arc<CudaStream>, host: &[f32]) {
        let mut all = vec![0.0f32; self.offset];
        all.extend_from_slice(host);
        stream
            .memcpy_htod(&encode(self.dtype, &all), &mut self.slice)
            .expect("htod");
    }
    fn read(&self, stream: &Arc<CudaStream>) -> Vec<f32> {
        let bytes = stream.clone_dtoh(&self.slice).expect("dtoh");
        decode(self.dtype, &bytes)[self.offset..].to_vec()
    }
    /// The alignment class of a launch on this buffer with rows `stride` elements apart.
    fn align(&self, stream: &CudaStream, stride: usize) -> AlignClass {
        AlignClass::of([self.ptr(stream), (stride * self.dtype.size()) as u64])
    }
}

/// The fused add RMSNorm problem over `x` and `residual` (both laid out as `shape`)
/// and the weight `w` (`shape.cols` elements).
fn fused_problem<'a>(
    stream: &CudaStream,
    x: &'a Buf,
    residual: &'a Buf,
    w: &'a Buf,
    shape: Rows,
    eps: f32,
) -> NormProblem<'a> {
    let len = shape.span().unwrap();
    // Safety: each Buf holds `len` (w: `shape.cols`) elements of its dtype past its
    // offset, and outlives the problem.
    unsafe {
        NormProblem::fused_add_rmsnorm_raw(
            x.dtype,
            x.ptr(stream),
            len,
            shape,
            residual.ptr(stream),
            len,
            shape,
            w.ptr(stream),
            shape.cols,
            eps,
        )
    }
    .expect("valid problem")
}

fn round_all(dtype: DType, v: &mut [f32]) {
    for x in v.iter_mut() {
        *x = norm_ref::round_to(dtype, *x);
    }
}

/// The configs a launch on buffers aligned to `align` runs: every config of `space`
/// fitted to the alignment (consecutive duplicates dropped), each variant of kernel `B`
/// of the family, and of `A` where `A` accepts the config at `batch` rows, compiled
/// before anything runs.
fn fitted_and_compiled<A, B>(
    rt: &CudaRuntime,
    key: &A::Key,
    batch: u64,
    space: &[A::Config],
    align: AlignClass,
) -> Vec<A::Config>
where
    A: PlannedKernel,
    B: PlannedKernel<Key = A::Key, Config = A::Config>,
{
    assert!(!space.is_empty(), "{key:?}: empty space");
    let info = rt.device().info();
    let mut configs: Vec<_> = space
        .iter()
        .map(|c| A::fit_alignment(info, key, c.clone(), align))
        .collect();
    configs.dedup();
    let target = info.tuning_target();
    let jobs: Vec<_> = configs
        .iter()
        .flat_map(|c| {
            let a = A::accepts(target, key, batch, c).then(|| (*A::SOURCE, A::variant(info, key, c)));
            a.into_iter().chain([(*B::SOURCE, B::variant(info, key, c))])
        })
        .collect();
    for r in rt.precompile(&jobs) {
        r.expect("every variant of the space compiles");
    }
    configs
}

/// The (config, shape) runs an every-config test has checked, and the failures.
#[derive(Default)]
struct Tally {
    checked: usize,
    failures: Vec<String>,
}

impl Tally {
    /// Counts one checked run, and its failure if any.
    fn add(&mut self, run: Result<(), String>) {
        self.checked += 1;
        if let Err(e) = run {
            self.failures.push(e);
        }
    }

    /// Prints how many (config, shape) runs were checked and fails on the first failures.
    fn report(&self, family: &str) {
        let (checked, failures) = (self.checked, &self.failures);
        println!(
            "{family}: {checked} (config, shape) runs checked, {} failed",
            failures.len()
        );
        assert!(
            failures.is_empty(),
            "{} failures, first: {}",
            failures.len(),
            failures[..failures.len().min(10)].join("\n")
        );
    }
}

/// An every-config test: the runtime and stream (or the skip, as [`runtime`]), then
/// `check` with the target whose search spaces it walks and the tally of its runs, then
/// the tally's report for `family`.
fn every_config(
    test: &str,
    family: &str,
    check: impl FnOnce(&CudaRuntime, &Arc<CudaStream>, Target, &mut Tally),
) {
    let Some((rt, stream)) = runtime(test) else {
        return;
    };
    let target = rt.device().info().tuning_target();
    let mut tally = Tally::default();
    check(&rt, &stream, target, &mut tally);
    tally.report(family);
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Case {
    dtype: DType,
    cols: usize,
    rows: usize,
    pad: usize,
    /// Elements by which every buffer is shifted off 16-byte alignment.
    offset: usize,
    specials: bool,
}

fn cases() -> Vec<Case> {
    let c = |dtype, cols, rows, pad, offset, specials| Case {
        dtype,
        cols,
        rows,
        pad,
        offset,
        specials,
    };
    vec![
        c(DType::Bf16, 1, 1, 0, 0, false),
        c(DType::Bf16, 97, 5, 3, 1, false),
        c(DType::Bf16, 1000, 37, 8, 0, true),
        c(DType::Bf16, 4096, 9, 8, 0, true),
        c(DType::Bf16, 4096, 3, 0, 1, false),
        c(DType::Bf16, 40000, 3, 8, 0, false),
        c(DType::F16, 3, 7, 1, 1, false),
        c(DType::F16, 2048, 5, 0, 0, true),
        c(DType::F32, 7, 4, 2, 0, false),
        c(DType::F32, 4096, 3, 4, 2, true),
    ]
}

fn input(case: &Case, seed: u64, scale: f32, softmax: bool) -> (Vec<f32>, Rows) {
    let shape = Rows::strided(case.rows, case.cols, case.cols + case.pad);
    let n = shape.span().unwrap();
    let mut x = pseudo_random(n, seed, scale, 0.0);
    if case.specials && case.rows >= 5 {
        let at = |r: usize, c: usize| r * shape.stride + c;
        x[at(1, case.cols / 2)] = f32::INFINITY;
        x[at(2, 0)] = f32::NAN;
        if softmax {
            x[at(3, 1)] = f32::NEG_INFINITY;
            for c in 0..case.cols {
                x[at(4, c)] = f32::NEG_INFINITY;
            }
        } else {
            x[at(3, 1)] = f32::NEG_INFINITY;
        }
    }
    round_all(case.dtype, &mut x);
    (x, shape)
}

#[test]
fn rmsnorm_every_config_matches_reference() {
    every_config(
        "rmsnorm_every_config_matches_reference",
        "rmsnorm",
        |rt, stream, target, tally| {
            for case in cases() {
                let key = RmsNormKey {
                    dtype: case.dtype,
                    cols: case.cols as u32,
                };
                let (x, shape) = input(&case, 7, 2.0, false);
                let (res, _) = input(&case, 8, 2.0, false);
                let mut w = pseudo_random(case.cols, 9, 0.5, 1.0);
                round_all(case.dtype, &mut w);
                let eps = 1e-6;
                let poison = f32::NAN;
                let mut y_want = vec![poison; x.len()];
                norm_ref::rmsnorm(&x, shape.stride, &w, &mut y_want, shape.stride, case.rows, eps);
                let (mut fx_want, mut fr_want) = (x.clone(), res.clone());
                norm_ref::fused_add_rmsnorm(
                    &mut fx_want,
                    shape.stride,
                    &mut fr_want,
                    shape.stride,
                    &w,
                    case.rows,
                    eps,
                    case.dtype,
                );

                let xb = Buf::new(stream, case.dtype, &x, case.offset);
                let wb = Buf::new(stream, case.dtype, &w, case.offset);
                let mut yb = Buf::new(stream, case.dtype, &vec![poison; x.len()], case.offset);
                let mut fx = Buf::new(stream, case.dtype, &x, case.offset);
                let mut fr = Buf::new(stream, case.dtype, &res, case.offset);

                let align = xb.align(stream, shape.stride);
                // The fused kernel's space: the plain one's and its late residual stores.
                let space = kernels::rmsnorm::space::search_space(target, &key, true);
                let rows = case.rows as u64;
                for c in &fitted_and_compiled::<RmsNorm, FusedAddRmsNorm>(rt, &key, rows, &space, align) {
                    let what = format!(
                        "rmsnorm {:?} cols={} rows={} offset={} {c:?}",
                        case.dtype, case.cols, case.rows, case.offset
                    );
                    // Plain RMSNorm has no residual to store late: it refuses those.
                    if RmsNorm::accepts(target, &key, rows, c) {
                        yb.write(stream, &vec![poison; x.len()]);
                        let p = unsafe {
                            NormProblem::rmsnorm_raw(
                                case.dtype,
                                xb.ptr(stream),
                                x.len(),
                                shape,
                                wb.ptr(stream),
                                w.len(),
                                yb.ptr(stream),
                                x.len(),
                                shape,
                                eps,
                            )
                        }
                        .expect("valid problem");
                        rt.launch_config::<RmsNorm>(stream, c, &p).expect("launch");
                        tally.add(compare(
                            &what,
                            &yb.read(stream),
                            &y_want,
                            shape,
                            norm_ref::tolerance(case.dtype),
                        ));
                    }

                    let what = what.replacen("rmsnorm", "fused_add_rmsnorm", 1);
                    fx.write(stream, &x);
                    fr.write(stream, &res);
                    let p = fused_problem(stream, &fx, &fr, &wb, shape, eps);
                    rt.launch_config::<FusedAddRmsNorm>(stream, c, &p)
                        .expect("launch");
                    tally.add(
                        compare(
                            &format!("{what} x"),
                            &fx.read(stream),
                            &fx_want,
                            shape,
                            norm_ref::tolerance(case.dtype),
                        )
                        .and_then(|_| {
                            compare(
                                &format!("{what} residual"),
                                &fr.read(stream),
                                &fr_want,
                                shape,
                                (0.0, 0.0),
                            )
                        }),
                    );
                }
            }
        },
    );
}

#[test]
fn softmax_every_config_matches_reference() {
    every_config(
        "softmax_every_config_matches_reference",
        "softmax",
        |rt, stream, target, tally| {
            let mut cases = cases();
            cases.push(Case {
                dtype: DType::Bf16,
                cols: 151936,
                rows: 3,
                pad: 8,
                offset: 0,
                specials: false,
            });
            // Long rows with special values (which take 5 rows) and padded strides: the staged
            // and online paths.
            cases.push(Case {
                dtype: DType::F32,
                cols: 50001,
                rows: 5,
                pad: 3,
                offset: 0,
                specials: true,
            });
            cases.push(Case {
                dtype: DType::F16,
                cols: 65536,
                rows: 5,
                pad: 8,
                offset: 0,
                specials: true,
            });
            // More rows than one wave of 128 KiB stages: the staged blocks prefetch the next
            // wave's rows into L2.
            cases.push(Case {
                dtype: DType::Bf16,
                cols: 65536,
                rows: 140,
                pad: 8,
                offset: 0,
                specials: false,
            });
            cases.push(Case {
                dtype: DType::Bf16,
                cols: 262144,
                rows: 2,
                pad: 0,
                offset: 0,
                specials: false,
            });
            // 1025 vectors of 8 per row: a last step or pass where most threads hold no vector.
            // At scale 0 (every row uniform) such an empty part must not make the sum NaN.
            let sparse_tail = Case {
                dtype: DType::Bf16,
                cols: 8200,
                rows: 3,
                pad: 0,
                offset: 0,
                specials: false,
            };
            cases.push(sparse_tail);
            for case in cases {
                let key = SoftmaxKey {
                    dtype: case.dtype,
                    cols: case.cols as u32,
                };
                let (x, shape) = input(&case, 17, 6.0, true);
                // A negative scale takes the min path of the 16-bit packed max, and 0 turns
                // infinities into NaN: both on the cases with special values; 0 on the sparse
                // tail too.
                let scales: &[f32] = if case.specials {
                    &[0.7, -1.3, 0.0]
                } else if case == sparse_tail {
                    &[0.7, 0.0]
                } else {
                    &[0.7]
                };
                for &scale in scales {
                    check_softmax_case(rt, stream, target, &case, &key, &x, shape, scale, tally);
                }
            }
        },
    );
}

/// Every fitting config of the softmax search space, softmax and log-softmax, on one
/// case at one scale, against the reference.
#[allow(clippy::too_many_arguments)]
fn check_softmax_case(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    target: Target,
    case: &Case,
    key: &SoftmaxKey,
    x: &[f32],
    shape: Rows,
    scale: f32,
    tally: &mut Tally,
) {
    let poison = f32::NAN;
    let mut want = vec![poison; x.len()];
    let mut want_log = vec![poison; x.len()];
    sm_ref::softmax(
        x,
        shape.stride,
        &mut want,
        shape.stride,
        case.rows,
        case.cols,
        scale,
    );
    sm_ref::log_softmax(
        x,
        shape.stride,
        &mut want_log,
        shape.stride,
        case.rows,
        case.cols,
        scale,
    );
    let xb = Buf::new(stream, case.dtype, x, case.offset);
    let mut yb = Buf::new(stream, case.dtype, &vec![poison; x.len()], case.offset);

    let align = xb.align(stream, shape.stride);
    let space = kernels::softmax::space::search_space(target, key);
    for c in &fitted_and_compiled::<Softmax, LogSoftmax>(rt, key, case.rows as u64, &space, align) {
        for log in [false, true] {
            let what = format!(
                "{} {:?} cols={} rows={} offset={} scale={scale} {c:?}",
                if log { "log_softmax" } else { "softmax" },
                case.dtype,
                case.cols,
                case.rows,
                case.offset
            );
            yb.write(stream, &vec![poison; x.len()]);
            let p = unsafe {
                SoftmaxProblem::raw(
                    case.dtype,
                    xb.ptr(stream),
                    x.len(),
                    shape,
                    yb.ptr(stream),
                    x.len(),
                    shape,
                    scale,
                )
            }
            .expect("valid problem");
            if log {
                rt.launch_config::<LogSoftmax>(stream, c, &p).expect("launch");
            } else {
                rt.launch_config::<Softmax>(stream, c, &p).expect("launch");
            }
            let w = if log { &want_log } else { &want };
            tally.add(compare(
                &what,
                &yb.read(stream),
                w,
                shape,
                sm_ref::tolerance(case.dtype, log),
            ));
        }
    }
}

#[test]
fn in_place_softmax_and_safe_ops() {
    let Some((rt, stream)) = runtime("in_place_softmax_and_safe_ops") else {
        return;
    };
    use half::bf16;
    let (rows, cols) = (3usize, 4096usize);
    let host: Vec<bf16> = pseudo_random(rows * cols, 5, 4.0, 0.0)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let xf: Vec<f32> = host.iter().map(|v| v.to_f32()).collect();
    let mut want = vec![0.0; rows * cols];
    sm_ref::softmax(&xf, cols, &mut want, cols, rows, cols, 1.0);
    let mut x = stream.clone_htod(&host).unwrap();
    let shape = Rows::contiguous(rows, cols);
    {
        let mut v = x.as_view_mut();
        kernels::softmax::cuda::softmax_in_place(&rt, &stream, &mut v, shape, 1.0).unwrap();
    }
    let got: Vec<f32> = stream
        .clone_dtoh(&x)
        .unwrap()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    compare(
        "in-place softmax",
        &got,
        &want,
        shape,
        sm_ref::tolerance(DType::Bf16, false),
    )
    .unwrap();

    // The safe op: resolves (default-only here), launches, reports the source.
    let w = stream.clone_htod(&vec![bf16::ONE; cols]).unwrap();
    let mut y = stream.alloc_zeros::<bf16>(rows * cols).unwrap();
    // The same call on `x`, `w` and `y` each time, laid out as `shape`, with `eps`.
    let mut rmsnorm = |shape: Rows, eps: f32| {
        norm_ops::rmsnorm(
            &rt,
            &stream,
            &x.as_view(),
            shape,
            &w.as_view(),
            &mut y.as_view_mut(),
            shape,
            eps,
        )
    };
    let used = rmsnorm(shape, 1e-6).unwrap();
    assert_eq!(used.source, tuned::Source::Default);
    // Bad input is refused before launching and names the argument.
    let err = rmsnorm(shape, 0.0).unwrap_err();
    assert!(err.to_string().contains("eps"), "{err}");
    let short = Rows::contiguous(rows + 1, cols);
    let err = rmsnorm(short, 1e-6).unwrap_err();
    assert!(
        err.to_string().contains("`x`") || err.to_string().contains("x:"),
        "{err}"
    );
}

#[test]
fn fused_add_rmsnorm_tuned_online_leaves_one_plain_run() {
    let test = "fused_add_rmsnorm_tuned_online_leaves_one_plain_run";
    let Some((plain_rt, stream)) = runtime(test) else {
        return;
    };
    let cache = std::env::temp_dir().join(format!("kernels-online-{}", std::process::id()));
    let opts = RuntimeOptions {
        policy: Policy::Online,
        cache: DiskCache::at(&cache),
        tune: TuneOptions::default(),
        pdl: false,
    };
    let rt = CudaRuntime::with_options(CudaDevice::open(0).unwrap(), opts).unwrap();
    let (rows, cols, dtype) = (64usize, 4096usize, DType::Bf16);
    let case = Case {
        dtype,
        cols,
        rows,
        pad: 0,
        offset: 0,
        specials: false,
    };
    let (x, shape) = input(&case, 31, 2.0, false);
    let (res, _) = input(&case, 32, 2.0, false);
    let mut w = pseudo_random(cols, 33, 0.5, 1.0);
    round_all(dtype, &mut w);
    let xb = Buf::new(&stream, dtype, &x, 0);
    let rb = Buf::new(&stream, dtype, &res, 0);
    let wb = Buf::new(&stream, dtype, &w, 0);
    let p = fused_problem(&stream, &xb, &rb, &wb, shape, 1e-6);
    let used = rt.run::<FusedAddRmsNorm>(&stream, &p).expect("online run");
    assert_eq!(
        used.resolved.source,
        tuned::Source::OnlineSearch,
        "first call searches"
    );
    let (tuned_x, tuned_r) = (xb.read(&stream), rb.read(&stream));

    // One plain run of the chosen config on fresh copies of the inputs.
    let mut xb2 = Buf::new(&stream, dtype, &x, 0);
    let mut rb2 = Buf::new(&stream, dtype, &res, 0);
    xb2.write(&stream, &x);
    rb2.write(&stream, &res);
    let p2 = fused_problem(&stream, &xb2, &rb2, &wb, shape, 1e-6);
    plain_rt
        .launch_config::<FusedAddRmsNorm>(&stream, &used.resolved.config, &p2)
        .unwrap();
    let (plain_x, plain_r) = (xb2.read(&stream), rb2.read(&stream));
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&tuned_r),
        bits(&plain_r),
        "residual after online tuning is exactly one run's"
    );
    assert_eq!(
        bits(&tuned_x),
        bits(&plain_x),
        "x after online tuning is exactly one run's"
    );

    // A second call is a memo hit: no search, one more plain run.
    let again = rt.run::<FusedAddRmsNorm>(&stream, &p).unwrap();
    assert_eq!(again.resolved.config, used.resolved.config);
    let _ = std::fs::remove_dir_all(&cache);
}

/// A chain of dependent launches (each reads what the one before wrote: a long softmax
/// feeding a fused add-RMSNorm, a one-row clustered softmax, an RMSNorm, ...) run by a
/// runtime with programmatic dependent launch gives bit for bit what a plain runtime
/// gives, launched eagerly and replayed from a CUDA graph. A kernel that touched memory
/// before waiting for the previous one would read stale rows here.
#[test]
fn programmatic_launch_chain_matches_plain_launches() {
    use kernels::core::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let test = "programmatic_launch_chain_matches_plain_launches";
    let Some((plain_rt, stream)) = runtime(test) else {
        return;
    };
    let opts = RuntimeOptions {
        policy: Policy::DefaultOnly,
        cache: DiskCache::from_env(),
        tune: TuneOptions::default(),
        pdl: true,
    };
    let pdl_rt = CudaRuntime::with_options(CudaDevice::open(0).unwrap(), opts).unwrap();
    let hopper = pdl_rt.device().info().compute_capability.0 >= 9;
    assert_eq!(pdl_rt.pdl_for(&kernels::softmax::plan::SOURCE), hopper);
    assert_eq!(pdl_rt.pdl_for(&kernels::rmsnorm::plan::SOURCE), hopper);
    assert!(!plain_rt.pdl_for(&kernels::softmax::plan::SOURCE));
    if !hopper {
        eprintln!("{test}: compute capability below 9.0: the chain runs with plain launches only");
    }

    let (rows, cols, dtype) = (1024usize, 32768usize, DType::Bf16);
    let shape = Rows::contiguous(rows, cols);
    let one_row = Rows::contiguous(1, cols);
    let len = rows * cols;
    let a0 = pseudo_random(len, 41, 4.0, 0.0);
    let r0 = pseudo_random(len, 42, 1.0, 0.0);
    let mut w = pseudo_random(cols, 43, 0.5, 1.0);
    round_all(dtype, &mut w);
    let zeros = vec![0.0f32; len];

    // Runs the chain `reps` times on fresh buffers (or captures it and replays the graph
    // once), returning every buffer's contents.
    let chain = |rt: &CudaRuntime, graph: bool| -> Vec<Vec<f32>> {
        let mut a = Buf::new(&stream, dtype, &a0, 0);
        let b = Buf::new(&stream, dtype, &zeros, 0);
        let c = Buf::new(&stream, dtype, &zeros, 0);
        let mut r = Buf::new(&stream, dtype, &r0, 0);
        let wb = Buf::new(&stream, dtype, &w, 0);
        let d = Buf::new(&stream, dtype, &zeros[..cols], 0);
        // Raw addresses taken once, before any capture: cudarc's tracked pointers would
        // wait on events recorded outside it, which a capture refuses.
        let [pa, pb, pc, pr, pw, pd] = [&a, &b, &c, &r, &wb, &d].map(|x| x.ptr(&stream));
        let softmax = |x: u64, y: u64, rows: Rows, scale: f32| {
            let y_len = rows.span().unwrap();
            // Safety: x holds `len` elements, y at least `y_len`, and both outlive the call.
            let p = unsafe { SoftmaxProblem::raw(dtype, x, len, rows, y, y_len, rows, scale) }
                .expect("valid problem");
            rt.run::<Softmax>(&stream, &p).expect("softmax");
        };
        let rmsnorm = |x: u64, y: u64| {
            // Safety: as above; w holds `cols` elements.
            let p = unsafe { NormProblem::rmsnorm_raw(dtype, x, len, shape, pw, cols, y, len, shape, 1e-6) }
                .expect("valid problem");
            rt.run::<RmsNorm>(&stream, &p).expect("rmsnorm");
        };
        let fused = |x: u64| {
            // Safety: as above.
            let p = unsafe {
                NormProblem::fused_add_rmsnorm_raw(dtype, x, len, shape, pr, len, shape, pw, cols, 1e-6)
            }
            .expect("valid problem");
            rt.run::<FusedAddRmsNorm>(&stream, &p).expect("fused");
        };
        // b, c and d are written before they are read; a and r are the inputs.
        let body = || {
            for _ in 0..3 {
                softmax(pa, pb, shape, 30.0);
                fused(pb);
                softmax(pb, pd, one_row, 50.0);
                rmsnorm(pb, pc);
                softmax(pc, pa, shape, 2.0);
                fused(pa);
            }
        };
        if graph {
            body(); // loads every kernel: a capture may not compile
            a.write(&stream, &a0);
            r.write(&stream, &r0);
            stream.synchronize().expect("inputs");
            stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .expect("begin capture");
            body();
            let g = stream
                .end_capture(CUgraphInstantiate_flags(0))
                .expect("end capture")
                .expect("a graph");
            g.launch().expect("graph launch");
        } else {
            body();
        }
        stream.synchronize().expect("chain");
        [&a, &b, &c, &d, &r].iter().map(|x| x.read(&stream)).collect()
    };
    let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|f| f.to_bits()).collect::<Vec<_>>();
    let want = bits(&chain(&plain_rt, false));
    assert!(want.iter().any(|&b| b != 0), "the chain produced something");
    assert!(
        bits(&chain(&pdl_rt, false)) == want,
        "eager launches with programmatic dependent launch differ from plain ones"
    );
    assert!(
        bits(&chain(&pdl_rt, true)) == want,
        "a CUDA graph of launches with programmatic dependent launch differs from plain launches"
    );
}
