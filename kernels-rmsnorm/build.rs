// Bakes tables/{rmsnorm,fused_add_rmsnorm}/<target>.json for the enabled targets.
#[allow(dead_code)] // build.rs uses only the schema and check, not every constant
#[path = "src/schema.rs"]
mod schema;

fn main() {
    build_tools::Bake::new()
        .kernel(&schema::RMSNORM, schema::check_rmsnorm_config)
        .kernel(&schema::FUSED_ADD_RMSNORM, schema::check_config)
        // The prelude is a build-dependency: cargo reruns this script when it changes.
        .source_text(kernels_prelude::FILE_NAME, kernels_prelude::PRELUDE)
        .source("cuda/rmsnorm.cu")
        .run();
}
