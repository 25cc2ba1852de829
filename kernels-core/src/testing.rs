//! Helpers for the GPU tests of every kernel family and backend; they need no GPU
//! themselves: what a test does where it cannot run ([`skip_or_fail`]) and how an
//! output is compared with its CPU reference ([`compare_rows`]); with the `rocm`
//! feature, the AMD tests' runtime and buffers (`hip`).

use tuned::DType;

use crate::{decode, encode, Rows};

/// The environment variable that turns a GPU test's skip into a failure (`1`), for
/// runs on a machine that must have the GPU.
pub const REQUIRE_GPU_ENV: &str = "KERNELS_REQUIRE_GPU";

/// What a GPU test does where it cannot run: with `KERNELS_REQUIRE_GPU=1` it fails
/// (panics, naming `test` and `why`); otherwise it prints `SKIPPED <test>: <why>` to
/// stderr directly, past the test harness's output capture, so the skip shows in
/// every run's output instead of passing silently.
pub fn skip_or_fail(test: &str, why: &str) {
    if std::env::var(REQUIRE_GPU_ENV).as_deref() == Ok("1") {
        panic!("{test}: {REQUIRE_GPU_ENV}=1 but {why}");
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
