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

/// Converts f32 values to `dtype`'s storage bytes (round to nearest even).
pub fn encode(dtype: DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::Bf16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
    }
}

/// Converts `dtype` storage bytes back to f32.
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::Bf16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

/// Deterministic pseudo-random values in `[offset - scale, offset + scale)` (tuning
/// and test inputs: never zeros, which hide unwritten outputs and run faster).
pub fn pseudo_random(n: usize, seed: u64, scale: f32, offset: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            // xorshift64*
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let u = (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32;
            offset + scale * (2.0 * u - 1.0)
        })
        .collect()
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
