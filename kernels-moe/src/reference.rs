//! CPU reference of fused MoE and its routing, in f64 on the stored (rounded) inputs,
//! with the error bound the GPU result is held to.

use kernels_core::launch::{decode, encode};
use tuned::DType;

/// `v` rounded to `dtype` and back, as the device stores it.
pub fn round_to(dtype: DType, v: &[f32]) -> Vec<f32> {
    decode(dtype, &encode(dtype, v))
}

/// Whether (v, i) ranks before (bv, bi): larger score first, then the lower index.
fn ranks_before(v: f32, i: usize, bv: f32, bi: usize) -> bool {
    v > bv || (v == bv && i < bi)
}

/// The `topk` indices of `scores` allowed by `keep`, best first.
fn top(scores: &[f32], topk: usize, keep: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&e| keep(e)).collect();
    order.sort_by(|&a, &b| {
        if ranks_before(scores[a], a, scores[b], b) {
            std::cmp::Ordering::Less
        } else {
            std::cmp::Ordering::Greater
        }
    });
    order.truncate(topk);
    order
}

/// Softmax routing: ids and weights `[tokens, topk]`.
pub fn topk_softmax(
    logits: &[f32],
    tokens: usize,
    experts: usize,
    topk: usize,
    renorm: bool,
) -> (Vec<i32>, Vec<f32>) {
    let mut ids = Vec::with_capacity(tokens * topk);
    let mut weights = Vec::with_capacity(tokens * topk);
    for row in logits.chunks(experts).take(tokens) {
        let mx = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let sum: f64 = row.iter().map(|&v| (v as f64 - mx).exp()).sum();
        let chosen = top(row, topk, |_| true);
        let w: Vec<f64> = chosen.iter().map(|&e| (row[e] as f64 - mx).exp() / sum).collect();
        let total: f64 = w.iter().sum();
        for (&e, &wi) in chosen.iter().zip(&w) {
            ids.push(e as i32);
            weights.push(if renorm { wi / total } else { wi } as f32);
        }
    }
    (ids, weights)
}

/// DeepSeek-V3 grouped routing (see `plan::Scoring::Grouped`). Choice scores are
/// computed in f32 as the device does, so near-ties rank alike.
#[allow(clippy::too_many_arguments)]
pub fn grouped_topk(
    logits: &[f32],
    bias: Option<&[f32]>,
    tokens: usize,
    experts: usize,
    n_group: usize,
    topk_group: usize,
    topk: usize,
    renorm: bool,
    scale: f32,
) -> (Vec<i32>, Vec<f32>) {
    let gs = experts / n_group;
    let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
    let mut ids = Vec::with_capacity(tokens * topk);
    let mut weights = Vec::with_capacity(tokens * topk);
    for row in logits.chunks(experts).take(tokens) {
        let choice: Vec<f32> = (0..experts)
            .map(|e| sigmoid(row[e]) + bias.map_or(0.0, |b| b[e]))
            .collect();
        let group_scores: Vec<f32> = (0..n_group)
            .map(|g| {
                let best = top(&choice[g * gs..(g + 1) * gs], 2, |_| true);
                best.iter().map(|&i| choice[g * gs + i]).sum()
            })
            .collect();
        let kept = top(&group_scores, topk_group, |_| true);
        let chosen = top(&choice, topk, |e| kept.contains(&(e / gs)));
        let w: Vec<f64> = chosen.iter().map(|&e| sigmoid(row[e]) as f64).collect();
        let total: f64 = w.iter().sum();
        for (&e, &wi) in chosen.iter().zip(&w) {
            ids.push(e as i32);
            let wi = if renorm { wi / total } else { wi };
            weights.push((wi * scale as f64) as f32);
        }
    }
    (ids, weights)
}

/// Alignment: `offsets[experts + 1]` (exclusive prefix of pairs per expert) and the
/// pair indices grouped by expert, in pair order inside a group; ids outside
/// `[0, experts)` dropped.
pub fn align(ids: &[i32], experts: usize) -> (Vec<i32>, Vec<i32>) {
    let valid = |e: i32| e >= 0 && (e as usize) < experts;
    let mut counts = vec![0i32; experts];
    for &e in ids.iter().filter(|&&e| valid(e)) {
        counts[e as usize] += 1;
    }
    let mut offsets = vec![0i32; experts + 1];
    for e in 0..experts {
        offsets[e + 1] = offsets[e] + counts[e];
    }
    let mut cursor = offsets.clone();
    let mut sorted = vec![0i32; offsets[experts] as usize];
    for (p, &e) in ids.iter().enumerate().filter(|(_, &e)| valid(e)) {
        sorted[cursor[e as usize] as usize] = p as i32;
        cursor[e as usize] += 1;
    }
    (offsets, sorted)
}

/// Fused MoE in f64: `out[tokens, k]` and, per element, the sum of the magnitudes of
/// every product that reaches it (weight · intermediate · w2), the scale of its error
/// bound. `w13` is `[experts, 2n, k]`, `w2` `[experts, k, n]`; choices with ids
/// outside `[0, experts)` add nothing. Tokens are split over the machine's threads; each
/// token's sums run in the same order on any number of them, so the result is the same.
#[allow(clippy::too_many_arguments)]
pub fn fused_moe(
    dims: (usize, usize, usize, usize, usize),
    hidden: &[f32],
    w13: &[f32],
    w2: &[f32],
    ids: &[i32],
    weights: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    fused_moe_on(threads, dims, hidden, w13, w2, ids, weights)
}

/// [`fused_moe`] on at most `threads` threads.
#[allow(clippy::too_many_arguments)]
fn fused_moe_on(
    threads: usize,
    (tokens, experts, n, k, topk): (usize, usize, usize, usize, usize),
    hidden: &[f32],
    w13: &[f32],
    w2: &[f32],
    ids: &[i32],
    weights: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0f64; tokens * k];
    let mut scale = vec![0.0f64; tokens * k];
    // Tokens t0.. of one thread: their rows of `out` and `scale`.
    let rows = |t0: usize, out: &mut [f64], scale: &mut [f64]| {
        for (dt, (out, scale)) in out.chunks_mut(k).zip(scale.chunks_mut(k)).enumerate() {
            let t = t0 + dt;
            let x = &hidden[t * k..(t + 1) * k];
            for j in 0..topk {
                let e = ids[t * topk + j];
                if e < 0 || e as usize >= experts {
                    continue;
                }
                let e = e as usize;
                let w = weights[t * topk + j] as f64;
                let (_, y, ys) = expert_rows(
                    x,
                    &w13[e * 2 * n * k..(e + 1) * 2 * n * k],
                    &w2[e * k * n..(e + 1) * k * n],
                    n,
                );
                for h in 0..k {
                    out[h] += w * y[h];
                    scale[h] += w.abs() * ys[h];
                }
            }
        }
    };
    let per = tokens.div_ceil(threads.clamp(1, tokens.max(1))).max(1);
    std::thread::scope(|s| {
        for (i, (out, scale)) in out.chunks_mut(per * k).zip(scale.chunks_mut(per * k)).enumerate() {
            let rows = &rows;
            s.spawn(move || rows(i * per, out, scale));
        }
    });
    (out, scale)
}

/// One token's pass through one expert, in f64 on the stored inputs: the intermediate
/// `silu(gate . x) * (up . x)` (n values), its down row `w2_e . inter` (k values, not yet
/// weighted) and the row's scale `sum |inter_i w2_e[h, i]|`. `w13_e` is the expert's
/// `[2n, k]` block (gate rows, then up rows), `w2_e` its `[k, n]` block.
pub fn expert_rows(x: &[f32], w13_e: &[f32], w2_e: &[f32], n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let k = x.len();
    let dot = |r: usize| -> f64 {
        w13_e[r * k..(r + 1) * k]
            .iter()
            .zip(x)
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum()
    };
    let inter: Vec<f64> = (0..n)
        .map(|i| {
            let g = dot(i);
            g / (1.0 + (-g).exp()) * dot(n + i)
        })
        .collect();
    let (mut y, mut ys) = (vec![0.0f64; k], vec![0.0f64; k]);
    for (h, (y, ys)) in y.iter_mut().zip(&mut ys).enumerate() {
        for (&a, &b) in inter.iter().zip(&w2_e[h * n..(h + 1) * n]) {
            *y += a * b as f64;
            *ys += (a * b as f64).abs();
        }
    }
    (inter, y, ys)
}

/// The relative bound on `|gpu - reference| / scale` for `dtype`: the device rounds
/// the intermediate, each choice's weighted output and the sum to the dtype, each a
/// relative error of at most its unit roundoff u over the scale, so 3u; 4u leaves
/// room for fp32 accumulation and the device's expf.
pub fn tolerance(dtype: DType) -> f64 {
    let u = match dtype {
        DType::Bf16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-24),
    };
    4.0 * u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_picks_the_largest_and_breaks_ties_to_the_lower_index() {
        let logits = [0.0, 2.0, 1.0, 2.0, -1.0, 0.5];
        let (ids, w) = topk_softmax(&logits, 1, 6, 3, false);
        assert_eq!(ids, [1, 3, 2]);
        assert!((w[0] - w[1]).abs() < 1e-7 && w[0] > w[2]);
        let (_, w) = topk_softmax(&logits, 1, 6, 3, true);
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn grouped_routing_keeps_only_the_best_groups() {
        // 4 groups of 2: group 2 holds the two best choice scores, group 0 the third.
        let logits = [1.0, 0.9, -3.0, -3.0, 4.0, 3.0, -2.0, 5.0];
        let bias = [0.0; 8];
        let (ids, w) = grouped_topk(&logits, Some(&bias), 1, 8, 4, 2, 3, true, 2.5);
        // Group scores: g0 1.44, g1 0.09, g2 1.93, g3 1.11: groups 2 and 0 are kept,
        // so expert 7 (the best single score) is not chosen.
        assert_eq!(ids, [4, 5, 0]);
        assert!((w.iter().sum::<f32>() - 2.5).abs() < 1e-5);
    }

    #[test]
    fn the_fused_reference_is_the_same_on_any_number_of_threads() {
        let (t, e, n, k, topk) = (7, 4, 16, 24, 2);
        let f = |len: usize, seed: u32| -> Vec<f32> {
            (0..len)
                .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0)
                .collect()
        };
        let (hidden, w13, w2) = (f(t * k, 1), f(e * 2 * n * k, 2), f(e * k * n, 3));
        // Token 3's second choice is dropped (an id outside [0, e)).
        let ids: Vec<i32> = (0..t * topk)
            .map(|p| if p == 7 { 9 } else { (p % e) as i32 })
            .collect();
        let weights = f(t * topk, 4);
        let one = fused_moe_on(1, (t, e, n, k, topk), &hidden, &w13, &w2, &ids, &weights);
        for threads in [2, 3, 7, 16] {
            let many = fused_moe_on(threads, (t, e, n, k, topk), &hidden, &w13, &w2, &ids, &weights);
            assert_eq!(one, many, "{threads} threads");
        }
        assert!(one.0.iter().any(|&v| v != 0.0));
    }

    #[test]
    fn align_groups_pairs_by_expert_and_drops_bad_ids() {
        let (offsets, sorted) = align(&[2, 0, 2, -1, 7, 0], 3);
        assert_eq!(offsets, [0, 2, 2, 4]);
        assert_eq!(sorted, [1, 5, 0, 2]);
    }
}
