#!/usr/bin/env python3
"""Peer timings on the GPU for the softmax and RMSNorm shape set, in one run.

Times torch eager, torch.compile and Liger (liger-kernel 0.8.5) on the shapes of
benches/shapes/norm_softmax.json, plus the device's own device-to-device copy
bandwidth (1 GiB) and, per shape, that copy moving the shape's bytes (kind
copy_same_bytes: the bound for the shape's size), and writes one JSON object per
measurement to the file given by --out (--copy-only: the copies alone).

Kernel time, not Python launch overhead: each measurement captures a CUDA graph of
many launches over rotating input buffers (working set above 2x L2), replays it
with CUDA events and takes the median per launch.
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F

L2_BYTES = 60 * 1024 * 1024


def graph_time_us(fn, nbuf, launches=None, reps=7):
    """Median microseconds per call of fn(i) (i = buffer index), captured in a CUDA graph."""
    launches = launches or max(nbuf, 20)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i % nbuf)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(launches):
            fn(i % nbuf)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / launches)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth():
    n = 1 << 30  # 1 GiB source
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    us = graph_time_us(lambda i: dst.copy_(src), 1, launches=10)
    return 2 * n / (us * 1e-6) / 1e12  # read + write


def buffers(nbytes_per_call):
    return max(2, min(64, math.ceil(2 * L2_BYTES / max(nbytes_per_call, 1))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="benches/shapes/norm_softmax.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--copy-only", action="store_true",
                    help="only the device copy of each shape's bytes (kind copy_same_bytes)")
    args = ap.parse_args()
    shapes = json.load(open(args.shapes))
    dt = torch.bfloat16
    out = open(args.out, "w")

    def emit(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    copy_tbs = copy_bandwidth()
    # Not the copy bandwidth the report uses (the bench's, kind "copy"): a copy captured in
    # a graph runs on the copy engines, about 2.7 TB/s on the H200.
    emit(kind="torch_copy", tbs=copy_tbs, device=torch.cuda.get_device_name())
    print(f"device copy bandwidth: {copy_tbs:.3f} TB/s", flush=True)

    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        have_liger = True
    except Exception as e:  # noqa: BLE001
        print(f"liger not importable: {e}", file=sys.stderr)
        have_liger = False

    eps = 1e-6

    def rms_eager(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    def fused_eager(x, r, w):
        r.add_(x)
        x.copy_(F.rms_norm(r, (r.shape[-1],), w, eps))

    def fused_compiled_fn(x, r, w):
        s = x + r
        y = F.rms_norm(s, (s.shape[-1],), w, eps)
        return y, s

    compiled = {}
    if not args.no_compile and not args.copy_only:
        compiled["softmax"] = torch.compile(lambda x: torch.softmax(x, -1), dynamic=True)
        compiled["rmsnorm"] = torch.compile(rms_eager, dynamic=True)
        compiled["fused_add_rmsnorm"] = torch.compile(fused_compiled_fn, dynamic=True)

    for kernel in ["softmax", "rmsnorm", "fused_add_rmsnorm"]:
        for rows, cols in shapes[kernel]:
            elems = rows * cols
            # bytes a fused kernel must move: softmax/rmsnorm read x, write y; fused reads x, r, writes x, r
            nbytes = elems * 2 * (4 if kernel == "fused_add_rmsnorm" else 2)
            nb = buffers(nbytes)
            # The bound for this shape: the driver's device-to-device copy (what
            # Tensor.copy_ runs for same-dtype contiguous tensors, and what the 1 GiB
            # reference measures) reading nbytes / 2 and writing nbytes / 2, timed the
            # same way.
            half = nbytes // 2
            srcs = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(nb)]
            dsts = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(nb)]
            us = graph_time_us(lambda i: dsts[i].copy_(srcs[i]), nb)
            del srcs, dsts
            emit(kind="copy_same_bytes", kernel=kernel, rows=rows, cols=cols, us=us,
                 tbs=nbytes / (us * 1e-6) / 1e12)
            print(f"{kernel:18} {rows:6}x{cols:<7} {'memcpy':14} {us:9.2f} us "
                  f"{nbytes / (us * 1e-6) / 1e12 / copy_tbs:5.2f}x copy", flush=True)
            if args.copy_only:
                continue
            xs = [torch.randn(rows, cols, dtype=dt, device="cuda") for _ in range(nb)]
            w = torch.randn(cols, dtype=dt, device="cuda")
            peers = {}
            if kernel == "softmax":
                peers["torch"] = lambda i: torch.softmax(xs[i], -1)
                if "softmax" in compiled:
                    peers["torch.compile"] = lambda i: compiled["softmax"](xs[i])
                if have_liger and cols <= 65536:
                    peers["liger"] = lambda i: LigerSoftmaxFunction.apply(xs[i])
            elif kernel == "rmsnorm":
                peers["torch"] = lambda i: rms_eager(xs[i], w)
                if "rmsnorm" in compiled:
                    peers["torch.compile"] = lambda i: compiled["rmsnorm"](xs[i], w)
                if have_liger:
                    peers["liger"] = lambda i: LigerRMSNormFunction.apply(xs[i], w, eps, 0.0, "llama", False)
            else:
                rs = [torch.randn(rows, cols, dtype=dt, device="cuda") for _ in range(nb)]
                peers["torch"] = lambda i: fused_eager(xs[i], rs[i], w)
                if "fused_add_rmsnorm" in compiled:
                    peers["torch.compile"] = lambda i: compiled["fused_add_rmsnorm"](xs[i], rs[i], w)
                if have_liger:
                    peers["liger"] = lambda i: LigerFusedAddRMSNormFunction.apply(xs[i], rs[i], w, eps, 0.0, "llama", True)
            for name, fn in peers.items():
                try:
                    us = graph_time_us(fn, nb)
                except Exception as e:  # noqa: BLE001
                    print(f"{kernel} {rows}x{cols} {name}: failed: {str(e).splitlines()[0][:120]}", file=sys.stderr)
                    torch.cuda.synchronize()
                    continue
                tbs = nbytes / (us * 1e-6) / 1e12
                emit(kind="peer", kernel=kernel, rows=rows, cols=cols, peer=name, us=us, tbs=tbs)
                print(f"{kernel:18} {rows:6}x{cols:<7} {name:14} {us:9.2f} us {tbs:6.3f} TB/s {tbs / copy_tbs:5.2f}x copy", flush=True)
            del xs
            torch.cuda.empty_cache()

    # An empty kernel's time, measured the same way (the floor for decode batches).
    z = torch.empty(1, device="cuda")
    us = graph_time_us(lambda i: z.add_(0), 1, launches=200)
    emit(kind="torch_empty", us=us)
    print(f"empty kernel (1-element add): {us:.2f} us", flush=True)


if __name__ == "__main__":
    main()
