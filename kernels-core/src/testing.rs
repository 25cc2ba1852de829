//! Helpers for the GPU tests of every kernel family and backend, in one place: what a
//! test does where it cannot run ([`skip_or_fail`], `KERNELS_REQUIRE_GPU`), how an
//! output is compared with its CPU reference ([`compare_rows`]) and the awkward shapes
//! the row kernels are run on ([`Case`], [`case_input`]), which need no GPU; with the
//! `cuda` feature, the NVIDIA tests' runtime, buffers and every-config walk (`cuda`);
//! with the `rocm` feature, the AMD tests' runtime and buffers (`hip`).

use tuned::DType;

use crate::{decode, encode, Rows};

/// The environment variable that turns a GPU test's skip into a failure, for runs on
/// a machine that must have the GPU: a boolean flag (`1`, `true`, `yes`, `on`, any
/// case; [`tuned::parse_flag`]).
pub const REQUIRE_GPU_ENV: &str = "KERNELS_REQUIRE_GPU";

/// What a GPU test does where it cannot run: with `KERNELS_REQUIRE_GPU` on it fails
/// (panics, naming `test` and `why`), and a value that is no boolean fails too;
/// otherwise it prints `SKIPPED <test>: <why>` to stderr directly, past the test
/// harness's output capture, so the skip shows in every run's output instead of
/// passing silently.
pub fn skip_or_fail(test: &str, why: &str) {
    match tuned::env_flag(REQUIRE_GPU_ENV) {
        Ok(true) => panic!("{test}: {REQUIRE_GPU_ENV} is on but {why}"),
        Err(e) => panic!("{test}: {e}"),
        Ok(false) => {}
    }
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Compares an output `got` with the reference `want`, both laid out as `shape`: on
/// each row's columns within `atol + rtol * |want|` (`tol` = (atol, rtol)), NaN where
/// `want` is NaN and the same infinity where it is infinite; in the padding between
/// rows, unchanged (the kernels must not write it; a NaN poison equals any NaN). The
/// error names `what` and the first mismatch.
pub fn compare_rows(
    what: &str,
    got: &[f32],
    want: &[f32],
    shape: Rows,
    tol: (f64, f64),
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, want {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (r, c) = (i / shape.stride, i % shape.stride);
        if r >= shape.rows || c >= shape.cols {
            if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
                return Err(format!("{what}: padding element {i} was written ({g}, was {w})"));
            }
            continue;
        }
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            ((g as f64) - (w as f64)).abs() <= tol.0 + tol.1 * (w as f64).abs()
        };
        if !ok {
            return Err(format!("{what}: row {r} col {c}: got {g}, want {w}"));
        }
    }
    Ok(())
}

/// [`compare_rows`] that panics with its error: for tests.
pub fn assert_rows(what: &str, got: &[f32], want: &[f32], shape: Rows, tol: (f64, f64)) {
    compare_rows(what, got, want, shape, tol).unwrap_or_else(|e| panic!("{e}"));
}

/// `v` as the device holds it in `dtype` (each value rounded through the storage type).
pub fn stored(dtype: DType, v: &[f32]) -> Vec<f32> {
    decode(dtype, &encode(dtype, v))
}

/// One shape the GPU tests of a row kernel run: `rows` rows of `cols` elements of
/// `dtype`, rows `cols + pad` apart, every buffer `offset` elements off 16-byte
/// alignment, with special values (inf, -inf, NaN) in its first rows where `specials`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case {
    pub dtype: DType,
    pub cols: usize,
    pub rows: usize,
    pub pad: usize,
    pub offset: usize,
    pub specials: bool,
}

impl Case {
    /// The case of these fields, in this order.
    pub const fn new(
        dtype: DType,
        cols: usize,
        rows: usize,
        pad: usize,
        offset: usize,
        specials: bool,
    ) -> Case {
        Case {
            dtype,
            cols,
            rows,
            pad,
            offset,
            specials,
        }
    }

    /// Its row layout.
    pub fn shape(&self) -> Rows {
        Rows::strided(self.rows, self.cols, self.cols + self.pad)
    }
}

/// The awkward shapes every row kernel's GPU tests run on: 1, odd and prime columns,
/// one row, row strides above cols, buffers not 16-byte aligned, special values, and
/// rows long enough for the streaming paths, in each storage type.
pub fn row_cases() -> Vec<Case> {
    let c = Case::new;
    vec![
        c(DType::Bf16, 1, 1, 0, 0, false),
        c(DType::Bf16, 97, 5, 3, 1, false),
        c(DType::Bf16, 1000, 37, 8, 0, true),
        c(DType::Bf16, 4096, 9, 8, 0, true),
        c(DType::Bf16, 4096, 3, 0, 1, false),
        c(DType::Bf16, 40000, 3, 8, 0, false),
        c(DType::F16, 3, 7, 1, 1, false),
        c(DType::F16, 2048, 5, 0, 0, true),
        c(DType::F32, 7, 4, 2, 0, false),
        c(DType::F32, 4096, 5, 4, 2, true),
    ]
}

/// Rows a case with special values needs: one each for +inf, NaN and a -inf, one of
/// only -inf, and a row without any.
pub const SPECIAL_ROWS: usize = 5;

/// The input of `case` (every element of the span, padding included), values in
/// `[-scale, scale)` from `seed`, rounded to the case's dtype, and its layout. With
/// `case.specials`: +inf in row 1, NaN in row 2, -inf in row 3 and, where
/// `neg_inf_row`, every column of row 4 -inf (softmax's row of nothing); row 0 keeps
/// none. Panics where a case asks for special values with fewer than
/// [`SPECIAL_ROWS`] rows, so none is left out silently.
pub fn case_input(case: &Case, seed: u64, scale: f32, neg_inf_row: bool) -> (Vec<f32>, Rows) {
    let shape = case.shape();
    let n = shape.span().expect("a case's span fits");
    let mut x = crate::pseudo_random(n, seed, scale, 0.0);
    if case.specials {
        assert!(
            case.rows >= SPECIAL_ROWS,
            "{case:?}: special values need {SPECIAL_ROWS} rows"
        );
        let at = |r: usize, c: usize| r * shape.stride + c;
        x[at(1, case.cols / 2)] = f32::INFINITY;
        x[at(2, 0)] = f32::NAN;
        x[at(3, case.cols - 1)] = f32::NEG_INFINITY;
        if neg_inf_row {
            for c in 0..case.cols {
                x[at(4, c)] = f32::NEG_INFINITY;
            }
        }
    }
    (stored(case.dtype, &x), shape)
}

/// What the CUDA GPU tests of the kernel families share (feature `cuda`): a runtime on
/// device 0 that skips (or fails, see [`skip_or_fail`]) without an NVIDIA GPU, device
/// buffers of converted host values, every config of a space compiled, and a tally of
/// checked runs.
#[cfg(feature = "cuda")]
pub mod cuda {
    use std::sync::Arc;

    use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
    use tuned::{DType, Target};

    use crate::{
        decode, encode, AlignClass, CudaDevice, CudaRuntime, DiskCache, PlannedKernel, Policy, RuntimeOptions,
    };

    /// A runtime on NVIDIA device 0 with `options` and a new stream on it; `None`
    /// (after [`super::skip_or_fail`] naming `test`) where there is no NVIDIA GPU.
    pub fn runtime_with(test: &str, options: RuntimeOptions) -> Option<(CudaRuntime, Arc<CudaStream>)> {
        let dev = match CudaDevice::open(0) {
            Ok(d) => d,
            Err(e) => {
                super::skip_or_fail(test, &format!("no NVIDIA GPU found ({e})"));
                return None;
            }
        };
        let rt = CudaRuntime::with_options(dev, options).expect("NVRTC loads where an NVIDIA GPU is");
        let stream = rt.device().new_stream().expect("stream");
        Some((rt, stream))
    }

    /// [`runtime_with`] resolving under `policy`, with the disk cache of the
    /// environment and plain launches.
    pub fn runtime(test: &str, policy: Policy) -> Option<(CudaRuntime, Arc<CudaStream>)> {
        runtime_with(
            test,
            RuntimeOptions {
                policy,
                cache: DiskCache::from_env(),
                ..RuntimeOptions::default()
            },
        )
    }

    /// A runtime like `plain` (same device, policy and cache) that launches with
    /// programmatic dependent launch; `None` (after [`super::skip_or_fail`]) below
    /// sm_90, where there is none to test.
    pub fn pdl_runtime(test: &str, plain: &CudaRuntime) -> Option<CudaRuntime> {
        let cc = plain.info().compute_capability;
        if cc.0 < 9 {
            super::skip_or_fail(
                test,
                &format!(
                    "programmatic dependent launch needs sm_90; this GPU is sm_{}{}",
                    cc.0, cc.1
                ),
            );
            return None;
        }
        let options = RuntimeOptions {
            pdl: true,
            ..plain.options().clone()
        };
        Some(CudaRuntime::with_options(plain.device().clone(), options).expect("runtime"))
    }

    /// Captures what `body` enqueues on `stream` into a CUDA graph and replays it once.
    /// Every kernel `body` launches must be loaded already: a capture may not compile.
    pub fn replay_captured(stream: &Arc<CudaStream>, body: impl FnOnce()) {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .expect("begin capture");
        body();
        let graph = stream
            .end_capture(CUgraphInstantiate_flags(0))
            .expect("end capture")
            .expect("a graph");
        graph.launch().expect("graph launch");
    }

    /// Asserts that a chain of dependent launches gives, bit for bit, `want` (every
    /// buffer after the same launches made one at a time by a plain runtime), when
    /// `chained(runtime, graph)` enqueues it at once: with `plain` launches, then with
    /// `pdl`'s programmatic dependent launches, eagerly and replayed from a CUDA graph.
    pub fn assert_chains_match(
        plain: &CudaRuntime,
        pdl: &CudaRuntime,
        want: &[Vec<f32>],
        chained: impl Fn(&CudaRuntime, bool) -> Vec<Vec<f32>>,
    ) {
        let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|f| f.to_bits()).collect::<Vec<_>>();
        let want = bits(want);
        assert!(
            bits(&chained(plain, false)) == want,
            "plain launches enqueued together differ from the same launches one at a time"
        );
        assert!(
            bits(&chained(pdl, false)) == want,
            "eager launches with programmatic dependent launch differ from plain ones"
        );
        assert!(
            bits(&chained(pdl, true)) == want,
            "a CUDA graph of launches with programmatic dependent launch differs from plain launches"
        );
    }

    /// Device memory holding host values converted to a dtype, its usable part
    /// `offset` elements in (an offset makes it not 16-byte aligned).
    pub struct Buf {
        slice: CudaSlice<u8>,
        dtype: DType,
        offset: usize,
    }

    impl Buf {
        /// Allocates and fills it; panics where the device refuses (a test helper).
        pub fn new(stream: &Arc<CudaStream>, dtype: DType, host: &[f32], offset: usize) -> Buf {
            let mut all = vec![0.0f32; offset];
            all.extend_from_slice(host);
            let slice = stream.clone_htod(&encode(dtype, &all)).expect("htod");
            Buf { slice, dtype, offset }
        }
        /// The element type.
        pub fn dtype(&self) -> DType {
            self.dtype
        }
        /// Elements in the usable part.
        pub fn len(&self) -> usize {
            self.slice.len() / self.dtype.size() - self.offset
        }
        /// Whether the usable part is empty.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
        /// The device address of the usable part.
        pub fn ptr(&self, stream: &CudaStream) -> u64 {
            self.slice.device_ptr(stream).0 + (self.offset * self.dtype.size()) as u64
        }
        /// Overwrites the usable part with `host`.
        pub fn write(&mut self, stream: &Arc<CudaStream>, host: &[f32]) {
            let mut all = vec![0.0f32; self.offset];
            all.extend_from_slice(host);
            stream
                .memcpy_htod(&encode(self.dtype, &all), &mut self.slice)
                .expect("htod");
        }
        /// The usable part read back, as floats.
        pub fn read(&self, stream: &Arc<CudaStream>) -> Vec<f32> {
            let bytes = stream.clone_dtoh(&self.slice).expect("dtoh");
            decode(self.dtype, &bytes)[self.offset..].to_vec()
        }
        /// The alignment class of a launch on this buffer with rows `stride` elements apart.
        pub fn align(&self, stream: &CudaStream, stride: usize) -> AlignClass {
            AlignClass::of([self.ptr(stream), (stride * self.dtype.size()) as u64])
        }
    }

    /// The configs a launch on buffers aligned to `align` runs: every config of `space`
    /// fitted to the alignment (consecutive duplicates dropped), each variant of kernel
    /// `B` of the family and of `A` where `A` accepts the config at `batch` rows,
    /// compiled in parallel before anything runs.
    pub fn fitted_and_compiled<A, B>(
        rt: &CudaRuntime,
        key: &A::Key,
        batch: u64,
        space: &[A::Config],
        align: AlignClass,
    ) -> Vec<A::Config>
    where
        A: PlannedKernel,
        B: PlannedKernel<Key = A::Key, Config = A::Config>,
    {
        assert!(!space.is_empty(), "{key:?}: empty space");
        let info = rt.info();
        let mut configs: Vec<_> = space
            .iter()
            .map(|c| A::fit_alignment(info, key, c.clone(), align))
            .collect();
        configs.dedup();
        let target = info.tuning_target();
        let jobs: Vec<_> = configs
            .iter()
            .flat_map(|c| {
                let a = A::accepts(target, key, batch, c).then(|| A::variants(info, key, c));
                let a = a.into_iter().flatten().map(|v| (*A::SOURCE, v));
                a.chain(B::variants(info, key, c).into_iter().map(|v| (*B::SOURCE, v)))
            })
            .collect();
        for r in rt.precompile(&jobs) {
            r.expect("every variant of the space compiles");
        }
        configs
    }

    /// The (config, shape) runs an every-config test has checked, and the failures.
    #[derive(Default)]
    pub struct Tally {
        checked: usize,
        failures: Vec<String>,
        /// When the test began, and the runs checked at the last [`Tally::progress`].
        started: Option<std::time::Instant>,
        reported: usize,
    }

    impl Tally {
        /// Prints one line for the case just finished: its runs, the failures so far and
        /// the seconds since the test began, so a run stopped by a time limit shows
        /// which cases it finished and where its time went.
        pub fn progress(&mut self, case: &str) {
            let secs = self.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
            println!(
                "  {case}: {} runs, {} failed so far, {secs:.1} s",
                self.checked - self.reported,
                self.failures.len()
            );
            self.reported = self.checked;
        }

        /// Counts one checked run, and its failure if any.
        pub fn add(&mut self, run: Result<(), String>) {
            self.checked += 1;
            if let Err(e) = run {
                self.failures.push(e);
            }
        }

        /// Prints how many runs were checked and panics with the first failures.
        pub fn report(&self, family: &str) {
            let (checked, failures) = (self.checked, &self.failures);
            println!(
                "{family}: {checked} (config, shape) runs checked, {} failed",
                failures.len()
            );
            assert!(checked > 0, "{family}: nothing was checked");
            assert!(
                failures.is_empty(),
                "{} failures, first: {}",
                failures.len(),
                failures[..failures.len().min(10)].join("\n")
            );
        }
    }

    /// An every-config test: the runtime (default-only policy) and stream, or the skip
    /// as in [`runtime`]; then `check` with the target whose search spaces it walks and
    /// the tally of its runs; then the tally's report for `family`.
    pub fn every_config(
        test: &str,
        family: &str,
        check: impl FnOnce(&CudaRuntime, &Arc<CudaStream>, Target, &mut Tally),
    ) {
        let Some((rt, stream)) = runtime(test, Policy::DefaultOnly) else {
            return;
        };
        let target = rt.info().tuning_target();
        let mut tally = Tally {
            started: Some(std::time::Instant::now()),
            ..Tally::default()
        };
        check(&rt, &stream, target, &mut tally);
        tally.report(family);
    }
}

/// What the AMD GPU tests of the kernel families share (feature `rocm`): a runtime
/// on device 0 that skips (or fails, see [`skip_or_fail`]) without an AMD GPU, and
/// device buffers of converted host values.
#[cfg(feature = "rocm")]
pub mod hip {
    use tuned::DType;

    use crate::{
        decode, encode, DiskCache, HipBuffer, HipDevice, HipRuntime, HipStream, Policy, RuntimeOptions,
    };

    /// A runtime on AMD device 0 with `cache` under [`Policy::Serve`] and a stream on
    /// it; `None` (after [`super::skip_or_fail`] naming `test`) where there is no AMD
    /// GPU.
    pub fn runtime(test: &str, cache: DiskCache) -> Option<(HipRuntime, HipStream)> {
        let dev = match HipDevice::open(0) {
            Ok(d) => d,
            Err(e) => {
                super::skip_or_fail(test, &format!("no AMD GPU found ({e})"));
                return None;
            }
        };
        let options = RuntimeOptions {
            cache,
            policy: Policy::Serve,
            ..RuntimeOptions::default()
        };
        let rt = HipRuntime::with_options(dev, options).expect("hipRTC loads where an AMD GPU is");
        let stream = rt.device().new_stream().expect("stream");
        Some((rt, stream))
    }

    /// Device memory holding `host` converted to `dtype`, its usable part `offset`
    /// elements in (an offset makes it not 16-byte aligned).
    pub struct Buf {
        mem: HipBuffer<u8>,
        dtype: DType,
        offset: usize,
    }

    impl Buf {
        /// Allocates and fills it; panics where the device refuses (a test helper).
        pub fn new(rt: &HipRuntime, dtype: DType, host: &[f32], offset: usize) -> Buf {
            let mut all = vec![0.0f32; offset];
            all.extend_from_slice(host);
            let mem = rt.device().from_host(&encode(dtype, &all)).expect("alloc");
            Buf { mem, dtype, offset }
        }
        /// The device address of the usable part.
        pub fn ptr(&self) -> u64 {
            self.mem.device_ptr() + (self.offset * self.dtype.size()) as u64
        }
        /// Elements in the usable part.
        pub fn len(&self) -> usize {
            self.mem.len() / self.dtype.size() - self.offset
        }
        /// Whether the usable part is empty.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
        /// The usable part read back, as floats.
        pub fn read(&self) -> Vec<f32> {
            decode(self.dtype, &self.mem.to_vec().expect("read back"))[self.offset..].to_vec()
        }
    }
}

/// The parts of a tuning-result cache key on a nominal H200 (crate 0.1.0, nvrtc 13.0,
/// sm_90a, no codegen variables, no candidates digest, 16-byte alignment) for tests
/// that store and look up results: override fields with struct update syntax.
pub fn tuning_key_parts<'a>(
    kernel: &'a str,
    fingerprint: &'a str,
    static_key: &'a str,
    batch: u64,
) -> crate::CacheKeyParts<'a> {
    use crate::Component::{Applies, DoesNotApply};
    crate::CacheKeyParts {
        crate_version: "0.1.0",
        kernel,
        source_fingerprint: fingerprint,
        compiler: "nvrtc 13.0",
        arch: "sm_90a",
        device_name: "NVIDIA H200",
        sm_count: 132,
        codegen_env: &[],
        variant: DoesNotApply,
        candidates: DoesNotApply,
        static_key: Applies(static_key),
        batch: Applies(batch),
        alignment: Applies(crate::AlignClass::A16),
    }
}

/// The body (from its opening brace to the matching closing one) of the first function
/// definition in `src` whose text starts at `signature` (a unique prefix such as
/// `"void rmsnorm_rows("`), or `None`. Braces inside comments or strings are counted
/// too, which the kernel sources never need.
pub fn function_body<'a>(src: &'a str, signature: &str) -> Option<&'a str> {
    let at = src.find(signature)?;
    body_from(src, at)
}

/// The bodies of every `extern "C" __global__` definition in `src` (lines that start
/// with it; comment lines do not).
pub fn entry_bodies(src: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in src.split_inclusive('\n') {
        if line.starts_with("extern \"C\" __global__") {
            if let Some(b) = body_from(src, offset) {
                out.push(b);
            }
        }
        offset += line.len();
    }
    out
}

fn body_from(src: &str, at: usize) -> Option<&str> {
    let open = at + src[at..].find('{')?;
    let mut depth = 0usize;
    for (i, c) in src[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&src[open..=open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The calls through which the kernel sources touch global memory.
pub const MEMORY_ACCESSES: &[&str] = &[
    "load_vec",
    "load_stream",
    "store_vec",
    "store_stream",
    "copy_async",
    "cp.async",
];

/// Checks that `body` calls `kd::pdl_wait()` before its first global memory access
/// ([`MEMORY_ACCESSES`]): what a source marked `KernelSource::programmatic_launch`
/// promises for each entry point. The error names the first access that comes first.
pub fn waits_before_memory(body: &str) -> Result<(), String> {
    let wait = body.find("kd::pdl_wait();").ok_or("no kd::pdl_wait() call")?;
    match MEMORY_ACCESSES
        .iter()
        .filter_map(|m| body.find(m).map(|i| (i, *m)))
        .min()
    {
        Some((i, m)) if i < wait => Err(format!("`{m}` comes before kd::pdl_wait()")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_bodies_and_the_wait_check() {
        let src = "// extern \"C\" __global__ void doc(int* p);\n\
                   __device__ void helper(int* p) { if (p) { kd::pdl_wait(); } store_vec(p); }\n\
                   extern \"C\" __global__ void good(int* p) {\n  kd::pdl_wait();\n  { int v = load_vec(p); }\n}\n\
                   extern \"C\" __global__ void bad(int* p) {\n  int v = load_vec(p);\n  kd::pdl_wait();\n}\n\
                   extern \"C\" __global__ void none(int* p) { helper(p); }\n";
        let bodies = entry_bodies(src);
        assert_eq!(
            bodies.len(),
            3,
            "the commented declaration is not an entry: {bodies:?}"
        );
        assert!(bodies[0].starts_with('{') && bodies[0].ends_with('}'));
        assert_eq!(waits_before_memory(bodies[0]), Ok(()));
        assert_eq!(
            waits_before_memory(bodies[1]),
            Err("`load_vec` comes before kd::pdl_wait()".to_string())
        );
        assert!(waits_before_memory(bodies[2]).is_err(), "no wait at all");
        let helper = function_body(src, "void helper(").unwrap();
        assert!(helper.ends_with("store_vec(p); }"), "{helper}");
        assert_eq!(waits_before_memory(helper), Ok(()));
        assert_eq!(function_body(src, "void missing("), None);
    }

    #[test]
    fn rows_within_tolerance_padding_untouched() {
        // 2 rows of 3 columns in rows of 4: index 3 and 7 are padding.
        let shape = Rows::strided(2, 3, 4);
        let nan = f32::NAN;
        let want = [1.0, nan, f32::INFINITY, nan, 100.0, -2.0, 0.5, 7.0];
        let ok = [1.001, nan, f32::INFINITY, nan, 100.1, -2.0, 0.5, 7.0];
        assert_eq!(compare_rows("t", &ok, &want, shape, (0.01, 0.001)), Ok(()));
        let off = |i: usize, v: f32| {
            let mut g = ok;
            g[i] = v;
            compare_rows("t", &g, &want, shape, (0.01, 0.001)).unwrap_err()
        };
        assert!(off(0, 1.02).contains("row 0 col 0"), "outside the tolerance");
        assert!(off(1, 0.0).contains("row 0 col 1"), "a NaN expected");
        assert!(off(2, f32::MAX).contains("row 0 col 2"), "the infinity expected");
        assert!(off(3, 0.0).contains("padding element 3"), "padding written");
        assert!(off(7, 7.5).contains("padding element 7"), "padding written");
        assert!(compare_rows("t", &ok[..7], &want, shape, (0.01, 0.001))
            .unwrap_err()
            .contains("7 values, want 8"));
    }
}
