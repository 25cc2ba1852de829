//! The tuner's output check, without a GPU: a kernel family on the mock backend whose
//! variants write a value into their output (`MOCK_FILL`) and take a simulated time
//! (`MOCK_US`). One candidate is the fastest and writes the wrong value: every search,
//! offline (`DynTunable::search`) and online (`Runtime::run` under the online policy),
//! reports it as wrong, never times it and never picks it.

use std::marker::PhantomData;

use kernels_core::backend::mock::MockStream;
use kernels_core::tune::TuneOptions;
use kernels_core::{
    BufferRole, DeviceInfo, DiskCache, DynTunable, Expected, KernelArgs, KernelSource, LaunchDims, Mock,
    PlannedKernel, Policy, Runtime, RuntimeOptions, Tunable, TunableDyn, TuneBuffer, Variant,
};
use tuned::{
    int_key, int_param, BakedTable, Field, KernelSchema, KeyValues, Source, StaticKey, Target, TunedKernel,
    Value,
};

static SCHEMA: KernelSchema = KernelSchema {
    kernel: "mock_fill",
    key: &[Field::int("bytes")],
    params: &[Field::int("us"), Field::int("fill")],
};

static SOURCE: KernelSource =
    KernelSource::new("mock_fill", "// the mock backend runs nothing", "fnv1a64:mock");

/// The value every right variant writes.
const RIGHT: i64 = 7;

/// Writes `fill` into every byte of its output, taking `us` microseconds.
struct Fill;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FillConfig {
    us: i64,
    fill: i64,
}

impl TunedKernel for Fill {
    type Key = u32;
    type Config = FillConfig;
    const SCHEMA: &'static KernelSchema = &SCHEMA;
    const SOURCE_FINGERPRINT: &'static str = "fnv1a64:mock";

    fn key_values(bytes: &u32) -> KeyValues {
        KeyValues::new().push(*bytes as i64)
    }
    fn key_from_values(values: &[Value]) -> Result<u32, String> {
        Ok(int_key(&SCHEMA, values, "bytes", 1, 1 << 20)? as u32)
    }
    fn config_from_values(values: &[Value]) -> Result<FillConfig, String> {
        Ok(FillConfig {
            us: int_param(&SCHEMA, values, 0, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])?,
            fill: int_param(&SCHEMA, values, 1, &[RIGHT, 9])?,
        })
    }
    fn config_values(c: &FillConfig) -> Vec<Value> {
        vec![Value::Int(c.us), Value::Int(c.fill)]
    }
    /// 10 us; for a problem of 13 bytes, a variant that does not compile (`us` 0).
    fn analytic_default(_: Target, bytes: &u32, _: u64) -> FillConfig {
        let us = if *bytes == 13 { 0 } else { 10 };
        FillConfig { us, fill: RIGHT }
    }
    fn baked_table(_: Target) -> Option<&'static BakedTable> {
        None
    }
}

struct FillProblem<'a> {
    out: u64,
    bytes: u32,
    /// A read-only input right after `out` (address, bytes), and the `us` of the
    /// variant that also writes over its first bytes: an input-corrupting candidate
    /// whose own output is right.
    input: Option<(u64, usize, i64)>,
    _out: PhantomData<&'a mut [u8]>,
}

// SAFETY: `buffers` lists the one buffer a launch writes, with its real length.
unsafe impl PlannedKernel for Fill {
    type Problem<'a> = FillProblem<'a>;
    const SOURCE: &'static KernelSource = &SOURCE;

    /// Right configs at 8, 5 and 3 us, and the fastest of all (1 us) wrong.
    fn search_space(_: &DeviceInfo, _: &u32, _: u64) -> Vec<FillConfig> {
        [(8, RIGHT), (1, 9), (5, RIGHT), (3, RIGHT)]
            .map(|(us, fill)| FillConfig { us, fill })
            .to_vec()
    }
    fn variant(_: &DeviceInfo, _: &u32, c: &FillConfig) -> Variant {
        let v = Variant::new("fill")
            .define("MOCK_US", c.us)
            .define("MOCK_FILL", c.fill);
        if c.us == 0 {
            v.define("MOCK_FAIL", 1)
        } else {
            v
        }
    }
    fn problem_shape(p: &FillProblem<'_>) -> (u32, u64) {
        (p.bytes, 1)
    }
    fn buffers(p: &FillProblem<'_>) -> Vec<TuneBuffer> {
        let mut out = vec![TuneBuffer {
            name: "out",
            ptr: p.out,
            bytes: p.bytes as usize,
            role: BufferRole::Write,
        }];
        if let Some((ptr, bytes, _)) = p.input {
            out.push(TuneBuffer {
                name: "input",
                ptr,
                bytes,
                role: BufferRole::Read,
            });
        }
        out
    }
    fn launch_args(
        _: &DeviceInfo,
        c: &FillConfig,
        p: &FillProblem<'_>,
    ) -> kernels_core::Result<(LaunchDims, KernelArgs)> {
        let spill = match p.input {
            Some((_, _, greedy)) if greedy == c.us => 64,
            _ => 0,
        };
        let mut args = KernelArgs::new();
        args.ptr(p.out).u64(p.bytes as u64 + spill);
        Ok((LaunchDims::linear(1, 32), args))
    }
    fn reference(p: &FillProblem<'_>, _before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
        Some(vec![vec![RIGHT as f32; p.bytes as usize]])
    }
    /// Right: every byte of the output equals the expected one.
    fn check_outputs(
        _: &FillProblem<'_>,
        _before: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> Result<(), String> {
        let want: Vec<u8> = match expected {
            Expected::Run(w) => w[0].clone(),
            Expected::Reference(w) => w[0].iter().map(|&v| v as u8).collect(),
        };
        match got[0].iter().zip(&want).position(|(g, w)| g != w) {
            None => Ok(()),
            Some(i) => Err(format!("out[{i}] = {}, want {}", got[0][i], want[i])),
        }
    }
}

// SAFETY: the problem's one buffer is the uploaded one.
unsafe impl Tunable for Fill {
    fn tuning_inputs(bytes: &u32, _: u64) -> Vec<Vec<u8>> {
        vec![vec![0; *bytes as usize]]
    }
    fn tuning_problem<'a>(bytes: &u32, _: u64, at: &'a [u64]) -> FillProblem<'a> {
        FillProblem {
            out: at[0],
            bytes: *bytes,
            input: None,
            _out: PhantomData,
        }
    }
}

fn runtime(policy: Policy) -> Runtime<Mock> {
    let options = RuntimeOptions {
        policy,
        cache: DiskCache::disabled(),
        tune: TuneOptions::default(),
        pdl: false,
    };
    Runtime::<Mock>::with_options(<Mock as kernels_core::Backend>::open(0).unwrap(), options).unwrap()
}

/// Launches the stream has logged of the variants whose text contains `needle`.
fn launches_of(stream: &MockStream, needle: &str) -> usize {
    stream.launches().iter().filter(|v| v.contains(needle)).count()
}

/// The wrong variant (the only one writing 9) and a right one (5 us).
const WRONG: &str = "MOCK_FILL=9";
const RIGHT_5US: &str = "MOCK_US=5 ";

#[test]
fn an_offline_search_reports_the_wrong_candidate_and_never_times_it() {
    let rt = runtime(Policy::Serve);
    let stream = MockStream::default();
    let key = StaticKey::from_pairs(&SCHEMA, [("bytes", "64")]).unwrap();
    let tunable: &dyn DynTunable<Mock> = &TunableDyn::<Fill>::new();
    let record = tunable
        .search(&rt, &stream, &key, 1, &TuneOptions::default())
        .expect("a right candidate wins");
    assert_eq!(
        record.config,
        vec![Value::Int(3), Value::Int(RIGHT)],
        "the fastest right one"
    );
    let wrong: Vec<_> = record
        .candidates
        .iter()
        .filter(|c| {
            c.outcome
                .as_ref()
                .is_err_and(|e| e.starts_with(kernels_core::tune::WRONG_OUTPUT))
        })
        .collect();
    assert_eq!(wrong.len(), 1, "{:?}", record.candidates);
    assert_eq!(wrong[0].config, vec![Value::Int(1), Value::Int(9)]);
    assert!(
        wrong[0]
            .outcome
            .as_ref()
            .unwrap_err()
            .contains("out[0] = 9, want 7"),
        "{:?}",
        wrong[0].outcome
    );
    // The wrong variant ran once, for its check; the right ones ran for their timing too.
    assert_eq!(launches_of(&stream, WRONG), 1);
    assert!(launches_of(&stream, RIGHT_5US) > 1);
}

#[test]
fn an_online_search_rejects_the_wrong_candidate_and_serves_a_right_one() {
    let rt = runtime(Policy::Online);
    let stream = MockStream::default();
    let mut out = vec![0u8; 256];
    let p = FillProblem {
        out: out.as_mut_ptr() as u64,
        bytes: 256,
        input: None,
        _out: PhantomData,
    };
    let used = rt.run::<Fill>(&stream, &p).expect("online run");
    assert_eq!(used.resolved.source, Source::OnlineSearch);
    assert_eq!(used.resolved.config, FillConfig { us: 3, fill: RIGHT });
    assert_eq!(
        launches_of(&stream, WRONG),
        1,
        "the wrong variant ran only for its check"
    );
    assert!(
        out.iter().all(|&b| b == RIGHT as u8),
        "the caller's buffer holds a right run"
    );
}

#[test]
fn a_search_whose_default_does_not_run_times_nothing_unchecked() {
    // Without the default's output there is nothing to compare with: every other
    // candidate is refused, not timed, and the search reports that it failed.
    let rt = runtime(Policy::Serve);
    let stream = MockStream::default();
    let mut out = vec![0u8; 13];
    let p = FillProblem {
        out: out.as_mut_ptr() as u64,
        bytes: 13,
        input: None,
        _out: PhantomData,
    };
    let report = rt.tune::<Fill>(&stream, &p, &TuneOptions::default());
    assert!(
        report.candidates[0].outcome.is_err(),
        "the default does not compile"
    );
    for c in &report.candidates[1..] {
        let e = c.outcome.as_ref().unwrap_err();
        assert!(e.contains("no output to compare with"), "{e}");
    }
    assert!(report.failure.is_some());
    assert!(
        stream.launches().is_empty(),
        "nothing was timed: {:?}",
        stream.launches()
    );
}

#[test]
fn served_variants_are_verified_against_the_reference() {
    let rt = runtime(Policy::Serve);
    let stream = MockStream::default();
    assert_eq!(
        kernels_core::tune::verify::<Mock, Fill>(&rt, &stream, &64, 1, &FillConfig { us: 5, fill: RIGHT }),
        Ok(())
    );
    let e = kernels_core::tune::verify::<Mock, Fill>(&rt, &stream, &64, 1, &FillConfig { us: 1, fill: 9 })
        .unwrap_err();
    assert!(e.contains("out[0] = 9, want 7"), "{e}");
}

/// Several configs of one problem: one verdict each, in order; a wrong config between
/// two right ones does not make the next one fail.
#[test]
fn served_variants_of_one_problem_share_one_reference() {
    let rt = runtime(Policy::Serve);
    let stream = MockStream::default();
    let configs = [
        FillConfig { us: 5, fill: RIGHT },
        FillConfig { us: 1, fill: 9 },
        FillConfig { us: 3, fill: RIGHT },
    ];
    let verdicts = kernels_core::tune::verify_each::<Mock, Fill>(&rt, &stream, &64, 1, &configs).unwrap();
    assert_eq!(verdicts.len(), 3);
    assert_eq!(verdicts[0], Ok(()));
    assert!(
        verdicts[1].as_ref().unwrap_err().contains("out[0] = 9, want 7"),
        "{:?}",
        verdicts[1]
    );
    assert_eq!(verdicts[2], Ok(()));
    assert_eq!(
        kernels_core::tune::verify_each::<Mock, Fill>(&rt, &stream, &64, 1, &[]).unwrap(),
        Vec::<Result<(), String>>::new()
    );
}

#[test]
fn a_screened_search_checks_the_fastest_and_never_picks_a_wrong_one() {
    // One finalist: the quick pass ranks the wrong variant (1 us) first, its full run
    // fails the check, so the next fastest (3 us) is the finalist and the others are
    // screened out with their quick times.
    let rt = runtime(Policy::Serve);
    let stream = MockStream::default();
    let key = StaticKey::from_pairs(&SCHEMA, [("bytes", "64")]).unwrap();
    let tunable: &dyn DynTunable<Mock> = &TunableDyn::<Fill>::new();
    let opts = TuneOptions {
        finalists: 1,
        ..TuneOptions::default()
    };
    let record = tunable
        .search(&rt, &stream, &key, 1, &opts)
        .expect("a right candidate wins");
    assert_eq!(record.config, vec![Value::Int(3), Value::Int(RIGHT)]);
    let outcome = |us: i64, fill: i64| {
        record
            .candidates
            .iter()
            .find(|c| c.config == vec![Value::Int(us), Value::Int(fill)])
            .map(|c| c.outcome.clone())
            .expect("a candidate")
    };
    assert!(outcome(1, 9).is_err_and(|e| e.starts_with(kernels_core::tune::WRONG_OUTPUT)));
    for us in [5, 8] {
        let e = outcome(us, RIGHT).unwrap_err();
        assert!(e.starts_with(kernels_core::tune::SCREENED_OUT), "{e}");
    }
    assert!(outcome(10, RIGHT).is_ok(), "the default is timed in full");
    // The record says where the search's time went: every phase measured, the quick
    // pass and the full runs among them.
    let p = record.phases;
    assert!(p.screen > 0.0 && p.full > 0.0, "{p:?}");
    assert!(
        [p.inputs, p.compile, p.setup, p.finish]
            .iter()
            .all(|s| s.is_finite() && *s >= 0.0),
        "{p:?}"
    );
    assert!(p
        .summary()
        .is_some_and(|s| s.contains("screen") && s.contains("full")));
}

#[test]
fn a_candidate_that_writes_into_a_large_input_fails_the_search() {
    // `out` (64 bytes) followed by a read-only input above the unread limit: the 3 us
    // variant writes its output right and 64 bytes of the input too. Its check cannot
    // see that (large inputs are compared once, after the search), so the comparison
    // after the search fails it and trusts no candidate.
    let rt = runtime(Policy::Serve);
    let stream = MockStream::default();
    let input_bytes = kernels_core::tune::UNREAD_LIMIT + 1;
    let mut mem = vec![0u8; 64 + input_bytes];
    let base = mem.as_mut_ptr() as u64;
    let p = FillProblem {
        out: base,
        bytes: 64,
        input: Some((base + 64, input_bytes, 3)),
        _out: PhantomData,
    };
    let report = rt.tune::<Fill>(&stream, &p, &TuneOptions::default());
    let failure = report.failure.expect("the search fails");
    assert!(failure.contains("`input` is only read"), "{failure}");
    assert_eq!(report.chosen_index, None);
    // Without the corrupting variant the same search succeeds.
    let mut mem = vec![0u8; 64 + input_bytes];
    let base = mem.as_mut_ptr() as u64;
    let p = FillProblem {
        out: base,
        bytes: 64,
        input: Some((base + 64, input_bytes, -1)),
        _out: PhantomData,
    };
    let report = rt.tune::<Fill>(&stream, &p, &TuneOptions::default());
    assert!(report.failure.is_none(), "{:?}", report.failure);
    assert_eq!(report.chosen, FillConfig { us: 3, fill: RIGHT });
}
