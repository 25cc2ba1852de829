//! The GPU runtime under every kernel family.
//!
//! Work in progress: device, compile, module cache, launch, timing and the autotuner
//! land with the kernels-core issue. Until then this crate re-exports the tuning model.

pub use tuned;
