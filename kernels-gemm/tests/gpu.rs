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
//! schema at two tiles; every split-K factor; grouped and plain rasters; clusters of 2
//! at every wgmma tile, on shapes whose last band of two tile rows has its second tile
//! empty or ragged, with more bands than SM pairs; TMA stores of C at every unswapped
//! tile and cluster size, at every ring depth of two tiles, with C's row stride a
//! multiple of 16 bytes or not (then the same variant stores C directly); the pingpong
//! schedule at every tile; every stream config (token tile, warp grid and depth) of the
//! space. Clusters of 2 and the pingpong schedule must also give C bit
//! for bit as the same cooperative tile without a cluster (each output sums the same
//! products in the same order), and TMA stores of C bit for bit as direct stores (the
//! same values, rounded the same way).
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
use kernels_gemm::{reference, space, Epilogue, Gemm, GemmConfig, GemmKey, Layout, Path};
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
/// bitwise equal to the first, which it returns.
fn check(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    case: &Case,
    dev: &mut Device,
    e: &Expected,
    config: &GemmConfig,
    runs: usize,
) -> Result<Vec<f32>, String> {
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
    Ok(first.unwrap_or_default())
}

/// Runs `base` once and `other` `other_runs` times on `case`, each checked against the
/// reference ([`check`]), and the failure, if any: a check's, or the first element of
/// C where `other` differs in bits from `base` (`base_name` says what `base` is).
fn same_bits(
    (rt, stream, case, dev, e): (&CudaRuntime, &Arc<CudaStream>, &Case, &mut Device, &Expected),
    (base, base_name): (&GemmConfig, &str),
    (other, other_runs): (&GemmConfig, usize),
) -> Option<String> {
    let a = match check(rt, stream, case, dev, e, base, 1) {
        Ok(a) => a,
        Err(err) => return Some(err),
    };
    let b = match check(rt, stream, case, dev, e, other, other_runs) {
        Ok(b) => b,
        Err(err) => return Some(err),
    };
    let at = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))?;
    Some(format!(
        "{case:?} {other}: C[{}, {}] = {}, against {} from {base_name}",
        at / case.ldc,
        at % case.ldc,
        b[at],
        a[at]
    ))
}

impl Case {
    /// Layout nt with A and B packed (leading dimension k), a bias, and C's row stride
    /// `ldc`: the cases the bit-for-bit comparisons run on.
    fn nt(dtype: DType, m: usize, n: usize, k: usize, ldc: usize, c_dtype: DType) -> Case {
        Case {
            dtype,
            layout: Layout::Nt,
            m,
            n,
            k,
            lda: k,
            ldb: k,
            ldc,
            offset: 0,
            bias: true,
            c_dtype,
        }
    }
}

/// A base config, its name in a failure, and a config that must give C bit for bit as
/// it does, in as many runs.
type SameBits = (GemmConfig, &'static str, GemmConfig, usize);

/// For each case (inputs seeded from `seed`), every pair `pairs` gives for its key
/// whose second config fits it ([`same_bits`]), on a workspace as large as the largest
/// of them needs; on sm_90 every one must fit. Prints how many pairs `what` checked and
/// fails with every difference found.
fn bit_for_bit(test: &str, what: &str, seed: u64, cases: &[Case], pairs: impl Fn(&GemmKey) -> Vec<SameBits>) {
    let Some((rt, stream)) = runtime(test) else {
        return;
    };
    let target = rt.device().info().tuning_target();
    let key_of = |case: &Case| GemmKey {
        dtype: case.dtype,
        layout: case.layout,
        n: case.n as u32,
        k: case.k as u32,
    };
    // Every variant first, compiled in parallel (the runs below would compile them one
    // at a time); the cases' operands are 16-byte aligned, so no config is refitted.
    let mut jobs = Vec::new();
    for case in cases {
        let key = key_of(case);
        for (base, _, other, _) in pairs(&key) {
            for c in [base, other].into_iter().filter(|c| space::fits(target, &key, c)) {
                jobs.push((kernels_gemm::plan::SOURCE, kernels_gemm::plan::variant(&key, &c)));
            }
        }
    }
    for r in rt.precompile(&jobs) {
        r.expect("every variant compiles");
    }
    let (mut checked, mut failures) = (0, Vec::new());
    for (i, case) in cases.iter().enumerate() {
        let key = key_of(case);
        let e = expected(case, seed + i as u64);
        let pairs = pairs(&key);
        let ws_bytes = pairs
            .iter()
            .flat_map(|(base, _, other, _)| [base, other])
            .map(|c| c.workspace_bytes(case.m as u64, key.n))
            .max()
            .unwrap_or(0);
        let mut dev = Device::new(&stream, case, &e, ws_bytes);
        for (base, base_name, other, runs) in pairs {
            if !space::fits(target, &key, &other) {
                assert!(target != Target::Sm90, "{other} must fit {key:?}");
                continue;
            }
            checked += 1;
            let run = (&rt, &stream, case, &mut dev, &e);
            failures.extend(same_bits(run, (&base, base_name), (&other, runs)));
        }
    }
    println!("gemm {what}: {checked} tiles checked, {} failed", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// (block_m, block_n, block_k, warps_m, warps_n).
type Tile = (u32, u32, u32, u32, u32);

/// See the module doc.
fn covering_configs() -> Vec<GemmConfig> {
    let mut tiles = BTreeSet::new();
    let mut wgmma_tiles = BTreeSet::new();
    // (block_m, warps_n, warps_m, stages) of the stream configs: every one, unsplit.
    let mut stream = BTreeSet::new();
    // (path kind, cluster, TMA stores of C, tile) of the wgmma configs: see `WG_KINDS`.
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
                let tma = c.epilogue == Epilogue::Tma;
                match c.path {
                    Path::Mma => tiles.insert(tile),
                    // Unsplit: splits, with and without a cluster, have tests of their own
                    // (split_k_is_deterministic..., cluster_splits_match...).
                    Path::Wgmma if c.cluster_splits() => wgmma_tiles.insert((0, 1, tma, tile)),
                    Path::Wgmma => wgmma_tiles.insert((0, c.cluster, tma, tile)),
                    Path::WgmmaSwap => wgmma_tiles.insert((1, 1, tma, tile)),
                    Path::WgmmaPingpong => wgmma_tiles.insert((2, c.cluster, tma, tile)),
                    Path::Stream => stream.insert((c.block_m, c.warps_n, c.warps_m, c.stages)),
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
        cluster: 1,
        epilogue: Epilogue::Direct,
    };
    let mut out: Vec<GemmConfig> = tiles.iter().map(|&t| at(t, 3, 1, 8)).collect();
    for stages in 2..=6 {
        out.push(at((16, 64, 128, 1, 4), stages, 1, 8));
        out.push(at((128, 128, 32, 2, 4), stages, 1, 1));
    }
    out.push(at((64, 64, 64, 2, 2), 4, 1, 1));
    out.push(at((32, 64, 64, 1, 4), 4, 1, 16));
    out.extend(wgmma_covering(&wgmma_tiles));
    out.extend(
        stream.iter().map(|&(block_m, warps_n, warps_m, stages)| {
            GemmConfig::stream(block_m, warps_n, warps_m, stages)
        }),
    );
    out
}

/// The wgmma paths by the kind `covering_configs` records them under.
const WG_KINDS: [Path; 3] = [Path::Wgmma, Path::WgmmaSwap, Path::WgmmaPingpong];

/// The wgmma part of the covering set: every tile, warpgroup split, path, cluster size
/// and epilogue of the sm_90 space at the deepest of 4 or 3 stages that fits; every
/// ring depth 2..=8 at one tile of each operand order, with a cluster of 2 and with TMA
/// stores of C (and 2..=6 at a two-consumer tile and a pingpong tile with TMA stores);
/// the deep rings of 12 and 16 stages at the narrow 64-row tiles where they fit; plain
/// and wide grouped rasters, with and without clusters and TMA stores.
fn wgmma_covering(tiles: &BTreeSet<(usize, u32, bool, Tile)>) -> Vec<GemmConfig> {
    let key = GemmKey {
        dtype: DType::Bf16,
        layout: Layout::Nt,
        n: 300,
        k: 200,
    };
    let wg = |kind: usize,
              (block_m, block_n, _, warps_m, warps_n): (u32, u32, u32, u32, u32),
              stages,
              group_m,
              cluster,
              tma: bool| GemmConfig {
        path: WG_KINDS[kind],
        block_m,
        block_n,
        block_k: 64,
        warps_m,
        warps_n,
        stages,
        split_k: 1,
        group_m,
        vec: 8,
        cluster,
        epilogue: if tma { Epilogue::Tma } else { Epilogue::Direct },
    };
    let mut out = Vec::new();
    for &(kind, cluster, tma, tile) in tiles {
        let deepest = [4, 3]
            .into_iter()
            .map(|stages| wg(kind, tile, stages, 8, cluster, tma))
            .find(|c| space::fits(Target::Sm90, &key, c));
        out.extend(deepest);
    }
    for stages in 2..=8 {
        out.push(wg(1, (16, 128, 64, 1, 4), stages, 8, 1, false));
        for cluster in [1, 2] {
            for tma in [false, true] {
                out.push(wg(0, (64, 128, 64, 4, 1), stages, 8, cluster, tma));
            }
        }
    }
    // The deep rings of narrow tiles for few rows (`space::DEEP_STAGES`), where they fit.
    for stages in [12, 16] {
        for c in [
            wg(0, (64, 32, 64, 4, 1), stages, 8, 1, false),
            wg(0, (64, 64, 64, 4, 1), stages, 8, 1, true),
        ] {
            if space::fits(Target::Sm90, &key, &c) {
                out.push(c);
            }
        }
    }
    for stages in 2..=6 {
        out.push(wg(0, (128, 128, 64, 8, 1), stages, 8, 1, true));
        out.push(wg(2, (64, 128, 64, 8, 1), stages, 8, 1, true));
    }
    for cluster in [1, 2] {
        for tma in [false, true] {
            out.push(wg(0, (128, 128, 64, 8, 1), 4, 1, cluster, tma));
            out.push(wg(0, (64, 64, 64, 4, 1), 4, 16, cluster, tma));
        }
    }
    for tma in [false, true] {
        out.push(wg(2, (128, 128, 64, 8, 1), 4, 1, 1, tma));
        out.push(wg(2, (64, 64, 64, 8, 1), 4, 16, 1, tma));
    }
    // Swapped stages of 128 k (two boxes of each operand), one and two consumers.
    for stages in 2..=6 {
        for tile in [(16, 128, 128, 1, 4), (64, 64, 128, 1, 8)] {
            let c = GemmConfig {
                block_k: 128,
                ..wg(1, tile, stages, 8, 1, false)
            };
            if space::fits(Target::Sm90, &key, &c) {
                out.push(c);
            }
        }
    }
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
        // k over several ring passes; an odd number of tile rows for every wgmma tile
        // (a cluster's last band has its second tile past m).
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
        // An even number of tile rows for every wgmma tile (the last band of two
        // ragged in its second tile), more bands than the H200's 66 SM pairs for
        // every tile, ragged n and k, f32 out.
        Case {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            m: 2000,
            n: 2100,
            k: 520,
            lda: 520,
            ldb: 528,
            ldc: 2104,
            offset: 0,
            bias: true,
            c_dtype: DType::F32,
        },
        // Aligned A and B, bf16 C with a row stride of 404 bytes (not a multiple of 16:
        // no tensor map of C, so a tma epilogue stores C directly), ragged m, n and k.
        Case {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            m: 130,
            n: 200,
            k: 136,
            lda: 136,
            ldb: 136,
            ldc: 202,
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
                // Only the wgmma configs are left out (on other targets and for nn) and
                // the stream configs for nn.
                assert!(
                    (c.path.is_wgmma() && (target != Target::Sm90 || key.layout == Layout::Nn))
                        || (c.path == Path::Stream && key.layout == Layout::Nn),
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
                cluster: 1,
                epilogue: Epilogue::Direct,
            })
            .collect();
        // Swapped-operand wgmma with split-K (one and two consumers; stages of 64 and of
        // 128 k, two boxes each), where it runs.
        let target = rt.device().info().tuning_target();
        let key = GemmKey {
            dtype,
            layout,
            n: n as u32,
            k: k as u32,
        };
        for (split_k, block_m, warps_n, block_k) in [
            (2, 16, 4, 64),
            (3, 16, 4, 64),
            (4, 16, 8, 64),
            (6, 16, 8, 64),
            (8, 64, 4, 64),
            (12, 32, 4, 64),
            (16, 32, 4, 64),
            (2, 16, 4, 128),
            (6, 16, 8, 128),
            (4, 64, 4, 128),
        ] {
            let c = GemmConfig {
                path: Path::WgmmaSwap,
                block_m,
                block_n: 128,
                block_k,
                warps_m: 1,
                warps_n,
                stages: 6,
                split_k,
                group_m: 8,
                vec: 8,
                cluster: 1,
                epilogue: Epilogue::Direct,
            };
            if space::fits(target, &key, &c) {
                configs.push(c);
            }
        }
        // The stream path with split-K (8 and 16 tokens, one and several warps along k;
        // m = 67 takes five token tiles of 16), layout nt; through the workspace and, on
        // sm_90, as one cluster of the splits.
        for (split_k, warps_n, warps_m) in [
            (2, 8, 1),
            (3, 1, 8),
            (4, 2, 4),
            (6, 4, 2),
            (8, 1, 4),
            (12, 2, 2),
            (16, 1, 8),
        ] {
            for block_m in [8, 16] {
                let c = GemmConfig {
                    split_k,
                    ..GemmConfig::stream(block_m, warps_n, warps_m, 4)
                };
                let twin = GemmConfig {
                    cluster: split_k,
                    ..c
                };
                for c in [c, twin] {
                    if space::fits(target, &key, &c) {
                        configs.push(c);
                    }
                }
            }
        }
        // Unswapped wgmma with split-K (64 accumulators a thread: 64-row tiles on one
        // consumer, 128 x 128 on two), where it runs.
        for (split_k, block_m, block_n, warps_m) in [
            (2, 64, 64, 4),
            (3, 64, 128, 4),
            (6, 64, 64, 4),
            (2, 128, 128, 8),
            (4, 128, 128, 8),
        ] {
            for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                let c = GemmConfig {
                    split_k,
                    epilogue,
                    ..GemmConfig::wgmma(block_m, block_n, warps_m, 4)
                };
                if space::fits(target, &key, &c) {
                    configs.push(c);
                }
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

/// A cluster of 2 computes the same tiles as two unclustered blocks, each output from
/// the same products in the same order: C must match bit for bit, on every wgmma tile
/// of the space, with its second tile empty (m = 17), both ragged (m = 1030) and
/// exact (m = 512), three runs each.
#[test]
fn clusters_of_two_match_the_unclustered_tile_bit_for_bit() {
    let nt = |m, n, k, c_dtype| Case::nt(DType::Bf16, m, n, k, n, c_dtype);
    let cases = [
        nt(17, 300, 200, DType::Bf16),
        nt(1030, 2056, 1000, DType::Bf16),
        nt(512, 512, 1024, DType::F32),
    ];
    let tiles = [
        (64, 64, 4),
        (64, 256, 4),
        (128, 128, 8),
        (128, 256, 8),
        (192, 128, 12),
        (192, 192, 12),
        (256, 128, 8),
    ];
    bit_for_bit(
        "clusters_of_two_match_the_unclustered_tile_bit_for_bit",
        "clusters",
        300,
        &cases,
        |_| {
            tiles
                .iter()
                .map(|&(block_m, block_n, warps_m)| {
                    let one = GemmConfig::wgmma(block_m, block_n, warps_m, 4);
                    (one, "the unclustered tile", GemmConfig { cluster: 2, ..one }, 3)
                })
                .collect()
        },
    );
}

/// The splits of a tile as one cluster add the same partials in the same split order
/// as the workspace split: C must match it bit for bit, on swapped tiles of 16-128
/// token columns, 64-256 weight rows, one and two consumers and stages of 64 and 128 k,
/// and unswapped tiles of 64-128 rows by 64-128 columns stored directly and by TMA (the
/// partial after the staging buffers), in splits of 2, 3, 4, 6 and 8 (each rank summing
/// and storing its share of the tile; with 6 or 8 ranks on a 16-token tile some own
/// none), where a split gets no k steps (9 steps in 4 splits of 3), on
/// ragged n and k, and where each cluster takes several tiles in turn (its partial
/// buffers reused: n = 8200 at m = 17 makes 66-258 tiles, more than the clusters the
/// SMs hold), three runs each.
#[test]
fn cluster_splits_match_the_workspace_splits_bit_for_bit() {
    let cases = [
        Case::nt(DType::Bf16, 1, 300, 576, 300, DType::Bf16),
        Case::nt(DType::Bf16, 17, 8200, 1000, 8200, DType::F32),
        Case::nt(DType::F16, 64, 4096, 4096, 4104, DType::F16),
        Case::nt(DType::Bf16, 100, 1280, 2048, 1280, DType::Bf16),
    ];
    // (block_m = token columns, block_n = weight rows, block_k, consumer warps, stages)
    let tiles = [
        (16, 64, 64, 4, 4),
        (16, 128, 128, 4, 6),
        (32, 128, 64, 4, 8),
        (16, 256, 128, 8, 4),
        (64, 256, 64, 8, 4),
        (64, 128, 128, 4, 4),
        (128, 128, 64, 8, 4),
    ];
    bit_for_bit(
        "cluster_splits_match_the_workspace_splits_bit_for_bit",
        "cluster splits",
        700,
        &cases,
        |key| {
            // Each split that fits with its cluster twin, both ways.
            let mut splits = Vec::new();
            for split_k in [2, 3, 4, 6, 8] {
                for &(block_m, block_n, block_k, warps_n, stages) in &tiles {
                    splits.push(GemmConfig {
                        block_k,
                        split_k,
                        ..GemmConfig::swapped(block_m, block_n, warps_n, stages)
                    });
                }
                // Unswapped: (block_m, block_n, consumer warps, stages), either epilogue.
                for (block_m, block_n, warps_m, stages) in [(64, 64, 4, 4), (128, 64, 8, 4), (128, 128, 8, 3)]
                {
                    for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                        splits.push(GemmConfig {
                            split_k,
                            epilogue,
                            ..GemmConfig::wgmma(block_m, block_n, warps_m, stages)
                        });
                    }
                }
            }
            let mut pairs = Vec::new();
            for split in splits {
                let cluster = GemmConfig {
                    cluster: split.split_k,
                    ..split
                };
                if space::fits(Target::Sm90, key, &split) && space::fits(Target::Sm90, key, &cluster) {
                    pairs.push((split, "the workspace split", cluster, 3));
                }
            }
            pairs
        },
    );
}

/// A persistent launch of clusters is lowered to the clusters the device holds at once:
/// for a pair of 128 x 128 tiles and splits of 2, 3, 4, 6 and 8 as one cluster (each one
/// block an SM), the occupancy query finds at least one and at most `sm_count / cluster`
/// of them, and the same answer on every ask (kept by the kernel). Printed: what the
/// device holds of each.
#[test]
fn persistent_cluster_launches_fit_the_clusters_the_device_holds() {
    let Some((rt, stream)) = runtime("persistent_cluster_launches_fit_the_clusters_the_device_holds") else {
        return;
    };
    let info = rt.device().info().clone();
    if info.tuning_target() != Target::Sm90 {
        println!("gemm: no wgmma clusters on {} (sm_90 only)", info.name);
        return;
    }
    let key = GemmKey {
        dtype: DType::Bf16,
        layout: Layout::Nt,
        n: 8192,
        k: 512,
    };
    let pair = GemmConfig {
        cluster: 2,
        ..GemmConfig::wgmma(128, 128, 8, 4)
    };
    let split = |ways: u32| GemmConfig {
        split_k: ways,
        cluster: ways,
        ..GemmConfig::swapped(16, 128, 4, 6)
    };
    // 4 x 64 tiles in 128 pairs; 1 x 64 tiles for 64 clusters of each split.
    let launches = [(pair, 512usize)]
        .into_iter()
        .chain([2, 3, 4, 6, 8].map(|ways| (split(ways), 16)));
    for (c, m) in launches {
        let case = Case::nt(DType::Bf16, m, 8192, 512, 8192, DType::Bf16);
        let e = expected(&case, 900);
        let dev = Device::new(&stream, &case, &e, 0);
        let p = dev.problem(&stream, &case);
        let (dims, _) = kernels_gemm::plan::launch_args(&info, &c, &p).unwrap();
        assert!(dims.persistent, "{c}");
        let k = rt
            .kernel(
                &stream,
                &kernels_gemm::plan::SOURCE,
                &kernels_gemm::plan::variant(&key, &c),
            )
            .unwrap();
        let held = k.resident_clusters(&dims).unwrap();
        println!(
            "gemm: {} holds {held} clusters of {} ({c}); the launch asks for {}",
            info.name,
            c.cluster,
            dims.grid.0 / c.cluster
        );
        assert!(
            held >= 1 && held <= info.sm_count / c.cluster,
            "{held} clusters of {c}"
        );
        assert_eq!(k.resident_clusters(&dims).unwrap(), held);
    }
}

/// The pingpong schedule computes each tile as the cooperative kernel does, from the
/// same products in the same order, only in the other consumer warpgroup: C must match
/// bit for bit, on every pingpong tile of the space, stored directly and by TMA, where
/// a block has one unit (m = 17), a few with long k (16 k steps: a warpgroup waiting
/// two ring phases ahead would read a stage before it lands) and many with short k
/// (8 units a block, 2 k steps: the turns alternate often), three runs each.
#[test]
fn pingpong_matches_the_cooperative_tile_bit_for_bit() {
    let cases = [
        Case::nt(DType::Bf16, 17, 300, 200, 300, DType::Bf16),
        Case::nt(DType::Bf16, 1030, 2056, 1000, 2056, DType::Bf16),
        Case::nt(DType::Bf16, 2048, 4096, 128, 4096, DType::F32),
    ];
    let tiles = [(64, 64), (64, 128), (64, 256), (128, 64), (128, 128)];
    bit_for_bit(
        "pingpong_matches_the_cooperative_tile_bit_for_bit",
        "pingpong",
        500,
        &cases,
        |_| {
            let mut pairs = Vec::new();
            for &(block_m, block_n) in &tiles {
                // The cooperative kernel with the same output tile: one consumer for 64
                // rows, two for 128.
                let coop = GemmConfig::wgmma(block_m, block_n, block_m / 16, 4);
                for epilogue in [Epilogue::Direct, Epilogue::Tma] {
                    let pp = GemmConfig {
                        epilogue,
                        ..GemmConfig::pingpong(block_m, block_n, 4)
                    };
                    pairs.push((coop, "the cooperative tile", pp, 3));
                }
            }
            pairs
        },
    );
}

/// TMA stores of C write the values direct stores write, rounded the same way: C must
/// match bit for bit, on every unswapped wgmma tile of the space with and without a
/// cluster, on ragged edges (m = 17, n = 300; m = 1030, n = 2056), a padded C, f32 and
/// f16 out, and a row stride off 16 bytes (where both store directly), two runs each
/// (the staging buffers reused across launches).
#[test]
fn tma_stores_of_c_match_direct_stores_bit_for_bit() {
    let cases = [
        Case::nt(DType::Bf16, 17, 300, 200, 304, DType::Bf16),
        Case::nt(DType::Bf16, 1030, 2056, 1000, 2056, DType::Bf16),
        Case::nt(DType::Bf16, 512, 520, 1024, 524, DType::F32),
        Case::nt(DType::F16, 200, 390, 256, 392, DType::F16),
        Case::nt(DType::Bf16, 130, 200, 136, 202, DType::Bf16),
    ];
    let tiles = [
        (64, 64, 4, 4),
        (64, 128, 4, 6),
        (64, 256, 4, 4),
        (128, 64, 4, 4),
        (128, 64, 8, 4),
        (128, 128, 4, 4),
        (128, 128, 8, 4),
        (128, 256, 8, 4),
        (192, 128, 12, 4),
        (192, 192, 12, 3),
        (256, 64, 8, 4),
        (256, 128, 8, 4),
    ];
    bit_for_bit(
        "tma_stores_of_c_match_direct_stores_bit_for_bit",
        "tma stores",
        400,
        &cases,
        |_| {
            let mut pairs = Vec::new();
            for &(block_m, block_n, warps_m, stages) in &tiles {
                for cluster in [1, 2] {
                    let direct = GemmConfig {
                        cluster,
                        ..GemmConfig::wgmma(block_m, block_n, warps_m, stages)
                    };
                    let tma = GemmConfig {
                        epilogue: Epilogue::Tma,
                        ..direct
                    };
                    pairs.push((direct, "direct stores", tma, 2));
                }
            }
            pairs
        },
    );
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

/// Under programmatic dependent launch, a chain of GEMMs where each reads what the one
/// before wrote and overwrites what the one before read: `h = x_i · W1^T` then
/// `y_i = h · W2^T`, for several `x_i`, back to back on one stream with one shared `h`.
/// A kernel that touched A or C before the kernel before it finished would read a stale
/// `h` (the previous `x`'s) or overwrite `h` under its reader; every `y_i` is checked
/// against the reference of its own `x_i`. Decode (swapped), prefill, clusters of 2 and
/// TMA stores of C (of `y_i` at m = 256; of `h`, read by the next link, at m = 1000).
#[test]
fn a_chain_under_programmatic_launch_reads_and_overwrites_in_order() {
    let test = "a_chain_under_programmatic_launch_reads_and_overwrites_in_order";
    let Some((_, stream)) = runtime(test) else {
        return;
    };
    let dev = CudaDevice::open(0).expect("device");
    if dev.info().compute_capability.0 < 9 {
        skip_or_fail(test, "programmatic dependent launch needs sm_90");
        return;
    }
    let opts = RuntimeOptions {
        policy: Policy::DefaultOnly,
        cache: DiskCache::from_env(),
        tune: TuneOptions::default(),
        pdl: true,
    };
    let rt = CudaRuntime::with_options(dev, opts).expect("runtime");
    let stream = {
        drop(stream);
        rt.device().new_stream().expect("stream")
    };
    assert!(
        rt.pdl_for(&kernels_gemm::plan::SOURCE),
        "the GEMM source takes PDL"
    );
    let (hidden, inner, chain) = (1024usize, 2048usize, 6usize);
    let target = rt.device().info().tuning_target();
    let mut failures = Vec::new();
    for m in [1usize, 16, 256, 1000] {
        let w1 = pseudo_random(inner * hidden, 91, 1.0 / (hidden as f32).sqrt(), 0.0);
        let w2 = pseudo_random(hidden * inner, 92, 1.0 / (inner as f32).sqrt(), 0.0);
        let xs: Vec<Vec<f32>> = (0..chain)
            .map(|i| pseudo_random(m * hidden, 100 + i as u64, 1.0, 0.0))
            .collect();
        let key1 = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: inner as u32,
            k: hidden as u32,
        };
        let key2 = GemmKey {
            n: hidden as u32,
            k: inner as u32,
            ..key1
        };
        let mut c1 = kernels_gemm::analytic_default(target, &key1, m as u64);
        let mut c2 = kernels_gemm::analytic_default(target, &key2, m as u64);
        if m == 1000 && c1.path == Path::Wgmma {
            c1.cluster = 2;
        }
        // TMA stores where the tile allows them, on a ring shallow enough to fit.
        let tma = |c: &mut GemmConfig, key: &GemmKey| {
            let mut t = GemmConfig {
                epilogue: Epilogue::Tma,
                ..*c
            };
            while !space::fits(target, key, &t) && t.stages > 2 {
                t.stages -= 1;
            }
            if c.path == Path::Wgmma && space::fits(target, key, &t) {
                *c = t;
            }
        };
        match m {
            256 => tma(&mut c2, &key2),
            1000 => tma(&mut c1, &key1),
            _ => {}
        }
        let ws_bytes = kernels_gemm::workspace_bytes(target, &key1, m as u64)
            .max(kernels_gemm::workspace_bytes(target, &key2, m as u64));
        let w1b = Buf::new(&stream, DType::Bf16, &w1, 0);
        let w2b = Buf::new(&stream, DType::Bf16, &w2, 0);
        let xb: Vec<Buf> = xs.iter().map(|x| Buf::new(&stream, DType::Bf16, x, 0)).collect();
        let h = Buf::new(&stream, DType::Bf16, &vec![POISON; m * inner], 0);
        let ys: Vec<Buf> = (0..chain)
            .map(|_| Buf::new(&stream, DType::F32, &vec![POISON; m * hidden], 0))
            .collect();
        let ws1 = Buf::zeros(&stream, ws_bytes);
        let ws2 = Buf::zeros(&stream, ws_bytes);
        stream.synchronize().expect("sync");
        for (x, y) in xb.iter().zip(&ys) {
            // SAFETY: every buffer holds what its Operand says and outlives the launches
            // (the stream is synchronized below, before they drop).
            let (p1, p2) = unsafe {
                (
                    GemmProblem::raw(
                        DType::Bf16,
                        Layout::Nt,
                        m,
                        inner,
                        hidden,
                        Operand::new(x.ptr(&stream), m * hidden, hidden),
                        Operand::new(w1b.ptr(&stream), inner * hidden, hidden),
                        Operand::new(h.ptr(&stream), m * inner, inner),
                        DType::Bf16,
                        None,
                        Some((ws1.ptr(&stream), ws_bytes)),
                    )
                    .expect("problem 1"),
                    GemmProblem::raw(
                        DType::Bf16,
                        Layout::Nt,
                        m,
                        hidden,
                        inner,
                        Operand::new(h.ptr(&stream), m * inner, inner),
                        Operand::new(w2b.ptr(&stream), hidden * inner, inner),
                        Operand::new(y.ptr(&stream), m * hidden, hidden),
                        DType::F32,
                        None,
                        Some((ws2.ptr(&stream), ws_bytes)),
                    )
                    .expect("problem 2"),
                )
            };
            rt.launch_config::<Gemm>(&stream, &c1, &p1).expect("launch 1");
            rt.launch_config::<Gemm>(&stream, &c2, &p2).expect("launch 2");
        }
        stream.synchronize().expect("sync");
        for (i, (x, y)) in xs.iter().zip(&ys).enumerate() {
            // h as the first GEMM rounds it (bf16), then the second GEMM's reference.
            let mut h_ref = vec![0.0f32; m * inner];
            let mut scale = vec![0.0f64; m * inner];
            reference::gemm(
                Layout::Nt,
                m,
                inner,
                hidden,
                x,
                hidden,
                &w1,
                hidden,
                None,
                &mut h_ref,
                inner,
                &mut scale,
            );
            let h_bf16 = decode(DType::Bf16, &encode(DType::Bf16, &h_ref));
            let mut want = vec![0.0f32; m * hidden];
            let mut abs_sum = vec![0.0f64; m * hidden];
            reference::gemm(
                Layout::Nt,
                m,
                hidden,
                inner,
                &h_bf16,
                inner,
                &w2,
                inner,
                None,
                &mut want,
                hidden,
                &mut abs_sum,
            );
            // The first GEMM may round an h element to the bf16 neighbour of the
            // reference's: y moves by up to 2^-7 |h_p| |W2[j, p]| summed over p, that is
            // 2^-7 abs_sum, added to the second GEMM's own bound. A stale h (another
            // x's) moves y by about its own size, about abs_sum / sqrt(k): about 3x over.
            let (_, acc) = reference::tolerance(DType::F32);
            let widen = 1.0 + (1.0 / 128.0) / ((inner as f64).sqrt() * acc);
            for s in abs_sum.iter_mut() {
                *s *= widen;
            }
            let what = format!("m={m} link {i} ({c1} then {c2}, PDL)");
            if let Err(e) = reference::compare(
                &what,
                &y.read(&stream),
                &want,
                &abs_sum,
                m,
                hidden,
                inner,
                hidden,
                DType::F32,
                POISON,
            ) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
