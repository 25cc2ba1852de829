//! The one backend abstraction: what the runtime, the resolution policies, the tuner
//! and the ops need of a GPU API, and nothing more. [`crate::Cuda`] (feature `cuda`: cudarc's
//! driver API and NVRTC) and `Hip` (feature `rocm`: the HIP runtime and hipRTC)
//! implement it, and [`mock::Mock`] (host memory, simulated clock) lets the shared code
//! be tested without a GPU; everything above is written once, generic over [`Backend`].
//!
//! The trait covers device discovery and limits, streams, untyped device buffers,
//! module compile and load, launch, and event timing. Capabilities only one backend
//! has are named as such: CUDA graph replays for timing ([`Backend::GRAPH_TIMING`],
//! [`Backend::time_graph_runs`]) and programmatic dependent launch
//! ([`Backend::PROGRAMMATIC_LAUNCH`]).

use std::fmt;

use crate::{KernelArgs, KernelSource, LaunchDims, Result, Timing, TimingOptions, Variant};

mod info;
mod nvrtc;

pub use info::DeviceInfo;
#[cfg_attr(not(feature = "rocm"), allow(unused_imports))]
pub(crate) use info::{AmdNominal, AMD_MAX_GRID, AMD_REGS_PER_BLOCK};
pub use nvrtc::{Compiler, Image, ImageKind};

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "rocm")]
pub mod hip;
pub mod mock;

/// A loaded kernel: one variant's entry point in a module loaded on one device. The
/// runtime memoizes them; launching one compiles and loads nothing.
pub trait LoadedKernel: Send + Sync + fmt::Debug {
    /// The kernel family's name (`softmax`).
    fn name(&self) -> &str;
    /// The variant, as [`Variant`] displays it.
    fn variant(&self) -> &str;
    /// The device it is loaded on, as search spaces and launch plans see it.
    fn info(&self) -> &DeviceInfo;
}

/// A GPU API the runtime runs on. Implemented by zero-sized marker types ([`crate::Cuda`],
/// `Hip`, [`mock::Mock`]); every method is an associated function over the backend's handle types,
/// so generic code names the backend once (`Runtime<Cuda>`).
///
/// Methods taking raw device addresses are `unsafe`: the caller guarantees the memory
/// belongs to the stream's device and is valid for the bytes given.
pub trait Backend: Sized + Send + Sync + 'static {
    /// The API's name in messages (`CUDA`, `HIP`).
    const NAME: &'static str;
    /// Whether [`Backend::time_graph_runs`] works: CUDA graphs replaying back-to-back
    /// launches ([`crate::TimingMethod::Graph`]). A CUDA capability.
    const GRAPH_TIMING: bool;
    /// Whether launches may use programmatic dependent launch
    /// ([`crate::RuntimeOptions::pdl`]). A CUDA capability (sm_90 and newer).
    const PROGRAMMATIC_LAUNCH: bool;

    /// An open device. Cheap to clone.
    type Device: Clone + Send + Sync + fmt::Debug;
    /// A stream work is enqueued on.
    type Stream;
    /// A loaded kernel.
    type Kernel: LoadedKernel;
    /// The run-time compiler (NVRTC, hipRTC).
    type Compiler: Send + Sync + fmt::Debug;
    /// An untyped device allocation, freed on drop.
    type Buffer: Send;
    /// A timing event.
    type Event;

    // ---- devices ----------------------------------------------------------------

    /// Opens device `ordinal`: an error (never a panic) when there is no driver, no
    /// GPU, or the ordinal is out of range.
    fn open(ordinal: usize) -> Result<Self::Device>;

    /// What the device is, as search spaces, variants and launch plans see it.
    fn info(device: &Self::Device) -> &DeviceInfo;

    // ---- compiling and loading --------------------------------------------------

    /// Finds the run-time compiler. Needs no GPU.
    fn compiler() -> Result<Self::Compiler>;

    /// The compiler's name and version as cache keys and tables record them.
    fn compiler_id(compiler: &Self::Compiler) -> String;

    /// The code-generation environment variables in force, as (name, value): part of
    /// every cache key.
    fn codegen_env(compiler: &Self::Compiler) -> &[(String, String)];

    /// The exact options `variant` compiles with for `arch`.
    fn compile_options(compiler: &Self::Compiler, variant: &Variant, arch: &str) -> Vec<String>;

    /// Compiles `variant` of `source` for `arch`. Thread-safe.
    fn compile(
        compiler: &Self::Compiler,
        source: &KernelSource,
        variant: &Variant,
        arch: &str,
    ) -> Result<Image>;

    /// Whether a module image of `kind` (from the disk cache) can be loaded.
    fn loads(kind: ImageKind) -> bool;

    /// Loads `image` on `device` and gets `variant`'s entry point from it; `pdl`: its
    /// launches use programmatic dependent launch.
    fn load(
        device: &Self::Device,
        image: &Image,
        source: &KernelSource,
        variant: &Variant,
        pdl: bool,
    ) -> Result<Self::Kernel>;

    /// Checks `dims` against the device and `args`' count, then enqueues the kernel.
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in order and type, every address in it
    /// must be valid for what the kernel reads and writes, and `stream` must belong to
    /// the kernel's device.
    unsafe fn launch(
        kernel: &Self::Kernel,
        stream: &Self::Stream,
        dims: LaunchDims,
        args: &KernelArgs,
    ) -> Result<()>;

    // ---- streams and memory -----------------------------------------------------

    /// Whether `stream` is capturing a graph now.
    fn is_capturing(stream: &Self::Stream) -> Result<bool>;

    /// Waits until everything enqueued on `stream` has run.
    fn synchronize(stream: &Self::Stream) -> Result<()>;

    /// `bytes` of uninitialised device memory on `stream`'s device.
    fn alloc(stream: &Self::Stream, bytes: usize) -> Result<Self::Buffer>;

    /// A device copy of `host`, made on `stream`.
    fn upload(stream: &Self::Stream, host: &[u8]) -> Result<Self::Buffer>;

    /// The device address of a buffer.
    fn address(buffer: &Self::Buffer) -> u64;

    /// Copies `bytes` from device address `src` to `dst`, enqueued on `stream`.
    ///
    /// # Safety
    /// Both ranges must be device memory of `stream`'s device, valid for `bytes`.
    unsafe fn copy(stream: &Self::Stream, dst: u64, src: u64, bytes: usize) -> Result<()>;

    /// Zeroes `bytes` at device address `dst`, enqueued on `stream`.
    ///
    /// # Safety
    /// As for [`Backend::copy`].
    unsafe fn zero(stream: &Self::Stream, dst: u64, bytes: usize) -> Result<()>;

    /// Waits for the work enqueued on `stream` so far, then copies `dst.len()` bytes
    /// from device address `src` to the host (the output checks of searches and of
    /// served variants read results this way).
    ///
    /// # Safety
    /// `src` must be device memory of `stream`'s device, valid for `dst.len()` bytes.
    unsafe fn read_back(stream: &Self::Stream, src: u64, dst: &mut [u8]) -> Result<()>;

    // ---- timing -----------------------------------------------------------------

    /// A timing event on `stream`'s device.
    fn event(stream: &Self::Stream) -> Result<Self::Event>;

    /// Records `event` on `stream`.
    fn record(event: &Self::Event, stream: &Self::Stream) -> Result<()>;

    /// Milliseconds from `start` to `end`, waiting for `end` to complete.
    fn elapsed_ms(start: &Self::Event, end: &Self::Event) -> Result<f32>;

    /// Graph timing ([`crate::TimingMethod::Graph`]): `opts.warmup` plain launches,
    /// then a graph of `launches` calls of `launch(i % copies)`, replayed `opts.reps`
    /// times; the median microseconds per launch. Backends without graph timing
    /// ([`Backend::GRAPH_TIMING`] false) return an error saying so.
    fn time_graph_runs(
        stream: &Self::Stream,
        opts: &TimingOptions,
        launches: usize,
        copies: usize,
        launch: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<Timing> {
        let _ = (stream, opts, launches, copies, launch);
        Err(no_graph_timing::<Self>())
    }
}

/// The error of a graph-timed search or timing on a backend without graph timing.
pub(crate) fn no_graph_timing<B: Backend>() -> crate::Error {
    crate::Error::invalid(
        "timing",
        format!(
            "timing method `graph` replays CUDA graphs; {} times with `single`",
            B::NAME
        ),
    )
}

/// A new device buffer holding the `bytes` bytes at `src`, copied on the device
/// (stream-ordered).
///
/// # Safety
/// `src` must be device memory of `stream`'s device, valid for `bytes` bytes until the
/// copy runs.
pub(crate) unsafe fn device_copy<B: Backend>(
    stream: &B::Stream,
    src: u64,
    bytes: usize,
) -> Result<B::Buffer> {
    let dst = B::alloc(stream, bytes)?;
    if bytes > 0 {
        // SAFETY: `dst` holds `bytes`; `src` is valid for them by the caller's contract.
        unsafe { B::copy(stream, B::address(&dst), src, bytes) }?;
    }
    Ok(dst)
}

/// A device buffer and its address.
pub(crate) struct Owned<B: Backend> {
    #[allow(dead_code)] // held for its allocation
    buffers: Vec<B::Buffer>,
    addresses: Vec<u64>,
    bytes: Vec<usize>,
}

impl<B: Backend> Owned<B> {
    /// Uploads each host image to the device on `stream`.
    pub(crate) fn upload(stream: &B::Stream, images: &[Vec<u8>]) -> Result<Owned<B>> {
        let buffers = images
            .iter()
            .map(|h| B::upload(stream, h))
            .collect::<Result<Vec<_>>>()?;
        let addresses = buffers.iter().map(B::address).collect();
        let bytes = images.iter().map(Vec::len).collect();
        Ok(Owned {
            buffers,
            addresses,
            bytes,
        })
    }

    /// Another set of buffers holding what these hold, copied on the device
    /// (stream-ordered; no host round trip).
    pub(crate) fn duplicate(&self, stream: &B::Stream) -> Result<Owned<B>> {
        let buffers = self
            .buffers
            .iter()
            .zip(&self.bytes)
            // SAFETY: each buffer is a live allocation of its `bytes` on the stream's device.
            .map(|(src, &bytes)| unsafe { device_copy::<B>(stream, B::address(src), bytes) })
            .collect::<Result<Vec<_>>>()?;
        let addresses = buffers.iter().map(B::address).collect();
        Ok(Owned {
            buffers,
            addresses,
            bytes: self.bytes.clone(),
        })
    }

    /// The buffers' device addresses, in upload order.
    pub(crate) fn addresses(&self) -> &[u64] {
        &self.addresses
    }
}

/// A run-time compile's strings as C strings, with the pointer arrays that NVRTC's and
/// hipRTC's create and compile calls both take. The pointers stay valid while this
/// value lives (a `CString`'s buffer does not move with it).
#[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
pub(crate) struct ProgramText {
    pub(crate) code: std::ffi::CString,
    pub(crate) name: std::ffi::CString,
    header_text: Vec<*const std::ffi::c_char>,
    header_names: Vec<*const std::ffi::c_char>,
    pub(crate) options: Vec<*const std::ffi::c_char>,
    _owned: Vec<std::ffi::CString>,
}

#[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
impl ProgramText {
    /// `code` named `file_name`, `headers` as (include name, text), and `options`; a
    /// string with a NUL byte is an error naming which one.
    pub(crate) fn new(
        code: &str,
        file_name: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<Self> {
        fn c(what: &str, s: &str) -> Result<std::ffi::CString> {
            std::ffi::CString::new(s)
                .map_err(|_| crate::Error::invalid(what.to_string(), "contains a NUL byte"))
        }
        let mut owned = Vec::with_capacity(2 * headers.len() + options.len());
        let mut keep = |s: std::ffi::CString| {
            let p = s.as_ptr();
            owned.push(s);
            p
        };
        let mut header_text = Vec::with_capacity(headers.len());
        let mut header_names = Vec::with_capacity(headers.len());
        for (n, t) in headers {
            header_text.push(keep(c("header", t)?));
            header_names.push(keep(c("header name", n)?));
        }
        let options = options
            .iter()
            .map(|o| Ok(keep(c("compiler option", o)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ProgramText {
            code: c("source", code)?,
            name: c("source name", file_name)?,
            header_text,
            header_names,
            options,
            _owned: owned,
        })
    }

    /// How many headers there are.
    pub(crate) fn headers(&self) -> usize {
        self.header_text.len()
    }

    /// The header texts' and names' arrays, both null when there are none.
    pub(crate) fn header_arrays(&self) -> (*const *const std::ffi::c_char, *const *const std::ffi::c_char) {
        if self.header_text.is_empty() {
            (std::ptr::null(), std::ptr::null())
        } else {
            (self.header_text.as_ptr(), self.header_names.as_ptr())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mock::{Mock, MockStream};
    use super::{Backend, Owned, ProgramText};

    #[test]
    fn duplicates_hold_the_same_bytes_and_are_copied_on_the_device() {
        let stream = MockStream::default();
        let images = vec![vec![1u8, 2, 3], Vec::new(), (0..=255u8).collect()];
        let first = Owned::<Mock>::upload(&stream, &images).unwrap();
        let copy = first.duplicate(&stream).unwrap();
        for (i, image) in images.iter().enumerate() {
            assert_ne!(first.addresses()[i], copy.addresses()[i], "buffer {i}");
            let mut host = vec![0u8; image.len()];
            // SAFETY: the copy holds image.len() bytes (mock device memory is host memory).
            unsafe { Mock::read_back(&stream, copy.addresses()[i], &mut host) }.unwrap();
            assert_eq!(&host, image, "buffer {i}");
        }
        // One device copy per non-empty buffer, and nothing sent from the host.
        let copies = stream.log.borrow().iter().filter(|l| *l == "copy").count();
        assert_eq!(copies, 2);
    }

    #[test]
    fn program_text_names_the_string_with_a_nul_byte_and_keeps_its_pointers() {
        let opts = vec!["-DA=1".to_string(), "-std=c++17".to_string()];
        let t = ProgramText::new("kernel", "k.cu", &[("h.cuh", "int x;")], &opts).unwrap();
        assert_eq!(t.headers(), 1);
        let (text, names) = t.header_arrays();
        // SAFETY: both arrays have one entry, each a live NUL-terminated string of `t`.
        let (text, name) = unsafe { (std::ffi::CStr::from_ptr(*text), std::ffi::CStr::from_ptr(*names)) };
        assert_eq!(
            (text.to_str().unwrap(), name.to_str().unwrap()),
            ("int x;", "h.cuh")
        );
        // SAFETY: as above, for the options array.
        let opt = unsafe { std::ffi::CStr::from_ptr(t.options[1]) };
        assert_eq!(opt.to_str().unwrap(), "-std=c++17");

        let none = ProgramText::new("kernel", "k.cu", &[], &[]).unwrap();
        assert_eq!(none.header_arrays(), (std::ptr::null(), std::ptr::null()));
        for (what, result) in [
            ("source", ProgramText::new("a\0b", "k.cu", &[], &[])),
            ("header name", ProgramText::new("a", "k.cu", &[("h\0", "x")], &[])),
            (
                "compiler option",
                ProgramText::new("a", "k.cu", &[], &["-D\0".to_string()]),
            ),
        ] {
            let e = result.err().expect("a NUL byte is an error").to_string();
            assert!(e.contains(what), "{what}: {e}");
        }
    }
}
