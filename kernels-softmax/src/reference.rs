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

use std::collections::HashMap;

use kernels_core::kernel_crate::{output_floor, reduction_depth, LAMBDA, U32};
use kernels_core::testing::compare_rows;
use kernels_core::Rows;
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

/// The accuracy the kernels promise on one row, as [`check`] applies it. Every term is
/// derived from the kernels' arithmetic (fp32, unit roundoff u = 2^-24) and the
/// storage type's rounding, for a row of `cols` elements whose scaled inputs
/// `t = x * scale` are at most `t_max` in magnitude.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowBound {
    /// Relative error of the row's sum, shared by every element (the normaliser).
    pub sum: f64,
    /// An element's own fp32 error: relative for a probability, absolute (natural-log
    /// units) for a log-probability.
    pub element: f64,
    /// One rounding to the storage type, relative, plus the reference's own rounding
    /// to f32.
    pub storage: f64,
    /// Absolute error near zero: results the kernels' fp32 exponential flushes to 0
    /// (below 2^-126), and for f16 half its subnormal spacing (2^-25).
    pub floor: f64,
}

/// The roundings a term goes through on its way to the row's sum: every config
/// runs at least a warp (32 threads) per row (`space::fits`), so at most
/// [`reduction_depth`]`(cols, 32)`.
pub fn sum_depth(cols: usize) -> f64 {
    reduction_depth(cols, 32)
}

/// The [`RowBound`] of a row of `cols` elements of `dtype` whose scaled inputs are at
/// most `t_max` in magnitude.
///
/// - element: the exponent `t * log2(e) - max` carries the roundings of
///   `scale * log2(e)`, of the fma and, for 16-bit outputs, of `max + log2(sum)`
///   (together at most u * (4 t_max + log2 cols) in natural-log units); 2^x on the
///   special-function unit adds 2 ulp (4u), the final multiply or division u and a
///   log-probability's `log(sum)` and fma 2u.
/// - sum: each of the [`sum_depth`] steps rounds once (u) and may rescale a part by
///   2^(max difference) (4u for 2^x, 2 t_max u for its argument). As independent
///   rounding errors (Higham and Mary, SIAM J. Sci. Comput. 2019), they stay within
///   LAMBDA * sqrt(depth) times one step's error, not depth times.
/// - storage: the storage type's unit roundoff (2^-8 bf16, 2^-11 f16, 2^-24 f32) and
///   the reference's rounding to f32 (u).
pub fn row_bound(dtype: DType, cols: usize, t_max: f64) -> RowBound {
    let log2_cols = (cols.max(1) as f64).log2();
    let step = U32 * (5.0 + 2.0 * t_max);
    RowBound {
        sum: LAMBDA * sum_depth(cols).sqrt() * step,
        element: U32 * (7.0 + 4.0 * t_max + log2_cols),
        storage: dtype.unit_roundoff() + U32,
        floor: output_floor(dtype),
    }
}

/// Checks a kernel's output `got` against `want` for the input `x` (rows `x_rows`),
/// `y = softmax(x * scale)` (or `log_softmax` where `log`), both outputs laid out as
/// `y_rows`. `want` is this module's reference (`kernel_runs = 1`), or another run of
/// a kernel (`kernel_runs = 2`: a search compares each candidate with the analytic
/// default's run, whose own error doubles the bound).
///
/// Per element, within the [`row_bound`] of its row: a probability within
/// `(sum + element + storage) * |want| + floor`, a log-probability within
/// `sum + element + storage * |want| + floor`; NaN where `want` is NaN, the same
/// infinity where it is infinite; padding between rows unchanged.
///
/// Per row without NaN, the normaliser: the sum of the probabilities (of `exp` of
/// the log-probabilities) within `sum + element` of the reference's, relative, plus
/// the storage roundings: for probabilities LAMBDA standard deviations of them (equal
/// values round alike, distinct ones independently), for log-probabilities their worst
/// case. A probability's normaliser off by 1% fails on any row; a log-probability's
/// fails where it exceeds one storage rounding of the outputs (2^-8 |log p| for bf16,
/// about 4% at vocabulary sizes, where bf16 cannot hold the difference).
#[allow(clippy::too_many_arguments)] // the operands of one call, and what to compare with
pub fn check(
    what: &str,
    dtype: DType,
    log: bool,
    x: &[f32],
    x_rows: Rows,
    scale: f32,
    got: &[f32],
    want: &[f32],
    y_rows: Rows,
    kernel_runs: u32,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, want {}", got.len(), want.len()));
    }
    let k = f64::from(kernel_runs);
    let (cols, ys) = (y_rows.cols, y_rows.stride);
    kernels_core::launch::par_check(y_rows.rows, cols, |range| {
        for r in range {
            let xr = &x[r * x_rows.stride..r * x_rows.stride + cols];
            let t_max = xr
                .iter()
                .map(|&v| (f64::from(v) * f64::from(scale)).abs())
                .filter(|t| t.is_finite())
                .fold(0.0, f64::max);
            let b = row_bound(dtype, cols, t_max);
            let (atol, rtol) = if log {
                (k * (b.sum + b.element + b.floor), k * b.storage)
            } else {
                (k * b.floor, k * (b.sum + b.element + b.storage))
            };
            // The row with the padding after it (none after the last).
            let end = ((r + 1) * ys).min(got.len());
            let one = Rows::strided(1, cols, ys);
            compare_rows(what, &got[r * ys..end], &want[r * ys..end], one, (atol, rtol))
                .map_err(|e| e.replacen(": row 0 col", &format!(": row {r} col"), 1))?;
            let (g, w) = (&got[r * ys..r * ys + cols], &want[r * ys..r * ys + cols]);
            if w.iter().any(|v| v.is_nan()) {
                continue;
            }
            // Probabilities: p = want, or exp(want) for log-probabilities.
            let p = |v: f32| if log { f64::from(v).exp() } else { f64::from(v) };
            let (mut got_sum, mut want_sum, mut worst, mut second) = (0.0, 0.0, 0.0, 0.0);
            // The storage rounding of each distinct probability: equal values round alike.
            let mut rounding: HashMap<u32, f64> = HashMap::new();
            for (&gv, &wv) in g.iter().zip(w) {
                let pw = p(wv);
                got_sum += p(gv);
                want_sum += pw;
                if wv.is_infinite() {
                    continue; // -inf: probability 0, checked exactly above
                }
                // At most one storage rounding of this element, as a probability.
                let c = if log {
                    pw * (b.storage * f64::from(wv).abs() + b.floor)
                } else {
                    b.storage * pw + b.floor
                };
                worst += c;
                *rounding.entry(wv.to_bits()).or_default() += c;
                if log {
                    // exp(w + d) - exp(w) - exp(w) d <= exp(w) d^2 for the |d| allowed here.
                    let d = atol + rtol * f64::from(wv).abs();
                    second += pw * d * d;
                }
            }
            // Probabilities are exponentials, so distinct ones round independently: their
            // roundings' sum stays within LAMBDA standard deviations. Log-probabilities of
            // inputs on the storage type's grid sit on one shifted grid and round alike, so
            // theirs is taken at its worst.
            let storage = if log {
                k * worst
            } else {
                let var: f64 = rounding.values().map(|c| c * c).sum();
                (LAMBDA * (k * var).sqrt()).min(k * worst)
            };
            let bound = k * (b.sum + b.element) * want_sum
                + storage
                + second
                + k * cols as f64 * DType::F32.smallest_normal();
            if (got_sum - want_sum).abs() > bound {
                return Err(format!(
                    "{what}, row {r}: the {} sum to {got_sum:.7}, the reference's to {want_sum:.7}: \
                     {:.3e} apart, beyond the bound {bound:.3e} (the normaliser is off)",
                    if log {
                        "exponentials of the outputs"
                    } else {
                        "outputs"
                    },
                    (got_sum - want_sum).abs()
                ));
            }
        }
        Ok(())
    })
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

    /// A softmax kernel simulated on the CPU as the GPU kernels compute it: fp32
    /// arithmetic (`t = x * scale`, the max, 2^((t - max) log2 e), a sequential fp32
    /// sum), the output rounded once to `dtype`; the normaliser multiplied by
    /// `perturb` (1 for the right kernel).
    fn simulated(dtype: DType, log: bool, x: &[f32], cols: usize, scale: f32, perturb: f32) -> Vec<f32> {
        use std::f32::consts::{LN_2, LOG2_E};
        let mut y = Vec::with_capacity(x.len());
        let k = scale * LOG2_E;
        for row in x.chunks(cols) {
            // In log2 units, as softmax.cu: t = x * k - max, the sum of 2^t.
            let m = row.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v * k));
            let t: Vec<f32> = row.iter().map(|&v| v.mul_add(k, -m)).collect();
            let s = t.iter().map(|v| v.exp2()).sum::<f32>() * perturb;
            y.extend(t.iter().map(|&t| {
                if log {
                    t.mul_add(LN_2, -s.ln())
                } else if dtype == DType::F32 {
                    t.exp2() * (1.0 / s)
                } else {
                    (t - s.log2()).exp2()
                }
            }));
        }
        kernels_core::testing::stored(dtype, &y)
    }

    /// The reference of `x` (rows of `cols`), and the check of `got` against it.
    fn checked(
        dtype: DType,
        log: bool,
        x: &[f32],
        cols: usize,
        scale: f32,
        got: &[f32],
    ) -> Result<(), String> {
        let rows = Rows::contiguous(x.len() / cols, cols);
        let mut want = vec![0.0; x.len()];
        let f = if log { log_softmax } else { softmax };
        f(x, cols, &mut want, cols, rows.rows, cols, scale);
        check("t", dtype, log, x, rows, scale, got, &want, rows, 1)
    }

    fn inputs(dtype: DType, n: usize, seed: u64) -> Vec<f32> {
        kernels_core::testing::stored(dtype, &kernels_core::launch::pseudo_random(n, seed, 6.0, 0.0))
    }

    #[test]
    fn a_right_kernel_passes_at_every_storage_type_and_length() {
        for (dtype, cols) in [
            (DType::Bf16, 151936),
            (DType::Bf16, 1000),
            (DType::F16, 65536),
            (DType::F16, 7),
            (DType::F32, 4096),
            (DType::F32, 50001),
        ] {
            let x = inputs(dtype, 2 * cols, 3);
            for log in [false, true] {
                let got = simulated(dtype, log, &x, cols, 0.7, 1.0);
                checked(dtype, log, &x, cols, 0.7, &got)
                    .unwrap_or_else(|e| panic!("{dtype} cols={cols} log={log}: {e}"));
            }
        }
    }

    #[test]
    fn a_normaliser_off_by_one_percent_fails_at_vocabulary_sizes() {
        for dtype in DType::ALL {
            let cols = 151936;
            let x = inputs(dtype, cols, 5);
            // bf16 log-probabilities near -12 are 2^-5 apart: a 1% shift (0.01) is below
            // one rounding, so only a larger one can fail there.
            let log_off = if dtype == DType::Bf16 { 1.08 } else { 1.01 };
            for log in [false, true] {
                let off = if log { log_off } else { 1.01 };
                for perturb in [off, 1.0 / off] {
                    let got = simulated(dtype, log, &x, cols, 1.0, perturb);
                    let e = checked(dtype, log, &x, cols, 1.0, &got)
                        .expect_err(&format!("{dtype} log={log} normaliser x{perturb} passed"));
                    assert!(e.contains("row 0"), "{e}");
                }
            }
            // A lost sixteenth of the sum (one block of a 16-block cluster): 6%.
            let got = simulated(dtype, false, &x, cols, 1.0, 15.0 / 16.0);
            assert!(checked(dtype, false, &x, cols, 1.0, &got).is_err());
        }
    }

    #[test]
    fn uniform_and_nearly_uniform_rows_pass() {
        // Equal inputs give equal outputs, which round alike: scale 0, and log-softmax
        // of softmax outputs (all near 1 / cols) as the chained test runs it.
        for (dtype, cols) in [
            (DType::Bf16, 4096),
            (DType::Bf16, 8200),
            (DType::F16, 2048),
            (DType::F32, 7),
        ] {
            let x = inputs(dtype, 3 * cols, 21);
            for log in [false, true] {
                let got = simulated(dtype, log, &x, cols, 0.0, 1.0);
                checked(dtype, log, &x, cols, 0.0, &got).unwrap_or_else(|e| panic!("{e}"));
            }
            let p = simulated(dtype, false, &x, cols, 3.0, 1.0);
            for log in [false, true] {
                let got = simulated(dtype, log, &p, cols, 30.0, 1.0);
                checked(dtype, log, &p, cols, 30.0, &got).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }

    #[test]
    fn zeros_for_small_outputs_and_a_uniform_error_fail() {
        let (dtype, cols) = (DType::Bf16, 151936);
        let x = inputs(dtype, cols, 9);
        let right = simulated(dtype, false, &x, cols, 1.0, 1.0);
        // Every output below the largest one's tenth written as 0.
        let top = right.iter().fold(0.0f32, |a, &b| a.max(b));
        let zeroed: Vec<f32> = right
            .iter()
            .map(|&v| if v < top / 10.0 { 0.0 } else { v })
            .collect();
        assert!(checked(dtype, false, &x, cols, 1.0, &zeroed).is_err());
        // Each output 2% high, one element at a time: past one bf16 rounding.
        let mut one_off = right.clone();
        one_off[cols / 3] *= 1.02;
        let e = checked(dtype, false, &x, cols, 1.0, &one_off).unwrap_err();
        assert!(e.contains(&format!("col {}", cols / 3)), "{e}");
    }

    #[test]
    fn a_run_compared_with_another_run_gets_both_runs_error() {
        // Two right kernels that round differently: one sums in the other order.
        let (dtype, cols) = (DType::F32, 32768);
        let x = inputs(dtype, cols, 13);
        let a = simulated(dtype, false, &x, cols, 1.0, 1.0);
        let reversed: Vec<f32> = x.iter().rev().copied().collect();
        let mut b = simulated(dtype, false, &reversed, cols, 1.0, 1.0);
        b.reverse();
        let rows = Rows::contiguous(1, cols);
        assert_eq!(check("t", dtype, false, &x, rows, 1.0, &b, &a, rows, 2), Ok(()));
        let off: Vec<f32> = b.iter().map(|v| v * 1.01).collect();
        assert!(check("t", dtype, false, &x, rows, 1.0, &off, &a, rows, 2).is_err());
    }

    #[test]
    #[should_panic(expected = "fewer than 2 rows")]
    fn short_buffers_are_refused() {
        let mut y = [0.0f32; 4];
        softmax(&[0.0; 5], 4, &mut y, 4, 2, 4, 1.0);
    }
}
