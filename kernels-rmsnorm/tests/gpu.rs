//! RMSNorm and fused residual-add RMSNorm on an NVIDIA GPU against the CPU reference
//! (`reference::check`; the stored residual exactly): every config of the search space
//! on awkward shapes (1, odd and prime columns, one row, row strides above cols,
//! buffers not 16-byte aligned, inf and NaN inputs; odd hidden sizes whose rows each
//! start at another offset, rows shorter than a vector; the weight aligned, misaligned
//! like x or otherwise; the output or residual misaligned like x or not), the safe ops and the ops on raw
//! addresses as an engine calls them, online tuning on the caller's buffers and its
//! memo, and programmatic dependent launch against plain launches and the reference.
//! Outputs are poisoned before each run; padding between rows must come back untouched.
//!
//! Without an NVIDIA GPU each test prints `SKIPPED ...`; with `KERNELS_REQUIRE_GPU` on,
//! that is a failure instead. `scripts/gpu_tests.sh` runs them on the GPU machine.

use kernels_core::cudarc::driver::{CudaSlice, CudaStream};
use kernels_core::launch::pseudo_random;
use kernels_core::testing::cuda::{every_config, fitted_and_compiled, runtime, runtime_with, Buf};
use kernels_core::testing::{case_input, row_cases, stored, Case};
use kernels_core::{CudaRuntime, DiskCache, PlannedKernel, Policy, Rows, RuntimeOptions};
use kernels_rmsnorm::plan::NormProblem;
use kernels_rmsnorm::{cuda as safe, ops, reference, space, FusedAddRmsNorm, RmsNorm, RmsNormKey};
use tuned::{DType, Source, TunedKernel};

const EPS: f32 = 1e-6;

/// The plain RMSNorm problem `y = rmsnorm(x) * w`, both laid out as `shape`.
fn plain_problem<'a>(
    stream: &CudaStream,
    x: &'a Buf,
    w: &'a Buf,
    y: &'a Buf,
    shape: Rows,
) -> NormProblem<'a> {
    // SAFETY: each Buf holds what the problem says past its offset and outlives it.
    unsafe {
        NormProblem::rmsnorm_raw(
            x.dtype(),
            x.ptr(stream),
            x.len(),
            shape,
            w.ptr(stream),
            w.len(),
            y.ptr(stream),
            y.len(),
            shape,
            EPS,
        )
    }
    .expect("valid problem")
}

/// The fused problem over `x` and `residual` (both laid out as `shape`) and `w`.
fn fused_problem<'a>(
    stream: &CudaStream,
    x: &'a Buf,
    r: &'a Buf,
    w: &'a Buf,
    shape: Rows,
) -> NormProblem<'a> {
    // SAFETY: as for `plain_problem`.
    unsafe {
        NormProblem::fused_add_rmsnorm_raw(
            x.dtype(),
            x.ptr(stream),
            x.len(),
            shape,
            r.ptr(stream),
            r.len(),
            shape,
            w.ptr(stream),
            w.len(),
            EPS,
        )
    }
    .expect("valid problem")
}

/// The references: plain RMSNorm of `x` over `y0` (its padding kept), and the fused
/// op's `(x, residual)` after one run.
fn wants(dtype: DType, x: &[f32], res: &[f32], w: &[f32], y0: &[f32], shape: Rows) -> [Vec<f32>; 3] {
    let mut y = y0.to_vec();
    reference::rmsnorm(x, shape.stride, w, &mut y, shape.stride, shape.rows, EPS);
    let (mut fx, mut fr) = (x.to_vec(), res.to_vec());
    reference::fused_add_rmsnorm(
        &mut fx,
        shape.stride,
        &mut fr,
        shape.stride,
        w,
        shape.rows,
        EPS,
        dtype,
    );
    [y, fx, fr]
}

/// The stored residual matches the reference exactly (the sum is rounded once, as the
/// reference rounds it), padding included.
fn exact(what: &str, got: &[f32], want: &[f32]) -> Result<(), String> {
    match got
        .iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()))
    {
        None => Ok(()),
        Some(i) => Err(format!("{what}: element {i}: got {}, want {}", got[i], want[i])),
    }
}

/// Hidden sizes no vector divides, each row starting at another offset from a 16-byte
/// boundary (contiguous, strided by one more, at an element offset), and rows shorter
/// than a vector or than its head.
fn odd_cases() -> Vec<Case> {
    let c = Case::new;
    vec![
        c(DType::Bf16, 4097, 9, 0, 0, false),
        c(DType::Bf16, 5121, 6, 1, 3, false),
        c(DType::F16, 8201, 4, 0, 5, false),
        c(DType::F32, 4097, 5, 2, 1, false),
        c(DType::Bf16, 33333, 3, 0, 1, false),
        c(DType::Bf16, 5, 6, 0, 3, false),
        c(DType::F32, 2, 6, 1, 1, false),
    ]
}

/// Where the weight and the output (`y`, or the fused op's residual) sit for `case`:
/// `(weight offset, elements by which the output sits further off alignment than x)`.
/// Every case: the weight misaligned like x, and aligned. Odd cases also: the weight
/// 3 elements in, and the output one element further off than x (rows of x and the
/// output split differently, so the vector is narrowed to what both allow).
fn layouts(case: &Case, odd: bool) -> Vec<(usize, usize)> {
    let mut out = vec![(case.offset, 0)];
    if case.offset != 0 {
        out.push((0, 0));
    }
    if odd {
        out.extend([(3, 0), (0, 1)]);
    }
    out
}

#[test]
fn every_config_matches_the_reference() {
    every_config(
        "every_config_matches_the_reference",
        "rmsnorm",
        |rt, stream, target, tally| {
            let cases = row_cases().into_iter().map(|c| (c, false));
            for (case, odd) in cases.chain(odd_cases().into_iter().map(|c| (c, true))) {
                for (w_offset, shift) in layouts(&case, odd) {
                    let key = RmsNormKey {
                        dtype: case.dtype,
                        cols: case.cols as u32,
                    };
                    let (x, shape) = case_input(&case, 7, 2.0, false);
                    let (res, _) = case_input(&case, 8, 2.0, false);
                    let w = stored(case.dtype, &pseudo_random(case.cols, 9, 0.5, 1.0));
                    let poison = vec![f32::NAN; x.len()];
                    let [y_want, fx_want, fr_want] = wants(case.dtype, &x, &res, &w, &poison, shape);

                    let xb = Buf::new(stream, case.dtype, &x, case.offset);
                    let wb = Buf::new(stream, case.dtype, &w, w_offset);
                    let mut yb = Buf::new(stream, case.dtype, &poison, case.offset + shift);
                    let mut fx = Buf::new(stream, case.dtype, &x, case.offset);
                    let mut fr = Buf::new(stream, case.dtype, &res, case.offset + shift);
                    let align =
                        <RmsNorm as PlannedKernel>::alignment(&plain_problem(stream, &xb, &wb, &yb, shape));
                    // The fused kernel's space: the plain one's and its late residual stores.
                    let space = space::search_space(target, &key, true);
                    let rows = case.rows as u64;
                    for c in &fitted_and_compiled::<RmsNorm, FusedAddRmsNorm>(rt, &key, rows, &space, align) {
                        let what = format!(
                            "rmsnorm {} cols={} rows={} offset={} w_offset={w_offset} out_shift={shift} {c}",
                            case.dtype, case.cols, case.rows, case.offset
                        );
                        // Plain RMSNorm has no residual to store late: it refuses those.
                        if RmsNorm::accepts(target, &key, rows, c) {
                            yb.write(stream, &poison);
                            let p = plain_problem(stream, &xb, &wb, &yb, shape);
                            rt.launch_config::<RmsNorm>(stream, c, &p).expect("launch");
                            tally.add(reference::check(
                                &what,
                                case.dtype,
                                &yb.read(stream),
                                &y_want,
                                shape,
                                1,
                            ));
                        }

                        let what = what.replacen("rmsnorm", "fused_add_rmsnorm", 1);
                        fx.write(stream, &x);
                        fr.write(stream, &res);
                        let p = fused_problem(stream, &fx, &fr, &wb, shape);
                        rt.launch_config::<FusedAddRmsNorm>(stream, c, &p)
                            .expect("launch");
                        tally.add(
                            reference::check(
                                &format!("{what} x"),
                                case.dtype,
                                &fx.read(stream),
                                &fx_want,
                                shape,
                                1,
                            )
                            .and_then(|_| exact(&format!("{what} residual"), &fr.read(stream), &fr_want)),
                        );
                    }
                    tally.progress(&format!("{case:?} w_offset={w_offset} out_shift={shift}"));
                }
            }
        },
    );
}

#[test]
fn safe_ops_and_raw_ops_match_the_reference() {
    let Some((rt, stream)) = runtime("safe_ops_and_raw_ops_match_the_reference", Policy::Serve) else {
        return;
    };
    use half::bf16;
    let dtype = DType::Bf16;
    let (rows, cols) = (5usize, 4096usize);
    let shape = Rows::contiguous(rows, cols);
    let n = rows * cols;
    let x = stored(dtype, &pseudo_random(n, 21, 2.0, 0.0));
    let res = stored(dtype, &pseudo_random(n, 22, 2.0, 0.0));
    let w = stored(dtype, &pseudo_random(cols, 23, 0.5, 1.0));
    let [y_want, fx_want, fr_want] = wants(dtype, &x, &res, &w, &vec![0.0; n], shape);
    let to_dev = |v: &[f32]| -> CudaSlice<bf16> {
        let h: Vec<bf16> = v.iter().map(|&f| bf16::from_f32(f)).collect();
        stream.clone_htod(&h).expect("htod")
    };
    let read = |b: &CudaSlice<bf16>| -> Vec<f32> {
        stream
            .clone_dtoh(b)
            .expect("dtoh")
            .iter()
            .map(|v| v.to_f32())
            .collect()
    };
    let (xd, wd) = (to_dev(&x), to_dev(&w));

    let mut y = to_dev(&vec![-3.5; n]);
    let used = safe::rmsnorm(
        &rt,
        &stream,
        &xd.as_view(),
        shape,
        &wd.as_view(),
        &mut y.as_view_mut(),
        shape,
        EPS,
    )
    .expect("cuda::rmsnorm");
    println!("cuda::rmsnorm: {} from {}", used.config, used.source);
    reference::check("cuda::rmsnorm", dtype, &read(&y), &y_want, shape, 1).unwrap();

    let (mut fx, mut fr) = (to_dev(&x), to_dev(&res));
    let used = safe::fused_add_rmsnorm(
        &rt,
        &stream,
        &mut fx.as_view_mut(),
        shape,
        &mut fr.as_view_mut(),
        shape,
        &wd.as_view(),
        EPS,
    )
    .expect("cuda::fused_add_rmsnorm");
    println!("cuda::fused_add_rmsnorm: {} from {}", used.config, used.source);
    reference::check("cuda::fused_add_rmsnorm x", dtype, &read(&fx), &fx_want, shape, 1).unwrap();
    exact("cuda::fused_add_rmsnorm residual", &read(&fr), &fr_want).unwrap();

    // The ops on raw addresses, strided and one element off 16-byte alignment.
    let strided = Rows::strided(rows, cols, cols + 8);
    let m = strided.span().unwrap();
    let xs = stored(dtype, &pseudo_random(m, 24, 2.0, 0.0));
    let rs = stored(dtype, &pseudo_random(m, 25, 2.0, 0.0));
    let y0 = vec![-3.5f32; m];
    let [y_want, fx_want, fr_want] = wants(dtype, &xs, &rs, &w, &y0, strided);
    let (xb, wb, yb) = (
        Buf::new(&stream, dtype, &xs, 1),
        Buf::new(&stream, dtype, &w, 1),
        Buf::new(&stream, dtype, &y0, 1),
    );
    let used =
        ops::rmsnorm(&rt, &stream, &plain_problem(&stream, &xb, &wb, &yb, strided)).expect("ops::rmsnorm");
    println!("ops::rmsnorm: {} from {}", used.config, used.source);
    reference::check("ops::rmsnorm", dtype, &yb.read(&stream), &y_want, strided, 1).unwrap();
    let (fxb, frb) = (Buf::new(&stream, dtype, &xs, 1), Buf::new(&stream, dtype, &rs, 1));
    let p = fused_problem(&stream, &fxb, &frb, &wb, strided);
    let used = ops::fused_add_rmsnorm(&rt, &stream, &p).expect("ops::fused_add_rmsnorm");
    println!("ops::fused_add_rmsnorm: {} from {}", used.config, used.source);
    reference::check(
        "ops::fused_add_rmsnorm x",
        dtype,
        &fxb.read(&stream),
        &fx_want,
        strided,
        1,
    )
    .unwrap();
    exact("ops::fused_add_rmsnorm residual", &frb.read(&stream), &fr_want).unwrap();
    // A plain problem under the fused op is refused, naming `problem`.
    let err =
        ops::fused_add_rmsnorm(&rt, &stream, &plain_problem(&stream, &xb, &wb, &yb, strided)).unwrap_err();
    assert!(err.to_string().contains("problem"), "{err}");

    // Bad input is refused before launching and names the argument.
    let mut y = to_dev(&vec![-3.5; n]);
    let mut rmsnorm = |shape: Rows, eps: f32| {
        safe::rmsnorm(
            &rt,
            &stream,
            &xd.as_view(),
            shape,
            &wd.as_view(),
            &mut y.as_view_mut(),
            shape,
            eps,
        )
    };
    let err = rmsnorm(shape, 0.0).unwrap_err();
    assert!(err.to_string().contains("eps"), "{err}");
    let err = rmsnorm(Rows::contiguous(rows + 1, cols), EPS).unwrap_err();
    assert!(err.to_string().contains('x'), "{err}");
    assert!(read(&y).iter().all(|&v| v == -3.5), "nothing was launched");
}

/// Online tuning searches on the caller's own buffers and leaves them holding exactly
/// one plain run of the chosen config; the next call of the same shape is a memo hit:
/// no new search, one more plain run.
#[test]
fn fused_add_rmsnorm_tuned_online_leaves_one_plain_run_then_serves_from_the_memo() {
    let test = "fused_add_rmsnorm_tuned_online_leaves_one_plain_run_then_serves_from_the_memo";
    let Some((plain_rt, stream)) = runtime(test, Policy::DefaultOnly) else {
        return;
    };
    let cache = std::env::temp_dir().join(format!("kernels-rmsnorm-online-{}", std::process::id()));
    let Some((rt, _)) = runtime_with(
        test,
        RuntimeOptions {
            policy: Policy::Online,
            cache: DiskCache::at(&cache),
            ..RuntimeOptions::default()
        },
    ) else {
        return;
    };
    let (rows, cols, dtype) = (64usize, 4096usize, DType::Bf16);
    let shape = Rows::contiguous(rows, cols);
    let x = stored(dtype, &pseudo_random(rows * cols, 31, 2.0, 0.0));
    let res = stored(dtype, &pseudo_random(rows * cols, 32, 2.0, 0.0));
    let w = stored(dtype, &pseudo_random(cols, 33, 0.5, 1.0));
    let [_, fx_want, fr_want] = wants(dtype, &x, &res, &w, &x, shape);
    let (xb, rb, wb) = (
        Buf::new(&stream, dtype, &x, 0),
        Buf::new(&stream, dtype, &res, 0),
        Buf::new(&stream, dtype, &w, 0),
    );
    let p = fused_problem(&stream, &xb, &rb, &wb, shape);
    let before = rt.stats().searches;
    let used = rt.run::<FusedAddRmsNorm>(&stream, &p).expect("online run");
    assert_eq!(
        used.resolved.source,
        Source::OnlineSearch,
        "the first call searches"
    );
    assert_eq!(rt.stats().searches, before + 1);
    let (tuned_x, tuned_r) = (xb.read(&stream), rb.read(&stream));
    reference::check("online fused x", dtype, &tuned_x, &fx_want, shape, 1).unwrap();
    exact("online fused residual", &tuned_r, &fr_want).unwrap();

    // One plain run of the chosen config on fresh copies of the inputs.
    let (xb2, rb2) = (Buf::new(&stream, dtype, &x, 0), Buf::new(&stream, dtype, &res, 0));
    let p2 = fused_problem(&stream, &xb2, &rb2, &wb, shape);
    plain_rt
        .launch_config::<FusedAddRmsNorm>(&stream, &used.resolved.config, &p2)
        .unwrap();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&tuned_r),
        bits(&rb2.read(&stream)),
        "residual after online tuning is exactly one run's"
    );
    assert_eq!(
        bits(&tuned_x),
        bits(&xb2.read(&stream)),
        "x after online tuning is exactly one run's"
    );

    // The same shape again: a memo hit, no search, and one more run on the buffers.
    let memo_hits = rt.stats().memo_hits;
    let again = rt.run::<FusedAddRmsNorm>(&stream, &p2).unwrap();
    assert_eq!(again.resolved.config, used.resolved.config);
    assert_eq!(rt.stats().searches, before + 1, "a memo hit searched again");
    assert_eq!(rt.stats().memo_hits, memo_hits + 1);
    plain_rt
        .launch_config::<FusedAddRmsNorm>(&stream, &used.resolved.config, &p)
        .unwrap();
    assert_eq!(
        bits(&rb2.read(&stream)),
        bits(&rb.read(&stream)),
        "the memo hit ran once"
    );
    let _ = std::fs::remove_dir_all(&cache);
}

/// One launch of an RMSNorm chain over the chain's buffers (indices).
#[derive(Clone, Copy)]
enum Step {
    /// `y = rmsnorm(x) * w`
    Plain { x: usize, y: usize },
    /// `r += x; x = rmsnorm(r) * w`
    Fused { x: usize, r: usize },
}

/// A chain of dependent launches (an RMSNorm, a fused add-RMSNorm on its output, an
/// RMSNorm of the residual back into the input, three times over) run by a runtime
/// with programmatic dependent launch, eagerly and replayed from a CUDA graph, gives bit
/// for bit what plain launches give, and each step of a plain run, read back one at a
/// time, matches the reference of its input. Below sm_90 it skips (fails under
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
    assert!(pdl_rt.pdl_for(&kernels_rmsnorm::plan::SOURCE));
    assert!(!plain_rt.pdl_for(&kernels_rmsnorm::plan::SOURCE));

    let (rows, cols, dtype) = (1024usize, 4096usize, DType::Bf16);
    let shape = Rows::contiguous(rows, cols);
    let n = rows * cols;
    let a0 = stored(dtype, &pseudo_random(n, 41, 2.0, 0.0));
    let r0 = stored(dtype, &pseudo_random(n, 42, 1.0, 0.0));
    let w = stored(dtype, &pseudo_random(cols, 43, 0.5, 1.0));
    let steps: Vec<Step> = (0..3)
        .flat_map(|_| {
            [
                Step::Plain { x: 0, y: 1 },
                Step::Fused { x: 1, r: 2 },
                Step::Plain { x: 2, y: 0 },
            ]
        })
        .collect();
    let fresh = || -> Vec<Buf> {
        vec![
            Buf::new(&stream, dtype, &a0, 0),
            Buf::new(&stream, dtype, &vec![f32::NAN; n], 0),
            Buf::new(&stream, dtype, &r0, 0),
            Buf::new(&stream, dtype, &w, 0),
        ]
    };
    let run = |rt: &CudaRuntime, s: &Step, ptrs: &[u64]| {
        // SAFETY: buffers 0..3 hold `n` elements, buffer 3 (the weight) `cols`, and all
        // outlive the launch.
        let p = match *s {
            Step::Plain { x, y } => unsafe {
                NormProblem::rmsnorm_raw(dtype, ptrs[x], n, shape, ptrs[3], cols, ptrs[y], n, shape, EPS)
            },
            Step::Fused { x, r } => unsafe {
                NormProblem::fused_add_rmsnorm_raw(
                    dtype, ptrs[x], n, shape, ptrs[r], n, shape, ptrs[3], cols, EPS,
                )
            },
        }
        .expect("valid problem");
        match s {
            Step::Plain { .. } => rt.run::<RmsNorm>(&stream, &p).map(|_| ()),
            Step::Fused { .. } => rt.run::<FusedAddRmsNorm>(&stream, &p).map(|_| ()),
        }
        .expect("launch");
    };

    // Plain launches one at a time, each checked against the reference of what it read.
    let bufs = fresh();
    let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr(&stream)).collect();
    for (i, s) in steps.iter().enumerate() {
        match *s {
            Step::Plain { x, y } => {
                let input = bufs[x].read(&stream);
                run(&plain_rt, s, &ptrs);
                let [want, _, _] = wants(dtype, &input, &input, &w, &input, shape);
                reference::check(
                    &format!("step {i}"),
                    dtype,
                    &bufs[y].read(&stream),
                    &want,
                    shape,
                    1,
                )
                .unwrap();
            }
            Step::Fused { x, r } => {
                let (xin, rin) = (bufs[x].read(&stream), bufs[r].read(&stream));
                run(&plain_rt, s, &ptrs);
                let [_, fx, fr] = wants(dtype, &xin, &rin, &w, &xin, shape);
                reference::check(
                    &format!("step {i} x"),
                    dtype,
                    &bufs[x].read(&stream),
                    &fx,
                    shape,
                    1,
                )
                .unwrap();
                exact(&format!("step {i} residual"), &bufs[r].read(&stream), &fr).unwrap();
            }
        }
    }
    let stepwise: Vec<Vec<f32>> = bufs.iter().map(|b| b.read(&stream)).collect();

    let chained = |rt: &CudaRuntime, graph: bool| -> Vec<Vec<f32>> {
        let bufs = fresh();
        // Raw addresses taken once, before any capture: cudarc's tracked pointers
        // would wait on events recorded outside it, which a capture refuses.
        let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr(&stream)).collect();
        stream.synchronize().expect("inputs");
        let body = || steps.iter().for_each(|s| run(rt, s, &ptrs));
        if graph {
            kernels_core::testing::cuda::replay_captured(&stream, body);
        } else {
            body();
        }
        stream.synchronize().expect("chain");
        bufs.iter().map(|b| b.read(&stream)).collect()
    };
    kernels_core::testing::cuda::assert_chains_match(&plain_rt, &pdl_rt, &stepwise, chained);
}

#[test]
fn safe_ops_are_captured_after_warm_at_every_alignment() {
    let Some((rt, stream)) = runtime(
        "safe_ops_are_captured_after_warm_at_every_alignment",
        Policy::Serve,
    ) else {
        return;
    };
    use half::bf16;
    use kernels_core::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let dtype = DType::Bf16;
    let rows = 3usize;
    let ctx = stream.context().clone();
    // Tracking off for the buffers allocated here (restored at the end); this is the
    // binary's only test that changes it.
    // SAFETY: this test's buffers are used on one stream, which orders them.
    unsafe { ctx.disable_event_tracking() };
    let to_dev = |v: &[f32]| -> CudaSlice<bf16> {
        let h: Vec<bf16> = v.iter().map(|&f| bf16::from_f32(f)).collect();
        stream.clone_htod(&h).expect("htod")
    };
    let read = |b: &CudaSlice<bf16>| -> Vec<f32> {
        stream
            .clone_dtoh(b)
            .expect("dtoh")
            .iter()
            .map(|v| v.to_f32())
            .collect()
    };
    // Aligned rows, rows one element off 16-byte alignment, an odd hidden size.
    let cases = [(4096usize, 0usize), (4096, 1), (4095, 0)];
    let keys: Vec<(RmsNormKey, u64)> = cases
        .iter()
        .map(|&(cols, _)| {
            (
                RmsNormKey {
                    dtype,
                    cols: cols as u32,
                },
                rows as u64,
            )
        })
        .collect();
    for r in rt
        .warm::<RmsNorm>(&stream, &keys)
        .into_iter()
        .chain(rt.warm::<FusedAddRmsNorm>(&stream, &keys))
    {
        r.expect("warm");
    }
    let compiled = rt.stats().compiled;
    struct Run {
        cols: usize,
        offset: usize,
        x: Vec<f32>,
        res: Vec<f32>,
        w: Vec<f32>,
        bufs: [CudaSlice<bf16>; 5],
    }
    let mut runs: Vec<Run> = cases
        .iter()
        .enumerate()
        .map(|(i, &(cols, offset))| {
            let n = rows * cols + offset;
            let x = stored(dtype, &pseudo_random(n, 40 + i as u64, 2.0, 0.0));
            let res = stored(dtype, &pseudo_random(n, 50 + i as u64, 2.0, 0.0));
            let w = stored(dtype, &pseudo_random(cols + offset, 60 + i as u64, 0.5, 1.0));
            let bufs = [
                to_dev(&x),
                to_dev(&w),
                to_dev(&vec![-3.5; n]),
                to_dev(&x),
                to_dev(&res),
            ];
            Run {
                cols,
                offset,
                x,
                res,
                w,
                bufs,
            }
        })
        .collect();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    for r in runs.iter_mut() {
        let shape = Rows::contiguous(rows, r.cols);
        let span = r.offset..r.offset + rows * r.cols;
        let wspan = r.offset..r.offset + r.cols;
        let [x, w, y, fx, fr] = &mut r.bufs;
        safe::rmsnorm(
            &rt,
            &stream,
            &x.slice(span.clone()),
            shape,
            &w.slice(wspan.clone()),
            &mut y.slice_mut(span.clone()),
            shape,
            EPS,
        )
        .expect("rmsnorm in capture");
        safe::fused_add_rmsnorm(
            &rt,
            &stream,
            &mut fx.slice_mut(span.clone()),
            shape,
            &mut fr.slice_mut(span),
            shape,
            &w.slice(wspan),
            EPS,
        )
        .expect("fused_add_rmsnorm in capture");
    }
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end capture")
        .expect("a graph");
    assert_eq!(rt.stats().compiled, compiled, "nothing compiled while capturing");
    graph.launch().expect("graph launch");
    stream.synchronize().expect("sync");
    for r in &runs {
        let shape = Rows::contiguous(rows, r.cols);
        let (o, n) = (r.offset, rows * r.cols);
        let [y_want, fx_want, fr_want] = wants(
            dtype,
            &r.x[o..o + n],
            &r.res[o..o + n],
            &r.w[o..o + r.cols],
            &vec![0.0; n],
            shape,
        );
        let what = format!("cols {} offset {o}", r.cols);
        let [_, _, y, fx, fr] = &r.bufs;
        reference::check(
            &format!("captured rmsnorm {what}"),
            dtype,
            &read(y)[o..o + n],
            &y_want,
            shape,
            1,
        )
        .unwrap();
        reference::check(
            &format!("captured fused x {what}"),
            dtype,
            &read(fx)[o..o + n],
            &fx_want,
            shape,
            1,
        )
        .unwrap();
        exact(
            &format!("captured fused residual {what}"),
            &read(fr)[o..o + n],
            &fr_want,
        )
        .unwrap();
    }
    // SAFETY: as above.
    unsafe { ctx.enable_event_tracking() };
}
