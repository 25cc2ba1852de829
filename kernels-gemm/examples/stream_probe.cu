// How fast a weight matrix streams into shared memory the way the decode GEMM steps load
// it (kernels-gemm's swapped tiles, kernels-moe's wgmma steps): TMA boxes of BR rows by 64
// bf16 columns in 128-byte swizzle, NBOX boxes of adjacent columns and ITEM row tiles a
// stage, a ring of STAGES stages filled by a producer warpgroup (one thread issuing the
// boxes) and released by a consumer warpgroup; GATHER and MMA add the decode steps' other
// work piece by piece. Beside it, `read_probe`: every SM reading the same bytes with
// 16-byte loads, the bound a weight stream is held to.
//
// stream_probe: item j of a launch is row tile j (ITEM = 1) or row tiles j and
// rows / 2 / BR + j (ITEM = 2: a gate tile and its up tile, half the matrix apart); each
// block takes items blockIdx.x, + gridDim.x, ... and streams every k step of each.

#if !defined(BR) || !defined(NBOX) || !defined(STAGES) || !defined(ITEM) || !defined(GATHER) || !defined(MMA) || \
    !defined(START)
#error "stream_probe needs BR, NBOX, STAGES, ITEM, GATHER, MMA, START"
#endif

// With GATHER, the producer warpgroup's 128 threads also copy BM activation rows a k step
// into the stage with cp.async (the first `valid` rows from `act`, the rest zero-filled,
// as a decode step's padded row tile), each thread arriving on the stage's barrier when
// its copies land. With MMA, the consumer warpgroup multiplies each stage as the swapped
// decode tiles do (wgmma m64n16k16, weight rows on the 64-row side, the activation tile
// on the N side) instead of reading one word of it. START dependent global loads (each
// address read from the one before, from a small table that stays in L2) come before an
// item's first weight box, as the decode steps find their row tile and pairs first.
namespace kp {
using kd::u32;
constexpr int ROW = 128;  // bytes of a box row (64 bf16, one swizzle row)
constexpr int BM = 16;    // activation rows a k step
constexpr int BOX_BYTES = BR * ROW;
constexpr int W_BYTES = NBOX * ITEM * BOX_BYTES;
constexpr int A_BYTES = GATHER || MMA ? NBOX * BM * ROW : 0;
constexpr int STAGE_BYTES = W_BYTES + A_BYTES;
constexpr int PRODUCTS = BR * ITEM / 64;  // m64 products a k step (MMA)
static_assert(BOX_BYTES % 1024 == 0, "each box starts on a swizzle atom");
static_assert(!MMA || (BR * ITEM) % 64 == 0, "MMA needs whole 64-row products");
}  // namespace kp

extern "C" __global__ void __launch_bounds__(256, 2)
    stream_probe(const __grid_constant__ kg::TmaMap w, int rows, int k, const kd::bf16* __restrict__ act, int valid,
                 const int* __restrict__ chain, unsigned* __restrict__ sink) {
    using namespace kp;
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const int tid = threadIdx.x;
    const u32 ring = (kd::smem_addr(smem) + 1023u) & ~1023u;
    const u32 full0 = kd::smem_addr(full), empty0 = kd::smem_addr(empty);
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            kg::mbar_init(full0 + 8 * s, 1 + (GATHER ? 128 : 0));
            kg::mbar_init(empty0 + 8 * s, 1);
        }
        kg::mbar_init_fence();
    }
    __syncthreads();
    const int items = rows / (ITEM * BR);
    const int steps = k / (64 * NBOX);
    const int up_rows = rows / 2;
    if (tid < 128) {
        if (!GATHER && tid != 0) {
            return;
        }
        const int q = tid % 8, r = tid / 8;  // chunk q of activation row r
        const u32 chunk_at = W_BYTES + r * ROW + ((q ^ (r % 8)) * 16);
        int it = 0;
        int hop = 0;
        for (int item = blockIdx.x; item < items; item += gridDim.x) {
            if (START > 0 && tid == 0) {
                hop = item % 256;
#pragma unroll 1
                for (int h = 0; h < START; ++h) hop = chain[hop];
            }
            for (int i = 0; i < steps; ++i, ++it) {
                const int s = it % STAGES;
                kg::mbar_wait(empty0 + 8 * s, ((it / STAGES) & 1) ^ 1);
                const u32 bar = full0 + 8 * s;
                const u32 stage = ring + s * STAGE_BYTES;
                if (tid == 0) {
                    kg::mbar_expect_tx(bar, W_BYTES);
#pragma unroll
                    for (int x = 0; x < NBOX; ++x)
#pragma unroll
                        for (int g = 0; g < ITEM; ++g)
                            kg::tma_load_2d(stage + (x * ITEM + g) * BOX_BYTES, &w, bar, (i * NBOX + x) * 64,
                                            g * up_rows + item * BR + (hop & 0x40000000));
                }
                if (GATHER) {
#pragma unroll
                    for (int x = 0; x < NBOX; ++x) {
                        const int col = (i * NBOX + x) * 64 + q * 8;
                        const bool ok = r < valid;
                        kg::cp_async16(stage + x * BM * ROW + chunk_at, ok ? act + (long long)r * k + col : act,
                                       ok ? 16 : 0);
                    }
                    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(bar) : "memory");
                }
            }
        }
        if (GATHER) {
            asm volatile("cp.async.wait_all;\n" ::: "memory");
        }
        return;
    }
    const int t = tid - 128;
    unsigned acc_bits = 0;
    float acc[MMA ? PRODUCTS : 1][8];
#pragma unroll
    for (int p = 0; p < (MMA ? PRODUCTS : 1); ++p)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[p][e] = 0.0f;
    int it = 0, prev = -1;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        for (int i = 0; i < steps; ++i, ++it) {
            const int s = it % STAGES;
            kg::mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
            const u32 stage = ring + s * STAGE_BYTES;
            if (MMA) {
                if (GATHER) {
                    kg::fence_proxy_async();
                }
                kg::wgmma_fence();
#pragma unroll
                for (int x = 0; x < NBOX; ++x)
#pragma unroll
                    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
                        for (int p = 0; p < (MMA ? PRODUCTS : 1); ++p)
                            kg::Wgmma<16>::run(acc[p],
                                               kg::smem_desc_sw128(stage + x * ITEM * BOX_BYTES + p * 64 * ROW + kk * 32),
                                               kg::smem_desc_sw128(stage + W_BYTES + x * BM * ROW + kk * 32));
                kg::wgmma_commit();
                kg::wgmma_wait<1>();
                if (prev >= 0 && t == 0) {
                    kg::mbar_arrive(empty0 + 8 * prev);
                }
                prev = s;
            } else {
                unsigned v;
                asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(stage + t * 16) : "memory");
                acc_bits ^= v;
                asm volatile("bar.sync 1, 128;\n" ::: "memory");
                if (t == 0) {
                    kg::mbar_arrive(empty0 + 8 * s);
                }
            }
        }
    }
    if (MMA) {
        kg::wgmma_wait<0>();
        if (prev >= 0 && t == 0) {
            kg::mbar_arrive(empty0 + 8 * prev);
        }
        acc_bits = __float_as_uint(acc[0][0]);
    }
    if (acc_bits == 0x9e3779b9u) {
        sink[0] = acc_bits;  // never in practice; keeps the reads and products
    }
}

// Every thread reads 16-byte pieces grid-stride, four in flight.
extern "C" __global__ void __launch_bounds__(512)
    read_probe(const uint4* __restrict__ p, long long pieces, unsigned* __restrict__ sink) {
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < pieces; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = __ldcs(p + i + j * stride);
#pragma unroll
        for (int j = 0; j < 4; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < pieces; i += stride) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) {
        sink[0] = acc;
    }
}
