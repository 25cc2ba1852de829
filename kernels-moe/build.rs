// Bakes tuned/tables/moe/<target>.json for the enabled targets. No device source has
// landed yet, so the fingerprint covers none.
#[allow(dead_code)] // build.rs uses only the schema and check, not every constant
#[path = "src/schema.rs"]
mod schema;

fn main() {
    build_tools::Bake::new()
        .kernel(&schema::MOE, schema::check_config)
        .run();
}
