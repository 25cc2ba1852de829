//! Softmax and log-softmax on an AMD GPU (feature `rocm`) against the CPU reference:
//! the ops as an engine calls them (raw pointers, a HIP stream, the config resolved
//! like on CUDA), every config of the device's search space on one shape, and bad
//! input refused before anything is launched.
//!
//! Without an AMD GPU each test prints `SKIPPED ...` to stderr; with
//! `KERNELS_REQUIRE_GPU=1` that is a failure instead.

use kernels_core::testing::hip::{runtime, Buf};
use kernels_core::testing::stored;
use kernels_core::{launch::pseudo_random, DiskCache, Error, PlannedKernel, Rows};
use kernels_softmax::plan::SoftmaxProblem;
use kernels_softmax::{
    ops as hip, reference, space, LogSoftmax, Softmax, SoftmaxConfig, SoftmaxKey, Strategy,
};
use tuned::{resolve_serve, DType, Resolved, Source, TunedKernel};

/// The problem of `y = softmax(x * scale)` over two buffers of this device.
fn problem<'a>(dtype: DType, x: &'a Buf, y: &'a Buf, shape: Rows, scale: f32) -> SoftmaxProblem<'a> {
    // SAFETY: both buffers are live allocations of this device with the lengths given.
    unsafe { SoftmaxProblem::raw(dtype, x.ptr(), x.len(), shape, y.ptr(), y.len(), shape, scale) }
        .expect("valid problem")
}

/// The reference output: `y0` with the rows' columns overwritten.
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

#[test]
fn ops_match_the_reference_and_resolve_like_cuda() {
    let Some((rt, stream)) = runtime(
        "ops_match_the_reference_and_resolve_like_cuda",
        DiskCache::from_env(),
    ) else {
        return;
    };
    let limits = rt.info().clone();
    // Log-softmax runs on the same stream lent as an engine's raw `hipStream_t`.
    // SAFETY: `stream` is a live stream of this device and outlives `lent`.
    let lent = unsafe { rt.device().borrow_stream(stream.as_raw()) };
    for (dtype, rows, cols, stride, offset) in [
        (DType::Bf16, 1, 1, 1, 0),
        (DType::Bf16, 37, 1000, 1000, 0),
        (DType::Bf16, 2, 40000, 40000, 0),
        (DType::Bf16, 3, 151936, 151936, 0),
        (DType::F16, 5, 2048, 2056, 1),
        (DType::F32, 3, 4096, 4100, 2),
    ] {
        let shape = Rows::strided(rows, cols, stride);
        let n = shape.span().unwrap();
        let x_host = stored(dtype, &pseudo_random(n, 7, 6.0, 0.0));
        let poison = vec![-7.5f32; n];
        for log in [false, true] {
            let what = format!(
                "{} {dtype} [{rows}, {cols}] stride {stride} offset {offset}",
                if log { "log_softmax" } else { "softmax" }
            );
            let x = Buf::new(&rt, dtype, &x_host, offset);
            let y = Buf::new(&rt, dtype, &poison, offset);
            let p = problem(dtype, &x, &y, shape, 0.75);
            let used = if log {
                hip::log_softmax(&rt, &lent, &p)
            } else {
                hip::softmax(&rt, &stream, &p)
            }
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            stream.synchronize().unwrap();
            let expect = want(log, &x_host, shape, &poison, 0.75);
            reference::check(
                &what,
                dtype,
                log,
                &x_host,
                shape,
                0.75,
                &y.read(),
                &expect,
                shape,
                1,
            )
            .unwrap_or_else(|e| panic!("{e}"));

            // Resolved as on CUDA: the gfx target's table, else the analytic default.
            let key = SoftmaxKey {
                dtype,
                cols: cols as u32,
            };
            let serve = match limits.target() {
                Some(t) => resolve_serve::<Softmax>(t, &key, rows as u64),
                None => Resolved {
                    config: Softmax::analytic_default(limits.tuning_target(), &key, rows as u64),
                    source: Source::Default,
                },
            };
            assert_eq!(used.source, serve.source, "{what}");
            if offset == 0 && stride % 8 == 0 {
                assert_eq!(used.config, serve.config, "{what}");
            }
        }
    }
    // Dropping the lent stream leaves the engine's stream alive.
    drop(lent);
    stream.synchronize().expect("the lent stream was not destroyed");
}

#[test]
fn every_config_of_the_device_space_matches_the_reference() {
    let Some((rt, stream)) = runtime(
        "every_config_of_the_device_space_matches_the_reference",
        DiskCache::from_env(),
    ) else {
        return;
    };
    let (dtype, shape) = (DType::Bf16, Rows::strided(9, 4096, 4104));
    let key = SoftmaxKey { dtype, cols: 4096 };
    let n = shape.span().unwrap();
    let x_host = stored(dtype, &pseudo_random(n, 3, 5.0, 0.0));
    let poison = vec![3.25f32; n];
    let x = Buf::new(&rt, dtype, &x_host, 0);
    let configs = space::search_space(rt.info().tuning_target(), &key);
    assert!(!configs.is_empty());
    let expect = want(true, &x_host, shape, &poison, 1.0);
    for c in configs {
        let y = Buf::new(&rt, dtype, &poison, 0);
        let p = problem(dtype, &x, &y, shape, 1.0);
        rt.launch_config::<LogSoftmax>(&stream, &c, &p)
            .unwrap_or_else(|e| panic!("{c:?}: {e}"));
        stream.synchronize().unwrap();
        reference::check(
            &format!("{c:?}"),
            dtype,
            true,
            &x_host,
            shape,
            1.0,
            &y.read(),
            &expect,
            shape,
            1,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn bad_input_is_refused_naming_the_argument_and_launches_nothing() {
    let Some((rt, stream)) = runtime(
        "bad_input_is_refused_naming_the_argument_and_launches_nothing",
        DiskCache::from_env(),
    ) else {
        return;
    };
    let (dtype, shape) = (DType::Bf16, Rows::contiguous(4, 4096));
    let poison = vec![1.5f32; 4 * 4096];
    // x one element off alignment, y two: their rows split 2 bytes apart, so 8-wide
    // vectors are not allowed (x and y misaligned alike would allow them).
    let x = Buf::new(&rt, dtype, &pseudo_random(4 * 4096, 1, 1.0, 0.0), 1);
    let y = Buf::new(&rt, dtype, &poison, 2);
    let p = problem(dtype, &x, &y, shape, 1.0);
    let wide = SoftmaxConfig {
        strategy: Strategy::Row,
        threads: 64,
        vec: 8,
        rows: 1,
        splits: 1,
        keep: false,
    };
    let named = |r: kernels_core::Result<()>| match r {
        Err(Error::InvalidArgument { name, .. }) => name,
        other => panic!("expected an argument error, got {other:?}"),
    };
    assert!(<Softmax as PlannedKernel>::plan(rt.info(), &wide, &p).is_err());
    assert_eq!(named(rt.launch_config::<Softmax>(&stream, &wide, &p)), "x");
    // Clusters are an sm_90 feature: not a config of an AMD device.
    let cluster = SoftmaxConfig {
        strategy: Strategy::Cluster,
        threads: 256,
        vec: 4,
        rows: 1,
        splits: 2,
        keep: false,
    };
    assert_eq!(
        named(rt.launch_config::<Softmax>(&stream, &cluster, &p)),
        "config"
    );
    stream.synchronize().unwrap();
    assert_eq!(y.read(), poison, "y was written");
}
