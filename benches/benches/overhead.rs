//! Host overhead per call: each op launched eagerly, back to back on one stream, on a
//! launch-bound shape (one row), against a bare `cuLaunchKernel` of the same module
//! with the same arguments. Four ways per op:
//!
//! - `bare`: the loaded kernel's function and the argument array built once, then
//!   only `cuLaunchKernel` in the loop (the floor an engine's own launch would pay);
//! - `raw`: the generic op (`ops::rmsnorm(&rt, &stream, &problem)`, ...) on a problem
//!   of raw device addresses built once: validation, memo lookup, argument packing,
//!   launch;
//! - `safe`: the safe op on cudarc views (`cuda::rmsnorm(...)`), problem built from
//!   the views on every call, with cudarc's cross-stream tracking on (the context has
//!   a second stream, so every buffer's events are waited on and recorded);
//! - `safe-untracked`: the same after `CudaContext::disable_event_tracking()`, what an
//!   engine that orders its streams itself gets;
//! - `bare-tracked`: `bare` inside the cudarc guards of the op's buffers, taken as the
//!   safe op takes them (a read guard per input, a write guard per output) and dropped
//!   after the launch: the floor cudarc's tracking sets for any launch on its buffers
//!   (each guard waits on the buffer's events and records one), which `safe` is read
//!   against;
//! - `bare-checked` (rmsnorm only): `bare` after the capture check the safe ops make
//!   while cudarc tracks the buffers (`CudaDevice::check_capturable`: one
//!   `cuStreamIsCapturing`), the part of `safe` over `bare-tracked` that is not the op.
//!
//! GEMM runs the same four ways on a launch-bound decode shape (m = 1, n = 256, k = 512,
//! bf16, layout nt, with the workspace its split-K configs need): on sm_90 that is the
//! Hopper path, whose launch encodes two tensor maps (`bare` reuses the encoded ones).
//! So does fused MoE (one token, 8 experts of n = 128, k = 256, top-2), whose call is
//! several launches (align, gate-up, down, combine): `bare` launches each in turn.
//!
//! Each figure is the wall time of `CALLS` calls after a synchronize, divided by
//! `CALLS`, the median of `REPEATS` repeats; the goal is at most 1.3x of `bare`.
//! `cargo bench -p benches --bench overhead`; `KERNELS_BENCH_OUT=FILE.jsonl` also writes
//! JSON lines. Without a GPU it says so in one line and exits cleanly.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use kernels::core::backend::cuda::encode_tensor_map;
use kernels::core::cudarc::driver::sys as dsys;
use kernels::core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use kernels::core::launch::pseudo_random;
use kernels::core::{CudaDevice, CudaRuntime, KernelArgs, LaunchDims, PlannedKernel, Rows, RuntimeOptions};
use kernels::gemm::cuda::Matrix;
use kernels::gemm::ops::{GemmProblem, Operand};
use kernels::moe::plan::{Buffer, MoeProblem};
use kernels::moe::{Moe, MoeKey};
use kernels::rmsnorm::ops::NormProblem;
use kernels::rmsnorm::{FusedAddRmsNorm, RmsNorm};
use kernels::softmax::ops::SoftmaxProblem;
use kernels::softmax::{LogSoftmax, Softmax};
use tuned::DType;

type BoxError = Box<dyn std::error::Error>;
type Bf = kernels::core::half::bf16;

const CALLS: usize = 20_000;
const REPEATS: usize = 7;
const COLS: usize = 4096;
/// The GEMM's m, n and k: a decode step on a small weight, so the call is launch-bound.
const GEMM_MNK: (usize, usize, usize) = (1, 256, 512);
/// Fused MoE's (tokens, experts, n, k, topk): one token on small experts, launch-bound.
const MOE_DIMS: (usize, usize, usize, usize, usize) = (1, 8, 128, 256, 2);

fn main() {
    if let Err(e) = run() {
        eprintln!("overhead bench: {e}");
        std::process::exit(1);
    }
}

/// Per-call microseconds of `f` called `CALLS` times back to back: median of repeats.
fn per_call(stream: &Arc<CudaStream>, f: &mut dyn FnMut() -> Result<(), BoxError>) -> Result<f64, BoxError> {
    for _ in 0..1000 {
        f()?;
    }
    stream.synchronize()?;
    let mut times = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        let start = Instant::now();
        for _ in 0..CALLS {
            f()?;
        }
        stream.synchronize()?;
        times.push(start.elapsed().as_secs_f64() * 1e6 / CALLS as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[REPEATS / 2])
}

/// One launch of a call as the bare loop replays it: the loaded function, its
/// dimensions and its arguments.
type BareLaunch = (dsys::CUfunction, LaunchDims, KernelArgs);

/// What runs around each bare call: the call itself (`bare`), or the call inside the
/// cudarc guards of the op's buffers (`bare-tracked`).
type Hold<'h> = &'h mut dyn FnMut(&mut dyn FnMut() -> Result<(), BoxError>) -> Result<(), BoxError>;

/// The bare call as it is.
fn plain(f: &mut dyn FnMut() -> Result<(), BoxError>) -> Result<(), BoxError> {
    f()
}

/// `cuLaunchKernel` of `K`'s resolved kernels for `problem` (every launch of its call),
/// with the functions, the parameter arrays and the tensor maps prepared once.
fn bare<K: kernels::core::Tunable>(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    problem: &K::Problem<'_>,
    hold: Hold<'_>,
) -> Result<f64, BoxError> {
    let prepared = rt.run::<K>(stream, problem)?;
    let launches = K::launches(rt.info(), &prepared.resolved.config, problem)?;
    let list = prepared
        .kernels
        .iter()
        .zip(launches.iter())
        .map(|(k, (dims, args))| (k.function().cu_function(), *dims, args.clone()))
        .collect();
    bare_launches(stream, list, hold)
}

/// Per-call microseconds of `cuLaunchKernel` of each of `launches` in turn, inside `hold`.
fn bare_launches(
    stream: &Arc<CudaStream>,
    launches: Vec<BareLaunch>,
    hold: Hold<'_>,
) -> Result<f64, BoxError> {
    // Each launch's argument slots and encoded tensor maps, boxed so the parameter
    // pointers into them stay valid.
    let mut ready = Vec::new();
    for (func, dims, args) in &launches {
        let slots: Box<[u64]> = args.slots().into();
        let maps = args
            .tensor_maps()
            .map(|(at, m)| Ok((at, encode_tensor_map(m, "args")?)))
            .collect::<Result<Vec<_>, kernels::core::Error>>()?
            .into_boxed_slice();
        ready.push((*func, *dims, slots, maps));
    }
    let mut params: Vec<Vec<*mut std::ffi::c_void>> = ready
        .iter_mut()
        .map(|(_, _, slots, maps)| {
            let mut p: Vec<_> = slots
                .iter_mut()
                .map(|s| s as *mut u64 as *mut std::ffi::c_void)
                .collect();
            for (at, map) in maps.iter_mut() {
                p[*at] = map as *mut dsys::CUtensorMap as *mut std::ffi::c_void;
            }
            p
        })
        .collect();
    let raw = stream.cu_stream();
    per_call(stream, &mut || {
        hold(&mut || {
            for ((func, dims, ..), p) in ready.iter().zip(params.iter_mut()) {
                // SAFETY: the functions, dimensions and arguments are exactly those the
                // runtime launched for this problem, whose buffers outlive the loop.
                let r = unsafe {
                    dsys::cuLaunchKernel(
                        *func,
                        dims.grid.0,
                        dims.grid.1,
                        dims.grid.2,
                        dims.block.0,
                        dims.block.1,
                        dims.block.2,
                        dims.smem_bytes,
                        raw,
                        p.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                };
                r.result()?;
            }
            Ok(())
        })
    })
}

/// [`bare_launches`] of fused MoE's call on `problem`: the align step, then the
/// tuned call's launches, with the kernels the op resolves.
fn bare_moe(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    key: &MoeKey,
    problem: &MoeProblem<'_>,
    hold: Hold<'_>,
) -> Result<f64, BoxError> {
    use kernels::moe::plan::{step_args, step_variant, Step, SOURCE};
    let prepared = kernels::moe::ops::prepare(rt, stream, key, MOE_DIMS.0 as u64)?;
    // One launch through the op first: it sets each kernel's shared-memory limit, which
    // a bare cuLaunchKernel of more than 48 KiB needs.
    prepared.launch(stream, problem)?;
    let c = prepared.resolved.config;
    let info = rt.info();
    let align = rt.kernel(stream, &SOURCE, &step_variant(key, &c, Step::Align))?;
    let (dims, args) = step_args(info, &c, problem, Step::Align)?;
    let mut list = vec![(align.function().cu_function(), dims, args)];
    let call = rt.kernels::<Moe>(stream, key, &c)?;
    let launches = <Moe as PlannedKernel>::launches(info, &c, problem)?;
    list.extend(
        call.iter()
            .zip(launches.iter())
            .map(|(k, (dims, args))| (k.function().cu_function(), *dims, args.clone())),
    );
    bare_launches(stream, list, hold)
}

/// `COLS` bf16 pseudo-random values on the device.
fn upload(stream: &Arc<CudaStream>, seed: u64, scale: f32, offset: f32) -> Result<CudaSlice<Bf>, BoxError> {
    upload_n(stream, COLS, seed, scale, offset)
}

/// `n` bf16 pseudo-random values on the device.
fn upload_n(
    stream: &Arc<CudaStream>,
    n: usize,
    seed: u64,
    scale: f32,
    offset: f32,
) -> Result<CudaSlice<Bf>, BoxError> {
    let host: Vec<Bf> = pseudo_random(n, seed, scale, offset)
        .into_iter()
        .map(Bf::from_f32)
        .collect();
    Ok(stream.clone_htod(&host)?)
}

struct Row {
    op: &'static str,
    way: &'static str,
    us: f64,
}

fn run() -> Result<(), BoxError> {
    let dev = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("overhead bench: no GPU ({e}); nothing measured");
            return Ok(());
        }
    };
    let options = RuntimeOptions {
        pdl: false,
        ..RuntimeOptions::from_env()?
    };
    let rt = CudaRuntime::with_options(dev.clone(), options)?;
    let stream = dev.new_stream()?;
    // A second stream puts cudarc in multi-stream mode: its tracking is on.
    let _other = dev.new_stream()?;
    let x: CudaSlice<Bf> = upload(&stream, 1, 2.0, 0.0)?;
    let w: CudaSlice<Bf> = upload(&stream, 2, 0.5, 1.0)?;
    let mut y: CudaSlice<Bf> = upload(&stream, 3, 1.0, 0.0)?;
    let mut r: CudaSlice<Bf> = upload(&stream, 4, 1.0, 0.0)?;
    let shape = Rows::contiguous(1, COLS);
    let (xp, yp, wp, rp) = {
        let (xp, _a) = x.device_ptr(&stream);
        let (yp, _b) = y.device_ptr_mut(&stream);
        let (wp, _c) = w.device_ptr(&stream);
        let (rp, _d) = r.device_ptr_mut(&stream);
        (xp, yp, wp, rp)
    };
    // SAFETY: the four buffers live to the end of `run`, hold COLS bf16 each, and the
    // problems' aliasing rules hold (x, y, weight and residual are distinct).
    let (softmax, norm, fused) = unsafe {
        (
            SoftmaxProblem::raw(DType::Bf16, xp, COLS, shape, yp, COLS, shape, 1.0)?,
            NormProblem::rmsnorm_raw(DType::Bf16, xp, COLS, shape, wp, COLS, yp, COLS, shape, 1e-6)?,
            NormProblem::fused_add_rmsnorm_raw(
                DType::Bf16,
                yp,
                COLS,
                shape,
                rp,
                COLS,
                shape,
                wp,
                COLS,
                1e-6,
            )?,
        )
    };

    let (gm, gn, gk) = GEMM_MNK;
    let gemm_key = kernels::gemm::GemmKey {
        dtype: DType::Bf16,
        layout: kernels::gemm::Layout::Nt,
        n: gn as u32,
        k: gk as u32,
    };
    let ga: CudaSlice<Bf> = upload_n(&stream, gm * gk, 5, 1.0, 0.0)?;
    let gb: CudaSlice<Bf> = upload_n(&stream, gn * gk, 6, 1.0, 0.0)?;
    let mut gc: CudaSlice<Bf> = upload_n(&stream, gm * gn, 7, 1.0, 0.0)?;
    let ws_len = kernels::gemm::workspace_bytes(rt.info().tuning_target(), &gemm_key, gm as u64).max(16);
    let mut gws: CudaSlice<u8> = stream.alloc_zeros(ws_len)?;
    let (gap, gbp, gcp, gwsp) = {
        let (ap, _a) = ga.device_ptr(&stream);
        let (bp, _b) = gb.device_ptr(&stream);
        let (cp, _c) = gc.device_ptr_mut(&stream);
        let (wsp, _d) = gws.device_ptr_mut(&stream);
        (ap, bp, cp, wsp)
    };
    // SAFETY: the four GEMM buffers live to the end of `run` with the lengths given,
    // and are distinct.
    let gemm = unsafe {
        GemmProblem::raw(
            DType::Bf16,
            kernels::gemm::Layout::Nt,
            gm,
            gn,
            gk,
            Operand::new(gap, gm * gk, gk),
            Operand::new(gbp, gn * gk, gk),
            Operand::new(gcp, gm * gn, gn),
            DType::Bf16,
            None,
            Some((gwsp, ws_len)),
        )?
    };

    let (mt, me, mn, mk, mtopk) = MOE_DIMS;
    let moe_key = MoeKey {
        dtype: DType::Bf16,
        experts: me as u32,
        n: mn as u32,
        k: mk as u32,
        topk: mtopk as u32,
    };
    let hidden: CudaSlice<Bf> = upload_n(&stream, mt * mk, 8, 1.0, 0.0)?;
    let w13: CudaSlice<Bf> = upload_n(&stream, me * 2 * mn * mk, 9, 0.1, 0.0)?;
    let w2: CudaSlice<Bf> = upload_n(&stream, me * mk * mn, 10, 0.1, 0.0)?;
    let ids: CudaSlice<i32> = stream.clone_htod(&[0, 3])?;
    let weights: CudaSlice<f32> = stream.clone_htod(&[0.6, 0.4])?;
    let mut mout: CudaSlice<Bf> = upload_n(&stream, mt * mk, 11, 1.0, 0.0)?;
    let mws_len = kernels::moe::workspace_bytes(&moe_key, mt as u64).max(16);
    let mut mws: CudaSlice<u8> = stream.alloc_zeros(mws_len)?;
    let moe = {
        let (hp, _a) = hidden.device_ptr(&stream);
        let (p13, _b) = w13.device_ptr(&stream);
        let (p2, _c) = w2.device_ptr(&stream);
        let (ip, _d) = ids.device_ptr(&stream);
        let (wp, _e) = weights.device_ptr(&stream);
        let (op, _f) = mout.device_ptr_mut(&stream);
        let (sp, _g) = mws.device_ptr_mut(&stream);
        // SAFETY: the seven MoE buffers live to the end of `run` with the lengths
        // given, and are distinct.
        unsafe {
            MoeProblem::raw(
                DType::Bf16,
                MOE_DIMS,
                Buffer::new(hp, mt * mk),
                Buffer::new(p13, me * 2 * mn * mk),
                Buffer::new(p2, me * mk * mn),
                Buffer::new(ip, mt * mtopk),
                Buffer::new(wp, mt * mtopk),
                Buffer::new(op, mt * mk),
                (sp, mws_len),
            )?
        }
    };

    let mut rows = Vec::new();
    let mut push = |op: &'static str, way: &'static str, us: f64| rows.push(Row { op, way, us });

    push(
        "softmax",
        "bare",
        bare::<Softmax>(&rt, &stream, &softmax, &mut plain)?,
    );
    push(
        "log_softmax",
        "bare",
        bare::<LogSoftmax>(&rt, &stream, &softmax, &mut plain)?,
    );
    push(
        "rmsnorm",
        "bare",
        bare::<RmsNorm>(&rt, &stream, &norm, &mut plain)?,
    );
    push(
        "fused_add_rmsnorm",
        "bare",
        bare::<FusedAddRmsNorm>(&rt, &stream, &fused, &mut plain)?,
    );
    push(
        "gemm",
        "bare",
        bare::<kernels::gemm::Gemm>(&rt, &stream, &gemm, &mut plain)?,
    );
    push(
        "fused_moe",
        "bare",
        bare_moe(&rt, &stream, &moe_key, &moe, &mut plain)?,
    );

    let s = &stream;
    push(
        "softmax",
        "raw",
        per_call(s, &mut || {
            kernels::softmax::ops::softmax(&rt, s, &softmax)
                .map(drop)
                .map_err(Into::into)
        })?,
    );
    push(
        "log_softmax",
        "raw",
        per_call(s, &mut || {
            kernels::softmax::ops::log_softmax(&rt, s, &softmax)
                .map(drop)
                .map_err(Into::into)
        })?,
    );
    push(
        "rmsnorm",
        "raw",
        per_call(s, &mut || {
            kernels::rmsnorm::ops::rmsnorm(&rt, s, &norm)
                .map(drop)
                .map_err(Into::into)
        })?,
    );
    push(
        "fused_add_rmsnorm",
        "raw",
        per_call(s, &mut || {
            kernels::rmsnorm::ops::fused_add_rmsnorm(&rt, s, &fused)
                .map(drop)
                .map_err(Into::into)
        })?,
    );

    push(
        "gemm",
        "raw",
        per_call(s, &mut || {
            kernels::gemm::ops::gemm(&rt, s, &gemm)
                .map(drop)
                .map_err(Into::into)
        })?,
    );

    push(
        "fused_moe",
        "raw",
        per_call(s, &mut || {
            kernels::moe::ops::fused_moe(&rt, s, &moe)
                .map(drop)
                .map_err(Into::into)
        })?,
    );

    // The floor of cudarc's tracking: the bare calls inside the guards the safe ops take.
    push(
        "softmax",
        "bare-tracked",
        bare::<Softmax>(&rt, s, &softmax, &mut |f| {
            let (_, _x) = x.device_ptr(s);
            let (_, _y) = y.device_ptr_mut(s);
            f()
        })?,
    );
    push(
        "log_softmax",
        "bare-tracked",
        bare::<LogSoftmax>(&rt, s, &softmax, &mut |f| {
            let (_, _x) = x.device_ptr(s);
            let (_, _y) = y.device_ptr_mut(s);
            f()
        })?,
    );
    push(
        "rmsnorm",
        "bare-tracked",
        bare::<RmsNorm>(&rt, s, &norm, &mut |f| {
            let (_, _x) = x.device_ptr(s);
            let (_, _w) = w.device_ptr(s);
            let (_, _y) = y.device_ptr_mut(s);
            f()
        })?,
    );
    push(
        "rmsnorm",
        "bare-checked",
        bare::<RmsNorm>(&rt, s, &norm, &mut |f| {
            CudaDevice::check_capturable(s)?;
            f()
        })?,
    );
    push(
        "fused_add_rmsnorm",
        "bare-tracked",
        bare::<FusedAddRmsNorm>(&rt, s, &fused, &mut |f| {
            let (_, _x) = y.device_ptr_mut(s);
            let (_, _r) = r.device_ptr_mut(s);
            let (_, _w) = w.device_ptr(s);
            f()
        })?,
    );
    push(
        "gemm",
        "bare-tracked",
        bare::<kernels::gemm::Gemm>(&rt, s, &gemm, &mut |f| {
            let (_, _a) = ga.device_ptr(s);
            let (_, _b) = gb.device_ptr(s);
            let (_, _c) = gc.device_ptr_mut(s);
            let (_, _ws) = gws.device_ptr_mut(s);
            f()
        })?,
    );
    push(
        "fused_moe",
        "bare-tracked",
        bare_moe(&rt, s, &moe_key, &moe, &mut |f| {
            let (_, _h) = hidden.device_ptr(s);
            let (_, _w13) = w13.device_ptr(s);
            let (_, _w2) = w2.device_ptr(s);
            let (_, _i) = ids.device_ptr(s);
            let (_, _w) = weights.device_ptr(s);
            let (_, _o) = mout.device_ptr_mut(s);
            let (_, _ws) = mws.device_ptr_mut(s);
            f()
        })?,
    );

    for (way, tracking) in [("safe", true), ("safe-untracked", false)] {
        let ctx = dev.context();
        if tracking {
            // SAFETY: no other thread uses the context's buffers meanwhile.
            unsafe { ctx.enable_event_tracking() };
        } else {
            // SAFETY: every op below runs on one stream, which orders them.
            unsafe { ctx.disable_event_tracking() };
        }
        push(
            "softmax",
            way,
            per_call(s, &mut || {
                kernels::softmax::cuda::softmax(&rt, s, &x.as_view(), shape, &mut y.as_view_mut(), shape, 1.0)
                    .map(drop)
                    .map_err(Into::into)
            })?,
        );
        push(
            "log_softmax",
            way,
            per_call(s, &mut || {
                kernels::softmax::cuda::log_softmax(
                    &rt,
                    s,
                    &x.as_view(),
                    shape,
                    &mut y.as_view_mut(),
                    shape,
                    1.0,
                )
                .map(drop)
                .map_err(Into::into)
            })?,
        );
        push(
            "rmsnorm",
            way,
            per_call(s, &mut || {
                kernels::rmsnorm::cuda::rmsnorm(
                    &rt,
                    s,
                    &x.as_view(),
                    shape,
                    &w.as_view(),
                    &mut y.as_view_mut(),
                    shape,
                    1e-6,
                )
                .map(drop)
                .map_err(Into::into)
            })?,
        );
        push(
            "fused_add_rmsnorm",
            way,
            per_call(s, &mut || {
                kernels::rmsnorm::cuda::fused_add_rmsnorm(
                    &rt,
                    s,
                    &mut y.as_view_mut(),
                    shape,
                    &mut r.as_view_mut(),
                    shape,
                    &w.as_view(),
                    1e-6,
                )
                .map(drop)
                .map_err(Into::into)
            })?,
        );
        push(
            "gemm",
            way,
            per_call(s, &mut || {
                kernels::gemm::cuda::gemm(
                    &rt,
                    s,
                    kernels::gemm::Layout::Nt,
                    GEMM_MNK,
                    Matrix {
                        view: &ga.as_view(),
                        ld: gk,
                    },
                    Matrix {
                        view: &gb.as_view(),
                        ld: gk,
                    },
                    None,
                    &mut gc.as_view_mut(),
                    gn,
                    Some(&mut gws.as_view_mut()),
                )
                .map(drop)
                .map_err(Into::into)
            })?,
        );
        push(
            "fused_moe",
            way,
            per_call(s, &mut || {
                kernels::moe::cuda::fused_moe(
                    &rt,
                    s,
                    MOE_DIMS,
                    &hidden.as_view(),
                    &w13.as_view(),
                    &w2.as_view(),
                    &ids.as_view(),
                    &weights.as_view(),
                    &mut mout.as_view_mut(),
                    &mut mws.as_view_mut(),
                )
                .map(drop)
                .map_err(Into::into)
            })?,
        );
    }

    let mut out = match std::env::var_os("KERNELS_BENCH_OUT") {
        Some(p) => Some(std::fs::File::create(p)?),
        None => None,
    };
    println!(
        "{} (rows: 1 x {COLS} bf16; gemm: m, n, k = {GEMM_MNK:?} bf16 nt; fused_moe: tokens, experts, n, k, topk = {MOE_DIMS:?} bf16; {CALLS} calls back to back, median of {REPEATS})",
        rt.info().name
    );
    println!("{:<18} {:>15} {:>9} {:>8}", "op", "way", "us/call", "x bare");
    for row in &rows {
        let bare = rows
            .iter()
            .find(|b| b.op == row.op && b.way == "bare")
            .map_or(f64::NAN, |b| b.us);
        println!(
            "{:<18} {:>15} {:>9.3} {:>8.2}",
            row.op,
            row.way,
            row.us,
            row.us / bare
        );
        if let Some(f) = out.as_mut() {
            writeln!(
                f,
                "{}",
                serde_json::json!({
                    "kind": "overhead", "op": row.op, "way": row.way,
                    "shape": match row.op {
                        "gemm" => format!("m={gm},n={gn},k={gk}"),
                        "fused_moe" => format!("tokens={mt},experts={me},n={mn},k={mk},topk={mtopk}"),
                        _ => format!("1x{COLS}"),
                    },
                    "us_per_call": row.us, "ratio_bare": row.us / bare, "calls": CALLS,
                    "device": rt.info().name,
                })
            )?;
        }
    }
    Ok(())
}
