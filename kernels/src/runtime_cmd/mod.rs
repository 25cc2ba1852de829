//! `kernels tune`, `kernels precompile`, `kernels info` and `kernels tables check` on a
//! GPU, the commands that need the GPU runtime (`kernels-core`); the retune bench calls
//! [`tune()`] too. Shape files are described in `kernels_core::tune::tune_table` (a JSON array
//! of `{key fields..., "batch": N or [N, ...]}`).
//!
//! A library only with the `tools` feature (on with `cli`), for the CLI and the retune
//! bench; engines leave it off. One module per command; `common` holds what they share.

#[macro_use]
mod common;
mod check;
mod defaults;
mod info;
mod precompile;
mod tune;

pub use check::check_tables;
#[cfg(feature = "cuda")]
pub use common::cuda::{cuda_runtime, tunables};
#[cfg(feature = "rocm")]
pub use common::hip::hip_tunables;
pub use common::{all_tables_dirs, tables_dir, Backend, CmdResult};
pub use defaults::{check_defaults, DefaultRow};
pub use info::info;
pub use precompile::precompile;
pub use tune::{tune, ShapeFilter, TuneArgs};
