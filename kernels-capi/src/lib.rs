//! The C ABI of the kernels, for C and C++ engines: softmax, log-softmax, RMSNorm,
//! fused residual-add RMSNorm, GEMM, and fused MoE with its routing, on raw device
//! pointers, a `CUstream` and a device ordinal, with the tuned configs of the baked
//! tables. The header is
//! `include/kernels.h`; build the library with `cargo build --release -p kernels-capi`
//! (`libkernels_capi.so` and `libkernels_capi.a` in `target/release`).
//!
//! ```c
//! #include "kernels.h"
//! // x, w, y: device pointers of tokens x 4096 bf16 values; stream: the engine's.
//! if (kernels_rmsnorm(y, 4096, x, 4096, w, tokens, 4096, KERNELS_BF16, 1e-6f, 0, stream) != KERNELS_OK)
//!     fprintf(stderr, "rmsnorm: %s\n", kernels_last_error());
//! ```
//!
//! Two layers: [`raw`] checks the integer codes and sizes a foreign caller holds and
//! runs the kernel crates' ops on the caller's stream (the Python extension uses it
//! too); [`ffi`] is the `extern "C"` surface over it: status codes, the thread-local
//! error message, and no panic crossing into C.

pub mod ffi;
pub mod raw;

pub use ffi::ABI_VERSION;
pub use kernels::core::{Error, Result};
pub use raw::{DTypeCode, Op, Status};
