//! What a kernel family builds a launch from: its source and compile variant
//! ([`KernelSource`], [`Variant`]), its dimensions and arguments ([`LaunchDims`],
//! [`KernelArgs`]), the backend-neutral plan ([`PlannedKernel`], [`LaunchPlan`], [`Launches`]), row
//! shapes and their checks ([`Rows`]), and element encoding for tests and tuning
//! inputs.

mod args;
mod element;
mod plan;
mod shape;
mod variant;

pub use args::{
    KernelArgs, LaunchDims, TensorMap2d, TmaElement, TmaSwizzle, MAX_CLUSTER, MAX_KERNEL_ARGS,
    MAX_PORTABLE_CLUSTER, MAX_TENSOR_MAPS,
};
#[cfg(feature = "cuda")]
pub use element::{alloc_random, Element};
pub use element::{
    decode, element_at, encode, par_check, par_fill, pseudo_random, row_norms, PARALLEL_ELEMENTS,
};
pub(crate) use plan::check_count;
pub use plan::{
    candidates_digest, BufferRole, Expected, LaunchPlan, Launches, PlannedKernel, TuneBuffer, MAX_LAUNCHES,
};
pub use shape::{check_disjoint, check_eps, dtype_define, widest_vector, Rows};
pub use variant::{KernelSource, Variant};
