// Bakes the fixture tables (tests/fixtures/tables) with the real rmsnorm schema, through
// the same build-tools path every kernel crate uses. This crate is never published
// (`publish = false`), so it may read the schema from its sibling's source.
#[allow(dead_code)] // only the schema and its check are used here
#[path = "../kernels-rmsnorm/src/schema.rs"]
mod schema;

fn main() {
    build_tools::Bake::new()
        .kernel(&schema::RMSNORM, schema::check_rmsnorm_config)
        .tables_dir("fixtures/tables")
        .run();
}
