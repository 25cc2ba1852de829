#!/usr/bin/env python3
"""Launches a few of our kernels the way the Rust host does, for Nsight Compute.

Run on the GPU machine from the repository root, under ncu, for example:

    ncu --kernel-name regex:'softmax_kernel|rmsnorm_kernel' --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \\
        python3 scripts/ncu_profile.py softmax-vocab

Each case compiles one variant with NVRTC (scripts/gpu_check.py's loader), then launches
it 3 times on bf16 data (the third is the one profiled with --launch-skip 2).
Cases: softmax-vocab (1024 x 128256, staged, 1024 threads, the analytic default there),
rmsnorm-64mib (4096 x 4096, the analytic default).
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check as gc  # noqa: E402

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "softmax-vocab"
    gc.import_gpu()
    torch, np = gc.torch, gc.np
    comp = gc.Compiler("sm_90a")
    libcuda = ctypes.CDLL("libcuda.so.1")
    if case == "softmax-vocab":
        rows, cols, threads = 1024, 128256, 1024
        # staged_smem_limit(sm90) / 16 bytes, whole rounds of 1024 threads
        stage = ((232448 - 1024) // 16) // threads * threads
        d = dict(DTYPE=2, COLS=cols, THREADS=threads, VEC=8, ROWS=1, STRATEGY=3, SPLITS=1,
                 LOG_SOFTMAX=0, KEEP=0, STAGE_VECS=stage)
        f = comp.get("softmax", d)["softmax_kernel"]
        smem = stage * 16
        rc = libcuda.cuFuncSetAttribute(ctypes.c_void_p(f.ptr),
                                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        assert rc == 0, f"cuFuncSetAttribute: {rc}"
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        for _ in range(3):
            f((rows,), (threads,), (gc.ptr(x), gc.ptr(y), np.int64(rows), np.int64(cols),
                                    np.int64(cols), np.float32(1.0)), shared_mem=smem)
    elif case == "rmsnorm-64mib":
        rows, cols, threads = 4096, 4096, 128
        d = dict(DTYPE=2, COLS=cols, THREADS=threads, VEC=8, ROWS=1)
        f = comp.get("rmsnorm", d)["rmsnorm_kernel"]
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(cols, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        for _ in range(3):
            f((rows,), (threads,), (gc.ptr(x), np.int64(cols), gc.ptr(w), gc.ptr(y),
                                    np.int64(cols), np.int64(rows), np.float32(1e-6)))
    else:
        sys.exit(f"unknown case {case}")
    torch.cuda.synchronize()
    print(f"{case}: ok")


if __name__ == "__main__":
    main()
