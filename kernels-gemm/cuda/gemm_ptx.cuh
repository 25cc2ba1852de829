// PTX wrappers the GEMM kernels use, compiled after the shared prelude and before
// gemm.cu as one program (NVRTC finds no CUDA headers on a serving machine).
//
// Contents (namespace kg):
//   cp_async16 ........ 16-byte global -> shared copy, zero-filling past `bytes` (sm_80)
//   cp_async_commit / cp_async_wait<N>   group the copies; wait until N groups remain
//   ldmatrix_x4 / ldmatrix_x4_trans      four 8x8 16-bit tiles from shared memory
//   Mma<T>::run ....... one m16n8k16 tensor-core product, fp32 accumulate (sm_80)
//   (sm_90a, WGMMA variants only: mbarriers, TMA loads, wgmma ordering and
//   descriptors, setmaxnreg; see the second namespace block)

namespace kg {

using kd::u32;

// Copies `bytes` (0..16) from `src` and zero-fills the rest of the 16-byte slot, so
// ragged edges need no separate path. `src` must be 16-byte aligned even when `bytes`
// is 0 (the caller then passes a valid base address).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Lane l gives the row address of matrix l / 8; register i receives matrix i.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

template <typename T>
struct Mma;

template <>
struct Mma<kd::bf16> {
    static __device__ __forceinline__ void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <>
struct Mma<kd::f16> {
    static __device__ __forceinline__ void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

}  // namespace kg

// Hopper (sm_90a) wrappers, compiled only into the WGMMA variants.
//   mbar_init / mbar_expect_tx / mbar_arrive / mbar_wait   shared-memory mbarriers
//   tma_load_2d ........ one TMA box global -> shared, completing on an mbarrier
//   (thread-block clusters: cluster_addr, mbar_arrive_cluster,
//   tma_load_2d_multicast, cluster_sync)
//   wgmma_fence / wgmma_commit / wgmma_wait<N>            warpgroup MMA ordering
//   smem_desc_sw128 .... wgmma descriptor of a K-major tile in 128-byte swizzle
//   regs_dec<N> / regs_inc<N>                            setmaxnreg
//   (TMA stores of C: fence_proxy_async, tma_store_2d, bulk_commit,
//   bulk_wait_read<N>, bulk_wait<N>, named_sync, st_shared_b32, st_shared_v2_f32)
#if WGMMA
#if DTYPE == 2
#define KG_WGMMA_TYPE "bf16"
#else
#define KG_WGMMA_TYPE "f16"
#endif

namespace kg {

// The 128-byte CUtensorMap the host encodes; a __grid_constant__ parameter so TMA
// reads it in place from the parameter space.
struct alignas(64) TmaMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Arrives once and raises the phase's expected transaction bytes by `bytes`.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

// Makes the barriers' initialisation visible to the TMA unit before first use.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// Box (col, row) of `map` into shared memory at `dst`; out-of-bounds elements land as
// zeros and still count towards the barrier's transaction bytes.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaMap* map, u32 bar, int col, int row) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row), "r"(bar)
        : "memory");
}

// The address of `addr` (a shared address of this block) in block `rank` of the
// cluster, as a shared::cluster address.
__device__ __forceinline__ u32 cluster_addr(u32 addr, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

// Arrives once on an mbarrier of any block of the cluster (a cluster_addr address). The
// default (CTA-scope) semantics suffice for an empty barrier: what it orders is the
// arriving warpgroup's wgmma reads of the stage, complete once wgmma_wait returns, before
// the TMA refill the waiting producer issues.
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// tma_load_2d into the same shared offset `dst` of every block of the cluster whose
// bit is set in `mask` (bit r: rank r), counting the bytes on each one's mbarrier at
// the offset of `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TmaMap* map, u32 bar, int col, int row,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row), "r"(bar), "h"(mask)
        : "memory");
}

// Every thread of every block of the cluster, once each: returns when all have
// arrived. Not .aligned, so it may follow divergent code in a warp.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Descriptor of a K-major tile whose rows are 128 bytes (64 16-bit elements) in
// 128-byte swizzle, as TMA writes it: 8-row groups 1024 bytes apart (stride byte
// offset); the leading byte offset is unused in this mode. `addr` moves along k by
// 32 bytes per 16 elements; the tile base must be 1024-byte aligned.
__device__ __forceinline__ unsigned long long smem_desc_sw128(u32 addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

// Makes this thread's generic-proxy writes to shared memory visible to the async proxy
// (a TMA store issued after a barrier reads what they wrote).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The box of `map` at (col, row) from shared memory at `src` (laid out as a load of
// that box would land it, swizzle included) to global memory, in this thread's current
// bulk async-group. Elements of the box past the tensor's bounds are not written.
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, u32 src, int col, int row) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(col), "r"(row), "r"(src)
                 : "memory");
}

// Closes this thread's current bulk async-group.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Until at most N of this thread's bulk groups still read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Until at most N of this thread's bulk groups are still in flight (writes included).
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Named barrier `id` over `count` threads (whole warps).
__device__ __forceinline__ void named_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void st_shared_b32(u32 addr, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_shared_v2_f32(u32 addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

template <int N>
__device__ __forceinline__ void regs_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace kg
#endif
