// Bakes tuned/tables/{rmsnorm,fused_add_rmsnorm}/<target>.json for the enabled targets.
#[allow(dead_code)] // build.rs uses only the schema and check, not every constant
#[path = "src/schema.rs"]
mod schema;

fn main() {
    build_tools::Bake::new()
        .kernel(&schema::RMSNORM, schema::check_rmsnorm_config)
        .kernel(&schema::FUSED_ADD_RMSNORM, schema::check_config)
        .source("../kernels-core/cuda/prelude.cuh")
        .source("cuda/rmsnorm.cu")
        .run();
}
