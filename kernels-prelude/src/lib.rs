//! The shared device prelude: the text every kernel family's device source is compiled
//! after (bf16/fp16 storage types and conversions, vector loads, warp and group
//! reductions, the sm_90 cluster exchange), so a source compiles with NVRTC or hipRTC
//! alone, without the CUDA toolkit's headers.
//!
//! It is its own crate, with no dependencies, so that both users of the text reach it
//! through a dependency rather than a path into another crate: a kernel crate's
//! `KernelSource` puts it before the family's own source (through `kernels_core::PRELUDE`),
//! and the same crate's `build.rs` fingerprints it, under its file name `prelude.cuh`,
//! with the family's source:
//!
//! ```
//! assert!(kernels_prelude::PRELUDE.contains("namespace kd"));
//! assert_eq!(kernels_prelude::FILE_NAME, "prelude.cuh");
//! ```

/// The prelude's text (`cuda/prelude.cuh` of this crate).
pub const PRELUDE: &str = include_str!("../cuda/prelude.cuh");

/// The prelude's file name, under which source fingerprints cover its text.
pub const FILE_NAME: &str = "prelude.cuh";
