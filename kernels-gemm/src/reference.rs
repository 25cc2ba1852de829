//! CPU reference for the GEMM, accumulating in f64, with the error bound the GPU
//! kernels are held to.
//!
//! `C[i, j] = Σ_p A[i, p] · B(p, j) (+ bias[j])`, where `B(p, j)` is `B[j, p]` for
//! layout `nt` and `B[p, j]` for `nn`; matrices are row-major with explicit leading
//! dimensions, and elements past a row's end (up to the leading dimension) are neither
//! read nor written.
//!
//! ```
//! use kernels_gemm::{reference, Layout};
//! // [1 2] · [[3 4], [5 6]]^T (nt: B rows are output columns) = [11 17].
//! let (a, b) = ([1.0f32, 2.0], [3.0f32, 4.0, 5.0, 6.0]);
//! let mut c = [0.0f32; 2];
//! let mut bound = [0.0f64; 2];
//! reference::gemm(Layout::Nt, 1, 2, 2, &a, 2, &b, 2, None, &mut c, 2, &mut bound);
//! assert_eq!(c, [11.0, 17.0]);
//! assert_eq!(bound, [11.0, 17.0]); // Σ|a·b|
//! ```

use tuned::DType;

use crate::Layout;

/// `c = a · op(b) (+ bias)` in f64, rounded to f32 once; `abs_sum[i * n + j]` receives
/// `Σ_p |A[i, p] · B(p, j)|`, the scale of the accumulation error (see [`tolerance`]).
///
/// # Panics
/// When a buffer is shorter than its shape and leading dimension need (a broken test,
/// not caller input: the ops validate before this is ever compared against).
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    layout: Layout,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    bias: Option<&[f32]>,
    c: &mut [f32],
    ldc: usize,
    abs_sum: &mut [f64],
) {
    assert!(lda >= k && ldc >= n, "a leading dimension is shorter than a row");
    assert!(abs_sum.len() >= m * n, "abs_sum holds fewer than m * n values");
    let at_b = |p: usize, j: usize| match layout {
        Layout::Nt => b[j * ldb + p],
        Layout::Nn => b[p * ldb + j],
    };
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut t) = (0.0f64, 0.0f64);
            for p in 0..k {
                let x = f64::from(a[i * lda + p]) * f64::from(at_b(p, j));
                s += x;
                t += x.abs();
            }
            if let Some(bias) = bias {
                s += f64::from(bias[j]);
            }
            c[i * ldc + j] = s as f32;
            abs_sum[i * n + j] = t;
        }
    }
}

/// The bound `|got - want| <= out_ulp * |want| + sqrt(k) * ACC_EPS * abs_sum` per
/// element, returned as `(out_ulp, ACC_EPS)`:
///
/// - `out_ulp`: one rounding of the result into C's type (2^-8 bf16, 2^-11 f16,
///   2^-24 f32), plus one of the bias it adds;
/// - the accumulation: the inputs are exact in bf16/f16 and their products exact in
///   fp32, so the error is the fp32 additions'. Their rounding errors have random
///   signs, so they grow like sqrt(k) times the unit roundoff times the sum of the
///   magnitudes (the worst case grows like k, which is too loose to notice a dropped k
///   step). `ACC_EPS` = 2^-20 is 16x fp32's unit roundoff: tensor cores add with
///   truncation, and split-K adds partials in another order.
pub const fn tolerance(c_dtype: DType) -> (f64, f64) {
    const ACC_EPS: f64 = 1.0 / (1u64 << 20) as f64;
    let out_ulp = match c_dtype {
        DType::Bf16 => 1.0 / 256.0,
        DType::F16 => 1.0 / 2048.0,
        DType::F32 => 1.0 / (1u64 << 24) as f64,
    };
    (2.0 * out_ulp, ACC_EPS)
}

/// Compares C (`got`, laid out `m` x `n` with leading dimension `ldc`) with the
/// reference within [`tolerance`]; elements between `n` and `ldc` must be `pad`
/// (untouched). The error names `what` and the first mismatch.
#[allow(clippy::too_many_arguments)]
pub fn compare(
    what: &str,
    got: &[f32],
    want: &[f32],
    abs_sum: &[f64],
    m: usize,
    n: usize,
    k: usize,
    ldc: usize,
    c_dtype: DType,
    pad: f32,
) -> Result<(), String> {
    let (out_ulp, acc) = tolerance(c_dtype);
    let sqrt_k = (k as f64).sqrt();
    for i in 0..m {
        for j in 0..ldc {
            let at = i * ldc + j;
            let Some(&g) = got.get(at) else {
                return Err(format!("{what}: C holds {} values, needs {}", got.len(), m * ldc));
            };
            if j >= n {
                if g.to_bits() != pad.to_bits() && !(g.is_nan() && pad.is_nan()) {
                    return Err(format!("{what}: padding at row {i} col {j} was written ({g})"));
                }
                continue;
            }
            let w = f64::from(want[at]);
            let bound = out_ulp * w.abs() + sqrt_k * acc * abs_sum[i * n + j] + 1e-30;
            if !(f64::from(g) - w).abs().le(&bound) {
                return Err(format!("{what}: C[{i}, {j}] = {g}, want {w} (bound {bound:.3e})"));
            }
        }
    }
    Ok(())
}

/// `v` rounded through `dtype` (what the device holds).
pub fn round_to(dtype: DType, v: &[f32]) -> Vec<f32> {
    kernels_core::testing::stored(dtype, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_strides_agree() {
        // A 2x3, B as nt [4, 3] and as nn [3, 4] (the same matrix), padded rows.
        let a = [1.0, 2.0, 3.0, -9.0, 4.0, 5.0, 6.0, -9.0];
        let b_nt: Vec<f32> = (0..12).map(|x| x as f32 * 0.5).collect();
        let mut b_nn = vec![0.0f32; 3 * 5];
        for j in 0..4 {
            for p in 0..3 {
                b_nn[p * 5 + j] = b_nt[j * 3 + p];
            }
        }
        let bias = [1.0, 0.0, -1.0, 2.0];
        let (mut c1, mut c2) = (vec![7.0f32; 2 * 6], vec![7.0f32; 2 * 6]);
        let mut s = vec![0.0; 8];
        gemm(
            Layout::Nt,
            2,
            4,
            3,
            &a,
            4,
            &b_nt,
            3,
            Some(&bias),
            &mut c1,
            6,
            &mut s,
        );
        gemm(
            Layout::Nn,
            2,
            4,
            3,
            &a,
            4,
            &b_nn,
            5,
            Some(&bias),
            &mut c2,
            6,
            &mut s,
        );
        assert_eq!(c1, c2);
        // Row 0, col 1: [1 2 3] · [1.5 2 2.5] + 0 = 13.
        assert_eq!(c1[1], 13.0);
        assert_eq!(c1[4], 7.0, "padding untouched");
        assert!(compare("nt", &c1, &c2, &s, 2, 4, 3, 6, DType::F32, 7.0).is_ok());
    }

    #[test]
    fn the_bound_notices_a_dropped_term_and_allows_rounding() {
        let k = 4096;
        let a: Vec<f32> = (0..k).map(|p| (p * 37 % 101) as f32 / 50.0 - 1.0).collect();
        let b: Vec<f32> = (0..k).map(|p| (p * 53 % 97) as f32 / 48.0 - 1.0).collect();
        let (mut c, mut s) = ([0.0f32], [0.0f64]);
        gemm(Layout::Nt, 1, 1, k, &a, k, &b, k, None, &mut c, 1, &mut s);
        let rounded = round_to(DType::Bf16, &c);
        assert!(compare("rounded", &rounded, &c, &s, 1, 1, k, 1, DType::Bf16, 0.0).is_ok());
        // Dropping the last 16 products (one k step of a tile) must fail.
        let mut short = [0.0f32];
        gemm(
            Layout::Nt,
            1,
            1,
            k - 16,
            &a,
            k,
            &b,
            k,
            None,
            &mut short,
            1,
            &mut [0.0],
        );
        assert!(compare("short", &short, &c, &s, 1, 1, k, 1, DType::F32, 0.0).is_err());
    }
}
