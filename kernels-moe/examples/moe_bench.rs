//! Fused MoE on the GPU, graph-timed per call (align, gate-up GEMM, down GEMM,
//! combine), at the Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3 (one GPU, and tp 8) shapes
//! of ../shared/models.json (`MOE_BENCH_MODELS=Qwen3,...` picks by name substring).
//! Four routings (uniform, distinct experts per token) rotate through the graph, as
//! SGLang's bench does, so a small T's active experts do not sit in L2. Times the config
//! the runtime serves (the baked table's, else the analytic default) whole, without the
//! align step (as SGLang's figure, which excludes its alignment) and step by step, then
//! the analytic default and a sample of the search space; prints one JSON line per shape.
//! `MOE_BENCH_SAMPLE=N` samples N configs a path (6 by default; 0 times the served config
//! and the default alone, for quick comparisons of two builds). `MOE_BENCH_ROUTES=<file>`
//! times the routings a file records (`scripts/sglang_routes.py` writes SGLang's bench's:
//! one line a routing, `<model> <T> <index> <ids...>`) for the shapes it holds, so both
//! benches stream the same experts; each line of output says which routing it timed.
//! `MOE_BENCH_TABLE=<dir>/moe/<target>.json` serves from that table file instead of the
//! baked one, by the same lookup rule (a table a tuning run has just written, timed in the
//! same device call before it is landed and baked; its sources read `file:table-exact` and
//! so on), refused unless it was tuned against this binary's kernel source and target,
//! unless `MOE_BENCH_ANY_SOURCE=1`.
//!
//! `cargo run --release -p kernels-moe --example moe_bench -- [tokens,...]`

use std::collections::HashMap;
use std::sync::Arc;

use kernels_core::backend::cuda::GraphTimer;
use kernels_core::backend::Backend;
use kernels_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kernels_core::launch::{encode, pseudo_random};
use kernels_core::{Cuda, CudaDevice, CudaRuntime, Result, RuntimeOptions};
use kernels_moe::config::Path;
use kernels_moe::ops::{prepare, prepare_config, uniform_routing, MoePrepared};
use kernels_moe::plan::{step_args, step_variant, Buffer, MoeProblem, Step, SOURCE};
use kernels_moe::{analytic_default, space, workspace_bytes, Moe, MoeConfig, MoeKey};
use tuned::{resolve_in_entries, DType, ServeError, ServedTable, TableFile, Target};

const MODELS: &[(&str, u32, u32, u32, u32)] = &[
    // name, experts, topk, hidden (k), intermediate (n)
    ("Mixtral-8x7B", 8, 2, 4096, 14336),
    ("Qwen3-30B-A3B", 128, 8, 2048, 768),
    // All 256 experts on one GPU, as SGLang's bench runs it (22.5 GB of weights).
    ("DeepSeek-V3", 256, 8, 7168, 2048),
    // Its experts split over 8 GPUs along n (tp 8), as engines serve it: a catalog key.
    ("DeepSeek-V3-tp8", 256, 8, 7168, 256),
];
const ROUTINGS: usize = 4;
/// Configs sampled a path unless `MOE_BENCH_SAMPLE` says otherwise.
const SAMPLE: usize = 6;

fn ptr(s: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    s.device_ptr(stream).0
}

/// A device buffer of `bytes` filled by tiling a random block.
fn random_device(stream: &Arc<CudaStream>, bytes: usize, seed: u64, scale: f32) -> CudaSlice<u8> {
    let block = stream
        .clone_htod(&encode(DType::Bf16, &pseudo_random(1 << 22, seed, scale, 0.0)))
        .expect("htod");
    let mut out = stream.alloc_zeros::<u8>(bytes).expect("alloc");
    let mut at = 0;
    while at < bytes {
        let len = (bytes - at).min(block.len());
        let mut dst = out.slice_mut(at..at + len);
        stream.memcpy_dtod(&block.slice(0..len), &mut dst).expect("dtod");
        at += len;
    }
    out
}

/// Routings read from a `MOE_BENCH_ROUTES` file, by (model, tokens): `ROUTINGS` each, in
/// order, each `tokens * topk` expert ids.
type Recorded = HashMap<(String, usize), Vec<Vec<i32>>>;

fn read_routes(path: &str) -> std::result::Result<Recorded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    parse_routes(&text, path)
}

/// The routings of a routes file's `text`; errors name `path` and the line.
fn parse_routes(text: &str, path: &str) -> std::result::Result<Recorded, String> {
    let mut out = Recorded::new();
    for (no, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |what: &str| format!("{path}:{}: {what}", no + 1);
        let mut f = line.split_ascii_whitespace();
        let model = f.next().ok_or_else(|| bad("no model"))?.to_string();
        let mut num = |what: &str| -> std::result::Result<usize, String> {
            f.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(&format!("no {what}")))
        };
        let (t, index) = (num("token count")?, num("routing index")?);
        let ids: Vec<i32> = f
            .map(|v| v.parse().map_err(|_| bad(&format!("`{v}` is not an expert id"))))
            .collect::<std::result::Result<_, _>>()?;
        let sets = out.entry((model, t)).or_default();
        if index != sets.len() {
            return Err(bad(&format!("routing {index} where {} was due", sets.len())));
        }
        sets.push(ids);
    }
    Ok(out)
}

/// The analytic default for `tokens`, then about `sample` configs of each path spread
/// over the space.
fn candidates(key: &MoeKey, tokens: u64, sample: usize) -> Vec<MoeConfig> {
    let default = analytic_default(Target::Sm90, key, tokens);
    let mut out = vec![default];
    if sample == 0 {
        return out;
    }
    let space = space::search_space(Target::Sm90, key, tokens);
    for path in [Path::Mma, Path::Wgmma, Path::WgmmaSwap] {
        let of_path: Vec<MoeConfig> = space.iter().filter(|c| c.path == path).copied().collect();
        let step = (of_path.len() / sample).max(1);
        out.extend(of_path.into_iter().step_by(step).filter(|c| *c != default));
    }
    out
}

/// `MOE_BENCH_TABLE`'s table file, to serve by the baked lookup rule; `None` where the
/// variable is unset. Exits naming the variable where [`TableFile::to_serve`] refuses it.
fn table_from_env(target: Target) -> Option<ServedTable> {
    let path = std::env::var_os("MOE_BENCH_TABLE")?;
    let path = std::path::Path::new(&path);
    let any_source = std::env::var_os("MOE_BENCH_ANY_SOURCE").is_some_and(|v| v == "1");
    let fingerprint = <Moe as tuned::TunedKernel>::SOURCE_FINGERPRINT;
    match TableFile::to_serve(path, &kernels_moe::schema::MOE, target, fingerprint, any_source) {
        Ok(table) => {
            if let Some(what) = &table.other_source {
                eprintln!(
                    "MOE_BENCH_ANY_SOURCE: {what}; its configs are served on code they were not tuned on"
                );
            }
            eprintln!(
                "serving from {} (tuned {} on {}), not the baked table",
                path.display(),
                table.header.tuned_at,
                table.header.device
            );
            Some(table)
        }
        Err(ServeError::OtherSource(what)) => {
            eprintln!("MOE_BENCH_TABLE: {what} (MOE_BENCH_ANY_SOURCE=1 serves it anyway)");
            std::process::exit(2)
        }
        Err(ServeError::File(e)) => {
            eprintln!("MOE_BENCH_TABLE: {e}");
            std::process::exit(2)
        }
    }
}

fn main() -> Result<()> {
    let tokens: Vec<usize> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "1,16,64,512,2048,8192".into())
        .split(',')
        .filter_map(|t| t.parse().ok())
        .collect();
    let sample = match std::env::var("MOE_BENCH_SAMPLE") {
        Ok(v) => v.trim().parse::<usize>().unwrap_or_else(|_| {
            eprintln!("MOE_BENCH_SAMPLE: `{v}` is not a count; sampling {SAMPLE} configs a path");
            SAMPLE
        }),
        Err(_) => SAMPLE,
    };
    let recorded = match std::env::var("MOE_BENCH_ROUTES") {
        Ok(path) => read_routes(&path).unwrap_or_else(|err| {
            eprintln!("MOE_BENCH_ROUTES: {err}");
            std::process::exit(2)
        }),
        Err(_) => Recorded::new(),
    };
    let dev = CudaDevice::open(0)?;
    let rt = CudaRuntime::new(dev.clone())?;
    // The served config again under programmatic dependent launch (`us_served_pdl`; SGLang's
    // bench launches with PDL too).
    let rt_pdl = CudaRuntime::with_options(
        dev,
        RuntimeOptions {
            pdl: true,
            ..RuntimeOptions::default()
        },
    )?;
    let stream = rt.device().new_stream()?;
    let target = rt.info().tuning_target();
    let file_table = table_from_env(target);
    println!(
        "{{\"device\": \"{}\", \"sms\": {}}}",
        rt.info().name,
        rt.info().sm_count
    );
    let only = std::env::var("MOE_BENCH_MODELS").unwrap_or_default();
    let picked = |name: &str| only.is_empty() || only.split(',').any(|m| !m.is_empty() && name.contains(m));
    for &(name, experts, topk, h, i) in MODELS.iter().filter(|m| picked(m.0)) {
        let key = MoeKey {
            dtype: DType::Bf16,
            experts,
            n: i,
            k: h,
            topk,
        };
        let (e, n, k) = (experts as usize, i as usize, h as usize);
        let mut key_buf = tuned::KeyBuf::new();
        tuned::write_canonical(
            &kernels_moe::schema::MOE,
            <Moe as tuned::TunedKernel>::key_values(&key).as_slice(),
            &mut key_buf,
        )
        .expect("a catalog key is canonical");
        let key_text = key_buf.as_str();
        // The served config: the baked table's (else the analytic default), or
        // MOE_BENCH_TABLE's by the same rule.
        let serve = |rt: &CudaRuntime, tokens: u64| -> Result<MoePrepared<Cuda>> {
            match &file_table {
                Some(table) => {
                    let resolved =
                        resolve_in_entries::<Moe>(target, &key, table.key_entries(key_text), tokens);
                    let mut p = prepare_config(rt, &stream, &key, resolved.config)?;
                    p.resolved = resolved;
                    Ok(p)
                }
                None => prepare(rt, &stream, &key, tokens),
            }
        };
        let w13 = random_device(&stream, e * 2 * n * k * 2, 1, 1.0 / (k as f32).sqrt());
        let w2 = random_device(&stream, e * k * n * 2, 2, 1.0 / (n as f32).sqrt());
        // Compile every candidate's steps in parallel before timing.
        let mut jobs = Vec::new();
        for &t in &tokens {
            for c in candidates(&key, t as u64, sample) {
                for s in Step::ALL {
                    let v = step_variant(&key, &c, s);
                    if !jobs.iter().any(|(_, j)| *j == v) {
                        jobs.push((SOURCE, v));
                    }
                }
            }
        }
        for (r, (_, v)) in rt.precompile(&jobs).iter().zip(&jobs) {
            if let Err(err) = r {
                eprintln!("{v}: {err}");
            }
        }
        for &t in &tokens {
            let pairs = t * topk as usize;
            let hidden = random_device(&stream, t * k * 2, 3, 1.0);
            let out = stream.alloc_zeros::<u8>(t * k * 2).expect("alloc");
            let ws_bytes = workspace_bytes(&key, t as u64);
            // A workspace per routing: each keeps its routing's alignment, so the steps
            // timed alone after the align step rotate over the routings too.
            let ws: Vec<CudaSlice<u8>> = (0..ROUTINGS)
                .map(|_| stream.alloc_zeros::<u8>(ws_bytes).expect("alloc"))
                .collect();
            let (routing, sets) = match recorded.get(&(name.to_string(), t)) {
                Some(sets) => {
                    let fits = sets.len() == ROUTINGS
                        && sets.iter().all(|s| {
                            s.len() == pairs && s.iter().all(|&id| id >= 0 && (id as u32) < experts)
                        });
                    if !fits {
                        eprintln!(
                            "MOE_BENCH_ROUTES: {name} T={t}: want {ROUTINGS} routings of {pairs} ids in [0, {experts})"
                        );
                        std::process::exit(2)
                    }
                    ("recorded", sets.clone())
                }
                None => (
                    "uniform",
                    (0..ROUTINGS)
                        .map(|r| uniform_routing(t as u64, experts, topk, 10 + r as u64))
                        .collect(),
                ),
            };
            let ids: Vec<CudaSlice<u8>> = sets
                .iter()
                .map(|s| {
                    stream
                        .clone_htod(&s.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
                        .expect("htod")
                })
                .collect();
            let weights = stream
                .clone_htod(&encode(DType::F32, &vec![1.0 / topk as f32; pairs]))
                .expect("htod");
            // SAFETY: live allocations of the lengths given.
            let problems: Vec<MoeProblem<'_>> = ids
                .iter()
                .zip(&ws)
                .map(|(d, ws)| unsafe {
                    MoeProblem::raw(
                        DType::Bf16,
                        (t, e, n, k, topk as usize),
                        Buffer::new(ptr(&hidden, &stream), t * k),
                        Buffer::new(ptr(&w13, &stream), e * 2 * n * k),
                        Buffer::new(ptr(&w2, &stream), e * k * n),
                        Buffer::new(ptr(d, &stream), pairs),
                        Buffer::new(ptr(&weights, &stream), pairs),
                        Buffer::new(ptr(&out, &stream), t * k),
                        (ptr(ws, &stream), ws_bytes),
                    )
                })
                .collect::<Result<_>>()?;
            let candidates = candidates(&key, t as u64, sample);
            let default = candidates[0];
            // The median of 7 graph replays of `launch` over the routings, each replay
            // about 2 ms long (at least one call a routing).
            let graph_us = |launch: &mut dyn FnMut(usize) -> Result<()>| -> Result<f64> {
                for r in 0..ROUTINGS {
                    launch(r)?;
                }
                Cuda::synchronize(&stream)?;
                let timer = GraphTimer::capture(&stream, 2 * ROUTINGS, ROUTINGS, launch)?;
                let once = timer.time_us(2)?;
                let launches =
                    ROUTINGS * ((2000.0 / ROUTINGS as f64 / once.max(1.0)).round() as usize).clamp(1, 10);
                let timer = GraphTimer::capture(&stream, launches, ROUTINGS, launch)?;
                let mut us: Vec<f64> = (0..7).map(|_| timer.time_us(1)).collect::<Result<_>>()?;
                us.sort_by(|a, b| a.total_cmp(b));
                Ok(us[us.len() / 2])
            };
            let time_prepared =
                |prep: &MoePrepared<Cuda>| graph_us(&mut |r| prep.launch(&stream, &problems[r]));
            let time = |c: MoeConfig| time_prepared(&prepare_config(&rt, &stream, &key, c)?);
            // The served config: whole, without the align step (what SGLang's figure
            // covers: its alignment is excluded), and one step at a time (after a whole
            // call left each routing's alignment in its workspace).
            let served = serve(&rt, t as u64)?;
            let us_served = time_prepared(&served)?;
            let us_served_pdl = time_prepared(&serve(&rt_pdl, t as u64)?)?;
            let c = served.resolved.config;
            let kernels: Vec<_> = Step::ALL
                .iter()
                .map(|&s| rt.kernel(&stream, &SOURCE, &step_variant(&key, &c, s)))
                .collect::<Result<_>>()?;
            let launch_steps = |which: &[usize]| {
                graph_us(&mut |r| {
                    for &i in which {
                        let (dims, args) = step_args(rt.info(), &c, &problems[r], Step::ALL[i])?;
                        // SAFETY: the plan of the step for a problem built over live buffers.
                        unsafe { Cuda::launch(&kernels[i], &stream, dims, &args) }?;
                    }
                    Ok(())
                })
            };
            let us_served_no_align = launch_steps(&[1, 2, 3])?;
            // All four steps by the same loop: where it matches `us_served`, a gap between the
            // whole call and the no-align span lies in the align step's presence, not the loop.
            let us_served_steps = launch_steps(&[0, 1, 2, 3])?;
            let mut steps = Vec::new();
            for (i, s) in Step::ALL.iter().enumerate() {
                steps.push(format!("\"{s:?}\": {:.2}", launch_steps(&[i])?));
            }
            let us_default = time(default)?;
            let mut best = (us_default, default);
            for &c in &candidates[1..] {
                match time(c) {
                    Ok(us) if us < best.0 => best = (us, c),
                    Ok(_) => {}
                    Err(err) => eprintln!("{name} T={t} {c}: {err}"),
                }
            }
            let active: f64 = sets
                .iter()
                .map(|s| {
                    let mut v = s.clone();
                    v.sort();
                    v.dedup();
                    v.len() as f64
                })
                .sum::<f64>()
                / ROUTINGS as f64;
            let wbytes = active * 3.0 * (n * k * 2) as f64;
            let flops = 2.0 * pairs as f64 * 3.0 * (n * k) as f64;
            println!(
                "{{\"model\": \"{name}\", \"T\": {t}, \"routing\": \"{routing}\", \"us_served\": {us_served:.2}, \"us_served_no_align\": {us_served_no_align:.2}, \"us_served_steps\": {us_served_steps:.2}, \"us_served_pdl\": {us_served_pdl:.2}, \"source\": \"{}\", \"served\": \"{}\", \"steps_us\": {{{}}}, \"weight_GBps_served\": {:.0}, \"tflops_served\": {:.1}, \"us_default\": {us_default:.2}, \"default\": \"{default}\", \"us_best\": {:.2}, \"best\": \"{}\", \"sampled\": {}, \"active_experts\": {active}, \"weight_GBps_best\": {:.0}, \"tflops_best\": {:.1}}}",
                match &file_table {
                    Some(_) => format!("file:{}", served.resolved.source),
                    None => served.resolved.source.to_string(),
                },
                served.resolved.config,
                steps.join(", "),
                wbytes / us_served / 1e3,
                flops / us_served / 1e6,
                best.0,
                best.1,
                candidates.len(),
                wbytes / best.0 / 1e3,
                flops / best.0 / 1e6
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_read_by_model_and_tokens_in_order() {
        let text = "Qwen3-30B-A3B 1 0 3 7\nQwen3-30B-A3B 1 1 5 6\n\nMixtral-8x7B 2 0 0 1 1 0\n";
        let r = parse_routes(text, "f").unwrap();
        assert_eq!(r[&("Qwen3-30B-A3B".to_string(), 1)], vec![vec![3, 7], vec![5, 6]]);
        assert_eq!(r[&("Mixtral-8x7B".to_string(), 2)], vec![vec![0, 1, 1, 0]]);
    }

    #[test]
    fn a_bad_routes_line_is_named() {
        for (text, want) in [
            ("Qwen3 1 1 3 7\n", "f:1: routing 1 where 0 was due"),
            ("Qwen3 1 0 3 7\nQwen3 x 1 3\n", "f:2: no token count"),
            ("Qwen3 1 0 3 seven\n", "f:1: `seven` is not an expert id"),
            ("Qwen3\n", "f:1: no token count"),
        ] {
            assert_eq!(parse_routes(text, "f").unwrap_err(), want, "{text:?}");
        }
    }
}
