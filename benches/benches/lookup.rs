//! The serving lookup: format the static key on the stack, probe the perfect-hash
//! table, pick the nearest batch, decode the config. Runs on any machine (no GPU).
//!
//! `table hit` probes the baked fixture table (tests/fixtures/tables) through the
//! full `resolve_serve` path; `default` is a miss that computes the analytic default.

use benches::FixtureNorm;
use criterion::{criterion_group, criterion_main, Criterion};
use kernels::rmsnorm::RmsNormKey;
use std::hint::black_box;
use tuned::{resolve_serve, DType, PreparedKey, Target};

fn lookup(c: &mut Criterion) {
    let hit = RmsNormKey {
        dtype: DType::Bf16,
        cols: 4096,
    };
    let r = resolve_serve::<FixtureNorm>(Target::Sm90, &hit, 7);
    assert!(
        r.source.name().starts_with("table"),
        "the bench must exercise a table hit: {}",
        r.source
    );
    c.bench_function("resolve_serve, table hit (nearest batch)", |b| {
        let mut batch = 0u64;
        b.iter(|| {
            batch = (batch * 7 + 13) % 16384 + 1;
            black_box(resolve_serve::<FixtureNorm>(Target::Sm90, black_box(&hit), batch))
        })
    });
    let prepared = PreparedKey::<FixtureNorm>::new(Target::Sm90, hit);
    assert!(prepared.in_table());
    c.bench_function("PreparedKey::resolve, table hit (per-request part)", |b| {
        let mut batch = 0u64;
        b.iter(|| {
            batch = (batch * 7 + 13) % 16384 + 1;
            black_box(black_box(&prepared).resolve(batch))
        })
    });
    let miss = RmsNormKey {
        dtype: DType::Bf16,
        cols: 5120,
    };
    c.bench_function("resolve_serve, miss -> analytic default", |b| {
        let mut batch = 0u64;
        b.iter(|| {
            batch = (batch * 7 + 13) % 16384 + 1;
            black_box(resolve_serve::<FixtureNorm>(
                Target::Sm90,
                black_box(&miss),
                batch,
            ))
        })
    });
}

criterion_group!(benches, lookup);
criterion_main!(benches);
