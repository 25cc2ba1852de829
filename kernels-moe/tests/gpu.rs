//! Fused MoE on the GPU against the CPU reference (`reference::fused_moe`, f64, the
//! bound of `reference::tolerance`): routing (softmax and DeepSeek-V3 grouped), the
//! alignment in the workspace, and the whole layer, on small shapes of Mixtral
//! (E = 8, topk = 2), Qwen3-MoE (E = 128, topk = 8) and DeepSeek-V3 (E = 256, topk = 8,
//! grouped routing), T = 1 up to a few hundred, bf16 and f16; all tokens on one expert
//! (duplicate ids within a token), topk = 1, and ids outside [0, E) from an engine's
//! routing. `out` and the workspace sit between poisoned guard bytes that must come
//! back untouched; `out` itself starts poisoned and every element must be written.
//!
//! The covering set of compiled variants (`covering_configs`): every path, tile and
//! warp count of the schema that the sm_90 space accepts, at 3 stages or the most that
//! fit, and every pipeline depth at a decode and a prefill tile of each path; each runs
//! on a Qwen3-like case in both dtypes. The wgmma paths' covering set also runs on the
//! awkward cases (`awkward_cases`): T = 1, experts with no pairs, all pairs on one
//! expert (full and ragged tiles), topk = 1, ids outside [0, E), and n and k that are
//! not multiples of the tiles with rings that wrap (more k steps than stages) in both
//! GEMMs. The wgmma paths run on compute capability 9.0 only; elsewhere they are left
//! out with a message.
//!
//! Skips with a message where no GPU is found; fails there when KERNELS_REQUIRE_GPU=1.

use std::collections::BTreeSet;
use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels_core::testing::skip_or_fail;
use kernels_core::{
    launch::{decode, encode, pseudo_random},
    tune::TuneOptions,
    Cuda, CudaDevice, CudaRuntime, DiskCache, Policy, RuntimeOptions,
};
use kernels_moe::config::Path;
use kernels_moe::ops::{prepare_config, route, MoePrepared};
use kernels_moe::plan::{
    step_variant, Buffer, MoeProblem, RoutingProblem, Scoring, Step, WorkspaceLayout, SOURCE,
};
use kernels_moe::{analytic_default, reference, schema, space, MoeConfig, MoeKey};
use tuned::{DType, Target};

/// Poisoned bytes on each side of `out` and the workspace.
const GUARD: usize = 4096;
const POISON: u8 = 0xff;

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

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_i32(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn ptr(s: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    s.device_ptr(stream).0
}

#[derive(Clone, Copy, Debug)]
enum Routing {
    Softmax,
    Grouped {
        n_group: u32,
        topk_group: u32,
    },
    /// Every choice of every token on this expert.
    AllOn(i32),
    /// Softmax routing with some ids replaced by values outside [0, E).
    OutOfRange,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    dtype: DType,
    tokens: usize,
    experts: usize,
    n: usize,
    k: usize,
    topk: usize,
    routing: Routing,
}

impl Case {
    fn key(&self) -> MoeKey {
        MoeKey {
            dtype: self.dtype,
            experts: self.experts as u32,
            n: self.n as u32,
            k: self.k as u32,
            topk: self.topk as u32,
        }
    }
}

/// A case's inputs on host and device, its routing and reference output.
struct Prepared {
    case: Case,
    hidden: CudaSlice<u8>,
    w13: CudaSlice<u8>,
    w2: CudaSlice<u8>,
    ids: CudaSlice<u8>,
    weights: CudaSlice<u8>,
    host_ids: Vec<i32>,
    want: Vec<f64>,
    scale: Vec<f64>,
}

/// Routes on the device where the case asks (checking it against the reference),
/// uploads everything and computes the reference output.
fn prepare_case(rt: &CudaRuntime, stream: &Arc<CudaStream>, case: Case, seed: u64) -> Prepared {
    let (t, e, n, k, topk) = (case.tokens, case.experts, case.n, case.k, case.topk);
    let dt = case.dtype;
    let hidden = reference::round_to(dt, &pseudo_random(t * k, seed, 1.0, 0.0));
    let w13 = reference::round_to(
        dt,
        &pseudo_random(e * 2 * n * k, seed + 1, 2.0 / (k as f32).sqrt(), 0.0),
    );
    let w2 = reference::round_to(
        dt,
        &pseudo_random(e * k * n, seed + 2, 2.0 / (n as f32).sqrt(), 0.0),
    );
    let logits = pseudo_random(t * e, seed + 3, 4.0, 0.0);
    let (ids, weights) = match case.routing {
        Routing::Softmax | Routing::OutOfRange => device_routing(
            rt,
            stream,
            &case,
            &logits,
            Scoring::Softmax { renormalize: true },
            None,
        ),
        Routing::Grouped { n_group, topk_group } => {
            let bias = pseudo_random(e, seed + 4, 0.2, 0.0);
            device_routing(
                rt,
                stream,
                &case,
                &logits,
                Scoring::Grouped {
                    n_group,
                    topk_group,
                    renormalize: true,
                    scale: 2.5,
                    bias: None,
                },
                Some(&bias),
            )
        }
        Routing::AllOn(x) => (vec![x; t * topk], pseudo_random(t * topk, seed + 5, 0.5, 0.5)),
    };
    let mut ids = ids;
    if let Routing::OutOfRange = case.routing {
        let bad = [-1, e as i32, i32::MAX, i32::MIN, e as i32 + 7];
        for (i, id) in ids.iter_mut().enumerate() {
            if i % 3 == 1 {
                *id = bad[i % bad.len()];
            }
        }
    }
    let (want, scale) = reference::fused_moe((t, e, n, k, topk), &hidden, &w13, &w2, &ids, &weights);
    let up = |b: &[u8]| stream.clone_htod(b).expect("htod");
    Prepared {
        case,
        hidden: up(&encode(dt, &hidden)),
        w13: up(&encode(dt, &w13)),
        w2: up(&encode(dt, &w2)),
        ids: up(&i32_bytes(&ids)),
        weights: up(&encode(DType::F32, &weights)),
        host_ids: ids,
        want,
        scale,
    }
}

/// Routing on the device, checked against the reference: ids exactly, weights within
/// 1e-5 (fp32 exp against f64).
fn device_routing(
    rt: &CudaRuntime,
    stream: &Arc<CudaStream>,
    case: &Case,
    logits: &[f32],
    scoring: Scoring,
    bias: Option<&[f32]>,
) -> (Vec<i32>, Vec<f32>) {
    let (t, e, topk) = (case.tokens, case.experts, case.topk);
    let ldt = if t % 2 == 0 { DType::Bf16 } else { DType::F32 };
    let logits = reference::round_to(ldt, logits);
    let d_logits = stream.clone_htod(&encode(ldt, &logits)).expect("htod");
    let d_bias = bias.map(|b| stream.clone_htod(&encode(DType::F32, b)).expect("htod"));
    let d_ids = stream.alloc_zeros::<u8>(t * topk * 4).expect("alloc");
    let d_w = stream.alloc_zeros::<u8>(t * topk * 4).expect("alloc");
    let scoring = match scoring {
        Scoring::Grouped {
            n_group,
            topk_group,
            renormalize,
            scale,
            ..
        } => Scoring::Grouped {
            n_group,
            topk_group,
            renormalize,
            scale,
            bias: d_bias.as_ref().map(|b| Buffer::new(ptr(b, stream), e)),
        },
        s => s,
    };
    // SAFETY: live allocations of the lengths given.
    let p = unsafe {
        RoutingProblem::raw(
            ldt,
            t,
            e,
            topk,
            Buffer::new(ptr(&d_logits, stream), t * e),
            Buffer::new(ptr(&d_ids, stream), t * topk),
            Buffer::new(ptr(&d_w, stream), t * topk),
            scoring,
        )
    }
    .expect("routing problem");
    route(rt, stream, &p).expect("route");
    let ids = bytes_i32(&stream.clone_dtoh(&d_ids).expect("dtoh"));
    let w = decode(DType::F32, &stream.clone_dtoh(&d_w).expect("dtoh"));
    let (want_ids, want_w) = match scoring {
        Scoring::Softmax { renormalize } => reference::topk_softmax(&logits, t, e, topk, renormalize),
        Scoring::Grouped {
            n_group,
            topk_group,
            renormalize,
            scale,
            ..
        } => reference::grouped_topk(
            &logits,
            bias,
            t,
            e,
            n_group as usize,
            topk_group as usize,
            topk,
            renormalize,
            scale,
        ),
    };
    assert_eq!(ids, want_ids, "{case:?}: routing ids");
    for (i, (g, w)) in w.iter().zip(&want_w).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{case:?}: weight {i}: {g} vs {w}"
        );
    }
    (ids, w)
}

/// Runs `prep` on `case` and checks output, guards, alignment and run-to-run bits.
fn check(stream: &Arc<CudaStream>, prep: &MoePrepared<Cuda>, p: &Prepared, what: &str) {
    let c = &p.case;
    let key = c.key();
    let (t, e, k, topk) = (c.tokens, c.experts, c.k, c.topk);
    let es = c.dtype.size();
    let out_bytes = t * k * es;
    let layout = WorkspaceLayout::of(&key, t as u64).expect("layout");
    let mut last: Option<Vec<u8>> = None;
    for run in 0..2 {
        let out = stream
            .clone_htod(&vec![POISON; out_bytes + 2 * GUARD])
            .expect("htod");
        let ws = stream
            .clone_htod(&vec![POISON; layout.bytes + 2 * GUARD])
            .expect("htod");
        // SAFETY: live allocations of the lengths given.
        let problem = unsafe {
            MoeProblem::raw(
                c.dtype,
                (t, e, c.n, k, topk),
                Buffer::new(ptr(&p.hidden, stream), t * k),
                Buffer::new(ptr(&p.w13, stream), p.w13.len() / es),
                Buffer::new(ptr(&p.w2, stream), p.w2.len() / es),
                Buffer::new(ptr(&p.ids, stream), t * topk),
                Buffer::new(ptr(&p.weights, stream), t * topk),
                Buffer::new(ptr(&out, stream) + GUARD as u64, t * k),
                (ptr(&ws, stream) + GUARD as u64, layout.bytes),
            )
        }
        .expect("valid problem");
        prep.launch(stream, &problem).expect("launch");
        stream.synchronize().expect("sync");
        let got = stream.clone_dtoh(&out).expect("dtoh");
        let ws_host = stream.clone_dtoh(&ws).expect("dtoh");
        for (name, bytes, len) in [("out", &got, out_bytes), ("workspace", &ws_host, layout.bytes)] {
            assert!(
                bytes[..GUARD]
                    .iter()
                    .chain(&bytes[GUARD + len..])
                    .all(|&b| b == POISON),
                "{what} {c:?}: a write outside {name}"
            );
        }
        // The wgmma GEMMs' work counters after the prefix: zero again once the call is
        // done (the align step zeroes them, the last block of each GEMM again), so a
        // GEMM step may be relaunched on its own (as the tuner does).
        let at = GUARD + layout.offsets + (e + 1) * 4;
        assert_eq!(
            bytes_i32(&ws_host[at..at + 16]),
            [0; 4],
            "{what} {c:?}: the work counters after the call"
        );
        let interior = got[GUARD..GUARD + out_bytes].to_vec();
        if run == 0 {
            let vals = decode(c.dtype, &interior);
            let tol = reference::tolerance(c.dtype);
            let mut worst = 0.0f64;
            for (i, ((&g, &w), &s)) in vals.iter().zip(&p.want).zip(&p.scale).enumerate() {
                let err = (g as f64 - w).abs();
                assert!(
                    err <= tol * s + 1e-6,
                    "{what} {c:?}: out[{}, {}] = {g}, want {w} (error {err:.3e}, bound {:.3e})",
                    i / k,
                    i % k,
                    tol * s + 1e-6
                );
                worst = worst.max(err / (s + 1e-12));
            }
            // Alignment: offsets exactly, each expert's group as a set of pairs.
            let ws_in = &ws_host[GUARD..GUARD + layout.bytes];
            let offsets = bytes_i32(&ws_in[layout.offsets..layout.offsets + (e + 1) * 4]);
            let (want_off, want_sorted) = reference::align(&p.host_ids, e);
            assert_eq!(offsets, want_off, "{what} {c:?}: alignment offsets");
            let total = want_off[e] as usize;
            let sorted = bytes_i32(&ws_in[layout.sorted..layout.sorted + total * 4]);
            for x in 0..e {
                let (a, b) = (want_off[x] as usize, want_off[x + 1] as usize);
                let got: BTreeSet<i32> = sorted[a..b].iter().copied().collect();
                let want: BTreeSet<i32> = want_sorted[a..b].iter().copied().collect();
                assert_eq!(got, want, "{what} {c:?}: expert {x}'s pairs");
            }
            let _ = worst;
        }
        if let Some(prev) = &last {
            assert!(
                prev == &interior,
                "{what} {c:?}: a second run differs in its bits"
            );
        }
        last = Some(interior);
    }
}

fn cases(dtype: DType) -> Vec<Case> {
    let c = |tokens, experts, n, k, topk, routing| Case {
        dtype,
        tokens,
        experts,
        n,
        k,
        topk,
        routing,
    };
    vec![
        // Mixtral-like.
        c(1, 8, 128, 256, 2, Routing::Softmax),
        c(64, 8, 128, 256, 2, Routing::Softmax),
        c(300, 8, 128, 256, 2, Routing::Softmax),
        c(33, 8, 128, 256, 2, Routing::AllOn(5)),
        c(40, 8, 128, 256, 1, Routing::Softmax),
        c(70, 8, 128, 256, 2, Routing::OutOfRange),
        // Qwen3-MoE-like.
        c(1, 128, 96, 128, 8, Routing::Softmax),
        c(17, 128, 96, 128, 8, Routing::Softmax),
        c(200, 128, 96, 128, 8, Routing::OutOfRange),
        // DeepSeek-V3-like, grouped routing.
        c(
            1,
            256,
            64,
            256,
            8,
            Routing::Grouped {
                n_group: 8,
                topk_group: 4,
            },
        ),
        c(
            40,
            256,
            64,
            256,
            8,
            Routing::Grouped {
                n_group: 8,
                topk_group: 4,
            },
        ),
        c(
            9,
            64,
            64,
            128,
            6,
            Routing::Grouped {
                n_group: 4,
                topk_group: 2,
            },
        ),
    ]
}

/// Every path, tile and warp count of the schema the sm_90 and sm_80 spaces accept for
/// `key` (of `paths`; sm_90's holds the wgmma paths, sm_80's the mma path, which sm_90
/// runs where wgmma cannot), at 3 stages (or the most that fit), plus every depth at a
/// decode and a prefill tile of each path.
fn covering_configs(key: &MoeKey, paths: &[Path]) -> Vec<MoeConfig> {
    let mut all: Vec<MoeConfig> = Vec::new();
    for c in space::search_space(Target::Sm90, key, 1 << 20)
        .into_iter()
        .chain(space::search_space(Target::Sm80, key, 1 << 20))
    {
        if paths.contains(&c.path) && !all.contains(&c) {
            all.push(c);
        }
    }
    let tile = |c: &MoeConfig| (c.path.name(), c.block_m, c.block_n, c.block_k, c.warps);
    let mut out: Vec<MoeConfig> = Vec::new();
    let tiles: BTreeSet<_> = all.iter().map(tile).collect();
    for t in tiles {
        let best = all
            .iter()
            .filter(|c| tile(c) == t && c.stages <= 3)
            .max_by_key(|c| c.stages)
            .or_else(|| all.iter().find(|c| tile(c) == t));
        if let Some(c) = best {
            out.push(*c);
        }
    }
    let mut bases = Vec::new();
    if paths.contains(&Path::Mma) {
        // The mma path's defaults (sm80's: sm90's take the wgmma paths).
        bases.push(analytic_default(Target::Sm80, key, 1));
        bases.push(analytic_default(Target::Sm80, key, 1 << 16));
    }
    // The wgmma paths: their first (smallest) tile and their largest-row tile.
    for path in [Path::Wgmma, Path::WgmmaSwap] {
        let of_path: Vec<&MoeConfig> = all.iter().filter(|c| c.path == path).collect();
        bases.extend(of_path.first().copied());
        bases.extend(of_path.iter().max_by_key(|c| (c.block_m, c.block_n)).copied());
    }
    for &stages in schema::STAGES {
        for base in &bases {
            let c = MoeConfig {
                stages: stages as u32,
                ..*base
            };
            if space::fits(Target::Sm90, key, &c) && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// The paths this device runs: the wgmma ones on compute capability 9.0 alone.
fn device_paths(rt: &CudaRuntime, test: &str) -> Vec<Path> {
    if rt.info().compute_capability == (9, 0) {
        vec![Path::Mma, Path::Wgmma, Path::WgmmaSwap]
    } else {
        println!(
            "{test}: {} is not compute capability 9.0; the wgmma paths are left out",
            rt.info().name
        );
        vec![Path::Mma]
    }
}

/// Compiles every variant `configs` need for both dtypes in parallel.
fn precompile(rt: &CudaRuntime, key: &MoeKey, configs: &[MoeConfig]) {
    let mut jobs = Vec::new();
    for dtype in [DType::Bf16, DType::F16] {
        let key = MoeKey { dtype, ..*key };
        for c in configs {
            for step in Step::ALL {
                let v = step_variant(&key, c, step);
                if !jobs.iter().any(|(_, j)| j == &v) {
                    jobs.push((SOURCE, v));
                }
            }
        }
    }
    for (r, (_, v)) in rt.precompile(&jobs).iter().zip(&jobs) {
        if let Err(e) = r {
            panic!("{v}: {e}");
        }
    }
}

#[test]
fn routing_alignment_and_fused_moe_match_the_reference() {
    let Some((rt, stream)) = runtime("routing_alignment_and_fused_moe_match_the_reference") else {
        return;
    };
    let mut ran = 0;
    for dtype in [DType::Bf16, DType::F16] {
        for (i, case) in cases(dtype).into_iter().enumerate() {
            let p = prepare_case(&rt, &stream, case, 100 + i as u64);
            // The analytic default at this size, and at decode and prefill sizes.
            let key = case.key();
            let mut configs = vec![analytic_default(Target::Sm90, &key, case.tokens as u64)];
            for t in [1, 4096] {
                let c = analytic_default(Target::Sm90, &key, t);
                if !configs.contains(&c) {
                    configs.push(c);
                }
            }
            for c in configs {
                let prep = prepare_config(&rt, &stream, &key, c).expect("prepare");
                check(&stream, &prep, &p, &format!("{c}"));
                ran += 1;
            }
        }
    }
    println!("{ran} fused-MoE runs matched the reference");
}

#[test]
fn every_covering_config_matches_the_reference() {
    let Some((rt, stream)) = runtime("every_covering_config_matches_the_reference") else {
        return;
    };
    let base = Case {
        dtype: DType::Bf16,
        tokens: 37,
        experts: 128,
        n: 96,
        k: 128,
        topk: 8,
        routing: Routing::Softmax,
    };
    let paths = device_paths(&rt, "every_covering_config_matches_the_reference");
    let configs = covering_configs(&base.key(), &paths);
    assert!(configs.len() > 20, "{}", configs.len());
    precompile(&rt, &base.key(), &configs);
    for dtype in [DType::Bf16, DType::F16] {
        let case = Case { dtype, ..base };
        let p = prepare_case(&rt, &stream, case, 7);
        for c in &configs {
            let prep = prepare_config(&rt, &stream, &case.key(), *c).expect("prepare");
            check(&stream, &prep, &p, &format!("{c}"));
        }
    }
    println!("{} configs x 2 dtypes matched the reference", configs.len());
}

/// Cases where a tile's edges matter, for the wgmma paths' covering set.
fn awkward_cases(dtype: DType) -> Vec<Case> {
    let c = |tokens, experts, n, k, topk, routing| Case {
        dtype,
        tokens,
        experts,
        n,
        k,
        topk,
        routing,
    };
    vec![
        // One token: six of eight experts have no pairs.
        c(1, 8, 128, 256, 2, Routing::Softmax),
        // Every pair on one expert: 128 pairs fill whole tiles of 16 to 128 rows...
        c(64, 8, 128, 256, 2, Routing::AllOn(3)),
        // ... 66 pairs leave a ragged last tile of every size.
        c(33, 8, 128, 256, 2, Routing::AllOn(5)),
        c(40, 8, 128, 256, 1, Routing::Softmax),
        c(70, 8, 128, 256, 2, Routing::OutOfRange),
        // Many experts with one or two pairs; n = 96 is not a multiple of any column
        // tile (gate boxes reach into up rows, up boxes into the next expert).
        c(17, 128, 96, 128, 8, Routing::Softmax),
        // k = 1032 and n = 520: 17 and 9 k steps, more than any ring's stages, neither a
        // multiple of 64; ragged row and column tiles.
        c(150, 8, 520, 1032, 2, Routing::Softmax),
    ]
}

#[test]
fn every_wgmma_tile_matches_the_reference_on_awkward_cases() {
    let test = "every_wgmma_tile_matches_the_reference_on_awkward_cases";
    let Some((rt, stream)) = runtime(test) else {
        return;
    };
    if !device_paths(&rt, test).contains(&Path::Wgmma) {
        return;
    }
    let wgmma = [Path::Wgmma, Path::WgmmaSwap];
    let mut ran = 0;
    for dtype in [DType::Bf16, DType::F16] {
        for (i, case) in awkward_cases(dtype).into_iter().enumerate() {
            let key = case.key();
            let configs = covering_configs(&key, &wgmma);
            assert!(
                configs.iter().any(|c| c.path == Path::Wgmma)
                    && configs.iter().any(|c| c.path == Path::WgmmaSwap),
                "{case:?}: {configs:?}"
            );
            precompile(&rt, &key, &configs);
            let p = prepare_case(&rt, &stream, case, 300 + i as u64);
            for c in &configs {
                let prep = prepare_config(&rt, &stream, &key, *c).expect("prepare");
                check(&stream, &prep, &p, &format!("{c}"));
                ran += 1;
            }
        }
    }
    println!("{ran} wgmma runs on the awkward cases matched the reference");
}

/// Three MoE layers chained on one stream (routing, then the fused layer, whose output is
/// the next layer's input) give the same bits with programmatic dependent launch on every
/// launch as with the default options (where only the steps after each align, chained,
/// use it), eagerly and replayed from a CUDA graph, and the same as the layers run one at
/// a time; the first layer's output also matches the reference.
#[test]
fn programmatic_launch_chain_matches_plain_launches() {
    let test = "programmatic_launch_chain_matches_plain_launches";
    let Some((plain_rt, stream)) = runtime(test) else {
        return;
    };
    let Some(pdl_rt) = kernels_core::testing::cuda::pdl_runtime(test, &plain_rt) else {
        return;
    };
    assert!(pdl_rt.pdl_for(&SOURCE));
    assert!(!plain_rt.pdl_for(&SOURCE));
    const LAYERS: usize = 3;
    // Qwen3-like: many experts, some with no pairs, several column tiles in both GEMMs.
    let (t, e, n, k, topk, dtype) = (48usize, 32usize, 192usize, 256usize, 4usize, DType::Bf16);
    let es = dtype.size();
    let key = MoeKey {
        dtype,
        experts: e as u32,
        n: n as u32,
        k: k as u32,
        topk: topk as u32,
    };
    let hidden0 = reference::round_to(dtype, &pseudo_random(t * k, 71, 1.0, 0.0));
    let w13 = reference::round_to(
        dtype,
        &pseudo_random(e * 2 * n * k, 72, 2.0 / (k as f32).sqrt(), 0.0),
    );
    let w2 = reference::round_to(dtype, &pseudo_random(e * k * n, 73, 2.0 / (n as f32).sqrt(), 0.0));
    let logits: Vec<Vec<f32>> = (0..LAYERS)
        .map(|l| reference::round_to(DType::Bf16, &pseudo_random(t * e, 74 + l as u64, 4.0, 0.0)))
        .collect();
    let up = |b: &[u8]| stream.clone_htod(b).expect("htod");
    let d_w13 = up(&encode(dtype, &w13));
    let d_w2 = up(&encode(dtype, &w2));
    let d_logits: Vec<CudaSlice<u8>> = logits.iter().map(|x| up(&encode(DType::Bf16, x))).collect();
    let ws_bytes = kernels_moe::workspace_bytes(&key, t as u64);
    // Raw addresses taken before any capture (see `addrs`).
    let logits_at: Vec<u64> = d_logits.iter().map(|x| ptr(x, &stream)).collect();
    let (w13_at, w2_at) = (ptr(&d_w13, &stream), ptr(&d_w2, &stream));
    // Per run: the activations of each layer boundary, each layer's ids and weights, and
    // one workspace the layers share in turn.
    struct Bufs {
        h: Vec<CudaSlice<u8>>,
        ids: Vec<CudaSlice<u8>>,
        w: Vec<CudaSlice<u8>>,
        ws: CudaSlice<u8>,
    }
    let fresh = || Bufs {
        h: (0..=LAYERS)
            .map(|l| {
                if l == 0 {
                    up(&encode(dtype, &hidden0))
                } else {
                    up(&vec![POISON; t * k * es])
                }
            })
            .collect(),
        ids: (0..LAYERS).map(|_| up(&vec![POISON; t * topk * 4])).collect(),
        w: (0..LAYERS).map(|_| up(&vec![POISON; t * topk * 4])).collect(),
        ws: up(&vec![POISON; ws_bytes]),
    };
    // Raw addresses taken once, before any capture: cudarc's tracked pointers would wait
    // on events recorded outside it, which a capture refuses.
    let addrs = |b: &Bufs| {
        let p = |s: &CudaSlice<u8>| ptr(s, &stream);
        (
            b.h.iter().map(p).collect::<Vec<u64>>(),
            b.ids.iter().map(p).collect::<Vec<u64>>(),
            b.w.iter().map(p).collect::<Vec<u64>>(),
            p(&b.ws),
        )
    };
    let layer = |rt: &CudaRuntime, l: usize, a: &(Vec<u64>, Vec<u64>, Vec<u64>, u64)| {
        let (h, ids, w, ws) = a;
        // SAFETY: live allocations of the lengths given.
        let routing = unsafe {
            RoutingProblem::raw(
                DType::Bf16,
                t,
                e,
                topk,
                Buffer::new(logits_at[l], t * e),
                Buffer::new(ids[l], t * topk),
                Buffer::new(w[l], t * topk),
                Scoring::Softmax { renormalize: true },
            )
        }
        .expect("routing problem");
        route(rt, &stream, &routing).expect("route");
        // SAFETY: as above.
        let p = unsafe {
            MoeProblem::raw(
                dtype,
                (t, e, n, k, topk),
                Buffer::new(h[l], t * k),
                Buffer::new(w13_at, e * 2 * n * k),
                Buffer::new(w2_at, e * k * n),
                Buffer::new(ids[l], t * topk),
                Buffer::new(w[l], t * topk),
                Buffer::new(h[l + 1], t * k),
                (*ws, ws_bytes),
            )
        }
        .expect("problem");
        kernels_moe::ops::fused_moe(rt, &stream, &p).expect("fused_moe");
    };
    let read = |b: &Bufs| -> Vec<Vec<f32>> {
        b.h.iter()
            .chain(&b.ids)
            .chain(&b.w)
            .map(|s| {
                let bytes = stream.clone_dtoh(s).expect("dtoh");
                // ids and weights as raw 32-bit patterns, activations decoded.
                if bytes.len() == t * topk * 4 {
                    bytes
                        .chunks(4)
                        .map(|c| f32::from_bits(u32::from_le_bytes(c.try_into().unwrap())))
                        .collect()
                } else {
                    decode(dtype, &bytes)
                }
            })
            .collect()
    };

    // One layer at a time with plain launches; the first against the reference.
    let bufs = fresh();
    let a = addrs(&bufs);
    for l in 0..LAYERS {
        layer(&plain_rt, l, &a);
        stream.synchronize().expect("layer");
        if l == 0 {
            let ids = bytes_i32(&stream.clone_dtoh(&bufs.ids[0]).expect("dtoh"));
            let w = decode(DType::F32, &stream.clone_dtoh(&bufs.w[0]).expect("dtoh"));
            let (want, scale) = reference::fused_moe((t, e, n, k, topk), &hidden0, &w13, &w2, &ids, &w);
            let got = decode(dtype, &stream.clone_dtoh(&bufs.h[1]).expect("dtoh"));
            let tol = reference::tolerance(dtype);
            for (i, ((&g, &w), &s)) in got.iter().zip(&want).zip(&scale).enumerate() {
                assert!(
                    (g as f64 - w).abs() <= tol * s + 1e-6,
                    "layer 0: out[{}, {}] = {g}, want {w}",
                    i / k,
                    i % k
                );
            }
        }
    }
    let stepwise = read(&bufs);

    // The layers enqueued at once: plain, then with programmatic dependent launch,
    // eagerly and from a graph (the kernels are loaded by the runs before it).
    let chained = |rt: &CudaRuntime, graph: bool| -> Vec<Vec<f32>> {
        let bufs = fresh();
        let a = addrs(&bufs);
        stream.synchronize().expect("inputs");
        if graph {
            kernels_core::testing::cuda::replay_captured(&stream, || {
                for l in 0..LAYERS {
                    layer(rt, l, &a);
                }
            });
        } else {
            for l in 0..LAYERS {
                layer(rt, l, &a);
            }
        }
        stream.synchronize().expect("chain");
        read(&bufs)
    };
    kernels_core::testing::cuda::assert_chains_match(&plain_rt, &pdl_rt, &stepwise, chained);
    println!("{LAYERS} MoE layers chained: plain, programmatic and graph launches agree bit for bit");
}
