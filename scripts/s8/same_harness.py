#!/usr/bin/env python3
"""Eighth session: our kernels and Liger's timed by one method in one process.

Our kernel is compiled with NVRTC (the prelude and the kernel source with the config's
defines, as the Rust host does), loaded with the driver API and launched on torch's
stream, so that torch's CUDA graph captures it; both sides are then timed by
scripts/peers_bench.py's graph_time_us over the same rotating inputs. This removes
the difference between the Rust bench's timing and the peers script's from the
comparison. bf16. Usage (on the GPU machine, Liger importable):

    python3 scripts/s8/same_harness.py
"""
import ctypes
import sys

import torch

sys.path.insert(0, "scripts")
from nvrtc_check import Nvrtc, find_nvrtc, read_source  # noqa: E402
from peers_bench import buffers, graph_time_us  # noqa: E402
from liger_kernel.ops.softmax import LigerSoftmaxFunction  # noqa: E402
from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: E402
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction  # noqa: E402

cuda = ctypes.CDLL("libcuda.so.1")
nvrtc = Nvrtc(find_nvrtc())


def ck(rc, what):
    if rc != 0:
        s = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(s))
        raise RuntimeError(f"{what}: {s.value.decode() if s.value else rc}")


def load(src, defines, name):
    opts = ["--gpu-architecture=sm_90a", "-std=c++17"] + [f"-D{k}={v}" for k, v in defines.items()]
    ok, log, cubin = nvrtc.compile(read_source(["kernels-core/cuda/prelude.cuh", src]), "k.cu", opts, want_cubin=True)
    if not ok:
        raise RuntimeError(log)
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ck(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(cubin)), "module")
    ck(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "function")
    return fn


def launch(fn, grid, block, args):
    """args: list of ctypes values, in the kernel's parameter order."""
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    ck(cuda.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream, ptrs, None), "launch")


P = ctypes.c_uint64
L = ctypes.c_longlong
F = ctypes.c_float
dt = torch.bfloat16
eps = 1e-6

# (kernel, rows, cols, our configs as (label, defines))
CASES = [
    ("softmax", 16384, 8192, [("row 256x8", dict(THREADS=256, VEC=8)), ("row 512x4", dict(THREADS=512, VEC=4)),
                              ("row 512x8", dict(THREADS=512, VEC=8))]),
    ("softmax", 32768, 4096, [("row 128x8", dict(THREADS=128, VEC=8))]),
    ("rmsnorm", 32768, 4096, [("128x8", dict(THREADS=128, VEC=8)), ("256x8", dict(THREADS=256, VEC=8))]),
    ("rmsnorm", 16384, 8192, [("256x8", dict(THREADS=256, VEC=8))]),
    ("fused_add_rmsnorm", 16384, 8192, [("512x8", dict(THREADS=512, VEC=8))]),
    ("fused_add_rmsnorm", 8192, 7168, [("512x8", dict(THREADS=512, VEC=8))]),
    ("fused_add_rmsnorm", 4096, 2048, [("128x8", dict(THREADS=128, VEC=8))]),
]

def main():
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    for kernel, rows, cols, configs in CASES:
        fused = kernel == "fused_add_rmsnorm"
        nbytes = rows * cols * 2 * (4 if fused else 2)
        nb = buffers(nbytes)
        xs = [torch.randn(rows, cols, dtype=dt, device="cuda") for _ in range(nb)]
        ys = [torch.empty(rows, cols, dtype=dt, device="cuda") for _ in range(nb)]
        rs = [torch.randn(rows, cols, dtype=dt, device="cuda") for _ in range(nb)] if fused else None
        w = torch.randn(cols, dtype=dt, device="cuda")
        if kernel == "softmax":
            liger = lambda i: LigerSoftmaxFunction.apply(xs[i])
        elif kernel == "rmsnorm":
            liger = lambda i: LigerRMSNormFunction.apply(xs[i], w, eps, 0.0, "llama", False)
        else:
            liger = lambda i: LigerFusedAddRMSNormFunction.apply(xs[i], rs[i], w, eps, 0.0, "llama", True)
        fns = []
        for label, d in configs:
            base = dict(DTYPE=2, COLS=cols, ROWS=1, **d)
            if kernel == "softmax":
                fn = load("kernels-softmax/cuda/softmax.cu", dict(base, STRATEGY=0, SPLITS=1, LOG_SOFTMAX=0, KEEP=0), "softmax_kernel")
                run = (lambda fn, t: lambda i: launch(fn, rows, t, [P(xs[i].data_ptr()), P(ys[i].data_ptr()), L(rows), L(cols), L(cols), F(1.0)]))(fn, d["THREADS"])
                check = lambda: torch.softmax(xs[0].float(), -1)
            elif kernel == "rmsnorm":
                fn = load("kernels-rmsnorm/cuda/rmsnorm.cu", base, "rmsnorm_kernel")
                run = (lambda fn, t: lambda i: launch(fn, rows, t, [P(xs[i].data_ptr()), L(cols), P(w.data_ptr()), P(ys[i].data_ptr()), L(cols), L(rows), F(eps)]))(fn, d["THREADS"])
                check = lambda: torch.nn.functional.rms_norm(xs[0].float(), (cols,), w.float(), eps)
            else:
                fn = load("kernels-rmsnorm/cuda/rmsnorm.cu", base, "fused_add_rmsnorm_kernel")
                run = (lambda fn, t: lambda i: launch(fn, rows, t, [P(xs[i].data_ptr()), L(cols), P(rs[i].data_ptr()), L(cols), P(w.data_ptr()), L(rows), F(eps)]))(fn, d["THREADS"])
                check = None
            if check is not None:  # one launch on set 0, against torch in fp32
                run(0)
                torch.cuda.synchronize()
                err = (ys[0].float() - check()).abs().max().item()
                print(f"{kernel} {rows}x{cols} ours {label}: max abs error vs torch fp32 {err:.3g}", flush=True)
            fns.append((f"ours {label}", run))
        fns.append(("liger", liger))
        for rep in range(2):
            for label, fn in (fns if rep == 0 else fns[::-1]):
                us = graph_time_us(fn, nb)
                print(f"{kernel:18} {rows:6}x{cols:<6} {label:14} {us:9.2f} us {nbytes / (us * 1e-6) / 1e12:6.3f} TB/s",
                      flush=True)
        del xs, ys, rs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
