//! A kernel family whose call is a sequence of launches, GPU-free on the mock backend:
//! the tuner times the whole sequence and checks the buffers it leaves; the runtime
//! compiles, memoizes, warms and launches every step, and refuses a compile while
//! capturing before anything launches.
//!
//! `Pipe` runs three kernels per call: `stage` (takes `first` us, writes `mid`), `relay`
//! (1 us, the same variant for every config) and `finish` (takes `last` us, writes
//! `fill` over `out`). The mock's `MOCK_FILL` writes a byte over the buffer named by a
//! launch's first two arguments.

use std::marker::PhantomData;

use kernels_core::backend::mock::MockStream;
use kernels_core::tune::{TuneOptions, WRONG_OUTPUT};
use kernels_core::{
    Backend, BufferRole, DeviceInfo, DiskCache, DynTunable, Error, Expected, KernelArgs, KernelSource,
    LaunchDims, Launches, LoadedKernel, Mock, PlannedKernel, Policy, Runtime, RuntimeOptions, Tunable,
    TunableDyn, TuneBuffer, Variant,
};
use tuned::{
    int_key, int_param, BakedTable, Field, KernelSchema, KeyValues, Source, StaticKey, Target, TunedKernel,
    Value,
};

static SCHEMA: KernelSchema = KernelSchema {
    kernel: "mock_pipe",
    key: &[Field::int("bytes")],
    params: &[Field::int("first"), Field::int("last"), Field::int("fill")],
};

static SOURCE: KernelSource =
    KernelSource::new("mock_pipe", "// the mock backend runs nothing", "fnv1a64:mock");

/// What `stage` writes into `mid`, and every right `finish` into `out`.
const MID: u8 = 3;
const RIGHT: i64 = 7;
const WRONG: i64 = 9;
/// A problem of this many bytes plans one launch fewer than its call compiles.
const BROKEN_BYTES: u32 = 13;

struct Pipe;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PipeConfig {
    first: i64,
    last: i64,
    fill: i64,
}

const fn config(first: i64, last: i64, fill: i64) -> PipeConfig {
    PipeConfig { first, last, fill }
}

impl TunedKernel for Pipe {
    type Key = u32;
    type Config = PipeConfig;
    const SCHEMA: &'static KernelSchema = &SCHEMA;
    const SOURCE_FINGERPRINT: &'static str = "fnv1a64:mock";

    fn key_values(bytes: &u32) -> KeyValues {
        KeyValues::new().push(*bytes as i64)
    }
    fn key_from_values(values: &[Value]) -> Result<u32, String> {
        Ok(int_key(&SCHEMA, values, "bytes", 1, 1 << 20)? as u32)
    }
    fn config_from_values(values: &[Value]) -> Result<PipeConfig, String> {
        let us: Vec<i64> = (1..=10).collect();
        Ok(PipeConfig {
            first: int_param(&SCHEMA, values, 0, &us)?,
            last: int_param(&SCHEMA, values, 1, &us)?,
            fill: int_param(&SCHEMA, values, 2, &[RIGHT, WRONG])?,
        })
    }
    fn config_values(c: &PipeConfig) -> Vec<Value> {
        vec![Value::Int(c.first), Value::Int(c.last), Value::Int(c.fill)]
    }
    /// 5 + 1 + 5 = 11 us a call.
    fn analytic_default(_: Target, _: &u32, _: u64) -> PipeConfig {
        config(5, 5, RIGHT)
    }
    fn baked_table(_: Target) -> Option<&'static BakedTable> {
        None
    }
}

struct PipeProblem<'a> {
    mid: u64,
    out: u64,
    bytes: u32,
    _buffers: PhantomData<&'a mut [u8]>,
}

fn step(entry: &str, us: i64) -> Variant {
    Variant::new(entry).define("MOCK_US", us)
}

fn fill_args(ptr: u64, bytes: u32) -> KernelArgs {
    let mut args = KernelArgs::new();
    args.ptr(ptr).u64(bytes as u64);
    args
}

// SAFETY: `buffers` lists both buffers the launches write, with their real lengths.
unsafe impl PlannedKernel for Pipe {
    type Problem<'a> = PipeProblem<'a>;
    const SOURCE: &'static KernelSource = &SOURCE;

    /// By the first launch alone (1, 8) would win; by the call, (4, 2) does (7 us
    /// against 10); (1, 1) is the fastest call and finishes wrong.
    fn search_space(_: &DeviceInfo, _: &u32, _: u64) -> Vec<PipeConfig> {
        vec![
            config(1, 8, RIGHT),
            config(1, 1, WRONG),
            config(6, 6, RIGHT),
            config(4, 2, RIGHT),
        ]
    }
    fn variant(_: &DeviceInfo, _: &u32, c: &PipeConfig) -> Variant {
        step("stage", c.first).define("MOCK_FILL", MID)
    }
    fn variants(device: &DeviceInfo, key: &u32, c: &PipeConfig) -> Vec<Variant> {
        vec![
            Self::variant(device, key, c),
            step("relay", 1),
            step("finish", c.last).define("MOCK_FILL", c.fill),
        ]
    }
    fn problem_shape(p: &PipeProblem<'_>) -> (u32, u64) {
        (p.bytes, 1)
    }
    fn buffers(p: &PipeProblem<'_>) -> Vec<TuneBuffer> {
        let buffer = |name, ptr| TuneBuffer {
            name,
            ptr,
            bytes: p.bytes as usize,
            role: BufferRole::Write,
        };
        vec![buffer("mid", p.mid), buffer("out", p.out)]
    }
    fn launch_args(
        _: &DeviceInfo,
        _: &PipeConfig,
        p: &PipeProblem<'_>,
    ) -> kernels_core::Result<(LaunchDims, KernelArgs)> {
        Ok((LaunchDims::linear(1, 32), fill_args(p.mid, p.bytes)))
    }
    fn launches(device: &DeviceInfo, c: &PipeConfig, p: &PipeProblem<'_>) -> kernels_core::Result<Launches> {
        let (dims, args) = Self::launch_args(device, c, p)?;
        let mut l = Launches::one(dims, args);
        // The relay writes nothing: its first two arguments name no bytes.
        l.push(LaunchDims::linear(1, 32), fill_args(p.mid, 0))?;
        if p.bytes != BROKEN_BYTES {
            l.push(LaunchDims::linear(1, 32), fill_args(p.out, p.bytes))?;
        }
        Ok(l)
    }
    fn reference(p: &PipeProblem<'_>, _: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
        let n = p.bytes as usize;
        Some(vec![vec![MID as f32; n], vec![RIGHT as f32; n]])
    }
    /// Every byte of both buffers as expected.
    fn check_outputs(
        _: &PipeProblem<'_>,
        _: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> Result<(), String> {
        let want: Vec<Vec<u8>> = match expected {
            Expected::Run(w) => w.to_vec(),
            Expected::Reference(w) => w.iter().map(|b| b.iter().map(|&v| v as u8).collect()).collect(),
        };
        for (name, (g, w)) in ["mid", "out"].iter().zip(got.iter().zip(&want)) {
            if let Some(i) = g.iter().zip(w).position(|(a, b)| a != b) {
                return Err(format!("{name}[{i}] = {}, want {}", g[i], w[i]));
            }
        }
        Ok(())
    }
}

// SAFETY: the problem's buffers are the two uploaded ones.
unsafe impl Tunable for Pipe {
    fn tuning_inputs(bytes: &u32, _: u64) -> Vec<Vec<u8>> {
        vec![vec![0; *bytes as usize]; 2]
    }
    fn tuning_problem<'a>(bytes: &u32, _: u64, at: &'a [u64]) -> PipeProblem<'a> {
        PipeProblem {
            mid: at[0],
            out: at[1],
            bytes: *bytes,
            _buffers: PhantomData,
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
    Runtime::with_options(Mock::open(0).unwrap(), options).unwrap()
}

/// Host buffers `mid` and `out` of `bytes` each, and the problem over them.
struct Host {
    mid: Vec<u8>,
    out: Vec<u8>,
}

impl Host {
    fn new(bytes: usize) -> Host {
        Host {
            mid: vec![0; bytes],
            out: vec![0; bytes],
        }
    }
    fn problem(&mut self) -> PipeProblem<'_> {
        PipeProblem {
            mid: self.mid.as_mut_ptr() as u64,
            out: self.out.as_mut_ptr() as u64,
            bytes: self.mid.len() as u32,
            _buffers: PhantomData,
        }
    }
}

/// The entry points of the launches logged, in order.
fn entries(s: &MockStream) -> Vec<String> {
    s.launches()
        .iter()
        .map(|v| v.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_tuner_times_the_whole_call_and_checks_what_it_leaves() {
    let rt = runtime(Policy::Serve);
    let stream = MockStream::default();
    let key = StaticKey::from_pairs(&SCHEMA, [("bytes", "64")]).unwrap();
    let tunable: &dyn DynTunable<Mock> = &TunableDyn::<Pipe>::new();
    let record = tunable
        .search(&rt, &stream, &key, 1, &TuneOptions::default())
        .expect("a right candidate wins");
    assert_eq!(
        record.config,
        Pipe::config_values(&config(4, 2, RIGHT)),
        "the fastest right call, not the fastest first launch"
    );
    // The simulated clock (read through f32 milliseconds): every launch of the call
    // between the events.
    let us = |t: f64| (t * 1000.0).round() / 1000.0;
    assert_eq!((us(record.us), record.default_us.map(us)), (7.0, Some(11.0)));
    let times: Vec<_> = record.candidates.iter().map(|c| c.outcome.clone()).collect();
    assert_eq!(times[1].clone().map(us), Ok(10.0), "(1, 8): 1 + 1 + 8");
    let wrong = times[2].as_ref().unwrap_err();
    assert!(
        wrong.starts_with(WRONG_OUTPUT) && wrong.contains("out[0] = 9, want 7"),
        "the last launch's output is checked: {wrong}"
    );
    // The wrong call ran once, for its check; the others for their timing too.
    let finishes = |us: i64, fill: i64| {
        let v = format!("finish -DMOCK_US={us} -DMOCK_FILL={fill}");
        stream.launches().iter().filter(|l| **l == v).count()
    };
    assert_eq!(finishes(1, WRONG), 1);
    assert!(finishes(2, RIGHT) > 1);
    // Every call launched its three kernels in order.
    let e = entries(&stream);
    assert_eq!(e.len() % 3, 0, "{e:?}");
    for call in e.chunks(3) {
        assert_eq!(call, ["stage", "relay", "finish"]);
    }
    // The candidates digest covers every launch's variant: the relay's too.
    let info = rt.info().clone();
    let digest = kernels_core::launch::candidates_digest::<Pipe>(&info, &64, 1);
    assert_eq!(tunable.candidates(&info, &key, 1), digest);
}

#[test]
fn an_online_run_leaves_the_winners_call_in_the_callers_buffers() {
    let rt = runtime(Policy::Online);
    let stream = MockStream::default();
    let mut host = Host::new(32);
    let used = rt.run::<Pipe>(&stream, &host.problem()).expect("online run");
    assert_eq!(used.resolved.source, Source::OnlineSearch);
    assert_eq!(used.resolved.config, config(4, 2, RIGHT));
    assert_eq!(used.kernels.len(), 3);
    assert_eq!(used.kernel().variant(), "stage -DMOCK_US=4 -DMOCK_FILL=3");
    assert!(host.mid.iter().all(|&b| b == MID));
    assert!(host.out.iter().all(|&b| b == RIGHT as u8));
}

#[test]
fn a_call_compiles_each_variant_once_and_later_calls_hit_the_memo() {
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let mut host = Host::new(32);
    let first = rt.run::<Pipe>(&s, &host.problem()).unwrap();
    assert_eq!(first.resolved.source, Source::Default);
    assert_eq!(rt.stats().compiled, 3);
    let memo = rt.stats().memo_hits;
    rt.run::<Pipe>(&s, &host.problem()).unwrap();
    assert_eq!(rt.stats().compiled, 3);
    assert_eq!(rt.stats().memo_hits, memo + 1, "one memo hit for the whole call");
    assert_eq!(entries(&s), ["stage", "relay", "finish"].repeat(2));
    assert!(host.out.iter().all(|&b| b == RIGHT as u8));
}

#[test]
fn a_capture_before_warm_is_refused_and_after_warm_launches_the_call() {
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let mut host = Host::new(32);
    s.capturing.set(true);
    let err = rt.run::<Pipe>(&s, &host.problem()).unwrap_err();
    assert!(matches!(err, Error::CompileWhileCapturing { .. }), "{err}");
    assert!(s.launches().is_empty());
    assert_eq!(rt.stats().compiled, 0);

    s.capturing.set(false);
    let warmed = rt.warm::<Pipe>(&s, &[(32, 1)]);
    assert_eq!(warmed[0].as_ref().unwrap().kernels.len(), 3);
    assert_eq!(
        rt.stats().compiled,
        3,
        "the config fits every class: one call's variants"
    );
    s.capturing.set(true);
    rt.run::<Pipe>(&s, &host.problem()).unwrap();
    assert_eq!(rt.stats().compiled, 3, "nothing compiled while capturing");
    assert_eq!(entries(&s), ["stage", "relay", "finish"]);

    // The DynTunable's precompile goes through warm too.
    s.capturing.set(false);
    let tunable: &dyn DynTunable<Mock> = &TunableDyn::<Pipe>::new();
    let key = StaticKey::from_pairs(&SCHEMA, [("bytes", "48")]).unwrap();
    let r = tunable.precompile(&rt, &s, &[(key, 1)]);
    assert!(matches!(r[0], Ok(Source::Default)), "{:?}", r[0]);
}

#[test]
fn a_call_whose_launches_and_variants_disagree_launches_nothing() {
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let mut host = Host::new(BROKEN_BYTES as usize);
    let e = rt.run::<Pipe>(&s, &host.problem()).unwrap_err().to_string();
    assert!(e.contains("3 compiled variants for 2 planned launches"), "{e}");
    assert!(s.launches().is_empty());
}

#[test]
fn a_served_call_is_verified_against_the_reference() {
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let verify = |c| kernels_core::tune::verify::<Mock, Pipe>(&rt, &s, &64, 1, &c);
    assert_eq!(verify(config(4, 2, RIGHT)), Ok(()));
    let e = verify(config(1, 1, WRONG)).unwrap_err();
    assert!(e.contains("out[0] = 9, want 7"), "{e}");
    // The plans of a call: every variant with its launch.
    let mut host = Host::new(16);
    let plans = Pipe::plans(rt.info(), &config(4, 2, RIGHT), &host.problem()).unwrap();
    let names: Vec<String> = plans.iter().map(|p| p.variant.entry().to_string()).collect();
    assert_eq!(names, ["stage", "relay", "finish"]);
    assert_eq!(plans[2].args.slots()[1], 16);
}
