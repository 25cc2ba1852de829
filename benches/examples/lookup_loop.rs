//! 1M serving lookups in a loop, for instruction counting under callgrind.
use benches::FixtureNorm;
use kernels::rmsnorm::RmsNormKey;
use std::hint::black_box;
use tuned::{resolve_serve, DType, Target};

fn main() {
    let key = RmsNormKey {
        dtype: DType::Bf16,
        cols: 4096,
    };
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut acc = 0u32;
    for i in 0..n {
        acc ^= resolve_serve::<FixtureNorm>(Target::Sm90, black_box(&key), i % 16384 + 1)
            .config
            .threads;
    }
    println!("{acc}");
}
