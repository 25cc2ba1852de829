//! Benchmarks of the workspace: `cargo bench -p benches`. The serving-lookup bench
//! runs anywhere; GPU benches say so and exit where no GPU is found.

/// RMSNorm with its table replaced by the baked fixture (shared with the integration
/// tests, which probe the same table).
pub use tests::FixtureNorm;

/// The copy peer: 16-byte vectors, a grid-stride loop over `n` vectors (an SM copy: a
/// memcpy node captured in a graph runs on the copy engines, measured at about 2.7 TB/s
/// on the H200). Launched as the faster of two shapes measured on the H200 for each
/// size ([`copy_launch`]).
pub static COPY: kernels::core::KernelSource = kernels::core::KernelSource::new(
    "copy",
    "struct __align__(16) V4 { unsigned a, b, c, d; };\n\
     extern \"C\" __global__ void __launch_bounds__(1024) copy_kernel(const V4* __restrict__ src, \
     V4* __restrict__ dst, long long n) {\n\
       long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n\
       const long long stride = (long long)gridDim.x * blockDim.x;\n\
       for (; i + 3 * stride < n; i += 4 * stride) {\n\
         V4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];\n\
         dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;\n\
       }\n\
       for (; i < n; i += stride) dst[i] = src[i];\n\
     }",
    // A new value whenever the text changes: the module cache is keyed by it.
    "fnv1a64:2",
);

/// Blocks and threads of the copy peer moving `half` bytes (`vectors` of 16) each way.
/// From 64 MiB each way: 1024-thread blocks, up to 32 per SM, the fastest grid-stride
/// copy measured there (2 x 263 MB in 126.5 us, as fast as `cudaMemcpyAsync`, against
/// 136.2 us for 4 blocks of 512 threads per SM; and on all 15 bench shapes from 64 MiB
/// each way). Below: 512-thread blocks, up to 4 per SM, faster on 14 of the bench's 17
/// smaller shapes (1 x 128256 softmax bytes: 1.35 against 1.67 us; 32 MiB each way:
/// 18.76 against 19.08; docs/results/softmax.md).
pub fn copy_launch(half: usize, vectors: i64, sms: i64) -> (u32, u32) {
    let (threads, per_sm) = if half >= 64 << 20 { (1024, 32) } else { (512, 4) };
    let blocks = (sms * per_sm).min((vectors + threads - 1) / threads).max(1);
    (blocks as u32, threads as u32)
}
