#!/usr/bin/env python3
"""How much do the exponentials cost the long-row softmax? A diagnostic, not a kernel.

Compiles the staged softmax twice from the committed sources, as the Rust host does
(prelude + softmax.cu, NVRTC, the config's defines): as committed, and with the
prelude's 2^x (ex2.approx on the special-function unit) replaced in the compiled text by
one FMA (wrong results; same loads, stores and everything else). Times both per launch
over rotating buffers (working set > 2x L2, CUDA events around 20 back-to-back launches,
median of 7) on the GPU's real clocks, next to a torch device-to-device copy of the same
bytes. Run on the GPU machine from the repository root:

    python3 scripts/exp_probe.py
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvrtc_check as nc  # noqa: E402

EX2 = 'asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));'
FMA = "y = fmaf(x, 1e-30f, 1.0f);"


def main():
    import ctypes

    import cupy
    import numpy as np
    import torch

    src = nc.read_source([nc.PRELUDE, nc.SOFTMAX])
    assert EX2 in src, "the prelude's ex2 line moved; update this probe"
    nv = nc.Nvrtc(nc.find_nvrtc())
    libcuda = ctypes.CDLL("libcuda.so.1")
    cases = [  # rows, cols, threads, vec (bf16), the analytic defaults there
        (1024, 128256, 1024, 8),
        (2048, 151936, 1024, 8),
        (4096, 65536, 512, 8),
    ]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for rows, cols, threads, vec in cases:
        cap = (232448 - 1024) // (vec * 2)
        nvec = cols // vec
        stage = nvec if nvec <= cap else cap // threads * threads
        smem = stage * vec * 2
        d = dict(DTYPE=2, COLS=cols, THREADS=threads, VEC=vec, ROWS=1, STRATEGY=3, SPLITS=1,
                 LOG_SOFTMAX=0, KEEP=0, STAGE_VECS=stage)
        opts = ["-arch=sm_90a", *nc.BASE_OPTIONS, *[f"-D{k}={v}" for k, v in d.items()]]
        bytes_per = rows * cols * 2 * 2
        nbuf = max(1, -(-2 * l2 // bytes_per))
        xs = [torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16) for _ in range(nbuf)]
        ys = [torch.empty_like(x) for x in xs]
        out = {}
        for name, text in (("committed", src), ("exp as one FMA", src.replace(EX2, FMA))):
            ok, log, cubin = nv.compile(text, "softmax.cu", opts, want_cubin=True)
            assert ok, log
            m = cupy.cuda.function.Module()
            m.load(cubin)
            f = m.get_function("softmax_kernel")
            assert libcuda.cuFuncSetAttribute(ctypes.c_void_p(f.ptr), 8, smem) == 0

            def launch(i):
                x, y = xs[i % nbuf], ys[i % nbuf]
                f((rows,), (threads,), (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int64(rows),
                                        np.int64(cols), np.int64(cols), np.float32(1.0)), shared_mem=smem)

            out[name] = time_us(torch, launch)
        src_b = [torch.empty(rows * cols * 2, device="cuda", dtype=torch.uint8) for _ in range(nbuf)]
        dst_b = [torch.empty_like(b) for b in src_b]
        out["torch copy, same bytes"] = time_us(torch, lambda i: dst_b[i % nbuf].copy_(src_b[i % nbuf]))
        line = ", ".join(f"{k} {v:.2f} us ({bytes_per / v / 1e6:.3f} TB/s)" for k, v in out.items())
        print(f"softmax {rows}x{cols} staged t{threads}: {line}", flush=True)


def time_us(torch, launch, n=20, reps=7):
    for i in range(3):
        launch(i)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(n):
            launch(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / n)
    return statistics.median(times)


if __name__ == "__main__":
    main()
