//! The serving lookup: format the static key, probe the perfect-hash table, pick the
//! nearest batch. Runs on any machine (no GPU).

use criterion::{criterion_group, criterion_main, Criterion};
use kernels::rmsnorm::{RmsNorm, RmsNormKey};
use kernels::softmax::{Softmax, SoftmaxKey};
use std::hint::black_box;
use tuned::{resolve_serve, DType, Target};

fn lookup(c: &mut Criterion) {
    let key = RmsNormKey {
        dtype: DType::Bf16,
        cols: 4096,
    };
    c.bench_function("resolve_serve rmsnorm sm90 (table or default)", |b| {
        let mut batch = 0u64;
        b.iter(|| {
            batch = (batch * 7 + 13) % 16384 + 1;
            black_box(resolve_serve::<RmsNorm>(Target::Sm90, black_box(&key), batch))
        })
    });
    let key = SoftmaxKey {
        dtype: DType::Bf16,
        cols: 128256,
    };
    c.bench_function("resolve_serve softmax sm90 (table or default)", |b| {
        let mut batch = 0u64;
        b.iter(|| {
            batch = (batch * 7 + 13) % 16384 + 1;
            black_box(resolve_serve::<Softmax>(Target::Sm90, black_box(&key), batch))
        })
    });
}

criterion_group!(benches, lookup);
criterion_main!(benches);
