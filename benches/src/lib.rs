//! Benchmarks of the workspace: `cargo bench -p benches`. The serving-lookup bench
//! runs anywhere; GPU benches say so and exit where no GPU is found.
