//! CPU reference for softmax and log-softmax, in f64, with torch's semantics.
//!
//! Each row is `softmax(x * scale)` (or `log_softmax`) computed in f64 from the f32
//! inputs and written as the nearest f32. Special values behave as `torch.softmax`:
//!
//! - `-inf` contributes 0 (its probability is 0, its log-probability `-inf`);
//! - a row of only `-inf` is NaN everywhere;
//! - a NaN anywhere in a row makes the whole row NaN;
//! - a `+inf` makes the whole row NaN too (its `exp(inf - inf)` is NaN), and so
//!   does `scale = 0` with an infinite input (`inf * 0` is NaN).
//!
//! Rows are strided: row `r` of `x` starts at `r * x_stride` (`x_stride >= cols`);
//! elements between `cols` and the stride are neither read nor written.
//!
//! ```
//! use kernels_softmax::reference::softmax;
//! let x = [0.0f32, 2f32.ln()];
//! let mut y = [0.0f32; 2];
//! softmax(&x, 2, &mut y, 2, 1, 2, 1.0);
//! assert!((y[0] - 1.0 / 3.0).abs() < 1e-7 && (y[1] - 2.0 / 3.0).abs() < 1e-7);
//! ```

use tuned::DType;

/// Softmax over each of `rows` rows of `cols` elements of `x * scale`.
pub fn softmax(
    x: &[f32],
    x_stride: usize,
    y: &mut [f32],
    y_stride: usize,
    rows: usize,
    cols: usize,
    scale: f32,
) {
    for_each_row(x, x_stride, y, y_stride, rows, cols, |xr, yr| {
        softmax_row(xr, yr, scale, false)
    });
}

/// Log-softmax over each of `rows` rows of `cols` elements of `x * scale`.
pub fn log_softmax(
    x: &[f32],
    x_stride: usize,
    y: &mut [f32],
    y_stride: usize,
    rows: usize,
    cols: usize,
    scale: f32,
) {
    for_each_row(x, x_stride, y, y_stride, rows, cols, |xr, yr| {
        softmax_row(xr, yr, scale, true)
    });
}

/// The GPU kernels match this reference within `atol + rtol * |reference|` per
/// element, with NaN exactly where the reference is NaN and equal infinities.
/// Returns `(atol, rtol)`.
///
/// The kernels compute in fp32 with the hardware `2^x` (about 2 ulp) and round once
/// to the storage type, so the bound is a few fp32 ulps for f32 and one rounding of
/// the storage type (2^-11 for f16, 2^-8 for bf16, relative) plus that; log-softmax
/// outputs are large and negative, so their absolute bound is wider.
pub const fn tolerance(dtype: DType, log: bool) -> (f64, f64) {
    match (dtype, log) {
        (DType::F32, false) => (1e-6, 2e-5),
        (DType::F32, true) => (2e-5, 2e-5),
        (DType::F16, false) => (1e-5, 1.5e-3),
        (DType::F16, true) => (2e-3, 1.5e-3),
        (DType::Bf16, false) => (1e-5, 8e-3),
        (DType::Bf16, true) => (1e-2, 8e-3),
    }
}

fn for_each_row(
    x: &[f32],
    x_stride: usize,
    y: &mut [f32],
    y_stride: usize,
    rows: usize,
    cols: usize,
    mut row: impl FnMut(&[f32], &mut [f32]),
) {
    assert!(
        x_stride >= cols && y_stride >= cols,
        "a stride is shorter than a row"
    );
    if rows == 0 {
        return;
    }
    assert!(
        x.len() >= (rows - 1) * x_stride + cols,
        "x holds fewer than {rows} rows"
    );
    assert!(
        y.len() >= (rows - 1) * y_stride + cols,
        "y holds fewer than {rows} rows"
    );
    for r in 0..rows {
        row(
            &x[r * x_stride..r * x_stride + cols],
            &mut y[r * y_stride..r * y_stride + cols],
        );
    }
}

fn softmax_row(x: &[f32], y: &mut [f32], scale: f32, log: bool) {
    let scale = f64::from(scale);
    let t = |v: f32| f64::from(v) * scale;
    // f64::max ignores NaN, as the kernels' max does (fmaxf, and max.bf16x2 / max.f16x2 on
    // 16-bit rows); a NaN then poisons the sum.
    let max = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(t(v)));
    // max = -inf (a row of -inf) gives exp(-inf + inf) = NaN; max = +inf likewise.
    let sum: f64 = x.iter().map(|&v| (t(v) - max).exp()).sum();
    let log_sum = sum.ln();
    for (o, &v) in y.iter_mut().zip(x) {
        let shifted = t(v) - max;
        *o = if log {
            (shifted - log_sum) as f32
        } else {
            (shifted.exp() / sum) as f32
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f32 = f32::INFINITY;

    fn run(x: &[f32], scale: f32, log: bool) -> Vec<f32> {
        let mut y = vec![0.0; x.len()];
        let n = x.len();
        if log {
            log_softmax(x, n, &mut y, n, 1, n, scale);
        } else {
            softmax(x, n, &mut y, n, 1, n, scale);
        }
        y
    }

    #[test]
    fn known_values_and_normalisation() {
        let y = run(&[0.0, 2f32.ln(), 0.0], 1.0, false);
        assert!((y[0] - 0.25).abs() < 1e-7 && (y[1] - 0.5).abs() < 1e-7, "{y:?}");
        let x: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let s: f64 = run(&x, 1.0, false).iter().map(|&v| f64::from(v)).sum();
        assert!((s - 1.0).abs() < 1e-5, "sum {s}");
    }

    #[test]
    fn log_softmax_is_log_of_softmax() {
        let x = [1.5f32, -3.0, 0.25, 8.0, 8.0];
        let p = run(&x, 0.5, false);
        let l = run(&x, 0.5, true);
        for (a, b) in p.iter().zip(&l) {
            assert!((a.ln() - b).abs() < 1e-6, "{p:?} {l:?}");
        }
    }

    #[test]
    fn scale_multiplies_the_input() {
        let x = [1.0f32, 2.0, 4.0];
        let doubled: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
        assert_eq!(run(&x, 2.0, false), run(&doubled, 1.0, false));
        // Shift invariance (large inputs do not overflow).
        let big: Vec<f32> = x.iter().map(|v| v + 1e4).collect();
        for (a, b) in run(&big, 1.0, false).iter().zip(run(&x, 1.0, false)) {
            assert!((a - b).abs() < 1e-3, "{a} {b}");
        }
    }

    #[test]
    fn special_values_follow_torch() {
        // -inf contributes 0.
        let y = run(&[-INF, 0.0, 0.0], 1.0, false);
        assert_eq!(y, vec![0.0, 0.5, 0.5]);
        let l = run(&[-INF, 0.0, 0.0], 1.0, true);
        assert_eq!(l[0], -INF);
        // A row of only -inf is NaN.
        assert!(run(&[-INF, -INF], 1.0, false).iter().all(|v| v.is_nan()));
        assert!(run(&[-INF, -INF], 1.0, true).iter().all(|v| v.is_nan()));
        // NaN anywhere (even beside -inf) makes the row NaN.
        assert!(run(&[1.0, f32::NAN, 2.0], 1.0, false).iter().all(|v| v.is_nan()));
        assert!(run(&[-INF, f32::NAN], 1.0, true).iter().all(|v| v.is_nan()));
        // +inf makes the row NaN.
        assert!(run(&[1.0, INF, 2.0], 1.0, false).iter().all(|v| v.is_nan()));
        // inf * 0 is NaN.
        assert!(run(&[1.0, -INF], 0.0, false).iter().all(|v| v.is_nan()));
        // A single element is 1 (log 0).
        assert_eq!(run(&[-7.0], 1.0, false), vec![1.0]);
        assert_eq!(run(&[-7.0], 1.0, true), vec![0.0]);
    }

    #[test]
    fn strides_leave_padding_alone() {
        let (rows, cols, xs, ys) = (3, 2, 5, 4);
        let x: Vec<f32> = (0..rows * xs).map(|i| i as f32 * 0.1).collect();
        let mut y = vec![-1.0f32; rows * ys];
        softmax(&x, xs, &mut y, ys, rows, cols, 1.0);
        for r in 0..rows {
            let row = &y[r * ys..r * ys + cols];
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{y:?}");
            assert!(row[1] > row[0]);
            assert!(y[r * ys + cols..(r + 1) * ys].iter().all(|&v| v == -1.0));
        }
    }

    #[test]
    #[should_panic(expected = "fewer than 2 rows")]
    fn short_buffers_are_refused() {
        let mut y = [0.0f32; 4];
        softmax(&[0.0; 5], 4, &mut y, 4, 2, 4, 1.0);
    }
}
