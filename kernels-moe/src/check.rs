//! What a tuned fused-MoE call is held to: its CPU reference and the checks of the
//! buffers it leaves, for the tuner (each candidate against the analytic default's
//! run) and `kernels tables check --served` (against the reference).
//!
//! The tuned call is the gate-up GEMM, the down GEMM and the combine, on a workspace
//! whose routing region the align step has filled (see `PlannedKernel for Moe`). Each
//! step is checked on what the previous one stored, so a wrong tile shows in the step
//! that computed it: the intermediate rows, each pair's weighted down row, and `out`
//! as the fixed-order sum of the stored down rows. Rows no valid pair owns must stay
//! untouched. Every bound is a worst case derived from the arithmetic, built from
//! per-row norms, so checking a candidate costs a pass over the weights it uses and
//! the pairs' rows, not a GEMM.

use kernels_core::launch::{decode, par_check, par_fill, row_norms};
use kernels_core::Expected;
use tuned::DType;

use crate::plan::MoeProblem;

/// Buffer indices, in `PlannedKernel::buffers` order.
const HIDDEN: usize = 0;
const W13: usize = 1;
const W2: usize = 2;
const IDS: usize = 3;
const WEIGHTS: usize = 4;
const OUT: usize = 5;
const ROUTING: usize = 6;
const ACTIVATIONS: usize = 7;

/// Buffer `i` of a problem as one f32 per element: the i32 buffers (ids, the
/// workspace's routing region) by value, the weights as f32, the rest in the dtype.
fn as_f32(p: &MoeProblem<'_>, i: usize, bytes: &[u8]) -> Vec<f32> {
    match i {
        IDS | ROUTING => bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)
            .collect(),
        WEIGHTS => decode(DType::F32, bytes),
        _ => decode(p.key.dtype, bytes),
    }
}

/// The pairs a call computes: `(pair, token, expert)` for every choice whose expert
/// id (in `ids`, the bytes of `topk_ids`) lies in `[0, experts)`.
fn valid_pairs(p: &MoeProblem<'_>, ids: &[u8]) -> Vec<(usize, usize, usize)> {
    let topk = p.key.topk as usize;
    ids.chunks_exact(4)
        .enumerate()
        .filter_map(|(pair, b)| {
            let e = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            (e >= 0 && (e as u32) < p.key.experts).then_some((pair, pair / topk, e as usize))
        })
        .collect()
}

/// Where the down rows start in the activations buffer, in elements.
fn down_start(p: &MoeProblem<'_>) -> usize {
    (p.layout.down - p.layout.intermediate) / p.key.dtype.size()
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum()
}

fn norm(v: &[f32]) -> f64 {
    dot(v, v).sqrt()
}

/// Every buffer after one call on `before` ([`kernels_core::PlannedKernel::buffers`]
/// order), in f64 rounded to f32: the intermediate row of each valid pair,
/// `silu(gate . x) * (up . x)`; its down row, `weight * w2_e . intermediate`; `out`,
/// the sum of each token's down rows; everything else as it was.
pub(crate) fn reference(p: &MoeProblem<'_>, before: &[Vec<u8>]) -> Vec<Vec<f32>> {
    let (n, k) = (p.key.n as usize, p.key.k as usize);
    let mut out: Vec<Vec<f32>> = before.iter().enumerate().map(|(i, b)| as_f32(p, i, b)).collect();
    let (hidden, w13, w2, weights) = (&out[HIDDEN], &out[W13], &out[W2], &out[WEIGHTS]);
    // Each valid pair's intermediate and down rows, the pairs spread over the cores
    // (`par_fill`); the per-token sums then run in pair order, so the result does not
    // depend on the split.
    let pairs = valid_pairs(p, &before[IDS]);
    let mut rows: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); pairs.len()];
    par_fill(&mut rows, |start, part| {
        for (slot, &(pair, t, e)) in part.iter_mut().zip(&pairs[start..]) {
            let (inter, down, _) = crate::reference::expert_rows(
                &hidden[t * k..(t + 1) * k],
                &w13[e * 2 * n * k..(e + 1) * 2 * n * k],
                &w2[e * k * n..(e + 1) * k * n],
                n,
            );
            let w = f64::from(weights[pair]);
            *slot = (inter, down.into_iter().map(|d| w * d).collect());
        }
    });
    let mut sums = vec![0.0f64; p.tokens as usize * k];
    for (&(_, t, _), (_, down)) in pairs.iter().zip(&rows) {
        for (s, d) in sums[t * k..(t + 1) * k].iter_mut().zip(down) {
            *s += d;
        }
    }
    let ds = down_start(p);
    let acts = &mut out[ACTIVATIONS];
    for (&(pair, _, _), (inter, down)) in pairs.iter().zip(rows) {
        for (a, v) in acts[pair * n..(pair + 1) * n].iter_mut().zip(inter) {
            *a = v as f32;
        }
        for (a, v) in acts[ds + pair * k..ds + (pair + 1) * k].iter_mut().zip(down) {
            *a = v as f32;
        }
    }
    for (o, s) in out[OUT].iter_mut().zip(sums) {
        *o = s as f32;
    }
    out
}

/// Norms a check's bounds are built from, for the experts its pairs use: each row of
/// `w13[e]` (2n rows of k) and of `w2[e]` (k rows of n), and each token's `x`.
struct Norms {
    w13: Vec<Option<Vec<f64>>>,
    w2: Vec<Option<Vec<f64>>>,
    x: Vec<f64>,
}

impl Norms {
    /// None taken: for a check whose rows need no bounds.
    fn empty() -> Norms {
        Norms {
            w13: Vec::new(),
            w2: Vec::new(),
            x: Vec::new(),
        }
    }

    /// From the weights' bytes (`w13`, `w2`), decoded on the fly over every core:
    /// a tuner checks each finalist against gigabytes of expert weights.
    fn of(
        p: &MoeProblem<'_>,
        pairs: &[(usize, usize, usize)],
        hidden: &[f32],
        w13: &[u8],
        w2: &[u8],
    ) -> Norms {
        let (e, n, k) = (p.key.experts as usize, p.key.n as usize, p.key.k as usize);
        let es = p.key.dtype.size();
        let (mut a, mut b) = (vec![None; e], vec![None; e]);
        for &(_, _, ex) in pairs {
            if a[ex].is_none() {
                let rows = &w13[ex * 2 * n * k * es..(ex + 1) * 2 * n * k * es];
                a[ex] = Some(row_norms(p.key.dtype, rows, 2 * n, k, k));
                let rows = &w2[ex * k * n * es..(ex + 1) * k * n * es];
                b[ex] = Some(row_norms(p.key.dtype, rows, k, n, n));
            }
        }
        Norms {
            w13: a,
            w2: b,
            x: hidden.chunks(k).map(norm).collect(),
        }
    }
}

/// `|got - want| <= bound`, where a NaN wanted must be NaN and a NaN got fails.
fn within(got: f32, want: f32, bound: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    (f64::from(got) - f64::from(want)).abs() <= bound
}

/// Checks a call's buffers against `expected` (see the module docs). Bounds, with u
/// the storage type's rounding (`out_ulp` of `kernels_gemm::reference::tolerance`)
/// and `acc` fp32 accumulation's relative error per `sqrt(length)`:
///
/// - **intermediate**: each of the two dot products of length k is off by at most
///   `sqrt(k) acc |x| |w_row|`, and `d(silu(g) u) = silu'(g) u dg + silu(g) du` with
///   `|silu'| <= 1.1`, `|silu(g)| <= |x| |w_gate|`, `|u| <= |x| |w_up|`; plus u of the
///   stored value;
/// - **down row** `y = weight * w2_e . inter` (the stored intermediate): against
///   another run, the two intermediates' difference `d` reaches each element through
///   `|w2_row| |d|` (Cauchy-Schwarz), each accumulation adds `sqrt(n) acc |inter|
///   |w2_row|`, and each stored value u; against the reference, the exact product of
///   the run's own intermediate, off by one accumulation and one rounding;
/// - **out**: the fp32 sum of the token's stored down rows in slot order, rounded
///   once: u of the sum.
///
/// Against another run every bound of a single run doubles (each run carries its own
/// error).
pub(crate) fn check(
    p: &MoeProblem<'_>,
    before: &[Vec<u8>],
    got: &[Vec<u8>],
    expected: Expected<'_>,
) -> Result<(), String> {
    let dtype = p.key.dtype;
    let (n, k, topk) = (p.key.n as usize, p.key.k as usize, p.key.topk as usize);
    let es = dtype.size();
    let (out_ulp, acc) = kernels_gemm::reference::tolerance(dtype);
    let hidden = decode(dtype, &before[HIDDEN]);
    let weights = decode(DType::F32, &before[WEIGHTS]);
    let pairs = valid_pairs(p, &before[IDS]);
    // Intermediate and down rows whose bytes equal another run's need no bounds, nor the
    // norms of the experts' weights (a pass over gigabytes for each finalist a tuner
    // checks); the untouched rows and the combine below are checked all the same.
    let identical = matches!(expected, Expected::Run(w) if w[ACTIVATIONS] == got[ACTIVATIONS]);
    let norms = if identical {
        Norms::empty()
    } else {
        Norms::of(p, &pairs, &hidden, &before[W13], &before[W2])
    };
    // The down weights themselves only for the exact rows of a reference check; a
    // tuner's check against another run needs their norms alone.
    let w2 = match expected {
        Expected::Reference(_) => decode(dtype, &before[W2]),
        Expected::Run(_) => Vec::new(),
    };
    let acts = decode(dtype, &got[ACTIVATIONS]);
    let (want_acts, runs) = match expected {
        Expected::Run(w) => (decode(dtype, &w[ACTIVATIONS]), 2.0),
        Expected::Reference(w) => (w[ACTIVATIONS].clone(), 1.0),
    };
    let ds = down_start(p);
    let total_pairs = p.tokens as usize * topk;
    let mut owned = vec![false; total_pairs];
    let (sqrt_k, sqrt_n) = ((k as f64).sqrt(), (n as f64).sqrt());
    let name = format!("moe {dtype}");

    for &(pair, ..) in &pairs {
        owned[pair] = true;
    }
    // Each pair's rows apart, on every core; the error is the first pair's in order.
    let checked = if identical { &pairs[..0] } else { &pairs[..] };
    par_check(checked.len(), n + k, |range| {
        for &(pair, t, e) in &checked[range] {
            let (rows13, rows2) = match (&norms.w13[e], &norms.w2[e]) {
                (Some(a), Some(b)) => (a, b),
                _ => return Err(format!("{name}: no norms for expert {e}")),
            };
            let x = norms.x[t];
            // Intermediate row.
            let inter = &acts[pair * n..(pair + 1) * n];
            let want_inter = &want_acts[pair * n..(pair + 1) * n];
            for i in 0..n {
                let (wg, wu) = (rows13[i], rows13[n + i]);
                let (eg, eu) = (sqrt_k * acc * x * wg, sqrt_k * acc * x * wu);
                let (g, w) = (inter[i], want_inter[i]);
                let bound = runs * (out_ulp * f64::from(w).abs() + 1.1 * x * wu * eg + x * wg * eu) + 1e-30;
                if !within(g, w, bound) {
                    return Err(format!(
                        "{name} gate-up pair {pair} (token {t}, expert {e}) column {i}: got {g}, want {w} (bound {bound:.3e})"
                    ));
                }
            }
            // Down row.
            let weight = f64::from(weights[pair]).abs();
            let y = &acts[ds + pair * k..ds + (pair + 1) * k];
            let inter_norm = norm(inter);
            let (want_y, spread): (std::borrow::Cow<[f32]>, f64) = match expected {
                Expected::Run(_) => {
                    let diff: f64 = inter
                        .iter()
                        .zip(want_inter)
                        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                        .sum::<f64>()
                        .sqrt();
                    let spread = diff + sqrt_n * acc * (inter_norm + norm(want_inter));
                    (want_acts[ds + pair * k..ds + (pair + 1) * k].into(), spread)
                }
                Expected::Reference(_) => {
                    let w = f64::from(weights[pair]);
                    let exact: Vec<f32> = (0..k)
                        .map(|h| (w * dot(&w2[(e * k + h) * n..(e * k + h + 1) * n], inter)) as f32)
                        .collect();
                    (exact.into(), sqrt_n * acc * inter_norm)
                }
            };
            for h in 0..k {
                let (g, w) = (y[h], want_y[h]);
                let bound = weight * rows2[h] * spread
                    + runs * out_ulp * f64::from(w).abs().max(f64::from(g).abs())
                    + 1e-30;
                if !within(g, w, bound) {
                    return Err(format!(
                        "{name} down pair {pair} (token {t}, expert {e}) column {h}: got {g}, want {w} (bound {bound:.3e})"
                    ));
                }
            }
        }
        Ok(())
    })?;

    // Rows no valid pair owns, in both regions: untouched.
    let row = |start: usize, len: usize, r: usize| (start + r * len) * es..(start + (r + 1) * len) * es;
    let (act_before, act_now) = (&before[ACTIVATIONS], &got[ACTIVATIONS]);
    for (region, start, len) in [("gate-up", 0, n), ("down", ds, k)] {
        let changed = |r: usize| {
            let at = row(start, len, r);
            act_before[at.clone()] != act_now[at]
        };
        if let Some(r) = (0..total_pairs).find(|&r| !owned[r] && changed(r)) {
            return Err(format!(
                "{name} {region}: workspace row {r}, which no valid pair owns, was written"
            ));
        }
    }
    // Out: each token's stored down rows summed in slot order.
    let out = decode(dtype, &got[OUT]);
    par_check(p.tokens as usize, k * topk, |tokens| {
        for t in tokens {
            for h in 0..k {
                let sum = (0..topk)
                    .map(|j| t * topk + j)
                    .filter(|&pair| owned[pair])
                    .fold(0.0f32, |s, pair| s + acts[ds + pair * k + h]);
                let g = out[t * k + h];
                let bound = out_ulp * f64::from(sum).abs() + 1e-30;
                if !within(g, sum, bound) {
                    return Err(format!(
                        "{name} combine token {t} column {h}: got {g}, want {sum} (the sum of its stored down rows, bound {bound:.3e})"
                    ));
                }
            }
        }
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use kernels_core::launch::{encode, pseudo_random};

    use super::*;
    use crate::plan::MoeProblem;

    const GB: u64 = 1 << 30;
    const T: usize = 5;
    const E: usize = 8;
    const N: usize = 64;
    const K: usize = 128;
    const TOPK: usize = 2;

    fn problem(dtype: DType) -> MoeProblem<'static> {
        let dims = (T, E, N, K, TOPK);
        let ([h, w13, w2, ids, w, out], ws) = crate::plan::made_up_buffers(dtype, dims, GB);
        // SAFETY: made-up addresses, never dereferenced.
        unsafe { MoeProblem::raw(dtype, dims, h, w13, w2, ids, w, out, ws) }.unwrap()
    }

    /// Buffers before a call: an engine's out-of-range id in pair 3, the activations
    /// filled with a marker so a stray write shows.
    fn before(p: &MoeProblem<'_>) -> Vec<Vec<u8>> {
        let dt = p.key.dtype;
        let l = p.layout;
        let mut ids: Vec<i32> = (0..T * TOPK).map(|i| (i * 3 % E) as i32).collect();
        ids[3] = E as i32;
        vec![
            encode(dt, &pseudo_random(T * K, 1, 1.0, 0.0)),
            encode(dt, &pseudo_random(E * 2 * N * K, 2, 0.1, 0.0)),
            encode(dt, &pseudo_random(E * K * N, 3, 0.1, 0.0)),
            ids.iter().flat_map(|i| i.to_le_bytes()).collect(),
            encode(DType::F32, &pseudo_random(T * TOPK, 4, 0.5, 0.5)),
            vec![0u8; T * K * dt.size()],
            vec![0u8; l.intermediate],
            encode(dt, &vec![0.25; (l.bytes - l.intermediate) / dt.size()]),
        ]
    }

    /// A device that computes exactly and stores each step rounded: the intermediate,
    /// the down rows of the stored intermediate, and the fp32 slot-order sum.
    fn device(p: &MoeProblem<'_>, before: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let dt = p.key.dtype;
        let want = reference(p, before);
        let mut acts = decode(dt, &before[ACTIVATIONS]);
        let (w2, weights) = (decode(dt, &before[W2]), decode(DType::F32, &before[WEIGHTS]));
        let ds = down_start(p);
        let pairs = valid_pairs(p, &before[IDS]);
        for &(pair, _, _) in &pairs {
            let row = &want[ACTIVATIONS][pair * N..(pair + 1) * N];
            acts[pair * N..(pair + 1) * N].copy_from_slice(&decode(dt, &encode(dt, row)));
        }
        for &(pair, _, e) in &pairs {
            let inter = acts[pair * N..(pair + 1) * N].to_vec();
            for h in 0..K {
                let y = f64::from(weights[pair]) * dot(&w2[(e * K + h) * N..(e * K + h + 1) * N], &inter);
                acts[ds + pair * K + h] = decode(dt, &encode(dt, &[y as f32]))[0];
            }
        }
        let mut out = vec![0.0f32; T * K];
        for &(pair, t, _) in &pairs {
            for h in 0..K {
                out[t * K + h] += acts[ds + pair * K + h];
            }
        }
        let mut got = before.to_vec();
        got[ACTIVATIONS] = encode(dt, &acts);
        got[OUT] = encode(dt, &out);
        got
    }

    fn edit(p: &MoeProblem<'_>, got: &[Vec<u8>], buffer: usize, f: impl Fn(&mut Vec<f32>)) -> Vec<Vec<u8>> {
        let mut v = decode(p.key.dtype, &got[buffer]);
        f(&mut v);
        let mut out = got.to_vec();
        out[buffer] = encode(p.key.dtype, &v);
        out
    }

    #[test]
    fn a_right_call_passes_and_each_step_is_caught_when_wrong() {
        for dtype in [DType::Bf16, DType::F16] {
            let p = problem(dtype);
            let before = before(&p);
            let want = reference(&p, &before);
            let got = device(&p, &before);
            let check_ref = |g: &[Vec<u8>]| check(&p, &before, g, Expected::Reference(&want));
            let check_run = |g: &[Vec<u8>]| check(&p, &before, g, Expected::Run(&got));
            assert_eq!(check_ref(&got), Ok(()), "{dtype}");
            assert_eq!(check_run(&got), Ok(()), "{dtype}");

            let ds = down_start(&p);
            // Pair 1 is token 0's second choice, expert 3.
            let cases: Vec<(Vec<Vec<u8>>, &str)> = vec![
                (
                    // Pair 1's largest intermediate value, 5% off.
                    edit(&p, &got, ACTIVATIONS, |a| {
                        let i = (N..2 * N)
                            .max_by(|&i, &j| a[i].abs().total_cmp(&a[j].abs()))
                            .unwrap_or(N);
                        a[i] *= 1.05;
                    }),
                    "gate-up pair 1",
                ),
                (
                    edit(&p, &got, ACTIVATIONS, |a| a[3 * N] = 1.0),
                    "gate-up: workspace row 3",
                ),
                (
                    edit(&p, &got, ACTIVATIONS, |a| a[ds + K + 5] *= 1.5),
                    "down pair 1",
                ),
                (
                    edit(&p, &got, ACTIVATIONS, |a| a[ds + 3 * K] = 0.0),
                    "down: workspace row 3",
                ),
                (edit(&p, &got, OUT, |o| o[2] *= 1.02), "combine token 0 column 2"),
                (
                    // Token 0 without its second choice.
                    edit(&p, &got, OUT, |o| {
                        let ys = decode(dtype, &got[ACTIVATIONS]);
                        o[..K].copy_from_slice(&ys[ds..ds + K]);
                    }),
                    "combine token 0",
                ),
            ];
            for (wrong, what) in &cases {
                for e in [check_ref(wrong), check_run(wrong)] {
                    let e = e.expect_err(what);
                    assert!(e.contains(what), "{dtype}: want `{what}`: {e}");
                }
                // Against a run with the same bytes the rows need no bounds, but a row
                // no pair owns, or a wrong combine, is still caught.
                if what.contains("workspace row") || what.starts_with("combine") {
                    let e = check(&p, &before, wrong, Expected::Run(wrong)).expect_err(what);
                    assert!(e.contains(what), "{dtype}: want `{what}`: {e}");
                }
            }
        }
    }

    #[test]
    fn the_reference_covers_every_step_and_drops_bad_ids() {
        let p = problem(DType::Bf16);
        let before = before(&p);
        let want = reference(&p, &before);
        let ds = down_start(&p);
        // The out-of-range pair's rows keep their marker; token 1 (pairs 2 and 3) sums
        // pair 2's down row alone.
        assert_eq!(want[ACTIVATIONS][3 * N], 0.25);
        assert_eq!(want[ACTIVATIONS][ds + 3 * K], 0.25);
        for h in 0..K {
            assert_eq!(want[OUT][K + h], want[ACTIVATIONS][ds + 2 * K + h]);
        }
        // Token 0 sums both of its choices.
        let sum = want[ACTIVATIONS][ds] as f64 + want[ACTIVATIONS][ds + K] as f64;
        assert!((want[OUT][0] as f64 - sum).abs() < 1e-5);
    }
}
