//! Benchmarks of the workspace: `cargo bench -p benches`. The serving-lookup bench
//! runs anywhere; GPU benches say so and exit where no GPU is found.

/// RMSNorm with its table replaced by the baked fixture (shared with the integration
/// tests, which probe the same table).
pub use tests::FixtureNorm;
