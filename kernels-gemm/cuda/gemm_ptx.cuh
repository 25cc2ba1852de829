// PTX wrappers the GEMM kernels use, compiled after the shared prelude and before
// gemm.cu as one program (NVRTC finds no CUDA headers on a serving machine).
//
// Contents (namespace kg):
//   cp_async16 ........ 16-byte global -> shared copy, zero-filling past `bytes` (sm_80)
//   cp_async_commit / cp_async_wait<N>   group the copies; wait until N groups remain
//   ldmatrix_x4 / ldmatrix_x4_trans      four 8x8 16-bit tiles from shared memory
//   mma_16816<T> ...... one m16n8k16 tensor-core product, fp32 accumulate (sm_80)

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
