//! CPU reference for RMSNorm and fused residual-add RMSNorm, in f64.
//!
//! - `rmsnorm`: `y = x / sqrt(mean(x^2) + eps) * weight` per row.
//! - `fused_add_rmsnorm`, in place, with SGLang's and vLLM's semantics: first
//!   `residual = round(x + residual)` (the sum in f32, rounded to the storage type,
//!   which is what is stored and what the norm reads), then
//!   `x = rmsnorm(residual) * weight`.
//!
//! The norm is computed in f64 from the f32 values and written as the nearest f32;
//! the GPU kernels round it once more to the storage type (see [`check`]).
//! Special values propagate as in torch: an infinite element makes its row's
//! `mean(x^2)` infinite, so the row's outputs are 0, and NaN where `x` is infinite.
//!
//! Rows are strided: row `r` starts at `r * stride` (`stride >= cols`); elements
//! between `cols` and the stride are neither read nor written. `cols` is
//! `weight.len()`.
//!
//! ```
//! use kernels_rmsnorm::reference::rmsnorm;
//! let mut y = [0.0f32; 2];
//! rmsnorm(&[3.0, 4.0], 2, &[1.0, 2.0], &mut y, 2, 1, 0.0);
//! let rms = 12.5f32.sqrt();
//! assert!((y[0] - 3.0 / rms).abs() < 1e-6 && (y[1] - 8.0 / rms).abs() < 1e-6);
//! ```

use std::ops::Range;

use std::collections::HashMap;

use kernels_core::kernel_crate::{output_floor, reduction_depth, LAMBDA, U32};
use kernels_core::testing::compare_rows;
use kernels_core::Rows;
use tuned::DType;

/// RMSNorm of each of `rows` rows of `x` into `y`.
pub fn rmsnorm(
    x: &[f32],
    x_stride: usize,
    weight: &[f32],
    y: &mut [f32],
    y_stride: usize,
    rows: usize,
    eps: f32,
) {
    let (x_rows, y_rows) = (("x", x.len(), x_stride), ("y", y.len(), y_stride));
    for (xr, yr) in row_pairs(x_rows, y_rows, rows, weight.len()) {
        normalise(&x[xr], weight, eps, &mut y[yr]);
    }
}

/// Fused residual-add RMSNorm in place: `residual = round(x + residual)`, then
/// `x = rmsnorm(residual) * weight`, for each of `rows` rows; `storage` is the
/// tensors' element type, to which the residual is rounded.
#[allow(clippy::too_many_arguments)] // the kernel's parameters, plus the storage type
pub fn fused_add_rmsnorm(
    x: &mut [f32],
    x_stride: usize,
    residual: &mut [f32],
    r_stride: usize,
    weight: &[f32],
    rows: usize,
    eps: f32,
    storage: DType,
) {
    let (x_rows, r_rows) = (("x", x.len(), x_stride), ("residual", residual.len(), r_stride));
    for (xr, rr) in row_pairs(x_rows, r_rows, rows, weight.len()) {
        let (xr, rr) = (&mut x[xr], &mut residual[rr]);
        for (res, &v) in rr.iter_mut().zip(xr.iter()) {
            *res = round_to(storage, v + *res);
        }
        normalise(rr, weight, eps, xr);
    }
}

/// The accuracy the kernels promise on one row of `cols` elements of `dtype`, as
/// [`check`] applies it, derived from their fp32 arithmetic (unit roundoff u = 2^-24)
/// and the storage type's rounding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowBound {
    /// Relative error of the row's `rstd`, shared by every element, plus the two
    /// multiplies by it and by the weight.
    pub norm: f64,
    /// One rounding to the storage type, relative, plus the reference's own rounding
    /// to f32.
    pub storage: f64,
    /// Absolute error near zero: fp32 results below 2^-126 flushed to 0, and for f16
    /// half its subnormal spacing (2^-25).
    pub floor: f64,
}

/// The roundings a square goes through on its way to the row's sum: every config
/// runs at least a warp (32 threads) per row (`space::fits`), so at most
/// [`reduction_depth`]`(cols, 32)`.
pub fn sum_depth(cols: usize) -> f64 {
    reduction_depth(cols, 32)
}

/// The [`RowBound`] of a row of `cols` elements of `dtype`.
///
/// - norm: the sum of squares rounds each square (u) and each of its [`sum_depth`]
///   adds (u); as independent rounding errors (Higham and Mary, SIAM J. Sci. Comput.
///   2019) they stay within LAMBDA * sqrt(depth) u, not depth u. The mean, `+ eps` and
///   `1 / cols` add 3u; `rsqrt` halves the relative error of its argument and adds
///   2 ulp (4u); `x * rstd * weight` adds 2u.
/// - storage: the storage type's unit roundoff (2^-8 bf16, 2^-11 f16, 2^-24 f32) and
///   the reference's rounding to f32 (u).
pub fn row_bound(dtype: DType, cols: usize) -> RowBound {
    RowBound {
        norm: U32 * ((LAMBDA * (sum_depth(cols) + 1.0).sqrt() + 3.0) / 2.0 + 6.0),
        storage: dtype.unit_roundoff() + U32,
        floor: output_floor(dtype),
    }
}

/// Checks a kernel's normalised output `got` (RMSNorm's `y`, fused add RMSNorm's `x`)
/// against `want`, both laid out as `rows`. `want` is this module's reference
/// (`kernel_runs = 1`) or another run of a kernel (`kernel_runs = 2`: a search
/// compares each candidate with the analytic default's run, whose own error doubles
/// the bound).
///
/// Per element, within `(norm + storage) * |want| + floor` of its row's
/// [`row_bound`]; NaN where `want` is NaN, the same infinity where it is infinite;
/// padding between rows unchanged. Per row of finite values, the normaliser: the
/// least-squares scale of `got` onto `want`, `sum(got * want) / sum(want^2)`, within
/// `norm` of 1 plus LAMBDA standard deviations of the storage roundings (equal values
/// round alike, distinct ones independently; never more than their worst case). A 1%
/// error in `rstd` fails it on any row.
pub fn check(
    what: &str,
    dtype: DType,
    got: &[f32],
    want: &[f32],
    rows: Rows,
    kernel_runs: u32,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, want {}", got.len(), want.len()));
    }
    let k = f64::from(kernel_runs);
    let b = row_bound(dtype, rows.cols);
    let (cols, stride) = (rows.cols, rows.stride);
    kernels_core::launch::par_check(rows.rows, cols, |range| {
        for r in range {
            let end = ((r + 1) * stride).min(got.len());
            compare_rows(
                what,
                &got[r * stride..end],
                &want[r * stride..end],
                Rows::strided(1, cols, stride),
                (k * b.floor, k * (b.norm + b.storage)),
            )
            .map_err(|e| e.replacen(": row 0 col", &format!(": row {r} col"), 1))?;
            let (g, w) = (
                &got[r * stride..r * stride + cols],
                &want[r * stride..r * stride + cols],
            );
            if w.iter().any(|v| !v.is_finite()) {
                continue;
            }
            let (mut dot, mut norm2, mut worst) = (0.0, 0.0, 0.0);
            // The storage rounding of each distinct output: equal values round alike.
            let mut rounding: HashMap<u32, f64> = HashMap::new();
            for (&gv, &wv) in g.iter().zip(w) {
                let bits = wv.to_bits();
                let (gv, wv) = (f64::from(gv), f64::from(wv));
                dot += gv * wv;
                norm2 += wv * wv;
                let c = wv.abs() * (b.storage * wv.abs() + b.floor);
                worst += c;
                *rounding.entry(bits).or_default() += c;
            }
            if norm2 == 0.0 {
                continue;
            }
            let var: f64 = rounding.values().map(|c| c * c).sum();
            let storage = (LAMBDA * (k * var).sqrt()).min(k * worst);
            let bound = k * b.norm * norm2 + storage + k * cols as f64 * b.floor;
            if (dot - norm2).abs() > bound {
                return Err(format!(
                    "{what}, row {r}: the output is {:.7} times the reference's (least squares), \
                     beyond 1 +- {:.3e} (the normaliser is off)",
                    dot / norm2,
                    bound / norm2
                ));
            }
        }
        Ok(())
    })
}

/// `v` rounded to the nearest value of `dtype` (ties to even), as the kernels store
/// it; NaN stays NaN, values beyond the type's range become infinite.
pub fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::F32 => v,
        DType::Bf16 => round_bf16(v),
        DType::F16 => f16_bits_to_f32(f32_to_f16_bits(v)),
    }
}

/// The element ranges of rows `0..rows` (`cols` each) in two buffers given as
/// `(name, len, stride)`, after [`check_rows`] on the first, then the second.
fn row_pairs(
    (a, a_len, a_stride): (&str, usize, usize),
    (b, b_len, b_stride): (&str, usize, usize),
    rows: usize,
    cols: usize,
) -> impl Iterator<Item = (Range<usize>, Range<usize>)> {
    check_rows(a, a_len, a_stride, rows, cols);
    check_rows(b, b_len, b_stride, rows, cols);
    (0..rows).map(move |r| {
        (
            r * a_stride..r * a_stride + cols,
            r * b_stride..r * b_stride + cols,
        )
    })
}

fn check_rows(name: &str, len: usize, stride: usize, rows: usize, cols: usize) {
    assert!(
        stride >= cols,
        "{name}: stride {stride} is shorter than a row of {cols}"
    );
    if rows > 0 {
        assert!(
            len >= (rows - 1) * stride + cols,
            "{name} holds fewer than {rows} rows of stride {stride}"
        );
    }
}

fn normalise(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let sum_sq: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let rstd = 1.0 / (sum_sq / x.len() as f64 + f64::from(eps)).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (f64::from(v) * rstd * f64::from(w)) as f32;
    }
}

fn round_bf16(v: f32) -> f32 {
    if v.is_nan() {
        return v;
    }
    let b = v.to_bits();
    // Round to nearest even on the 16 dropped bits; a carry may reach the exponent
    // (and infinity), which is the right result.
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    f32::from_bits(r & 0xffff_0000)
}

fn f32_to_f16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15; // the f16 biased exponent
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    // Drop the low `drop` bits of a significand, rounding to nearest even. A carry
    // out of the kept bits lands in the exponent, which is right.
    let round = |sig: u32, drop: u32| -> u32 {
        let q = sig >> drop;
        let rem = sig & ((1 << drop) - 1);
        let half = 1 << (drop - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }
    };
    if e <= 0 {
        // Subnormal: units of 2^-24; 2^-25 and below round to 0 (ties to even).
        let drop = (14 - e) as u32;
        if drop > 24 {
            return sign;
        }
        return sign | round(man | 0x80_0000, drop) as u16;
    }
    sign | round(((e as u32) << 23) | man, 13) as u16
}

fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f32::from(h & 0x3ff);
    match exp {
        0 => sign * man * 2f32.powi(-24),
        0x1f if man == 0.0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        _ => sign * (1.0 + man / 1024.0) * 2f32.powi(exp - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmsnorm_known_values_and_strides() {
        let (rows, xs, ys) = (2, 3, 4);
        let x = [3.0f32, 4.0, 99.0, 0.0, 1e-3, 99.0];
        let mut y = [-1.0f32; 8];
        rmsnorm(&x, xs, &[1.0, 2.0], &mut y, ys, rows, 1e-6);
        let rms = (12.5f64 + 1e-6).sqrt();
        assert!((f64::from(y[0]) - 3.0 / rms).abs() < 1e-6, "{y:?}");
        assert!((f64::from(y[1]) - 8.0 / rms).abs() < 1e-6, "{y:?}");
        // Row 1 = [0, 1e-3]: mean square 5e-7, so eps matters.
        let r1 = 1.0 / (5e-7f64 + 1e-6).sqrt();
        assert!((f64::from(y[5]) - 2e-3 * r1).abs() < 1e-6, "{y:?}");
        assert_eq!(y[4], 0.0);
        assert!(y[2..4].iter().chain(&y[6..]).all(|&v| v == -1.0), "{y:?}");
    }

    #[test]
    fn rmsnorm_special_values() {
        let mut y = [0.0f32; 3];
        rmsnorm(&[1.0, f32::INFINITY, -2.0], 3, &[1.0; 3], &mut y, 3, 1, 1e-6);
        assert_eq!((y[0], y[2]), (0.0, 0.0));
        assert!(y[1].is_nan());
        rmsnorm(&[1.0, f32::NAN, -2.0], 3, &[1.0; 3], &mut y, 3, 1, 1e-6);
        assert!(y.iter().all(|v| v.is_nan()));
    }

    #[test]
    fn fused_rounds_the_residual_to_the_storage_type() {
        // 1 + 2^-9 is below half a bf16 ulp above 1 (2^-8): the bf16 residual is 1.
        for (dtype, expect) in [(DType::Bf16, 1.0f32), (DType::F32, 1.0 + 2f32.powi(-9))] {
            let mut x = [2f32.powi(-9), 1.0];
            let mut res = [1.0f32, 1.0];
            fused_add_rmsnorm(&mut x, 2, &mut res, 2, &[1.0, 3.0], 1, 0.0, dtype);
            assert_eq!(res, [expect, 2.0], "{dtype}");
            // x is the norm of the rounded residual.
            let rms = ((f64::from(expect).powi(2) + 4.0) / 2.0).sqrt();
            assert!(
                (f64::from(x[0]) - f64::from(expect) / rms).abs() < 1e-6,
                "{dtype} {x:?}"
            );
            assert!((f64::from(x[1]) - 6.0 / rms).abs() < 1e-6, "{dtype} {x:?}");
        }
    }

    #[test]
    fn fused_equals_add_then_rmsnorm() {
        let (rows, cols) = (3, 5);
        let mut x: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut res: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.11).cos()).collect();
        let w: Vec<f32> = (0..cols).map(|i| 0.5 + i as f32 * 0.25).collect();
        let sum: Vec<f32> = x.iter().zip(&res).map(|(a, b)| a + b).collect();
        let mut expect = vec![0.0f32; rows * cols];
        rmsnorm(&sum, cols, &w, &mut expect, cols, rows, 1e-5);
        fused_add_rmsnorm(&mut x, cols, &mut res, cols, &w, rows, 1e-5, DType::F32);
        assert_eq!(res, sum);
        assert_eq!(x, expect);
    }

    #[test]
    fn bf16_rounding_is_nearest_even() {
        let one = 1.0f32;
        assert_eq!(round_to(DType::Bf16, one + 2f32.powi(-8)), one); // tie -> even
        assert_eq!(
            round_to(DType::Bf16, one + 3.0 * 2f32.powi(-8)),
            one + 2f32.powi(-6)
        );
        assert_eq!(
            round_to(DType::Bf16, one + 2f32.powi(-8) + 2f32.powi(-20)),
            one + 2f32.powi(-7)
        );
        assert_eq!(round_to(DType::Bf16, -2.5), -2.5);
        assert_eq!(round_to(DType::Bf16, f32::MAX), f32::INFINITY);
        assert!(round_to(DType::Bf16, f32::NAN).is_nan());
    }

    #[test]
    fn f16_rounding_is_nearest_even() {
        let r = |v: f32| round_to(DType::F16, v);
        assert_eq!(r(1.0 + 2f32.powi(-11)), 1.0); // tie -> even
        assert_eq!(r(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        assert_eq!(r(65504.0), 65504.0);
        assert_eq!(r(65519.0), 65504.0);
        assert_eq!(r(65520.0), f32::INFINITY); // rounds up past the largest f16
        assert_eq!(r(-1e6), f32::NEG_INFINITY);
        assert_eq!(r(2f32.powi(-24)), 2f32.powi(-24)); // smallest subnormal
        assert_eq!(r(2f32.powi(-25)), 0.0); // tie -> even (0)
        assert_eq!(r(3.0 * 2f32.powi(-26)), 2f32.powi(-24));
        assert_eq!(r(3.0 * 2f32.powi(-25)), 2.0 * 2f32.powi(-24)); // tie -> even (2)
        assert_eq!(r(2f32.powi(-14) - 2f32.powi(-26)), 2f32.powi(-14)); // into the normals
        assert_eq!(r(0.1), 0.099975586);
        assert!(r(f32::NAN).is_nan());
        assert_eq!(r(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    /// RMSNorm simulated on the CPU as the GPU kernels compute it (fp32: a sequential
    /// sum of squares, `rsqrt`, two multiplies), rounded once to `dtype`; `rstd`
    /// multiplied by `perturb` (1 for the right kernel).
    fn simulated(dtype: DType, x: &[f32], w: &[f32], eps: f32, perturb: f32) -> Vec<f32> {
        let cols = w.len();
        let mut y = Vec::with_capacity(x.len());
        for row in x.chunks(cols) {
            let ss: f32 = row.iter().map(|v| v * v).sum();
            let rstd = (ss * (1.0 / cols as f32) + eps).sqrt().recip() * perturb;
            y.extend(row.iter().zip(w).map(|(v, w)| v * rstd * w));
        }
        kernels_core::testing::stored(dtype, &y)
    }

    fn reference_of(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
        let mut want = vec![0.0; x.len()];
        rmsnorm(x, w.len(), w, &mut want, w.len(), x.len() / w.len(), eps);
        want
    }

    #[test]
    fn the_check_passes_a_right_kernel_and_fails_a_normaliser_off_by_one_percent() {
        for (dtype, cols) in [
            (DType::Bf16, 8192),
            (DType::F16, 3584),
            (DType::F32, 4096),
            (DType::Bf16, 7),
        ] {
            let x = kernels_core::testing::stored(
                dtype,
                &kernels_core::launch::pseudo_random(3 * cols, 1, 2.0, 0.0),
            );
            let w =
                kernels_core::testing::stored(dtype, &kernels_core::launch::pseudo_random(cols, 2, 0.5, 1.0));
            let rows = Rows::contiguous(3, cols);
            let want = reference_of(&x, &w, 1e-6);
            let right = simulated(dtype, &x, &w, 1e-6, 1.0);
            assert_eq!(
                check("t", dtype, &right, &want, rows, 1),
                Ok(()),
                "{dtype} {cols}"
            );
            for perturb in [1.01, 0.99] {
                let off = simulated(dtype, &x, &w, 1e-6, perturb);
                let e = check("t", dtype, &off, &want, rows, 1).expect_err("a 1% normaliser error passed");
                assert!(e.contains("row 0"), "{e}");
            }
            // One element of the last row 2% off names its row and column.
            let mut one = right.clone();
            one[2 * cols + cols / 2] *= 1.02;
            let e = check("t", dtype, &one, &want, rows, 1).expect_err("a 2% error passed");
            assert!(e.contains(&format!("row 2 col {}", cols / 2)), "{e}");
        }
    }

    #[test]
    #[should_panic(expected = "residual holds fewer than 2 rows")]
    fn short_buffers_are_refused() {
        let mut x = [0.0f32; 8];
        let mut r = [0.0f32; 5];
        fused_add_rmsnorm(&mut x, 4, &mut r, 4, &[1.0; 4], 2, 1e-6, DType::F16);
    }
}
