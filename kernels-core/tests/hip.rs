//! Tests of the AMD backend (feature `rocm`).
//!
//! GPU-free tests run everywhere: the no-device error, the code object kind, and hipRTC compiles where hipRTC loads (it needs no GPU). Tests that need an
//! AMD GPU, or a hipRTC that can compile for an arch, print `SKIPPED ...` to stderr
//! when they cannot run, unless `KERNELS_REQUIRE_GPU=1`, where they fail instead.

use kernels_core::{
    backend::hip::HipCompiler,
    cache::Section,
    tune::{time_runs, TimingOptions},
    DiskCache, Error, Hip, HipDevice, HipRuntime, ImageKind, KernelArgs, KernelSource, LaunchDims,
    ModuleOrigin, Policy, RuntimeOptions, Variant, PRELUDE,
};

// ---- harness ------------------------------------------------------------------------

use kernels_core::testing::skip_or_fail as skip;

fn gpu(test: &str) -> Option<HipDevice> {
    match HipDevice::open(0) {
        Ok(d) => Some(d),
        Err(e) => {
            skip(test, &format!("no HIP device could be opened ({e})"));
            None
        }
    }
}

fn compiler(test: &str) -> Option<HipCompiler> {
    match HipCompiler::detect() {
        Ok(c) => Some(c),
        Err(e) => {
            skip(test, &format!("hipRTC could not be loaded ({e})"));
            None
        }
    }
}

/// A runtime on `dev` with `cache` under the serve policy.
fn runtime_with(dev: HipDevice, cache: DiskCache) -> kernels_core::Result<HipRuntime> {
    let options = RuntimeOptions {
        cache,
        policy: Policy::Serve,
        ..RuntimeOptions::default()
    };
    HipRuntime::with_options(dev, options)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kernels-core-hip-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

// ---- sources ------------------------------------------------------------------------

/// A tiny kernel over the shared prelude: each wavefront sums its 64 (WARP) inputs with
/// `kd::warp_sum` and writes `x * a + sum` per element.
macro_rules! tiny_body {
    () => {
        r#"
#ifdef BROKEN
#error "deliberately broken variant"
#endif
extern "C" __global__ void axpy_sum(float* x, unsigned int n, float a) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float s = kd::warp_sum(v);
    if (i < n) x[i] = v * a + s;
}
"#
    };
}

/// The tiny kernel including the prelude, passed as a header.
static TINY_SOURCE: KernelSource = KernelSource::new(
    "hip_tiny",
    concat!("#include \"prelude.cuh\"\n", tiny_body!()),
    "fnv1a64:hip-tiny-v1",
)
.with_headers(&[("prelude.cuh", PRELUDE)]);

/// A kernel with no prelude, its constant from a header passed to hipRTC by name: the
/// compile pipeline itself (headers, defines, code object) on any hipRTC.
const PLAIN: &str = r#"
#include "scale.h"
extern "C" __global__ void scale(float* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= SCALE * FACTOR;
}
"#;

static PLAIN_SOURCE: KernelSource = KernelSource::new("hip_plain", PLAIN, "fnv1a64:hip-plain-v1")
    .with_headers(&[("scale.h", "#define SCALE 2.0f\n")]);

/// The tiny kernel compiled after the prelude, as the kernel families' sources are.
static TINY_AFTER_PRELUDE: KernelSource =
    KernelSource::new("hip_tiny_after", tiny_body!(), "fnv1a64:hip-tiny-after-v1").with_preamble(&[PRELUDE]);

// ---- GPU-free -----------------------------------------------------------------------

#[test]
fn no_hip_device_is_a_clear_error_not_a_panic() {
    match HipDevice::count() {
        Err(e) => {
            assert!(matches!(e, Error::NoHipDevice(_)), "{e:?}");
            assert!(e.to_string().starts_with("no HIP device"), "{e}");
            let open = HipDevice::open(0).unwrap_err();
            assert!(matches!(open, Error::NoHipDevice(_)), "{open:?}");
            assert!(open.to_string().starts_with("no HIP device"), "{open}");
            eprintln!("no HIP device here, as expected on a GPU-free machine: {e}");
        }
        Ok(n) => {
            // An AMD machine: the ordinal past the last device is a named error.
            let e = HipDevice::open(n).unwrap_err();
            assert!(e.to_string().contains("invalid argument `ordinal`"), "{e}");
            let d = HipDevice::open(0).expect("device 0 of a machine that reports devices");
            assert!(d.info().arch().starts_with("gfx"), "{:?}", d.info());
        }
    }
}

#[test]
fn code_object_kind_round_trips_its_name() {
    assert_eq!(ImageKind::CodeObject.name(), "hsaco");
    assert_eq!(ImageKind::from_name("hsaco"), Some(ImageKind::CodeObject));
    let names = [ImageKind::Cubin, ImageKind::Ptx, ImageKind::CodeObject].map(ImageKind::name);
    assert_eq!(names, ["cubin", "ptx", "hsaco"]);
}

#[test]
fn hiprtc_missing_or_found_is_reported_clearly() {
    match HipCompiler::detect() {
        Ok(c) => {
            assert!(HipCompiler::LIBRARIES.contains(&c.library()), "{}", c.library());
            assert!(c.id().starts_with("hiprtc "), "{}", c.id());
            eprintln!("hipRTC loaded from {}: {}", c.library(), c.id());
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e, Error::NoHipRtc(_)), "{e:?}");
            for lib in HipCompiler::LIBRARIES {
                assert!(msg.contains(lib), "{msg} does not name {lib}");
            }
        }
    }
}

/// Compiles `variant` of `source` for each arch; returns how many compiled. An arch
/// this hipRTC's code object manager does not know is reported on stderr (or fails the
/// test under `KERNELS_REQUIRE_GPU=1`). With `uses_prelude`, a compile error on a HIP 5
/// hipRTC is reported the same way: the prelude is written for the clang of ROCm 6 and
/// later (and clang 19 in CI); on ROCm 6 and later it fails the test.
fn compile_for_archs(
    test: &str,
    c: &HipCompiler,
    source: &KernelSource,
    variant: &Variant,
    uses_prelude: bool,
) -> usize {
    let mut compiled = 0;
    for arch in ["gfx90a", "gfx942"] {
        match c.compile(source, variant, arch) {
            Ok(image) => {
                assert_eq!(image.kind, ImageKind::CodeObject);
                assert_eq!(&image.bytes[..4], b"\x7fELF", "{arch}: not an ELF code object");
                let entry = variant.entry().as_bytes();
                assert!(
                    image.bytes.windows(entry.len()).any(|w| w == entry),
                    "{arch}: the code object has no symbol `{}`",
                    variant.entry()
                );
                compiled += 1;
            }
            Err(Error::HipCompile { log, .. }) if log.contains("does not know") => {
                skip(
                    &format!("{test} [{arch}]"),
                    &format!("this hipRTC cannot target {arch}: {log}"),
                );
            }
            Err(Error::HipCompile { log, .. }) if uses_prelude && c.hip_version().0 < 6 => {
                let first_error = log.lines().find(|l| l.contains("error")).unwrap_or(&log);
                skip(
                    &format!("{test} [{arch}] {}", variant.entry()),
                    &format!(
                        "the prelude does not compile with this HIP 5 hipRTC ({}): {first_error}",
                        c.id()
                    ),
                );
            }
            Err(e) => panic!("{test} [{arch}]: {e}"),
        }
    }
    compiled
}

#[test]
fn hiprtc_compiles_a_kernel_with_a_header_and_defines() {
    let test = "hiprtc_compiles_a_kernel_with_a_header_and_defines";
    let Some(c) = compiler(test) else { return };
    let v = Variant::new("scale").define("FACTOR", "3.0f");
    if compile_for_archs(test, &c, &PLAIN_SOURCE, &v, false) == 0 {
        skip(
            test,
            "hipRTC loaded but can target neither gfx90a nor gfx942 here",
        );
    }
}

/// The prelude compiles both ways a source reaches it: included as a header, and as the
/// preamble the kernel families' sources are compiled after (their own hipRTC compiles
/// are in their crates' tests).
#[test]
fn hiprtc_compiles_the_prelude_as_a_header_and_as_a_preamble() {
    let test = "hiprtc_compiles_the_prelude_as_a_header_and_as_a_preamble";
    let Some(c) = compiler(test) else { return };
    let mut compiled = 0;
    for source in [&TINY_SOURCE, &TINY_AFTER_PRELUDE] {
        compiled += compile_for_archs(test, &c, source, &Variant::new("axpy_sum"), true);
    }
    if compiled == 0 {
        skip(
            test,
            "hipRTC loaded but compiled none of the prelude's kernels here (see above)",
        );
    }
}

#[test]
fn hiprtc_compile_errors_carry_the_log_and_variant() {
    let test = "hiprtc_compile_errors_carry_the_log_and_variant";
    let Some(c) = compiler(test) else { return };
    let broken = Variant::new("axpy_sum").define("BROKEN", 1);
    let mut checked = 0;
    for arch in ["gfx90a", "gfx942"] {
        match c.compile(&TINY_SOURCE, &broken, arch) {
            Err(Error::HipCompile { log, .. }) if log.contains("does not know") => {}
            Err(e @ Error::HipCompile { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.starts_with("hipRTC could not compile kernel `hip_tiny`"),
                    "{msg}"
                );
                assert!(msg.contains("-DBROKEN=1"), "the variant is missing: {msg}");
                assert!(
                    msg.contains("deliberately broken variant"),
                    "the log is missing: {msg}"
                );
                checked += 1;
            }
            other => panic!("{arch}: expected a compile error, got {other:?}"),
        }
    }
    if checked == 0 {
        skip(
            test,
            "hipRTC loaded but can target neither gfx90a nor gfx942 here",
        );
    }
}

// ---- GPU ----------------------------------------------------------------------------

#[test]
fn gpu_compile_cache_launch_and_time() {
    let test = "gpu_compile_cache_launch_and_time";
    let Some(dev) = gpu(test) else { return };
    let info = dev.info().clone();
    assert_eq!(info.warp_size, 64, "{info:?}");
    let dir = temp_dir("launch");
    let rt = runtime_with(dev.clone(), DiskCache::at(&dir)).expect("an AMD GPU machine must have hipRTC");
    let v = Variant::new("axpy_sum");

    let stream = dev.new_stream().unwrap();
    let (k, origin) = rt.kernel_with_origin(&stream, &TINY_SOURCE, &v).unwrap();
    assert_eq!(origin, ModuleOrigin::Compiled);
    assert_eq!(
        rt.kernel_with_origin(&stream, &TINY_SOURCE, &v).unwrap().1,
        ModuleOrigin::Memo
    );

    // Launch: 4 wavefronts of 64 over 256 floats; x[i] = x[i] * 2 + (sum of its wavefront).
    let n = 256usize;
    let host: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let x = dev.from_host(&host).unwrap();
    let mut args = KernelArgs::new();
    args.ptr(x.device_ptr()).u32(n as u32).f32(2.0);
    let dims = LaunchDims::linear((n / 64) as u32, 64);
    // SAFETY: the arguments match axpy_sum(float*, unsigned int, float); x holds n floats.
    unsafe { k.launch(&stream, dims, &args) }.unwrap();
    stream.synchronize().unwrap();
    let got = x.to_vec().unwrap();
    for (w, chunk) in host.chunks(64).enumerate() {
        let sum: f32 = chunk.iter().sum();
        for (j, &h) in chunk.iter().enumerate() {
            let want = h * 2.0 + sum;
            assert_eq!(got[w * 64 + j], want, "element {}", w * 64 + j);
        }
    }

    // More LDS than a workgroup has is refused by name, before any launch.
    let too_much = dims.with_smem(info.max_lds_per_block + 1);
    // SAFETY: as above; the launch is refused before reaching the runtime.
    let e = unsafe { k.launch(&stream, too_much, &args) }.unwrap_err();
    assert!(e.to_string().contains("smem_bytes"), "{e}");

    // Timing with events: warm-up, reps, median.
    let mut run = || {
        // SAFETY: as above.
        unsafe { k.launch(&stream, dims, &args) }
    };
    let t = time_runs::<Hip>(&stream, &TimingOptions::default(), None, &mut || Ok(()), &mut run).unwrap();
    assert!(
        t.median_us > 0.0 && t.min_us <= t.median_us && t.median_us <= t.max_us,
        "{t:?}"
    );
    eprintln!(
        "axpy_sum on {} ({}): median {:.2} us",
        info.name,
        info.arch(),
        t.median_us
    );

    // A second runtime reads the module from disk; a corrupt file is recompiled.
    let rt2 = runtime_with(dev.clone(), DiskCache::at(&dir)).unwrap();
    assert_eq!(
        rt2.kernel_with_origin(&stream, &TINY_SOURCE, &v).unwrap().1,
        ModuleOrigin::Disk
    );
    let key = rt2.module_key(&TINY_SOURCE, &v);
    let path = rt2.cache().path_for(Section::Modules, &key).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let rt3 = runtime_with(dev, DiskCache::at(&dir)).unwrap();
    assert_eq!(
        rt3.kernel_with_origin(&stream, &TINY_SOURCE, &v).unwrap().1,
        ModuleOrigin::Compiled
    );
    assert_eq!((rt3.stats().corrupt_files, rt3.stats().compiled), (1, 1));
    let _ = std::fs::remove_dir_all(&dir);
}
