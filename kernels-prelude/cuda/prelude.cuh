// Shared device prelude for every kernel family.
//
// The host prepends this text to a kernel's source before run-time compilation
// (NVRTC on NVIDIA, hipRTC or clang -x hip on AMD); kernel sources never #include
// it. It needs no header: NVRTC 13 does not find cuda_fp16.h / cuda_bf16.h on a
// machine with only the driver, so the 16-bit types, their conversions, vector
// loads and warp reductions are defined here. On AMD it needs HIP's runtime header,
// which hipRTC includes by itself; with clang add `-x hip -include hip/hip_runtime.h`
// (device-only compiles for gfx90a and gfx942 seen working with clang 19 and Debian's
// libamdhip64-dev 5.2, not run on AMD hardware).
//
// Contents (namespace kd):
//   u16 u32 u64 i32 i64 ........ fixed-width integers (no <cstdint>)
//   WARP ........................ threads per warp: 32 on NVIDIA, 64 on AMD CDNA
//   bf16, f16 ................... 16-bit storage types; to_f32 / from_f32<T> convert
//   Dtype<DTYPE>::T ............. 0 = float, 1 = f16, 2 = bf16 (the host's DTYPE define)
//   Vec<T, N> ................... N elements in one aligned access (at most 16 bytes)
//   load_vec / store_vec ........ one vector access; the address must be aligned to it
//   load_stream / store_stream .. the same, evict-first (last use of the data)
//   RowSplit .................... a row as its unaligned head, aligned vectors and tail
//   KD_LAUNCH_BOUNDS ............ __launch_bounds__ with an optional blocks-per-SM hint
//   unpack / pack ............... a vector to floats and back (round to nearest even)
//   opaque ...................... a register barrier for a vector held across passes
//   fast_exp2 .................. 2^x on the special-function unit
//   warp_sum / warp_max ......... butterfly reductions over a warp
//   group_sum / group_max ....... reductions over a group of whole warps (shared memory)
//   smem_addr ................... the 32-bit shared-memory address of a pointer (NVIDIA)
//   cluster_rank, peer_addr ..... a block's rank in its cluster; a shared address in
//                                 another block of the cluster (sm_90)
//   exchange_begin, cluster_wait, push, wait_pushes
//                                 the push exchange between the blocks of a cluster (sm_90)
#ifndef KD_PRELUDE_CUH
#define KD_PRELUDE_CUH

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_DEVICE_COMPILE__)
#define KD_AMD 1
#endif

namespace kd {

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;

#if defined(KD_AMD)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int WARP = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int WARP = 64;  // CDNA (gfx90a, gfx942, gfx950)
#endif
#else
constexpr int WARP = 32;
#endif

// ---- bit casts and special values -------------------------------------------

__device__ __forceinline__ u32 f32_bits(float f) {
#if defined(KD_AMD)
    return __builtin_bit_cast(u32, f);
#else
    return __float_as_uint(f);
#endif
}

__device__ __forceinline__ float bits_f32(u32 u) {
#if defined(KD_AMD)
    return __builtin_bit_cast(float, u);
#else
    return __uint_as_float(u);
#endif
}

__device__ __forceinline__ float neg_inf() { return bits_f32(0xff800000u); }

// ---- 16-bit storage types -----------------------------------------------------

struct bf16 {
    u16 bits;
};
struct f16 {
    u16 bits;
};

template <typename T>
struct IsBf16 {
    static constexpr bool value = false;
};
template <>
struct IsBf16<bf16> {
    static constexpr bool value = true;
};

__device__ __forceinline__ float to_f32(float v) { return v; }

__device__ __forceinline__ float to_f32(bf16 v) { return bits_f32(u32(v.bits) << 16); }

__device__ __forceinline__ float to_f32(f16 v) {
#if defined(KD_AMD)
    return float(__builtin_bit_cast(_Float16, v.bits));
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
#endif
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);

template <>
__device__ __forceinline__ float from_f32<float>(float v) {
    return v;
}

// Round to nearest even; a NaN stays a (quiet) NaN with its sign.
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) {
    u32 u = f32_bits(v);
    bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = u16((u >> 16) | 0x0040u);
    } else {
        r.bits = u16((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return r;
}

template <>
__device__ __forceinline__ f16 from_f32<f16>(float v) {
    f16 r;
#if defined(KD_AMD)
    r.bits = __builtin_bit_cast(u16, (_Float16)v);
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
#endif
    return r;
}

// The element type of the host's DTYPE define: 0 = f32, 1 = f16, 2 = bf16.
template <int D>
struct Dtype;
template <>
struct Dtype<0> {
    typedef float T;
};
template <>
struct Dtype<1> {
    typedef f16 T;
};
template <>
struct Dtype<2> {
    typedef bf16 T;
};

// ---- vectors ------------------------------------------------------------------

// N elements moved by one load or store instruction (2, 4, 8 or 16 bytes). The
// alignment makes the compiler emit a single wide access (LDG.128 for 16 bytes).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
    return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
    *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// A row of L elements of T at `row` (aligned to T), seen by vectors of N elements
// (a power of two): `head` elements before the first address aligned to a vector,
// `nvec` aligned vectors, then the tail. The head and tail together, `edges` elements
// (fewer than 2 * N), are read one element at a time; edge j is column edge_col(j).
// Rows of one tensor split differently when the row stride is not a multiple of N
// (an odd column count), so each row computes its own.
template <typename T, int N, int L>
struct RowSplit {
    int head, nvec, edges;
    __device__ __forceinline__ explicit RowSplit(const T* row) {
        const int mis = int(((unsigned long long)row / sizeof(T)) & (N - 1));
        head = mis == 0 ? 0 : (N - mis < L ? N - mis : L);
        nvec = (L - head) / N;
        edges = L - nvec * N;
    }
    __device__ __forceinline__ int edge_col(int j) const { return j < head ? j : j + nvec * N; }
};

// Two floats to two packed 16-bit values, `lo` in the low half; round to nearest
// even. sm_80+ has one instruction for the pair.
__device__ __forceinline__ u32 pack2(float lo, float hi, bf16*) {
#if !defined(KD_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
#else
    return u32(from_f32<bf16>(lo).bits) | (u32(from_f32<bf16>(hi).bits) << 16);
#endif
}

__device__ __forceinline__ u32 pack2(float lo, float hi, f16*) {
#if !defined(KD_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
#else
    return u32(from_f32<f16>(lo).bits) | (u32(from_f32<f16>(hi).bits) << 16);
#endif
}

// A vector's elements as floats.
// bf16 pairs go through their 32-bit word: the low element is the word shifted up,
// the high one the word with its low half cleared (one instruction each, where
// converting each element on its own costs an extract and a shift for the high one).
template <typename T, int N>
__device__ __forceinline__ void unpack(const Vec<T, N>& v, float (&f)[N]) {
    if constexpr (IsBf16<T>::value && N % 2 == 0) {
#pragma unroll
        for (int e = 0; e < N; e += 2) {
            const u32 w = reinterpret_cast<const u32*>(&v)[e / 2];
            f[e] = bits_f32(w << 16);
            f[e + 1] = bits_f32(w & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) f[e] = to_f32(v.v[e]);
    }
}

// Evict-first access (ld/st.global.cs) for the last use of data, so it does not push
// out of L2 what another pass of the same kernel will read again. The "memory"
// clobbers keep them in program order with the kernel's other accesses (a row's
// second pass reads what its first pass stored). Plain accesses on AMD.
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_stream(const T* p) {
#if !defined(KD_AMD)
    union {
        Vec<T, N> v;
        u32 w[4];
        u16 h;
    } u;
    if constexpr (sizeof(Vec<T, N>) == 16) {
        asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(u.w[0]), "=r"(u.w[1]), "=r"(u.w[2]), "=r"(u.w[3]) : "l"(p) : "memory");
    } else if constexpr (sizeof(Vec<T, N>) == 8) {
        asm volatile("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(u.w[0]), "=r"(u.w[1]) : "l"(p) : "memory");
    } else if constexpr (sizeof(Vec<T, N>) == 4) {
        asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(u.w[0]) : "l"(p) : "memory");
    } else {
        asm volatile("ld.global.cs.u16 %0, [%1];" : "=h"(u.h) : "l"(p) : "memory");
    }
    return u.v;
#else
    return load_vec<T, N>(p);
#endif
}

template <typename T, int N>
__device__ __forceinline__ void store_stream(T* p, const Vec<T, N>& v) {
#if !defined(KD_AMD)
    union {
        Vec<T, N> v;
        u32 w[4];
        u16 h;
    } u;
    u.v = v;
    if constexpr (sizeof(Vec<T, N>) == 16) {
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                     :: "l"(p), "r"(u.w[0]), "r"(u.w[1]), "r"(u.w[2]), "r"(u.w[3]) : "memory");
    } else if constexpr (sizeof(Vec<T, N>) == 8) {
        asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(u.w[0]), "r"(u.w[1]) : "memory");
    } else if constexpr (sizeof(Vec<T, N>) == 4) {
        asm volatile("st.global.cs.u32 [%0], %1;" :: "l"(p), "r"(u.w[0]) : "memory");
    } else {
        asm volatile("st.global.cs.u16 [%0], %1;" :: "l"(p), "h"(u.h) : "memory");
    }
#else
    store_vec<T, N>(p, v);
#endif
}

// __launch_bounds__ for a kernel of `threads` threads. KD_MIN_BLOCKS=N (optional, a
// compiler hint the host may add as a config variant) asks ptxas to fit N blocks per
// SM, capping registers at 64K / (N * threads); without it the second argument is
// left out, since even an explicit 1 changes ptxas' register choices.
#if defined(KD_MIN_BLOCKS) && KD_MIN_BLOCKS > 0 && !defined(KD_AMD)
#define KD_LAUNCH_BOUNDS(threads) __launch_bounds__(threads, KD_MIN_BLOCKS)
#else
#define KD_LAUNCH_BOUNDS(threads) __launch_bounds__(threads)
#endif

// Programmatic dependent launch (sm_90+). A kernel launched with the
// programmatic-stream-serialization attribute may start while the previous kernel of
// its stream is still running; pdl_wait() blocks until that kernel has completed and
// its memory is visible, so a kernel that may be launched so calls it before its first
// global memory access. pdl_launch_dependents() lets the next kernel of the stream (if
// it was launched with the attribute) start once every block of this one has called it
// or exited; it orders no memory (the next kernel still waits in its own pdl_wait()).
// The kernels call it once a block has read its inputs, not at their start: called
// earlier, it lets the next kernel's blocks take SM slots this kernel's clusters still
// need (figures in docs/results/softmax.md). Both are no-ops for a plain launch.
__device__ __forceinline__ void pdl_wait() {
#if !defined(KD_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if !defined(KD_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Floats rounded into a vector (pairs at a time for 16-bit types).
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> pack(const float (&f)[N]) {
    Vec<T, N> v;
    if constexpr (sizeof(T) == 2 && N % 2 == 0) {
#pragma unroll
        for (int e = 0; e < N; e += 2) {
            reinterpret_cast<u32*>(&v)[e / 2] = pack2(f[e], f[e + 1], (T*)nullptr);
        }
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) v.v[e] = from_f32<T>(f[e]);
    }
    return v;
}

// Makes the compiler forget what it knows about `v` (an empty asm that "rewrites" its
// registers; no instruction). Between passes over a row held in registers this stops
// it from keeping every unpacked float alive from one pass to the next, which
// doubles the registers a 16-bit row takes; it re-unpacks instead (a shift each).
template <typename T, int N>
__device__ __forceinline__ void opaque(Vec<T, N>& v) {
#if defined(KD_AMD)
    // AMD: "v" (a vector register) on 32-bit containers.
#pragma unroll
    for (int e = 0; e < N; e += (sizeof(T) == 4 ? 1 : 2)) {
        u32 w;
        if constexpr (sizeof(T) == 4) {
            w = f32_bits(v.v[e]);
        } else {
            w = u32(v.v[e].bits) | (e + 1 < N ? u32(v.v[e + 1].bits) << 16 : 0u);
        }
        asm volatile("" : "+v"(w));
        if constexpr (sizeof(T) == 4) {
            v.v[e] = bits_f32(w);
        } else {
            v.v[e].bits = u16(w);
            if (e + 1 < N) v.v[e + 1].bits = u16(w >> 16);
        }
    }
#else
    if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int e = 0; e < N; ++e) asm volatile("" : "+f"(v.v[e]));
    } else if constexpr (N % 2 == 0) {
#pragma unroll
        for (int e = 0; e < N; e += 2) asm volatile("" : "+r"(reinterpret_cast<u32*>(&v)[e / 2]));
    } else {
        asm volatile("" : "+h"(v.v[0].bits));
    }
#endif
}

// ---- thread-block clusters (sm_90) -------------------------------------------------

#if !defined(KD_AMD)
// The 32-bit shared-memory address of a pointer into this block's shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }" : "=r"(a) : "l"(p));
    return a;
}
#endif

// The push exchange. The blocks of a cluster swap a few floats each (a row's partial
// sums) by pushing, never pulling: a sender writes its values into its own slot of
// every block's shared memory with st.async, which also counts the bytes on the
// receiving block's mbarrier, and a block then waits on its own mbarrier only, until
// every expected byte (its own included) has landed. No cluster barrier runs after the
// start, and none at the end: nobody reads another block's memory, and a block cannot
// finish before every push to it has landed. A kernel using it:
//
//   __shared__ float parts[N]; __shared__ unsigned long long bar;
//   kd::exchange_begin(&bar, bytes);     // every thread, first thing (bytes: all pushes to a block)
//   ...                                  // the loads and the partial sums
//   kd::cluster_wait();                  // every thread: all blocks have armed their mbarrier
//   kd::push(&parts[slot], &bar, rank, v);  // each value to each block `rank`
//   kd::wait_pushes(&bar);               // every thread; then read `parts`
//
// It replaces reading the peers' values between two cluster barriers (one after the
// writes, one before a block may exit), each a wait for the cluster's slowest block
// (figures in docs/results/softmax.md). The kernels using it are softmax.cu (Exchange,
// cluster_merge) and rmsnorm.cu (Cluster, cluster_sum).
#if !defined(KD_AMD) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900)
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The address of `p` (in this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ unsigned peer_addr(const void* p, unsigned rank) {
    unsigned r;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
    return r;
}

// At the start of the kernel, by every thread: thread 0 arms the mbarrier `bar` for
// `bytes` to come (one arrival, its own), and every thread arrives on the cluster
// barrier (waited for in cluster_wait, long after, so it costs nothing by then).
//
// The arrive is relaxed. The only thing a peer relies on after the wait is the
// mbarrier's init, and fence.mbarrier_init.release.cluster (thread 0, before its
// arrive) is the release that publishes it; the values themselves travel by st.async,
// whose complete_tx releases them. The default release arrive compiles to a full GPU
// memory barrier in every thread, which under load waits on the memory system (figures
// in docs/results/softmax.md).
__device__ __forceinline__ void exchange_begin(unsigned long long* bar, unsigned bytes) {
    if (threadIdx.x == 0) {
        const unsigned b = smem_addr(bar);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// Every block of the cluster has started and armed its mbarrier after this. Every
// thread calls it once, after exchange_begin and before its first push.
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// `v` into `slot` (this block's address of it) in block `rank`, counted on that
// block's `bar` (this block's address of it).
__device__ __forceinline__ void push(float* slot, unsigned long long* bar, unsigned rank, float v) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                     peer_addr(slot, rank)),
                 "r"(__float_as_uint(v)), "r"(peer_addr(bar, rank))
                 : "memory");
}

// The same for two floats, into slot[0] and slot[1] (8-byte aligned).
__device__ __forceinline__ void push(float* slot, unsigned long long* bar, unsigned rank, float a, float b) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(
                     peer_addr(slot, rank)),
                 "f"(a), "f"(b), "r"(peer_addr(bar, rank))
                 : "memory");
}

// Until every byte armed on this block's `bar` has landed; the pushed values are then
// visible to the calling thread.
__device__ __forceinline__ void wait_pushes(unsigned long long* bar) {
    const unsigned b = smem_addr(bar);
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0; "
            "selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(b)
            : "memory");
    }
}
#endif

// ---- math -----------------------------------------------------------------------

// 2^x with the hardware approximation (about 2 ulp); exp2(-inf) = 0, exp2(NaN) = NaN.
__device__ __forceinline__ float fast_exp2(float x) {
#if defined(KD_AMD)
#if __has_builtin(__builtin_amdgcn_exp2f)
    return __builtin_amdgcn_exp2f(x);
#else
    return exp2f(x);  // older hipRTC (ROCm 5) lacks the builtin
#endif
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// ---- warp reductions ------------------------------------------------------------

__device__ __forceinline__ float shfl_xor(float v, int mask) {
#if defined(KD_AMD)
    return __shfl_xor(v, mask);
#else
    return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

// Lane `src`'s value, broadcast to the warp.
__device__ __forceinline__ float shfl(float v, int src) {
#if defined(KD_AMD)
    return __shfl(v, src);
#else
    return __shfl_sync(0xffffffffu, v, src);
#endif
}

// Butterfly reductions over aligned groups of N lanes (N a power of two, at most
// WARP): every lane of a group ends with the group's result. fmaxf drops a NaN
// operand; kernels that must propagate NaN do so through their sums.
template <int N = WARP>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = N / 2; o > 0; o /= 2) v += shfl_xor(v, o);
    return v;
}

template <int N = WARP>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = N / 2; o > 0; o /= 2) v = fmaxf(v, shfl_xor(v, o));
    return v;
}

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) & (WARP - 1); }

// Reduction over a group of GROUP consecutive threads (a multiple of WARP, at most
// 1024). Each warp reduces by shuffles; with more than one warp, lane 0 of each
// writes its partial to `slots` (this group's GROUP / WARP floats of shared
// memory), and after a barrier every warp reads all partials, lane i reading slot
// i % (GROUP / WARP): consecutive words, so no bank conflicts. Every thread of the
// block must call it (it holds __syncthreads), and a second reduction in the same
// kernel needs other slots, since a fast warp may write before a slow one reads.
template <int GROUP, bool MAX>
__device__ __forceinline__ float group_reduce(float v, float* slots) {
    static_assert(GROUP % WARP == 0 && GROUP <= 1024, "a group is whole warps");
    constexpr int WARPS = GROUP / WARP;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (WARPS == 1) return v;
    const int lane = lane_id();
    if (lane == 0) slots[(int(threadIdx.x) % GROUP) / WARP] = v;
    __syncthreads();
    v = slots[lane % WARPS];
    return MAX ? warp_max<WARPS>(v) : warp_sum<WARPS>(v);
}

template <int GROUP>
__device__ __forceinline__ float group_sum(float v, float* slots) {
    return group_reduce<GROUP, false>(v, slots);
}

template <int GROUP>
__device__ __forceinline__ float group_max(float v, float* slots) {
    return group_reduce<GROUP, true>(v, slots);
}

}  // namespace kd

#endif  // KD_PRELUDE_CUH
