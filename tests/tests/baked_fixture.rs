//! A fixture table baked by build-tools and probed with the serving lookup rule.

use kernels::rmsnorm::{RmsNorm, RmsNormKey};
use tests::fixture::{rmsnorm_table, SOURCE_FINGERPRINT};
use tests::FixtureNorm;
use tuned::{resolve_serve, DType, EntryConfig, PreparedKey, Source, TableHit, Target, TunedKernel, Value};

/// The entry's batch, how it matched, and its config values (empty for a default marker).
fn probe(target: Target, key: &str, batch: u64) -> Option<(u64, TableHit, Vec<Value>)> {
    let t = rmsnorm_table(target)?;
    t.lookup(key, batch).map(|(e, h)| {
        let values = e.config.tuned().map(|v| v.to_vec()).unwrap_or_default();
        (e.batch, h, values)
    })
}

fn probe_is_marker(key: &str, batch: u64) -> bool {
    let t = rmsnorm_table(Target::Sm90).unwrap();
    t.lookup(key, batch).unwrap().0.config.is_default()
}

#[test]
fn fixture_is_baked_with_provenance() {
    let t = rmsnorm_table(Target::Sm90).expect("sm90 is enabled and has a fixture");
    assert_eq!(t.kernel, "rmsnorm");
    assert_eq!(t.len, 6);
    assert_eq!(t.markers(), 1);
    assert_eq!(t.params, &["threads", "vec", "rows", "occ", "splits", "late"]);
    assert_eq!(t.tuned_at, "2026-11-30");
    assert_eq!(t.source_fingerprint, SOURCE_FINGERPRINT);
    assert!(!t.is_stale());
}

#[test]
fn exact_hit() {
    let (b, h, c) = probe(Target::Sm90, "dtype=bf16,cols=4096", 16).unwrap();
    assert_eq!((b, h), (16, TableHit::Exact));
    assert_eq!(
        c,
        vec![
            Value::Int(256),
            Value::Int(8),
            Value::Int(1),
            Value::Int(0),
            Value::Int(1),
            Value::Int(0)
        ]
    );
}

#[test]
fn nearest_from_below_above_and_between() {
    // Below the smallest batch of a key with one entry.
    let (b, h, _) = probe(Target::Sm90, "dtype=bf16,cols=8192", 1).unwrap();
    assert_eq!(
        (b, h),
        (
            64,
            TableHit::Nearest {
                table_batch: 64,
                distance: 6.0
            }
        )
    );
    // Above the largest.
    let (b, _, _) = probe(Target::Sm90, "dtype=bf16,cols=4096", 16384).unwrap();
    assert_eq!(b, 256);
    // Between 1 and 16: 3 is nearer 1 (log2 1.58) than 16 (2.42).
    assert_eq!(probe(Target::Sm90, "dtype=bf16,cols=4096", 3).unwrap().0, 1);
    // 5 is nearer 16 (1.68) than 1 (2.32).
    assert_eq!(probe(Target::Sm90, "dtype=bf16,cols=4096", 5).unwrap().0, 16);
}

#[test]
fn tie_goes_to_the_larger_batch() {
    // 4 is exactly 2 octaves from both 1 and 16; 64 is exactly 2 from 16 and 256.
    let (b, h, _) = probe(Target::Sm90, "dtype=bf16,cols=4096", 4).unwrap();
    assert_eq!(
        (b, h),
        (
            16,
            TableHit::Nearest {
                table_batch: 16,
                distance: 2.0
            }
        )
    );
    assert_eq!(probe(Target::Sm90, "dtype=bf16,cols=4096", 64).unwrap().0, 256);
}

#[test]
fn miss_on_unknown_key_or_dtype() {
    assert!(probe(Target::Sm90, "dtype=bf16,cols=4097", 16).is_none());
    assert!(probe(Target::Sm90, "dtype=f16,cols=4096", 16).is_none());
    assert!(
        probe(Target::Sm90, "cols=4096,dtype=bf16", 16).is_none(),
        "only the canonical form matches"
    );
    // f32 entry is separate from bf16.
    assert_eq!(
        probe(Target::Sm90, "dtype=f32,cols=4096", 4).unwrap().1,
        TableHit::Exact
    );
}

#[test]
fn disabled_target_bakes_no_table() {
    // fixtures/tables/rmsnorm/sm80.json exists, but this crate's features leave sm80 out.
    assert!(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/tables/rmsnorm/sm80.json")
        .exists());
    assert!(rmsnorm_table(Target::Sm80).is_none());
    // Enabled, but no file: nothing either.
    assert!(rmsnorm_table(Target::Gfx90a).is_none());
}

#[test]
fn gfx_fixture_is_baked_and_probed() {
    let t = rmsnorm_table(Target::Gfx942).expect("gfx942 fixture");
    assert_eq!(t.target, Target::Gfx942);
    let (b, h, c) = probe(Target::Gfx942, "dtype=bf16,cols=4096", 1).unwrap();
    assert_eq!((b, h), (1, TableHit::Exact));
    assert_eq!(c[0], Value::Int(64), "a 64-lane wavefront per row");
    assert_eq!(
        probe(Target::Gfx942, "dtype=bf16,cols=4096", 100).unwrap().0,
        1024
    );
}

#[test]
fn default_marker_is_baked_and_found_by_the_nearest_batch_rule() {
    let t = rmsnorm_table(Target::Sm90).unwrap();
    let (e, h) = t.lookup("dtype=bf16,cols=8192", 1024).unwrap();
    assert_eq!((e.batch, h), (1024, TableHit::Exact));
    assert_eq!(e.config, EntryConfig::Default);
    assert_eq!((e.us, e.default_us), (60.0, 60.0));
    // 256 is two octaves from both 64 and the marker at 1024: the tie goes to the marker.
    assert!(probe_is_marker("dtype=bf16,cols=8192", 256));
    assert!(probe_is_marker("dtype=bf16,cols=8192", 4096));
    // 200 is nearer 64 (log2 1.64) than 1024 (2.36): the tuned entry.
    let (b, _, c) = probe(Target::Sm90, "dtype=bf16,cols=8192", 200).unwrap();
    assert_eq!((b, c[0].clone()), (64, Value::Int(1024)));
}

#[test]
fn serving_a_batch_near_a_marker_gives_the_default_for_that_batch() {
    let key = RmsNormKey {
        dtype: DType::Bf16,
        cols: 8192,
    };
    let prepared = PreparedKey::<FixtureNorm>::new(Target::Sm90, key);
    for batch in [256, 1024, 3000] {
        let r = resolve_serve::<FixtureNorm>(Target::Sm90, &key, batch);
        assert_eq!(
            r.source,
            Source::TableDefault {
                table_batch: 1024,
                batch
            }
        );
        assert_eq!(
            r.config,
            RmsNorm::analytic_default(Target::Sm90, &key, batch),
            "batch {batch}: the default computed for the requested batch"
        );
        assert_eq!(prepared.resolve(batch), r, "the per-request path agrees");
    }
    // Nearer 64: batch 64's tuned config.
    let r = resolve_serve::<FixtureNorm>(Target::Sm90, &key, 100);
    assert_eq!(
        r.source,
        Source::TableNearest {
            table_batch: 64,
            batch: 100
        }
    );
    assert_eq!(
        RmsNorm::config_values(&r.config)[0],
        Value::Int(1024),
        "batch 64's threads"
    );
}
