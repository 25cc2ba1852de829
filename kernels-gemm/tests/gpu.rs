//! The GEMM on the GPU against the CPU reference (f64 accumulation, the bound of
//! `reference::tolerance`), for a covering set of the search space's compiled
//! variants on awkward shapes: m = 1, 3, 17, 33; n and k not multiples of any tile;
//! leading dimensions above the row length; operands off 16-byte alignment (element
//! loads); bias; f32 output; both layouts and dtypes; split-K with a reused workspace.
//! C is poisoned before each run; the padding between its rows must come back
//! untouched.
//!
//! The covering set (see `covering_configs`): every distinct tile and warp grid of the
//! sm_90 search space over the model shapes, at 3 stages; every pipeline depth of the
//! schema at two tiles; every split-K factor; grouped and plain rasters.
//!
//! Skips with a message where no GPU is found; fails there when KERNELS_REQUIRE_GPU=1.

use std::collections::BTreeSet;
use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels_core::testing::skip_or_fail;
use kernels_core::{
    cache::AlignClass,
    launch::{decode, encode, pseudo_random},
    tune::TuneOptions,
    CudaDevice, CudaRuntime, DiskCache, PlannedKernel, Policy, RuntimeOptions,
};
use kernels_gemm::plan::{GemmProblem, Operand};
use kernels_gemm::{reference, space, Gemm, GemmConfig, GemmKey, Layout, Path};
use tuned::{DType, Target};

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

/// A device buffer of `dtype` whose usable part starts `offset` elements in.
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
    fn zeros(stream: &Arc<CudaStream>, bytes: usize) -> Buf {
        Buf {
            slice: stream.alloc_zeros::<u8>(bytes.max(16)).expect("alloc"),
            dtype: DType::F32,
            offset: 0,
        }
    }
    fn ptr(&self, stream: &CudaStream) -> u64 {
        self.slice.device_ptr(stream).0 + (self.offset * self.dtype.size()) as u64
    }
    fn len(&self) -> usize {
        self.slice.len() / self.dtype.size() - self.offset
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
}

#[derive(Clone, Copy, Debug)]
struct Case {
    dtype: DType,
    layout: Layout,
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    ldc: usize,
    /// Elements by which A and B are shifted (off 16-byte alignment when odd).
    offset: usize,
    bias: bool,
    c_dtype: DType,
}

/// Host operands, the expected C (poison in the padding) and its error scales.
struct Expected {
    a: Vec<f32>,
    b: Vec<f32>,
    bias: Vec<f32>,
    c: Vec<f32>,
    abs_sum: Vec<f64>,
}

const POISON: f32 = f32::NAN;

fn expected(case: &Case, seed: u64) -> Expected {
    let b_rows = match case.layout {
        Layout::Nt => case.n,
        Layout::Nn => case.k,
    };
    let a = reference::round_to(case.dtype, &pseudo_random(case.m * case.lda, seed, 1.0, 0.0));
    let b = reference::round_to(case.dtype, &pseudo_random(b_rows * case.ldb, seed + 1, 1.0, 0.0));
    let bias = reference::round_to(case.dtype, &pseudo_random(case.n, seed + 2, 2.0, 0.0));
    let mut c = vec![POISON; case.m * case.ldc];
    let mut abs_sum = vec![0.0; case.m * case.n];
    reference::gemm(
        case.layout,
        case.m,
        case.n,
        case.k,
        &a,
        case.lda,
        &b,
        case.ldb,
        case.bias.then_some(&bias[..]),
        &mut c,
        case.ldc,
        &mut abs_sum,
    );
    Expected {
        a,
        b,
        bias,
        c,
        abs_sum,
    }
}

/// The device side of a case: operands uploaded once, C re-poisoned per run.
struct Device {
    a: Buf,
    b: Buf,
    bias: Buf,
    c: Buf,
    ws: Buf,
    ws_bytes: usize,
}

impl Device {
    fn new(stream: &Arc<CudaStream>, case: &Case, e: &Expected, ws_bytes: usize) -> Device {
        Device {
            a: Buf::new(stream, case.dtype, &e.a, case.offset),
            b: Buf::new(stream, case.dtype, &e.b, case.offset),
            bias: Buf::new(stream, case.dtype, &e.bias, 0),
            c: Buf::new(stream, case.c_dtype, &vec![POISON; case.m * case.ldc], 0),
            ws: Buf::zeros(stream, ws_bytes),
            ws_bytes,
        }
    }

    fn problem(&self, stream: &CudaStream, case: &Case) -> GemmProblem<'_> {
        // SAFETY: each buffer holds what its Operand says and outlives the problem.
        unsafe {
            GemmProblem::raw(
                case.dtype,
                case.layout,
                case.m,
                case.n,
                case.k,
                Operand::new(self.a.ptr(stream), self.a.len(), case.lda),
                Operand::new(self.b.ptr(stream), self.b.len(), case.ldb),
                Operand::new(self.c.ptr(stream), self.c.len(), case.ldc),
                case.c_dtype,
                case.bias.then(|| (self.bias.ptr(stream), case.n)),
                Some((self.ws.ptr(stream), self.ws_bytes)),
            )
        }
        .expect("valid problem")
    }
}

/// Runs `config` (fitted to the case's alignment) on `case` and compares; `runs`
/// launches on the same workspace without re-zeroing it, each compared, and every run
/// bitwise equal to the first.
fn check(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    case: &Case,
    dev: &mut Device,
    e: &Expected,
    config: &GemmConfig,
    runs: usize,
) -> Result<(), String> {
    let p = dev.problem(stream, case);
    let align = <Gemm as PlannedKernel>::alignment(&p);
    let c = kernels_gemm::plan::fit(*config, align);
    let what = format!("{case:?} {c}");
    let mut first: Option<Vec<f32>> = None;
    for run in 0..runs {
        dev.c.write(stream, &vec![POISON; case.m * case.ldc]);
        let p = dev.problem(stream, case);
        rt.launch_config::<Gemm>(stream, &c, &p)
            .map_err(|err| format!("{what}: launch: {err}"))?;
        let got = dev.c.read(stream);
        reference::compare(
            &format!("{what} run {run}"),
            &got,
            &e.c,
            &e.abs_sum,
            case.m,
            case.n,
            case.k,
            case.ldc,
            case.c_dtype,
            POISON,
        )?;
        match &first {
            None => first = Some(got),
            Some(f) => {
                if f.iter()
                    .zip(&got)
                    .any(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
                {
                    return Err(format!(
                        "{what}: run {run} differs from run 0 (not deterministic)"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// (block_m, block_n, block_k, warps_m, warps_n).
type Tile = (u32, u32, u32, u32, u32);

/// See the module doc.
fn covering_configs() -> Vec<GemmConfig> {
    let mut tiles = BTreeSet::new();
    let mut wgmma_tiles = BTreeSet::new();
    for (n, k) in [(6144u32, 4096u32), (4096, 14336), (1280, 8192), (28672, 4096)] {
        for m in [1u64, 16, 32, 64, 256, 4096] {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            // sm_80's space too: on sm_90 the mma path is searched only where no wgmma
            // config fits, but it runs wherever TMA cannot (`plan::fit`), and on sm_80.
            for c in space::search_space(Target::Sm90, &key, m)
                .into_iter()
                .chain(space::search_space(Target::Sm80, &key, m))
                .chain([kernels_gemm::analytic_default(Target::Sm90, &key, m)])
            {
                let tile = (c.block_m, c.block_n, c.block_k, c.warps_m, c.warps_n);
                match c.path {
                    Path::Mma => tiles.insert(tile),
                    Path::Wgmma => wgmma_tiles.insert((false, tile)),
                    Path::WgmmaSwap => wgmma_tiles.insert((true, tile)),
                };
            }
        }
    }
    let at = |(block_m, block_n, block_k, warps_m, warps_n): Tile, stages, split_k, group_m| GemmConfig {
        path: Path::Mma,
        block_m,
        block_n,
        block_k,
        warps_m,
        warps_n,
        stages,
        split_k,
        group_m,
        vec: 8,
    };
    let mut out: Vec<GemmConfig> = tiles.iter().map(|&t| at(t, 3, 1, 8)).collect();
    for stages in 2..=6 {
        out.push(at((16, 64, 128, 1, 4), stages, 1, 8));
        out.push(at((128, 128, 32, 2, 4), stages, 1, 1));
    }
    out.push(at((64, 64, 64, 2, 2), 4, 1, 1));
    out.push(at((32, 64, 64, 1, 4), 4, 1, 16));
    out.extend(wgmma_covering(&wgmma_tiles));
    out
}

/// The wgmma part of the covering set: every tile, warpgroup split and operand order of
/// the sm_90 space at the deepest of 4 or 3 stages that fits; every ring depth 2..=8 at
/// one tile of each order; plain and wide grouped rasters.
fn wgmma_covering(tiles: &BTreeSet<(bool, Tile)>) -> Vec<GemmConfig> {
    let key = GemmKey {
        dtype: DType::Bf16,
        layout: Layout::Nt,
        n: 300,
        k: 200,
    };
    let wg =
        |swap: bool, (block_m, block_n, _, warps_m, warps_n): (u32, u32, u32, u32, u32), stages, group_m| {
            GemmConfig {
                path: if swap { Path::WgmmaSwap } else { Path::Wgmma },
                block_m,
                block_n,
                block_k: 64,
                warps_m,
                warps_n,
                stages,
                split_k: 1,
                group_m,
                vec: 8,
            }
        };
    let mut out = Vec::new();
    for &(swap, tile) in tiles {
        let deepest = [4, 3]
            .into_iter()
            .map(|stages| wg(swap, tile, stages, 8))
            .find(|c| space::fits(Target::Sm90, &key, c));
        out.extend(deepest);
    }
    for stages in 2..=8 {
        out.push(wg(true, (16, 128, 64, 1, 4), stages, 8));
        out.push(wg(false, (64, 128, 64, 4, 1), stages, 8));
    }
    out.push(wg(false, (128, 128, 64, 8, 1), 4, 1));
    out.push(wg(false, (64, 64, 64, 4, 1), 4, 16));
    out
}

/// The awkward cases each covering config runs on.
fn tile_cases() -> Vec<Case> {
    vec![
        // Ragged m, n, k; padded leading dimensions; bias; bf16 out.
        Case {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            m: 17,
            n: 300,
            k: 200,
            lda: 208,
            ldb: 216,
            ldc: 304,
            offset: 0,
            bias: true,
            c_dtype: DType::Bf16,
        },
        // f16, [k, n] weight, f32 out with an odd ldc (single-element stores), m = 3.
        Case {
            dtype: DType::F16,
            layout: Layout::Nn,
            m: 3,
            n: 300,
            k: 200,
            lda: 200,
            ldb: 304,
            ldc: 301,
            offset: 0,
            bias: false,
            c_dtype: DType::F32,
        },
        // f16 nt (the wgmma paths too), f32 out with an odd ldc, m = 3.
        Case {
            dtype: DType::F16,
            layout: Layout::Nt,
            m: 3,
            n: 300,
            k: 200,
            lda: 200,
            ldb: 200,
            ldc: 301,
            offset: 0,
            bias: true,
            c_dtype: DType::F32,
        },
        // More output tiles than SMs for every tile (persistent blocks take several),
        // k over several ring passes.
        Case {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            m: 1030,
            n: 2056,
            k: 1000,
            lda: 1000,
            ldb: 1000,
            ldc: 2056,
            offset: 0,
            bias: true,
            c_dtype: DType::Bf16,
        },
        // Odd k and lda, operands one element off alignment: element loads (the
        // wgmma configs fall back to the mma path).
        Case {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            m: 33,
            n: 130,
            k: 77,
            lda: 77,
            ldb: 79,
            ldc: 130,
            offset: 1,
            bias: true,
            c_dtype: DType::Bf16,
        },
    ]
}

#[test]
fn covering_configs_match_the_reference_on_awkward_shapes() {
    let Some((rt, stream)) = runtime("covering_configs_match_the_reference_on_awkward_shapes") else {
        return;
    };
    let info = rt.device().info().clone();
    let target = info.tuning_target();
    let configs = covering_configs();
    let cases = tile_cases();
    // Compile every variant first, in parallel.
    let mut jobs = Vec::new();
    for case in &cases {
        let key = GemmKey {
            dtype: case.dtype,
            layout: case.layout,
            n: case.n as u32,
            k: case.k as u32,
        };
        let align = if case.offset % 8 == 0 && case.lda % 8 == 0 && case.ldb % 8 == 0 {
            AlignClass::A16
        } else {
            AlignClass::A2
        };
        for c in configs.iter().filter(|c| space::fits(target, &key, c)) {
            let c = kernels_gemm::plan::fit(*c, align);
            jobs.push((kernels_gemm::plan::SOURCE, kernels_gemm::plan::variant(&key, &c)));
        }
    }
    for r in rt.precompile(&jobs) {
        r.expect("every covering variant compiles");
    }
    let (mut checked, mut failures) = (0, Vec::new());
    for (i, case) in cases.iter().enumerate() {
        let e = expected(case, 100 + i as u64);
        let mut dev = Device::new(&stream, case, &e, 0);
        for c in &configs {
            let key = GemmKey {
                dtype: case.dtype,
                layout: case.layout,
                n: case.n as u32,
                k: case.k as u32,
            };
            if !space::fits(target, &key, c) {
                // Only the wgmma configs are left out: on other targets and for nn.
                assert!(
                    c.path != Path::Mma && (target != Target::Sm90 || key.layout == Layout::Nn),
                    "{c} must fit {key:?}"
                );
                continue;
            }
            checked += 1;
            if let Err(err) = check(&rt, &stream, case, &mut dev, &e, c, 1) {
                failures.push(err);
            }
        }
    }
    println!(
        "gemm: {checked} (config, case) runs checked ({} configs, {} of them wgmma), {} failed",
        configs.len(),
        configs.iter().filter(|c| c.path != Path::Mma).count(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{}",
        failures[..failures.len().min(8)].join("\n")
    );
}

#[test]
fn split_k_is_deterministic_and_reuses_its_workspace() {
    let Some((rt, stream)) = runtime("split_k_is_deterministic_and_reuses_its_workspace") else {
        return;
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for (m, dtype, layout, c_dtype, bias) in [
        (1, DType::Bf16, Layout::Nt, DType::Bf16, true),
        (5, DType::F16, Layout::Nn, DType::F32, false),
        (67, DType::Bf16, Layout::Nt, DType::F32, true),
    ] {
        let (n, k) = (200, 4136);
        let ldb = match layout {
            Layout::Nt => k,
            Layout::Nn => n,
        };
        let case = Case {
            dtype,
            layout,
            m,
            n,
            k,
            lda: k,
            ldb,
            ldc: n + 8,
            offset: 0,
            bias,
            c_dtype,
        };
        let e = expected(&case, 7 + m as u64);
        let tile = if m <= 16 {
            (16, 64, 128, 1, 4)
        } else {
            (32, 64, 64, 1, 4)
        };
        // Uneven splits too (3, 6, 12): k = 4136 leaves their last split short.
        let mut configs: Vec<GemmConfig> = [2, 3, 4, 6, 8, 12, 16]
            .into_iter()
            .map(|split_k| GemmConfig {
                path: Path::Mma,
                block_m: tile.0,
                block_n: tile.1,
                block_k: tile.2,
                warps_m: tile.3,
                warps_n: tile.4,
                stages: 4,
                split_k,
                group_m: 8,
                vec: 8,
            })
            .collect();
        // Swapped-operand wgmma with split-K (one and two consumers), where it runs.
        let target = rt.device().info().tuning_target();
        for (split_k, block_m, warps_n) in [
            (2, 16, 4),
            (3, 16, 4),
            (4, 16, 8),
            (6, 16, 8),
            (8, 64, 4),
            (12, 32, 4),
            (16, 32, 4),
        ] {
            let c = GemmConfig {
                path: Path::WgmmaSwap,
                block_m,
                block_n: 128,
                block_k: 64,
                warps_m: 1,
                warps_n,
                stages: 6,
                split_k,
                group_m: 8,
                vec: 8,
            };
            let key = GemmKey {
                dtype,
                layout,
                n: n as u32,
                k: k as u32,
            };
            if space::fits(target, &key, &c) {
                configs.push(c);
            }
        }
        let ws = configs
            .iter()
            .map(|c| c.workspace_bytes(m as u64, n as u32))
            .max()
            .unwrap_or(0);
        let mut dev = Device::new(&stream, &case, &e, ws);
        for c in &configs {
            checked += 1;
            if let Err(err) = check(&rt, &stream, &case, &mut dev, &e, c, 3) {
                failures.push(err);
            }
        }
    }
    println!(
        "gemm split-k: {checked} configs checked, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The safe op on cudarc views resolves the analytic default (split-K at decode) and
/// matches the reference; a bad argument is refused by name and launches nothing.
#[test]
fn the_safe_op_runs_the_default_and_refuses_bad_arguments() {
    use kernels_core::cudarc::driver::CudaSlice as Slice;
    use kernels_gemm::cuda::{gemm, Matrix};
    let Some((rt, stream)) = runtime("the_safe_op_runs_the_default_and_refuses_bad_arguments") else {
        return;
    };
    let target = rt.device().info().tuning_target();
    for (m, n, k) in [(1usize, 1024usize, 4096usize), (16, 1024, 4096), (200, 512, 1000)] {
        let case = Case {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            m,
            n,
            k,
            lda: k,
            ldb: k,
            ldc: n,
            offset: 0,
            bias: true,
            c_dtype: DType::Bf16,
        };
        let e = expected(&case, 40 + m as u64);
        let to_dev = |v: &[f32]| -> Slice<half::bf16> {
            let h: Vec<half::bf16> = v.iter().map(|&x| half::bf16::from_f32(x)).collect();
            stream.clone_htod(&h).expect("htod")
        };
        let (a, b, bias) = (to_dev(&e.a), to_dev(&e.b), to_dev(&e.bias[..n]));
        let mut c = to_dev(&vec![POISON; m * n]);
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: n as u32,
            k: k as u32,
        };
        let ws_bytes = kernels_gemm::workspace_bytes(target, &key, m as u64);
        let mut ws = stream.alloc_zeros::<u8>(ws_bytes.max(16)).expect("alloc");
        let used = gemm(
            &rt,
            &stream,
            Layout::Nt,
            (m, n, k),
            Matrix {
                view: &a.as_view(),
                ld: k,
            },
            Matrix {
                view: &b.as_view(),
                ld: k,
            },
            Some(&bias.as_view()),
            &mut c.as_view_mut(),
            n,
            Some(&mut ws.as_view_mut()),
        )
        .expect("op");
        assert_eq!(
            used.config,
            kernels_gemm::analytic_default(target, &key, m as u64)
        );
        let got: Vec<f32> = stream
            .clone_dtoh(&c)
            .expect("dtoh")
            .iter()
            .map(|x| x.to_f32())
            .collect();
        reference::compare(
            &format!("op {m}x{n}x{k} {}", used.config),
            &got,
            &e.c,
            &e.abs_sum,
            m,
            n,
            k,
            n,
            DType::Bf16,
            POISON,
        )
        .unwrap_or_else(|err| panic!("{err}"));

        // ldc shorter than n: refused by name, C untouched.
        let mut fresh = to_dev(&vec![POISON; m * n]);
        let err = gemm(
            &rt,
            &stream,
            Layout::Nt,
            (m, n, k),
            Matrix {
                view: &a.as_view(),
                ld: k,
            },
            Matrix {
                view: &b.as_view(),
                ld: k,
            },
            None,
            &mut fresh.as_view_mut(),
            n - 1,
            Some(&mut ws.as_view_mut()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("ldc"), "{err}");
        let untouched: Vec<f32> = stream
            .clone_dtoh(&fresh)
            .expect("dtoh")
            .iter()
            .map(|x| x.to_f32())
            .collect();
        assert!(untouched.iter().all(|x| x.is_nan()), "a refused call wrote C");
    }
}

#[test]
fn the_safe_op_is_captured_after_warm_aligned_or_not() {
    use kernels_core::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use kernels_core::cudarc::driver::CudaSlice as Slice;
    use kernels_gemm::cuda::{gemm, Matrix};
    let Some((rt, stream)) = runtime("the_safe_op_is_captured_after_warm_aligned_or_not") else {
        return;
    };
    let ctx = stream.context().clone();
    // Tracking off for the buffers allocated here (restored at the end): a capture
    // cannot wait on the events cudarc records outside it.
    // SAFETY: this test's buffers are used on one stream, which orders them.
    unsafe { ctx.disable_event_tracking() };
    let target = rt.device().info().tuning_target();
    let (m, n, k) = (16usize, 1024usize, 4096usize);
    let case = Case {
        dtype: DType::Bf16,
        layout: Layout::Nt,
        m,
        n,
        k,
        lda: k,
        ldb: k,
        ldc: n,
        offset: 0,
        bias: true,
        c_dtype: DType::Bf16,
    };
    let e = expected(&case, 77);
    let key = GemmKey {
        dtype: DType::Bf16,
        layout: Layout::Nt,
        n: n as u32,
        k: k as u32,
    };
    for r in rt.warm::<Gemm>(&stream, &[(key, m as u64)]) {
        r.expect("warm");
    }
    let compiled = rt.stats().compiled;
    // A second copy of A one element in: not 16-byte aligned, so the warmed alignment
    // class of that pointer serves it.
    let to_dev = |lead: usize, v: &[f32]| -> Slice<half::bf16> {
        let h: Vec<half::bf16> = std::iter::repeat_n(0.0, lead)
            .chain(v.iter().copied())
            .map(half::bf16::from_f32)
            .collect();
        stream.clone_htod(&h).expect("htod")
    };
    let (a, a_off, b, bias) = (
        to_dev(0, &e.a),
        to_dev(1, &e.a),
        to_dev(0, &e.b),
        to_dev(0, &e.bias[..n]),
    );
    let mut outs = [to_dev(0, &vec![POISON; m * n]), to_dev(0, &vec![POISON; m * n])];
    let ws_bytes = kernels_gemm::workspace_bytes(target, &key, m as u64);
    let mut ws = stream.alloc_zeros::<u8>(ws_bytes.max(16)).expect("alloc");
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    for (i, c) in outs.iter_mut().enumerate() {
        let a_view = if i == 0 { a.slice(..) } else { a_off.slice(1..) };
        gemm(
            &rt,
            &stream,
            Layout::Nt,
            (m, n, k),
            Matrix { view: &a_view, ld: k },
            Matrix {
                view: &b.as_view(),
                ld: k,
            },
            Some(&bias.as_view()),
            &mut c.as_view_mut(),
            n,
            Some(&mut ws.as_view_mut()),
        )
        .expect("gemm in capture");
    }
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end capture")
        .expect("a graph");
    assert_eq!(rt.stats().compiled, compiled, "nothing compiled while capturing");
    // Twice: the split-K counters the graph uses are back at zero after each replay.
    for replay in 0..2 {
        graph.launch().expect("graph launch");
        stream.synchronize().expect("sync");
        for (i, c) in outs.iter().enumerate() {
            let got: Vec<f32> = stream
                .clone_dtoh(c)
                .expect("dtoh")
                .iter()
                .map(|x| x.to_f32())
                .collect();
            reference::compare(
                &format!(
                    "captured gemm, A {} aligned, replay {replay}",
                    if i == 0 { "" } else { "not" }
                ),
                &got,
                &e.c,
                &e.abs_sum,
                m,
                n,
                k,
                n,
                DType::Bf16,
                POISON,
            )
            .unwrap_or_else(|err| panic!("{err}"));
        }
    }
    // SAFETY: as above.
    unsafe { ctx.enable_event_tracking() };
}
