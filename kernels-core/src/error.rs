//! The crate's one error type. Every message names the value, argument or file at fault.

use std::path::PathBuf;

/// Everything the runtime can fail with.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The CUDA driver library (`libcuda.so`) could not be loaded.
    #[error(
        "no CUDA driver found: libcuda could not be loaded (install the NVIDIA driver, or run where a GPU is)"
    )]
    NoDriver,

    /// The NVRTC library (`libnvrtc.so`) could not be loaded.
    #[error(
        "no NVRTC library found: libnvrtc could not be loaded (put the CUDA toolkit's lib64 folder or the \
         nvidia-cuda-nvrtc package's lib folder on LD_LIBRARY_PATH)"
    )]
    NoNvrtc,

    /// The driver loaded but reports no usable GPU.
    #[error("no CUDA GPU found: {0}")]
    NoGpu(String),

    /// A device ordinal past the number of devices.
    #[error("device ordinal {ordinal} is out of range: {count} CUDA device(s) found")]
    BadOrdinal { ordinal: usize, count: usize },

    /// A GPU older than the kernels support.
    #[error("device `{device}` has compute capability {major}.{minor}; the kernels need 8.0 or newer")]
    UnsupportedDevice { device: String, major: i32, minor: i32 },

    /// A CUDA driver call returned an error.
    #[error("CUDA driver call `{call}` failed: {message}")]
    Driver { call: &'static str, message: String },

    /// A CUDA library call panicked inside cudarc (for example a symbol missing from an
    /// older library); caught so the caller gets an error, not an abort.
    #[error("CUDA library call `{call}` failed inside cudarc: {message}")]
    LibraryPanic { call: &'static str, message: String },

    /// NVRTC rejected a kernel source: the variant that failed and the compiler's log.
    #[error("NVRTC could not compile kernel `{kernel}` variant [{variant}] for {arch}:\n{log}")]
    Compile {
        kernel: String,
        variant: String,
        arch: String,
        log: String,
    },

    /// An NVRTC call other than the compile itself failed.
    #[error("NVRTC call `{call}` failed for kernel `{kernel}`: {message}")]
    Nvrtc {
        call: &'static str,
        kernel: String,
        message: String,
    },

    /// A launch needed a module that is not loaded yet while its stream captures a CUDA
    /// graph; compiling or loading then would break the capture.
    #[error(
        "kernel `{kernel}` variant [{variant}] is not loaded yet and the stream is capturing a CUDA graph; \
         resolve and precompile it before capture (Runtime::warm or Runtime::precompile)"
    )]
    CompileWhileCapturing { kernel: String, variant: String },

    /// An argument failed validation; nothing was launched.
    #[error("invalid argument `{name}`: {reason}")]
    InvalidArgument { name: String, reason: String },

    /// `KERNELS_TUNING` (or an API call) named no policy.
    #[error("unknown tuning policy `{0}` in KERNELS_TUNING (expected serve, online or default)")]
    BadPolicy(String),

    /// A file or folder could not be read or written.
    #[error("{}: {reason}", path.display())]
    Io { path: PathBuf, reason: String },

    /// A shape file for `kernels tune` is malformed.
    #[error("shape file {file}: {reason}")]
    Shapes { file: String, reason: String },

    /// A table file could not be read, validated or written.
    #[error(transparent)]
    Table(#[from] tuned::TableError),

    /// A run's output failed its check, or could not be checked (the tuner's check of
    /// each candidate, `kernels_core::tune::verify`); the message says what differed.
    #[error("{0}")]
    Output(String),

    /// A kernel family's own code (problem allocation, key decoding) failed.
    #[error("kernel `{kernel}`: {reason}")]
    Kernel { kernel: String, reason: String },

    /// No usable HIP (AMD) device: the runtime reports none, or reports an error.
    #[error("no HIP device: {0}")]
    NoHipDevice(String),

    /// hipRTC could not be loaded: every library tried, and why each was not used.
    #[error("no hipRTC library found: tried {0} (install ROCm's hipRTC, or put its lib folder on LD_LIBRARY_PATH)")]
    NoHipRtc(String),

    /// A HIP runtime call returned an error.
    #[error("HIP call `{call}` failed: {message}")]
    Hip { call: &'static str, message: String },

    /// hipRTC rejected a kernel source: the variant that failed and the compiler's log.
    #[error("hipRTC could not compile kernel `{kernel}` variant [{variant}] for {arch}:\n{log}")]
    HipCompile {
        kernel: String,
        variant: String,
        arch: String,
        log: String,
    },

    /// A hipRTC call other than the compile itself failed.
    #[error("hipRTC call `{call}` failed for kernel `{kernel}`: {message}")]
    HipRtc {
        call: &'static str,
        kernel: String,
        message: String,
    },

    /// A tuning run could not produce a result.
    #[error("tuning kernel `{kernel}` [{key}] batch {batch}: {reason}")]
    Tune {
        kernel: String,
        key: String,
        batch: u64,
        reason: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An invalid argument, named.
    pub fn invalid(name: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// An I/O failure on `path`.
    pub fn io(path: impl Into<PathBuf>, err: impl std::fmt::Display) -> Error {
        Error::Io {
            path: path.into(),
            reason: err.to_string(),
        }
    }

    /// A failure inside a kernel family's code.
    pub fn kernel(kernel: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Kernel {
            kernel: kernel.into(),
            reason: reason.into(),
        }
    }
}
