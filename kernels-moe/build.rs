// Bakes tables/moe/<target>.json for the enabled targets and fingerprints the
// device source with what it is compiled after (the prelude, kernels-gemm's PTX
// and wgmma wrappers).
#[allow(dead_code)] // build.rs uses only the schema and check, not every constant
#[path = "src/schema.rs"]
mod schema;

fn main() {
    build_tools::Bake::new()
        .kernel(&schema::MOE, schema::check_config)
        // The prelude is a build-dependency: cargo reruns this script when it changes.
        .source_text(kernels_prelude::FILE_NAME, kernels_prelude::PRELUDE)
        .source("../kernels-gemm/cuda/gemm_ptx.cuh")
        .source("../kernels-gemm/cuda/gemm_wgmma.cuh")
        .source("cuda/moe.cu")
        .run();
}
