//! Fused MoE on the mock backend (host memory, nothing computed), GPU-free: what the
//! tuner launches for a config (both grouped GEMMs and the combine, never the align
//! step), and what the ops launch (align, then that call), compile-free under capture
//! once prepared.

use kernels_core::backend::mock::MockStream;
use kernels_core::tune::TuneOptions;
use kernels_core::{Backend, DiskCache, DynTunable, Error, Mock, Policy, Runtime, RuntimeOptions};
use kernels_moe::ops::{prepare, MOE_TUNABLE};
use kernels_moe::plan::{Buffer, MoeProblem};
use kernels_moe::{workspace_bytes, MoeKey, MOE};
use tuned::{DType, DynKernel, StaticKey};

const KEY: MoeKey = MoeKey {
    dtype: DType::Bf16,
    experts: 8,
    n: 64,
    k: 128,
    topk: 2,
};
const TOKENS: usize = 4;

fn runtime() -> Runtime<Mock> {
    let options = RuntimeOptions {
        policy: Policy::Serve,
        cache: DiskCache::disabled(),
        tune: TuneOptions::default(),
        pdl: false,
    };
    Runtime::with_options(Mock::open(0).unwrap(), options).unwrap()
}

/// Each launch's entry point and, for the GEMMs, whether it is the gate-up one.
fn steps(s: &MockStream) -> Vec<&'static str> {
    s.launches()
        .iter()
        .map(|v| match v.split(' ').next().unwrap_or_default() {
            "moe_align" => "align",
            "moe_gemm" if v.contains("-DUP=1") => "gate_up",
            "moe_gemm" => "down",
            "moe_combine" => "combine",
            _ => "other",
        })
        .collect()
}

#[test]
fn a_search_times_both_gemms_and_the_combine_for_every_config() {
    let rt = runtime();
    let s = MockStream::default();
    let pairs = [
        ("dtype", "bf16"),
        ("experts", "8"),
        ("n", "64"),
        ("k", "128"),
        ("topk", "2"),
    ];
    let key = StaticKey::from_pairs(MOE.schema(), pairs).unwrap();
    let opts = TuneOptions {
        max_candidates: 6,
        ..TuneOptions::default()
    };
    let record = MOE_TUNABLE.search(&rt, &s, &key, TOKENS as u64, &opts).unwrap();
    assert_eq!(record.candidates.len(), 6);
    for c in &record.candidates {
        assert!(c.outcome.is_ok(), "{c:?}");
    }
    let launched = steps(&s);
    assert!(!launched.is_empty());
    assert!(!launched.contains(&"align"), "the align step is outside the call");
    for call in launched.chunks(3) {
        assert_eq!(call, ["gate_up", "down", "combine"]);
    }
    // Each call's GEMMs run the candidate's tile (the down step's weight tile may be
    // twice the gate-up step's: `MoeConfig::step_block_n`).
    for call in s.launches().chunks(3) {
        let tile = |v: &str| {
            v.split(" -DUP=")
                .next()
                .unwrap_or_default()
                .replace("-DSTEP=5", "-DSTEP=4")
                .split(' ')
                .filter(|d| !d.starts_with("-DBN="))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(tile(&call[0]), tile(&call[1]));
    }
}

#[test]
fn the_op_launches_align_then_the_tuned_call_and_captures_once_prepared() {
    let rt = runtime();
    let s = MockStream::default();
    let (t, e, n, k, topk) = (TOKENS, 8, 64, 128, 2);
    let ws_bytes = workspace_bytes(&KEY, t as u64);
    // Host memory standing in for device buffers; the mock computes nothing.
    let mut mem: Vec<Vec<u8>> = [
        t * k * 2,
        e * 2 * n * k * 2,
        e * k * n * 2,
        t * topk * 4,
        t * topk * 4,
        t * k * 2,
    ]
    .iter()
    .map(|&b| vec![0u8; b + 256])
    .collect();
    let mut ws = vec![0u8; ws_bytes + 256];
    let at = |v: &mut Vec<u8>| (v.as_mut_ptr() as u64).next_multiple_of(256);
    let ptrs: Vec<u64> = mem.iter_mut().map(at).collect();
    let lens = [t * k, e * 2 * n * k, e * k * n, t * topk, t * topk, t * k];
    let b = |i: usize| Buffer::new(ptrs[i], lens[i]);
    // SAFETY: host allocations that outlive every launch; the mock writes nothing.
    let problem = unsafe {
        MoeProblem::raw(
            DType::Bf16,
            (t, e, n, k, topk),
            b(0),
            b(1),
            b(2),
            b(3),
            b(4),
            b(5),
            (at(&mut ws), ws_bytes),
        )
    }
    .unwrap();

    s.capturing.set(true);
    let refused = prepare(&rt, &s, &KEY, t as u64);
    assert!(
        matches!(refused, Err(Error::CompileWhileCapturing { .. })),
        "a compile while capturing is refused"
    );
    s.capturing.set(false);
    let prepared = prepare(&rt, &s, &KEY, t as u64).unwrap();
    let compiled = rt.stats().compiled;
    assert_eq!(compiled, 4, "align, gate-up, down, combine");
    s.capturing.set(true);
    prepared.launch(&s, &problem).unwrap();
    // A second prepare of the same shape is a memo hit: it compiles nothing.
    prepare(&rt, &s, &KEY, t as u64)
        .unwrap()
        .launch(&s, &problem)
        .unwrap();
    assert_eq!(rt.stats().compiled, compiled);
    assert_eq!(steps(&s), ["align", "gate_up", "down", "combine"].repeat(2));
}
