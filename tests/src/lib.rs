//! Cross-crate integration tests live in `tests/`. This library bakes the fixture
//! tables of `fixtures/tables` (through the same `build-tools` path as every kernel
//! crate) so the tests can probe a baked table with known contents.

/// The fixture tables, baked by `build.rs`.
pub mod fixture {
    include!(concat!(env!("OUT_DIR"), "/tuned_tables.rs"));
}

use kernels::rmsnorm::{RmsNorm, RmsNormConfig, RmsNormKey};
use tuned::{BakedTable, KernelSchema, KeyValues, Target, TunedKernel, Value};

/// RMSNorm with its table replaced by the baked fixture: every part of its
/// `TunedKernel` forwards to RMSNorm's except the table and the source fingerprint.
pub struct FixtureNorm;

impl TunedKernel for FixtureNorm {
    type Key = RmsNormKey;
    type Config = RmsNormConfig;
    const SCHEMA: &'static KernelSchema = RmsNorm::SCHEMA;
    const SOURCE_FINGERPRINT: &'static str = fixture::SOURCE_FINGERPRINT;

    fn key_values(key: &RmsNormKey) -> KeyValues {
        RmsNorm::key_values(key)
    }
    fn key_from_values(values: &[Value]) -> Result<RmsNormKey, String> {
        RmsNorm::key_from_values(values)
    }
    fn config_from_values(values: &[Value]) -> Result<RmsNormConfig, String> {
        RmsNorm::config_from_values(values)
    }
    fn config_from_baked(values: &[Value]) -> Option<RmsNormConfig> {
        RmsNorm::config_from_baked(values)
    }
    fn config_values(config: &RmsNormConfig) -> Vec<Value> {
        RmsNorm::config_values(config)
    }
    fn analytic_default(target: Target, key: &RmsNormKey, batch: u64) -> RmsNormConfig {
        RmsNorm::analytic_default(target, key, batch)
    }
    fn baked_table(target: Target) -> Option<&'static BakedTable> {
        fixture::rmsnorm_table(target)
    }
    fn accepts(target: Target, key: &RmsNormKey, batch: u64, config: &RmsNormConfig) -> bool {
        RmsNorm::accepts(target, key, batch, config)
    }
}
