//! Softmax and log-softmax on an NVIDIA GPU against the CPU reference
//! (`reference::check`): every config of the search space on awkward shapes (1, odd and
//! prime columns, one row, row strides above cols, buffers not 16-byte aligned, inf and
//! NaN inputs, rows long enough for the streaming paths), out of place and in place,
//! with x and y misaligned alike and differently (rows shorter than a vector, odd
//! vocabularies whose rows each start at another offset), the safe ops and the ops on
//! raw addresses as an engine calls them, programmatic dependent launch against plain
//! launches and the reference, and the check failing on a kernel whose normaliser is
//! off by 1%. Outputs are poisoned before each run; padding between rows must come
//! back untouched.
//!
//! Without an NVIDIA GPU each test prints `SKIPPED ...`; with `KERNELS_REQUIRE_GPU` on,
//! that is a failure instead. `scripts/gpu_tests.sh` runs them on the GPU machine.

use std::sync::Arc;

use kernels_core::cudarc::driver::CudaStream;
use kernels_core::launch::pseudo_random;
use kernels_core::testing::cuda::{every_config, fitted_and_compiled, runtime, Buf, Tally};
use kernels_core::testing::{case_input, row_cases, Case};
use kernels_core::{launch, CudaRuntime, KernelSource, PlannedKernel, Policy, Rows};
use kernels_softmax::plan::SoftmaxProblem;
use kernels_softmax::{cuda as safe, ops, reference, space, LogSoftmax, Softmax, SoftmaxKey, Strategy};
use tuned::{DType, Target, TunedKernel};

/// The problem of `y = softmax(x * scale)` (or log-softmax) over two buffers.
fn problem<'a>(stream: &CudaStream, x: &'a Buf, y: &'a Buf, shape: Rows, scale: f32) -> SoftmaxProblem<'a> {
    // SAFETY: both buffers hold `shape.span()` elements of their dtype past their
    // offset and outlive the problem.
    unsafe {
        SoftmaxProblem::raw(
            x.dtype(),
            x.ptr(stream),
            x.len(),
            shape,
            y.ptr(stream),
            y.len(),
            shape,
            scale,
        )
    }
    .expect("valid problem")
}

/// The reference of `x` laid out as `shape`, written over `y0` (so its padding stays).
fn want(log: bool, x: &[f32], shape: Rows, y0: &[f32], scale: f32) -> Vec<f32> {
    let mut y = y0.to_vec();
    let f = if log {
        reference::log_softmax
    } else {
        reference::softmax
    };
    f(
        x,
        shape.stride,
        &mut y,
        shape.stride,
        shape.rows,
        shape.cols,
        scale,
    );
    y
}

/// The shapes every row kernel runs on, and long rows with special values and padded
/// strides for the streaming and staged paths (the odd rows are [`odd_cases`] and the
/// longest rows [`long_cases`], tests of their own so each fits the runner's limit).
fn cases() -> Vec<Case> {
    let c = Case::new;
    let mut cases = row_cases();
    cases.extend([
        c(DType::Bf16, 151936, 3, 8, 0, false),
        c(DType::F32, 50001, 5, 3, 0, true),
        c(DType::F16, 65536, 5, 8, 0, true),
    ]);
    cases
}

/// More rows than one wave of 128 KiB stages: the staged blocks prefetch the next wave's
/// rows into L2. Only the staged configs run on it, the path it exists for (every other
/// config runs on the shorter cases; this one is 9 M elements per run).
const WAVES: Case = Case {
    dtype: DType::Bf16,
    cols: 65536,
    rows: 140,
    pad: 8,
    offset: 0,
    specials: false,
};

/// The longest rows: a wave-crossing staged case, one row longer than any stage, and
/// the sparse tail.
fn long_cases() -> Vec<Case> {
    vec![WAVES, Case::new(DType::Bf16, 262144, 2, 0, 0, false), SPARSE_TAIL]
}

/// Rows no vector divides, each row starting at another offset from a 16-byte boundary:
/// a vocabulary of odd length (contiguous, strided by one more, at an element offset,
/// with special values), hidden-size-like rows of 4097 and 8201, and rows shorter than
/// a vector or than its head.
fn odd_cases() -> Vec<Case> {
    let c = Case::new;
    vec![
        c(DType::Bf16, 50257, 3, 0, 0, false),
        c(DType::Bf16, 50257, 5, 1, 3, true),
        c(DType::F16, 8201, 6, 0, 5, false),
        c(DType::F32, 4097, 5, 0, 1, true),
        c(DType::Bf16, 4097, 9, 2, 7, false),
        c(DType::Bf16, 5, 6, 0, 3, false),
        c(DType::F32, 2, 6, 1, 1, false),
    ]
}

/// Elements by which y sits further off 16-byte alignment than x in the runs of `case`:
/// 0, and for the odd cases also 1 (x and y rows split differently, so the vector is
/// narrowed to what both allow).
fn y_shifts(case: &Case) -> &'static [usize] {
    if odd_cases().contains(case) {
        &[0, 1]
    } else {
        &[0]
    }
}

/// 1025 vectors of 8 per row: a last step or pass where most threads hold no vector.
/// At scale 0 (every row uniform) such an empty part must not make the sum NaN.
const SPARSE_TAIL: Case = Case {
    dtype: DType::Bf16,
    cols: 8200,
    rows: 3,
    pad: 0,
    offset: 0,
    specials: false,
};

#[test]
fn every_config_matches_the_reference() {
    every_config_on("every_config_matches_the_reference", cases());
}

/// The odd rows apart (each length compiles the whole space anew), so each test fits a
/// time limit and the two can run in parallel processes.
#[test]
fn every_config_matches_the_reference_on_odd_rows() {
    every_config_on("every_config_matches_the_reference_on_odd_rows", odd_cases());
}

#[test]
fn every_config_matches_the_reference_on_long_rows() {
    every_config_on("every_config_matches_the_reference_on_long_rows", long_cases());
}

fn every_config_on(test: &str, cases: impl IntoIterator<Item = Case>) {
    every_config(test, "softmax", |rt, stream, target, tally| {
        for case in cases {
            let key = SoftmaxKey {
                dtype: case.dtype,
                cols: case.cols as u32,
            };
            let (x, shape) = case_input(&case, 17, 6.0, true);
            // A negative scale takes the min path of the 16-bit packed max, and 0 turns
            // infinities into NaN: both on the cases with special values; 0 on the
            // sparse tail too.
            let scales: &[f32] = if case.specials {
                &[0.7, -1.3, 0.0]
            } else if case == SPARSE_TAIL {
                &[0.7, 0.0]
            } else {
                &[0.7]
            };
            for &scale in scales {
                for &shift in y_shifts(&case) {
                    every_softmax_config(rt, stream, target, &case, &key, &x, shape, scale, shift, tally);
                }
            }
            tally.progress(&format!("{case:?}"));
        }
    });
}

/// Every fitting config of the softmax search space, softmax and log-softmax, on one
/// case at one scale, against the reference: into y (`y_shift` elements further off
/// alignment than x, the space fitted to the problem's alignment) and, where y splits
/// like x, in place (its padding left as it was).
#[allow(clippy::too_many_arguments)]
fn every_softmax_config(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    target: Target,
    case: &Case,
    key: &SoftmaxKey,
    x: &[f32],
    shape: Rows,
    scale: f32,
    y_shift: usize,
    tally: &mut Tally,
) {
    let poison = vec![f32::NAN; x.len()];
    let wants = [false, true].map(|log| want(log, x, shape, &poison, scale));
    let in_place = [false, true].map(|log| want(log, x, shape, x, scale));
    let xb = Buf::new(stream, case.dtype, x, case.offset);
    let mut yb = Buf::new(stream, case.dtype, &poison, case.offset + y_shift);
    let mut ib = Buf::new(stream, case.dtype, x, case.offset);
    let align = <Softmax as PlannedKernel>::alignment(&problem(stream, &xb, &yb, shape, scale));
    let mut space = space::search_space(target, key);
    if *case == WAVES {
        space.retain(|c| c.strategy == Strategy::Staged);
    }
    let configs = fitted_and_compiled::<Softmax, LogSoftmax>(rt, key, case.rows as u64, &space, align);
    for c in &configs {
        for log in [false, true] {
            let what = |how: &str| {
                format!(
                    "{} {how} {} cols={} rows={} offset={} y_shift={y_shift} scale={scale} {c}",
                    if log { "log_softmax" } else { "softmax" },
                    case.dtype,
                    case.cols,
                    case.rows,
                    case.offset
                )
            };
            let launch = |p: &SoftmaxProblem<'_>| {
                if log {
                    rt.launch_config::<LogSoftmax>(stream, c, p).expect("launch");
                } else {
                    rt.launch_config::<Softmax>(stream, c, p).expect("launch");
                }
            };
            yb.write(stream, &poison);
            launch(&problem(stream, &xb, &yb, shape, scale));
            let got = yb.read(stream);
            let w = &wants[usize::from(log)];
            tally.add(reference::check(
                &what("into y"),
                case.dtype,
                log,
                x,
                shape,
                scale,
                &got,
                w,
                shape,
                1,
            ));
            if y_shift == 0 {
                ib.write(stream, x);
                launch(&problem(stream, &ib, &ib, shape, scale));
                let got = ib.read(stream);
                let w = &in_place[usize::from(log)];
                tally.add(reference::check(
                    &what("in place"),
                    case.dtype,
                    log,
                    x,
                    shape,
                    scale,
                    &got,
                    w,
                    shape,
                    1,
                ));
            }
        }
    }
}

#[test]
fn safe_ops_and_raw_ops_match_the_reference() {
    let Some((rt, stream)) = runtime("safe_ops_and_raw_ops_match_the_reference", Policy::Serve) else {
        return;
    };
    use half::bf16;
    let (rows, cols, scale) = (4usize, 32000usize, 0.9f32);
    let shape = Rows::contiguous(rows, cols);
    let xf = kernels_core::testing::stored(DType::Bf16, &pseudo_random(rows * cols, 5, 6.0, 0.0));
    let host: Vec<bf16> = xf.iter().map(|&v| bf16::from_f32(v)).collect();
    let poison = vec![bf16::from_f32(-3.5); rows * cols];
    let read = |b: &kernels_core::cudarc::driver::CudaSlice<bf16>| -> Vec<f32> {
        stream
            .clone_dtoh(b)
            .expect("dtoh")
            .iter()
            .map(|v| v.to_f32())
            .collect()
    };
    let x = stream.clone_htod(&host).expect("htod");
    for log in [false, true] {
        let name = if log { "cuda::log_softmax" } else { "cuda::softmax" };
        let mut y = stream.clone_htod(&poison).expect("htod");
        let f = if log { safe::log_softmax } else { safe::softmax };
        let used = f(
            &rt,
            &stream,
            &x.as_view(),
            shape,
            &mut y.as_view_mut(),
            shape,
            scale,
        )
        .expect(name);
        println!("{name}: {} from {}", used.config, used.source);
        let w = want(log, &xf, shape, &vec![0.0; rows * cols], scale);
        reference::check(name, DType::Bf16, log, &xf, shape, scale, &read(&y), &w, shape, 1).unwrap();
    }

    // In place.
    let mut xi = stream.clone_htod(&host).expect("htod");
    safe::softmax_in_place(&rt, &stream, &mut xi.as_view_mut(), shape, scale).expect("in place");
    let w = want(false, &xf, shape, &xf, scale);
    reference::check(
        "cuda::softmax_in_place",
        DType::Bf16,
        false,
        &xf,
        shape,
        scale,
        &read(&xi),
        &w,
        shape,
        1,
    )
    .unwrap();

    // The ops on raw addresses, strided and 2 elements off 16-byte alignment.
    let strided = Rows::strided(rows, cols, cols + 8);
    let xs = kernels_core::testing::stored(DType::Bf16, &pseudo_random(strided.span().unwrap(), 6, 6.0, 0.0));
    let y0 = vec![-3.5f32; xs.len()];
    let xb = Buf::new(&stream, DType::Bf16, &xs, 2);
    for log in [false, true] {
        let name = if log { "ops::log_softmax" } else { "ops::softmax" };
        let yb = Buf::new(&stream, DType::Bf16, &y0, 2);
        let p = problem(&stream, &xb, &yb, strided, scale);
        let used = if log {
            ops::log_softmax(&rt, &stream, &p)
        } else {
            ops::softmax(&rt, &stream, &p)
        }
        .expect(name);
        println!("{name}: {} from {}", used.config, used.source);
        let w = want(log, &xs, strided, &y0, scale);
        reference::check(
            name,
            DType::Bf16,
            log,
            &xs,
            strided,
            scale,
            &yb.read(&stream),
            &w,
            strided,
            1,
        )
        .unwrap();
    }

    // Bad input is refused before launching and names the argument.
    let mut y = stream.clone_htod(&poison).expect("htod");
    let long = Rows::contiguous(rows + 1, cols);
    let err = safe::softmax(
        &rt,
        &stream,
        &x.as_view(),
        long,
        &mut y.as_view_mut(),
        long,
        scale,
    )
    .unwrap_err();
    assert!(err.to_string().contains('x'), "{err}");
    assert!(read(&y).iter().all(|&v| v == -3.5), "nothing was launched");
}

/// One launch of a softmax chain: `y = softmax(x * scale)` (or log-softmax) over the
/// first `rows` rows of buffers `x` and `y` (indices into the chain's buffers).
#[derive(Clone, Copy)]
struct Step {
    x: usize,
    y: usize,
    rows: usize,
    scale: f32,
    log: bool,
}

/// A chain of dependent launches, each reading what the one before wrote (a long
/// softmax, a log-softmax of it, a one-row softmax of that, and a softmax back into
/// the first buffer, three times over), run by a runtime with programmatic dependent
/// launch, eagerly and replayed from a CUDA graph, gives bit for bit what plain
/// launches give, and each step of a plain run, read back one at a time, matches the
/// reference of its input. A kernel that touched memory before waiting for the
/// previous one would read a stale buffer here. Below sm_90 it skips (fails under
/// `KERNELS_REQUIRE_GPU`): programmatic dependent launch needs Hopper.
#[test]
fn programmatic_launch_chain_matches_plain_launches_and_the_reference() {
    let test = "programmatic_launch_chain_matches_plain_launches_and_the_reference";
    let Some((plain_rt, stream)) = runtime(test, Policy::Serve) else {
        return;
    };
    let Some(pdl_rt) = kernels_core::testing::cuda::pdl_runtime(test, &plain_rt) else {
        return;
    };
    assert!(pdl_rt.pdl_for(&kernels_softmax::plan::SOURCE));
    assert!(!plain_rt.pdl_for(&kernels_softmax::plan::SOURCE));

    let (rows, cols, dtype) = (256usize, 32768usize, DType::Bf16);
    let a0 = kernels_core::testing::stored(dtype, &pseudo_random(rows * cols, 41, 4.0, 0.0));
    let step = |x, y, rows, scale, log| Step {
        x,
        y,
        rows,
        scale,
        log,
    };
    let steps: Vec<Step> = (0..3)
        .flat_map(|_| {
            [
                step(0, 1, rows, 3.0, false),
                step(1, 2, rows, 30.0, true),
                step(2, 3, 1, 0.5, false),
                step(2, 0, rows, 0.25, false),
            ]
        })
        .collect();
    let fresh = || -> Vec<Buf> {
        let mut bufs = vec![Buf::new(&stream, dtype, &a0, 0)];
        bufs.extend((1..4).map(|_| Buf::new(&stream, dtype, &vec![f32::NAN; rows * cols], 0)));
        bufs
    };
    let rows_of = |s: &Step| Rows::contiguous(s.rows, cols);
    let run = |rt: &CudaRuntime, s: &Step, ptrs: &[u64]| {
        let len = rows * cols;
        // SAFETY: every buffer holds `len` elements and outlives the launch.
        let p = unsafe {
            SoftmaxProblem::raw(
                dtype,
                ptrs[s.x],
                len,
                rows_of(s),
                ptrs[s.y],
                len,
                rows_of(s),
                s.scale,
            )
        }
        .expect("valid problem");
        if s.log {
            rt.run::<LogSoftmax>(&stream, &p).expect("log_softmax");
        } else {
            rt.run::<Softmax>(&stream, &p).expect("softmax");
        }
    };

    // Plain launches one at a time, each step checked against the reference of what it read.
    let bufs = fresh();
    let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr(&stream)).collect();
    for (i, s) in steps.iter().enumerate() {
        let (x, y0) = (bufs[s.x].read(&stream), bufs[s.y].read(&stream));
        run(&plain_rt, s, &ptrs);
        let r = rows_of(s);
        let n = r.span().unwrap();
        let w = want(s.log, &x[..n], r, &y0[..n], s.scale);
        let got = bufs[s.y].read(&stream);
        reference::check(
            &format!("step {i}"),
            dtype,
            s.log,
            &x[..n],
            r,
            s.scale,
            &got[..n],
            &w,
            r,
            1,
        )
        .unwrap();
    }
    let stepwise: Vec<Vec<f32>> = bufs.iter().map(|b| b.read(&stream)).collect();

    // The chain enqueued at once: plain, then with programmatic dependent launch,
    // eagerly and from a graph.
    let chained = |rt: &CudaRuntime, graph: bool| -> Vec<Vec<f32>> {
        let bufs = fresh();
        // Raw addresses taken once, before any capture: cudarc's tracked pointers
        // would wait on events recorded outside it, which a capture refuses.
        let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr(&stream)).collect();
        stream.synchronize().expect("inputs");
        if graph {
            kernels_core::testing::cuda::replay_captured(&stream, || {
                for s in &steps {
                    run(rt, s, &ptrs);
                }
            });
        } else {
            for s in &steps {
                run(rt, s, &ptrs);
            }
        }
        stream.synchronize().expect("chain");
        bufs.iter().map(|b| b.read(&stream)).collect()
    };
    kernels_core::testing::cuda::assert_chains_match(&plain_rt, &pdl_rt, &stepwise, chained);
}

/// `reference::check` fails on a softmax kernel whose normaliser is off by 1%, while
/// it passes the same kernel unchanged: the served config of a vocabulary-sized bf16
/// row compiled once as is and once after a preamble that adds log2(1.01) to the
/// kernel's `log2f(sum)`, so every output is 1.01 times too small. The served source
/// text is unchanged; the perturbed variant is its own source for the module cache.
#[test]
fn the_check_fails_a_kernel_whose_normaliser_is_off_by_one_percent() {
    let test = "the_check_fails_a_kernel_whose_normaliser_is_off_by_one_percent";
    let Some((rt, stream)) = runtime(test, Policy::Serve) else {
        return;
    };
    let info = rt.device().info().clone();
    let (dtype, rows, cols) = (DType::Bf16, 4usize, 151936usize);
    let key = SoftmaxKey {
        dtype,
        cols: cols as u32,
    };
    // 16-bit outputs fold the sum into the exponent through log2f (kernels-softmax/cuda/
    // softmax.cu, Finish) unless the config keeps its exponentials.
    let served = tuned::resolve_serve::<Softmax>(info.tuning_target(), &key, rows as u64).config;
    let config = if served.keep {
        kernels_softmax::SoftmaxConfig {
            keep: false,
            ..served
        }
    } else {
        served
    };
    assert!(
        Softmax::accepts(info.tuning_target(), &key, rows as u64, &config),
        "{config}"
    );
    static PERTURB: &str = "#define log2f(v) ((log2f)(v) + 0.0143552930f)\n";
    let mut preamble = vec![PERTURB];
    preamble.extend_from_slice(kernels_softmax::plan::SOURCE.preamble);
    let perturbed: &'static KernelSource = Box::leak(Box::new(KernelSource {
        preamble: Box::leak(preamble.into_boxed_slice()),
        fingerprint: "test:normaliser-off-by-1%",
        ..kernels_softmax::plan::SOURCE
    }));

    let shape = Rows::contiguous(rows, cols);
    let x = kernels_core::testing::stored(dtype, &pseudo_random(rows * cols, 77, 6.0, 0.0));
    let xb = Buf::new(&stream, dtype, &x, 0);
    let yb = Buf::new(&stream, dtype, &vec![f32::NAN; x.len()], 0);
    let p = problem(&stream, &xb, &yb, shape, 1.0);
    let w = want(false, &x, shape, &vec![0.0; x.len()], 1.0);
    let variant = Softmax::variant(&info, &key, &config);
    let mut outputs = Vec::new();
    for source in [&kernels_softmax::plan::SOURCE, perturbed] {
        let kernel = rt.kernel(&stream, source, &variant).expect("compiles");
        launch::<kernels_core::Cuda, Softmax>(std::slice::from_ref(&kernel), &stream, &config, &p)
            .expect("launch");
        outputs.push(yb.read(&stream));
    }
    let check = |got: &[f32]| reference::check("softmax", dtype, false, &x, shape, 1.0, got, &w, shape, 1);
    check(&outputs[0]).unwrap_or_else(|e| panic!("the unperturbed kernel fails: {e}"));
    // The preamble took effect: the first row sums to 1 / 1.01.
    let sum: f64 = outputs[1][..cols].iter().map(|&v| f64::from(v)).sum();
    assert!((sum * 1.01 - 1.0).abs() < 2e-3, "the perturbed row sums to {sum}");
    let e = check(&outputs[1]).expect_err("the check passed a normaliser off by 1%");
    println!("softmax {config}, normaliser off by 1%: {e}");
}

/// The tests that depend on cudarc's event tracking, which is per context: one at a
/// time, so turning it off in one never reaches another's buffers.
static TRACKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_consumer_on_another_stream_waits_for_the_safe_op() {
    let _one = TRACKING.lock().unwrap_or_else(|e| e.into_inner());
    let test = "a_consumer_on_another_stream_waits_for_the_safe_op";
    let Some((rt, a)) = runtime(test, Policy::Serve) else {
        return;
    };
    use half::bf16;
    let b = rt.device().new_stream().expect("second stream");
    assert!(
        a.context().is_managing_stream_synchronization(),
        "cudarc tracks buffers across streams here (two streams, tracking on)"
    );
    // 512 MiB each way: the kernel runs for over 100 µs, long enough for an unordered
    // copy on the other stream to read the zeros written before it.
    let (rows, cols) = (16384usize, 16384usize);
    let shape = Rows::contiguous(rows, cols);
    let x = a.alloc_zeros::<bf16>(rows * cols).expect("alloc");
    let mut y = a.alloc_zeros::<bf16>(rows * cols).expect("alloc");
    let want = bf16::from_f32(1.0 / cols as f32);
    for trial in 0..20 {
        a.memset_zeros(&mut y).expect("memset");
        safe::softmax(&rt, &a, &x.as_view(), shape, &mut y.as_view_mut(), shape, 1.0).expect("softmax");
        // No explicit synchronization: only cudarc's tracking orders this copy on `b`
        // after the kernel on `a`.
        let last = b.clone_dtoh(&y.slice((rows - 1) * cols..)).expect("dtoh on b");
        let wrong = last.iter().filter(|&&v| v != want).count();
        assert_eq!(
            wrong, 0,
            "trial {trial}: {wrong} of the last row's {cols} outputs read on stream b are not the kernel's"
        );
    }
}

#[test]
fn safe_ops_are_captured_after_warm_at_every_alignment() {
    let _one = TRACKING.lock().unwrap_or_else(|e| e.into_inner());
    let test = "safe_ops_are_captured_after_warm_at_every_alignment";
    let Some((rt, stream)) = runtime(test, Policy::Serve) else {
        return;
    };
    use half::bf16;
    use kernels_core::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let (rows, scale) = (4usize, 0.7f32);
    let host = |cols: usize, seed: u64| -> (Vec<f32>, Vec<bf16>) {
        let f = kernels_core::testing::stored(DType::Bf16, &pseudo_random(rows * cols + 1, seed, 6.0, 0.0));
        let h = f.iter().map(|&v| bf16::from_f32(v)).collect();
        (f, h)
    };
    let read = |b: &kernels_core::cudarc::driver::CudaSlice<bf16>| -> Vec<f32> {
        stream
            .clone_dtoh(b)
            .expect("dtoh")
            .iter()
            .map(|v| v.to_f32())
            .collect()
    };

    // With tracking on, the op refuses and the capture stays valid.
    let ctx = stream.context().clone();
    assert!(ctx.is_managing_stream_synchronization());
    let (_, h) = host(4096, 1);
    let xt = stream.clone_htod(&h).expect("htod");
    let mut yt = stream.clone_htod(&h).expect("htod");
    let shape = Rows::contiguous(rows, 4096);
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    let refused = safe::softmax(
        &rt,
        &stream,
        &xt.slice(..rows * 4096),
        shape,
        &mut yt.slice_mut(..rows * 4096),
        shape,
        scale,
    );
    let ended = stream.end_capture(CUgraphInstantiate_flags(0));
    let err = refused.expect_err("a tracked capture is refused").to_string();
    assert!(err.contains("`stream`"), "{err}");
    assert!(
        ended.is_ok(),
        "the refused op left the capture valid: {:?}",
        ended.err()
    );

    // Tracking off for buffers allocated from here on (restored at the end).
    // SAFETY: this test's buffers are used on one stream, which orders them; the lock
    // keeps the other tracking test out meanwhile.
    unsafe { ctx.disable_event_tracking() };
    // Aligned rows, rows one element off 16-byte alignment, and an odd column count.
    let cases = [(32000usize, 0usize), (32000, 1), (32001, 0)];
    let mut keys = Vec::new();
    for &(cols, _) in &cases {
        keys.push((
            SoftmaxKey {
                dtype: DType::Bf16,
                cols: cols as u32,
            },
            rows as u64,
        ));
    }
    for r in rt
        .warm::<Softmax>(&stream, &keys)
        .into_iter()
        .chain(rt.warm::<LogSoftmax>(&stream, &keys))
    {
        r.expect("warm");
    }
    let compiled = rt.stats().compiled;
    let mut runs = Vec::new();
    for (i, &(cols, offset)) in cases.iter().enumerate() {
        let (xf, xh) = host(cols, 10 + i as u64);
        let x = stream.clone_htod(&xh).expect("htod");
        let y = stream
            .clone_htod(&vec![bf16::from_f32(-3.5); rows * cols + 1])
            .expect("htod");
        let yl = stream
            .clone_htod(&vec![bf16::from_f32(-3.5); rows * cols + 1])
            .expect("htod");
        let xi = stream.clone_htod(&xh).expect("htod");
        runs.push((cols, offset, xf, x, y, yl, xi));
    }
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    for (cols, offset, _, x, y, yl, xi) in runs.iter_mut() {
        let (cols, offset) = (*cols, *offset);
        let shape = Rows::contiguous(rows, cols);
        let span = offset..offset + rows * cols;
        safe::softmax(
            &rt,
            &stream,
            &x.slice(span.clone()),
            shape,
            &mut y.slice_mut(span.clone()),
            shape,
            scale,
        )
        .expect("softmax in capture");
        safe::log_softmax(
            &rt,
            &stream,
            &x.slice(span.clone()),
            shape,
            &mut yl.slice_mut(span.clone()),
            shape,
            scale,
        )
        .expect("log_softmax in capture");
        safe::softmax_in_place(&rt, &stream, &mut xi.slice_mut(span), shape, scale)
            .expect("in place in capture");
    }
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end capture")
        .expect("a graph");
    assert_eq!(rt.stats().compiled, compiled, "nothing compiled while capturing");
    graph.launch().expect("graph launch");
    stream.synchronize().expect("sync");
    for (cols, offset, xf, _, y, yl, xi) in &runs {
        let (cols, offset) = (*cols, *offset);
        let shape = Rows::contiguous(rows, cols);
        let x = &xf[offset..offset + rows * cols];
        let zeros = vec![0.0; rows * cols];
        for (name, log, got) in [
            ("softmax", false, y),
            ("log_softmax", true, yl),
            ("softmax_in_place", false, xi),
        ] {
            let got = &read(got)[offset..offset + rows * cols];
            let w = want(
                log,
                x,
                shape,
                if name == "softmax_in_place" { x } else { &zeros },
                scale,
            );
            reference::check(
                &format!("captured {name} cols {cols} offset {offset}"),
                DType::Bf16,
                log,
                x,
                shape,
                scale,
                got,
                &w,
                shape,
                1,
            )
            .unwrap();
        }
    }
    // SAFETY: as above; later tests get the default back.
    unsafe { ctx.enable_event_tracking() };
}
