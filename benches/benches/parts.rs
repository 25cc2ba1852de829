use criterion::{criterion_group, criterion_main, Criterion};
use kernels::rmsnorm::{RmsNorm, RmsNormKey};
use std::hint::black_box;
use tuned::{write_canonical, DType, KeyBuf, Target, TunedKernel};

fn parts(c: &mut Criterion) {
    let key = RmsNormKey {
        dtype: DType::Bf16,
        cols: 4096,
    };
    c.bench_function("key_values", |b| {
        b.iter(|| black_box(RmsNorm::key_values(black_box(&key))))
    });
    c.bench_function("format", |b| {
        b.iter(|| {
            let mut buf = KeyBuf::new();
            write_canonical(
                RmsNorm::SCHEMA,
                RmsNorm::key_values(black_box(&key)).as_slice(),
                &mut buf,
            )
            .unwrap();
            black_box(buf.as_str().len())
        })
    });
    let t = tests::fixture::rmsnorm_table(Target::Sm90).unwrap();
    c.bench_function("phf get", |b| {
        b.iter(|| black_box(t.entries.get(black_box("dtype=bf16,cols=4096"))))
    });
    c.bench_function("lookup", |b| {
        b.iter(|| black_box(t.lookup(black_box("dtype=bf16,cols=4096"), black_box(7))))
    });
    let e = t.lookup("dtype=bf16,cols=4096", 7).unwrap().0;
    let values = e.config.tuned().copied().unwrap();
    c.bench_function("decode", |b| {
        b.iter(|| black_box(RmsNorm::config_from_values(black_box(values))))
    });
}
criterion_group!(benches, parts);
criterion_main!(benches);
