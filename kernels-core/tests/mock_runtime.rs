//! The runtime written once over `Backend`, exercised GPU-free on the mock backend:
//! resolution and the memo, capture refusal, `warm` for every alignment class, and the
//! online policy's one search per shape.
//!
//! The kernel here, `Scale`, copies rows `y = x` in vectors of `vec` bf16 elements; its
//! variant defines `MOCK_US` (the mock's simulated duration), so a search on the mock
//! picks the config with the smallest `us`.

use std::marker::PhantomData;

use kernels_core::backend::mock::MockStream;
use kernels_core::cache::AlignClass;
use kernels_core::{
    Backend, BufferRole, DeviceInfo, DiskCache, Error, Expected, KernelArgs, KernelSource, LaunchDims, Mock,
    PlannedKernel, Policy, Result, Runtime, RuntimeOptions, Tunable, TuneBuffer, Variant,
};
use tuned::{BakedTable, Field, KernelSchema, KeyValues, Source, Target, TunedKernel, Value};

struct Scale;

static SCALE: KernelSchema = KernelSchema {
    kernel: "scale",
    key: &[Field::int("cols")],
    params: &[Field::int("vec"), Field::int("us")],
};

static SOURCE: KernelSource =
    KernelSource::new("scale", "extern \"C\" __global__ void scale() {}", "fnv1a64:0");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Config {
    vec: u32,
    us: u32,
}

#[derive(Clone, Copy, Debug)]
struct Problem<'a> {
    cols: u32,
    rows: u64,
    x: u64,
    y: u64,
    _buffers: PhantomData<&'a ()>,
}

impl TunedKernel for Scale {
    type Key = u32;
    type Config = Config;
    const SCHEMA: &'static KernelSchema = &SCALE;
    const SOURCE_FINGERPRINT: &'static str = "fnv1a64:0";

    fn key_values(cols: &u32) -> KeyValues {
        KeyValues::new().push(*cols as i64)
    }
    fn key_from_values(values: &[Value]) -> std::result::Result<u32, String> {
        values
            .first()
            .and_then(Value::as_int)
            .map(|c| c as u32)
            .ok_or_else(|| "cols".into())
    }
    fn config_from_values(values: &[Value]) -> std::result::Result<Config, String> {
        match values {
            [Value::Int(vec), Value::Int(us)] => Ok(Config {
                vec: *vec as u32,
                us: *us as u32,
            }),
            _ => Err("vec, us".into()),
        }
    }
    fn config_values(c: &Config) -> Vec<Value> {
        vec![Value::Int(c.vec as i64), Value::Int(c.us as i64)]
    }
    fn analytic_default(_: Target, _: &u32, _: u64) -> Config {
        Config { vec: 8, us: 5 }
    }
    fn baked_table(_: Target) -> Option<&'static BakedTable> {
        None
    }
    fn accepts(_: Target, cols: &u32, _: u64, c: &Config) -> bool {
        cols.is_multiple_of(c.vec)
    }
}

// SAFETY: nothing is launched on a device (the mock's kernels touch no memory), and the
// buffers listed are the problem's two.
unsafe impl PlannedKernel for Scale {
    type Problem<'a> = Problem<'a>;
    const SOURCE: &'static KernelSource = &SOURCE;

    fn search_space(_: &DeviceInfo, cols: &u32, _: u64) -> Vec<Config> {
        let mut space = Vec::new();
        for vec in [1, 2, 4, 8] {
            for us in [2, 3, 4] {
                if cols.is_multiple_of(vec) {
                    space.push(Config { vec, us });
                }
            }
        }
        space
    }

    fn variant(_: &DeviceInfo, cols: &u32, c: &Config) -> Variant {
        Variant::new("scale")
            .define("COLS", *cols)
            .define("VEC", c.vec)
            .define("MOCK_US", c.us)
    }

    fn problem_shape(p: &Problem<'_>) -> (u32, u64) {
        (p.cols, p.rows)
    }

    fn buffers(p: &Problem<'_>) -> Vec<TuneBuffer> {
        let bytes = (p.rows * p.cols as u64 * 2) as usize;
        vec![
            TuneBuffer {
                name: "x",
                ptr: p.x,
                bytes,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "y",
                ptr: p.y,
                bytes,
                role: BufferRole::Write,
            },
        ]
    }

    fn fit_alignment(_: &DeviceInfo, _: &u32, mut c: Config, align: AlignClass) -> Config {
        while c.vec > 1 && c.vec * 2 > align.bytes() {
            c.vec /= 2;
        }
        c
    }

    fn launch_args(_: &DeviceInfo, c: &Config, p: &Problem<'_>) -> Result<(LaunchDims, KernelArgs)> {
        let need = u64::from(c.vec) * 2;
        if !p.x.is_multiple_of(need) || !p.y.is_multiple_of(need) {
            return Err(Error::invalid(
                "x",
                format!("vec {} needs {need}-byte alignment", c.vec),
            ));
        }
        let mut args = KernelArgs::new();
        args.ptr(p.x).ptr(p.y);
        Ok((LaunchDims::linear(p.rows as u32, 128), args))
    }

    fn reference(_: &Problem<'_>, _: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
        None
    }

    /// The mock's kernels write nothing: every run leaves `y` as the default's did.
    fn check_outputs(
        _: &Problem<'_>,
        _: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> std::result::Result<(), String> {
        match expected {
            Expected::Run(want) if got == want => Ok(()),
            _ => Err("y differs from the default's run".into()),
        }
    }
}

// SAFETY: the problem covers exactly the two uploaded buffers.
unsafe impl Tunable for Scale {
    fn tuning_inputs(cols: &u32, rows: u64) -> Vec<Vec<u8>> {
        let bytes = (rows * *cols as u64 * 2) as usize;
        vec![vec![1u8; bytes], vec![0u8; bytes]]
    }
    fn tuning_problem<'a>(cols: &u32, rows: u64, at: &'a [u64]) -> Problem<'a> {
        Problem {
            cols: *cols,
            rows,
            x: at[0],
            y: at[1],
            _buffers: PhantomData,
        }
    }
}

fn runtime(policy: Policy) -> Runtime<Mock> {
    let options = RuntimeOptions {
        policy,
        cache: DiskCache::disabled(),
        ..RuntimeOptions::default()
    };
    Runtime::with_options(Mock::open(0).unwrap(), options).unwrap()
}

/// Two buffers of `rows x cols` bf16 on the mock, and a problem over them starting
/// `offset` bytes in.
fn problem(s: &MockStream, cols: u32, rows: u64, offset: u64) -> (Vec<<Mock as Backend>::Buffer>, u64, u64) {
    let bytes = (rows * cols as u64 * 2 + 64) as usize;
    let bufs: Vec<_> = (0..2).map(|_| Mock::alloc(s, bytes).unwrap()).collect();
    // Host allocations are at least 16-byte aligned; round up to be sure.
    let base = |b: &<Mock as Backend>::Buffer| Mock::address(b).next_multiple_of(16) + offset;
    let (x, y) = (base(&bufs[0]), base(&bufs[1]));
    (bufs, x, y)
}

fn scale(cols: u32, rows: u64, x: u64, y: u64) -> Problem<'static> {
    Problem {
        cols,
        rows,
        x,
        y,
        _buffers: PhantomData,
    }
}

#[test]
fn a_shape_compiles_once_and_later_calls_hit_the_memo() {
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let (_bufs, x, y) = problem(&s, 4096, 4, 0);
    let first = rt.run::<Scale>(&s, &scale(4096, 4, x, y)).unwrap();
    assert_eq!(first.resolved.source, Source::Default);
    assert_eq!(first.resolved.config, Config { vec: 8, us: 5 });
    rt.run::<Scale>(&s, &scale(4096, 4, x, y)).unwrap();
    let stats = rt.stats();
    assert_eq!((stats.compiled, stats.memo_hits, stats.searches), (1, 1, 0));
    assert_eq!(s.launches().len(), 2);
}

/// `Runtime::kernel` by variant: the second call returns the same loaded kernel from
/// the memo (also while capturing), another define compiles another kernel, and a
/// variant precompiled by `warm`-style precompile is found too.
#[test]
fn kernels_named_by_variant_compile_once_and_come_from_the_memo() {
    use std::sync::Arc;
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let a = Variant::new("scale").define("MOCK_US", 3);
    let b = Variant::new("scale").define("MOCK_US", 4);
    let first = rt.kernel(&s, &SOURCE, &a).unwrap();
    let again = rt.kernel(&s, &SOURCE, &a).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!((rt.stats().compiled, rt.stats().memo_hits), (1, 1));
    s.capturing.set(true);
    let captured = rt.kernel(&s, &SOURCE, &a).unwrap();
    assert!(Arc::ptr_eq(&first, &captured));
    let err = rt.kernel(&s, &SOURCE, &b).unwrap_err();
    assert!(matches!(err, Error::CompileWhileCapturing { .. }), "{err}");
    s.capturing.set(false);
    let other = rt.kernel(&s, &SOURCE, &b).unwrap();
    assert!(!Arc::ptr_eq(&first, &other));
    // A source of another fingerprint is another module, though the variant is equal.
    static EDITED: KernelSource =
        KernelSource::new("scale", "extern \"C\" __global__ void scale() {}", "fnv1a64:1");
    let edited = rt.kernel(&s, &EDITED, &a).unwrap();
    assert!(!Arc::ptr_eq(&first, &edited));
    assert_eq!((rt.stats().compiled, rt.stats().memo_hits), (3, 2));
    // Precompiled modules are found by variant as well.
    let c = Variant::new("scale").define("MOCK_US", 5);
    for r in rt.precompile(&[(SOURCE, c.clone())]) {
        r.unwrap();
    }
    s.capturing.set(true);
    rt.kernel(&s, &SOURCE, &c).unwrap();
    rt.kernel(&s, &SOURCE, &c).unwrap();
    assert_eq!((rt.stats().compiled, rt.stats().memo_hits), (4, 4));
}

/// A chained variant (launched with programmatic dependent launch where it applies) is
/// its own module key and loaded kernel: loading it never hands back the plain
/// variant's kernel, whose launches are made the other way, nor the reverse.
#[test]
fn a_chained_variant_is_loaded_apart_from_its_plain_twin() {
    use std::sync::Arc;
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let plain = Variant::new("scale").define("MOCK_US", 3);
    let chained = plain.clone().chained();
    assert_ne!(rt.module_key(&SOURCE, &plain), rt.module_key(&SOURCE, &chained));
    let a = rt.kernel(&s, &SOURCE, &plain).unwrap();
    let b = rt.kernel(&s, &SOURCE, &chained).unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert!(Arc::ptr_eq(&b, &rt.kernel(&s, &SOURCE, &chained).unwrap()));
    // The mock backend has no programmatic launch: neither launches that way.
    assert!(!rt.pdl_for_variant(&SOURCE, &chained));
}

#[test]
fn a_compile_while_capturing_is_refused_and_nothing_is_launched() {
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let (_bufs, x, y) = problem(&s, 4096, 4, 0);
    s.capturing.set(true);
    let err = rt.run::<Scale>(&s, &scale(4096, 4, x, y)).unwrap_err();
    assert!(matches!(err, Error::CompileWhileCapturing { .. }), "{err}");
    assert!(s.launches().is_empty());
    assert_eq!(rt.stats().compiled, 0);
}

#[test]
fn warm_prepares_every_alignment_class_so_unaligned_problems_capture() {
    let rt = runtime(Policy::Serve);
    let s = MockStream::default();
    let warmed = rt.warm::<Scale>(&s, &[(4096, 4)]);
    assert_eq!(warmed.len(), 1);
    assert_eq!(warmed[0].as_ref().unwrap().resolved.config.vec, 8);
    // vec 8, 4, 2 and 1 (the 1- and 2-byte classes both narrow to 1).
    assert_eq!(rt.stats().compiled, 4);

    s.capturing.set(true);
    for (offset, vec) in [(0, 8), (8, 4), (4, 2), (2, 1)] {
        let (_bufs, x, y) = problem(&s, 4096, 4, offset);
        let used = rt.run::<Scale>(&s, &scale(4096, 4, x, y)).unwrap();
        assert_eq!(used.resolved.config.vec, vec, "offset {offset}");
        assert_eq!(used.resolved.source, Source::Default);
    }
    assert_eq!(rt.stats().compiled, 4, "nothing compiled while capturing");
    let launched = s.launches();
    assert_eq!(launched.len(), 4);
    assert!(launched[3].contains("-DVEC=1"), "{launched:?}");
}

#[test]
fn the_online_policy_searches_a_shape_once() {
    let rt = runtime(Policy::Online);
    let s = MockStream::default();
    let (_bufs, x, y) = problem(&s, 4096, 4, 0);
    let first = rt.run::<Scale>(&s, &scale(4096, 4, x, y)).unwrap();
    assert_eq!(first.resolved.source, Source::OnlineSearch);
    assert_eq!(first.resolved.config.us, 2, "the fastest simulated config wins");
    assert_eq!(rt.stats().searches, 1);
    let again = rt.run::<Scale>(&s, &scale(4096, 4, x, y)).unwrap();
    assert_eq!(again.resolved.config, first.resolved.config);
    assert_eq!(rt.stats().searches, 1, "a memo hit searches nothing");
    // Another shape is another search.
    let (_bufs2, x2, y2) = problem(&s, 2048, 4, 0);
    rt.run::<Scale>(&s, &scale(2048, 4, x2, y2)).unwrap();
    assert_eq!(rt.stats().searches, 2);
}
