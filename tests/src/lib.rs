//! Cross-crate integration tests live in `tests/`. This library bakes the fixture
//! tables of `fixtures/tables` (through the same `build-tools` path as every kernel
//! crate) so the tests can probe a baked table with known contents.

/// The fixture tables, baked by `build.rs`.
pub mod fixture {
    include!(concat!(env!("OUT_DIR"), "/tuned_tables.rs"));
}
