//! Element types ops accept, tied to their [`DType`], and host-side encoding of test
//! and tuning inputs (backend-neutral: the HIP tuner uses it too).

use tuned::DType;

/// A storage type a kernel reads and writes: `f32`, `half::f16` or `half::bf16`.
#[cfg(feature = "cuda")]
pub trait Element: cudarc::driver::DeviceRepr + Copy + Send + Sync + 'static {
    const DTYPE: DType;
}

#[cfg(feature = "cuda")]
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}

#[cfg(feature = "cuda")]
impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
}

#[cfg(feature = "cuda")]
impl Element for half::bf16 {
    const DTYPE: DType = DType::Bf16;
}

/// Converts f32 values to `dtype`'s storage bytes (round to nearest even). Large inputs
/// (tuning weights reach gigabytes) are converted on every core.
pub fn encode(dtype: DType, values: &[f32]) -> Vec<u8> {
    let size = dtype.size();
    let mut out = vec![0u8; values.len() * size];
    let convert = |first: usize, part: &mut [u8]| {
        for (v, c) in values[first..].iter().zip(part.chunks_exact_mut(size)) {
            match dtype {
                DType::F32 => c.copy_from_slice(&v.to_le_bytes()),
                DType::F16 => c.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes()),
                DType::Bf16 => c.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes()),
            }
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores == 1 || values.len() < PARALLEL_ELEMENTS {
        convert(0, &mut out);
        return out;
    }
    // Whole elements per core, so no element straddles two parts.
    let per = values.len().div_ceil(cores);
    std::thread::scope(|scope| {
        for (i, part) in out.chunks_mut(per * size).enumerate() {
            let convert = &convert;
            scope.spawn(move || convert(i * per, part));
        }
    });
    out
}

/// Converts `dtype` storage bytes back to f32 (a trailing partial element is ignored).
/// Large buffers (an output the tuner reads back reaches hundreds of millions of
/// elements) are converted on every core ([`par_fill`]).
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let size = dtype.size();
    let mut out = vec![0.0f32; bytes.len() / size];
    let convert = |start: usize, part: &mut [f32]| {
        let src = bytes[start * size..(start + part.len()) * size].chunks_exact(size);
        match dtype {
            DType::F32 => {
                for (d, c) in part.iter_mut().zip(src) {
                    *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            DType::F16 => {
                for (d, c) in part.iter_mut().zip(src) {
                    *d = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            DType::Bf16 => {
                for (d, c) in part.iter_mut().zip(src) {
                    *d = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
        }
    };
    if out.len() < PARALLEL_ELEMENTS {
        convert(0, &mut out);
    } else {
        par_fill(&mut out, convert);
    }
    out
}

/// Host-side passes over fewer elements than this stay on the calling thread:
/// spawning a thread a core costs more than they save there.
pub const PARALLEL_ELEMENTS: usize = 1 << 20;

/// Element `i` of `dtype` storage bytes as f32 (`bytes` holds at least `i + 1`
/// elements).
pub fn element_at(dtype: DType, bytes: &[u8], i: usize) -> f32 {
    match dtype {
        DType::F32 => {
            let c = &bytes[4 * i..4 * i + 4];
            f32::from_le_bytes([c[0], c[1], c[2], c[3]])
        }
        DType::F16 => half::f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
        DType::Bf16 => half::bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
    }
}

/// `f(start, out)` over `out` cut into one contiguous run per core, in parallel
/// (`start` is the index of `out[0]` in the whole): for host-side checks that pass
/// over gigabytes (a tuner checks every finalist's output against weights that size).
pub fn par_fill<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores == 1 || out.len() < 64 {
        f(0, out);
        return;
    }
    let chunk = out.len().div_ceil(cores);
    std::thread::scope(|scope| {
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            let f = &f;
            scope.spawn(move || f(i * chunk, part));
        }
    });
}

/// Runs `check` over rows `0..rows` split into contiguous ranges, one a core where
/// there are `rows * cols` elements enough to pay for the threads
/// ([`par_fill`]), and returns the error of the lowest range that
/// failed: the error a sequential pass would have stopped at, when `check` stops at its
/// first failing row. The tuner checks every finalist's output this way; at vocabulary
/// sizes, or an MoE layer's intermediate rows, one output is hundreds of millions of
/// elements.
pub fn par_check<F>(rows: usize, cols: usize, check: F) -> std::result::Result<(), String>
where
    F: Fn(std::ops::Range<usize>) -> std::result::Result<(), String> + Sync,
{
    if rows.saturating_mul(cols) < PARALLEL_ELEMENTS {
        return check(0..rows);
    }
    // One slot a row; each range's outcome lands in its first slot.
    let mut outcomes: Vec<std::result::Result<(), String>> = vec![Ok(()); rows];
    par_fill(&mut outcomes, |start, part| {
        part[0] = check(start..start + part.len());
    });
    outcomes.into_iter().collect()
}

/// The L2 norm of each of `rows` rows of `len` elements, row `r` starting at element
/// `r * ld` of `dtype` storage `bytes`, in f64; decoded on the fly, rows spread over
/// the cores ([`par_fill`]).
///
/// ```
/// use kernels_core::launch::{encode, row_norms};
/// let bytes = encode(tuned::DType::Bf16, &[3.0, 4.0, 9.0, 0.0, 0.0, 2.0]);
/// assert_eq!(row_norms(tuned::DType::Bf16, &bytes, 2, 3, 2), vec![5.0, 0.0]);
/// ```
pub fn row_norms(dtype: DType, bytes: &[u8], rows: usize, ld: usize, len: usize) -> Vec<f64> {
    let size = dtype.size();
    let mut out = vec![0.0f64; rows];
    par_fill(&mut out, |start, part| {
        for (r, slot) in part.iter_mut().enumerate() {
            let base = (start + r) * ld * size;
            *slot = sum_of_squares(dtype, &bytes[base..base + len * size]).sqrt();
        }
    });
    out
}

/// The sum of the squares of the `dtype` elements stored in `bytes`, in f64, over eight
/// running sums: one sum in a row waits on each add, and the tuner takes the norm of
/// every row of weights of up to a gigabyte for each finalist it checks.
fn sum_of_squares(dtype: DType, bytes: &[u8]) -> f64 {
    fn over<const N: usize>(bytes: &[u8], decode: impl Fn([u8; N]) -> f32) -> f64 {
        let mut sums = [0.0f64; 8];
        let mut chunks = bytes.chunks_exact(8 * N);
        for c in &mut chunks {
            for (l, sum) in sums.iter_mut().enumerate() {
                let x = f64::from(decode(c[l * N..(l + 1) * N].try_into().unwrap_or([0; N])));
                *sum += x * x;
            }
        }
        let tail: f64 = chunks
            .remainder()
            .chunks_exact(N)
            .map(|e| f64::from(decode(e.try_into().unwrap_or([0; N]))).powi(2))
            .sum();
        sums.iter().sum::<f64>() + tail
    }
    match dtype {
        DType::F32 => over::<4>(bytes, f32::from_le_bytes),
        DType::F16 => over::<2>(bytes, |b| half::f16::from_le_bytes(b).to_f32()),
        DType::Bf16 => over::<2>(bytes, |b| half::bf16::from_le_bytes(b).to_f32()),
    }
}

/// Deterministic pseudo-random values in `[offset - scale, offset + scale)` (tuning
/// and test inputs: never zeros, which hide unwritten outputs and run faster).
pub fn pseudo_random(n: usize, seed: u64, scale: f32, offset: f32) -> Vec<f32> {
    // Counter-based (element i depends on seed and i alone), so the cores fill it
    // together: tuning inputs reach gigabytes of weights per shape.
    let key = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = vec![0.0f32; n];
    par_fill(&mut out, |start, part| {
        for (j, v) in part.iter_mut().enumerate() {
            // splitmix64 of the element's counter
            let mut z = key.wrapping_add(((start + j) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let u = (z >> 40) as f32 / (1u64 << 24) as f32;
            *v = offset + scale * (2.0 * u - 1.0);
        }
    });
    out
}

/// A device buffer of `n` elements of `dtype` holding [`pseudo_random`] values.
#[cfg(feature = "cuda")]
pub fn alloc_random(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    dtype: DType,
    n: usize,
    seed: u64,
    scale: f32,
    offset: f32,
) -> crate::Result<cudarc::driver::CudaSlice<u8>> {
    let bytes = encode(dtype, &pseudo_random(n, seed, scale, offset));
    stream
        .clone_htod(&bytes)
        .map_err(|e| crate::Error::kernel("alloc_random", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decoding on every core gives what one thread gives, element by element, for
    /// each dtype (a partial trailing element ignored).
    #[test]
    fn parallel_decode_matches_element_by_element() {
        let n = PARALLEL_ELEMENTS * 2 + 7;
        let values = pseudo_random(n, 3, 100.0, 0.0);
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            let mut bytes = encode(dtype, &values);
            bytes.push(0xff);
            let got = decode(dtype, &bytes);
            assert_eq!(got.len(), n, "{dtype}");
            assert!(
                (0..n).all(|i| got[i].to_bits() == element_at(dtype, &bytes, i).to_bits()),
                "{dtype}"
            );
        }
    }

    /// Encoding on every core gives what one thread gives, element by element (round
    /// to nearest even), for each dtype, on a length no core count divides evenly.
    #[test]
    fn parallel_encode_matches_element_by_element() {
        let n = PARALLEL_ELEMENTS * 3 + 5;
        let values = pseudo_random(n, 4, 1000.0, 0.5);
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            let bytes = encode(dtype, &values);
            assert_eq!(bytes.len(), n * dtype.size(), "{dtype}");
            let one = |v: f32| -> Vec<u8> {
                match dtype {
                    DType::F32 => v.to_le_bytes().to_vec(),
                    DType::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
                    DType::Bf16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
                }
            };
            let want: Vec<u8> = values.iter().flat_map(|&v| one(v)).collect();
            assert!(bytes == want, "{dtype}");
        }
        assert!(encode(DType::Bf16, &[]).is_empty());
    }

    /// Split or not, every row is checked once and the error is the lowest failing
    /// row's, as a sequential pass would report it.
    #[test]
    fn parallel_row_checks_see_every_row_and_report_the_first_failure() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        for (rows, cols) in [
            (0, 100),
            (1, 100),
            (7, 3),
            (1000, 4096),
            (3, 1 << 20),
            (100_003, 64),
        ] {
            let seen = AtomicUsize::new(0);
            let r = par_check(rows, cols, |range| {
                seen.fetch_add(range.len(), Ordering::Relaxed);
                Ok(())
            });
            assert_eq!((r, seen.into_inner()), (Ok(()), rows), "{rows} x {cols}");
            if rows < 2 {
                continue;
            }
            let bad = [rows / 2, rows - 1];
            let first_failing = |range: std::ops::Range<usize>| match range.clone().find(|r| bad.contains(r))
            {
                Some(r) => Err(format!("row {r}")),
                None => Ok(()),
            };
            assert_eq!(
                par_check(rows, cols, first_failing),
                Err(format!("row {}", rows / 2)),
                "{rows} x {cols}"
            );
        }
    }
}
