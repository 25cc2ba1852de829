#!/usr/bin/env python3
"""Eighth session: Liger's kernels timed as scripts/peers_bench.py does (each call's
output freed, so the caching allocator hands every launch the same buffer), and again
with the outputs of the last nb calls kept alive, so that outputs rotate over buffers
like the inputs (and like ours in the bench). bf16, the shapes where Liger led."""
import sys

import torch

sys.path.insert(0, "scripts")
from peers_bench import buffers, graph_time_us  # noqa: E402
from liger_kernel.ops.softmax import LigerSoftmaxFunction  # noqa: E402
from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: E402
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction  # noqa: E402

dt = torch.bfloat16
eps = 1e-6
for kernel, rows, cols in [("softmax", 16384, 8192), ("rmsnorm", 32768, 4096), ("rmsnorm", 4096, 4096),
                           ("fused_add_rmsnorm", 16384, 8192), ("fused_add_rmsnorm", 8192, 7168)]:
    fused = kernel == "fused_add_rmsnorm"
    nbytes = rows * cols * 2 * (4 if fused else 2)
    nb = buffers(nbytes)
    xs = [torch.randn(rows, cols, dtype=dt, device="cuda") for _ in range(nb)]
    rs = [torch.randn(rows, cols, dtype=dt, device="cuda") for _ in range(nb)] if fused else None
    w = torch.randn(cols, dtype=dt, device="cuda")
    if kernel == "softmax":
        call = lambda i: LigerSoftmaxFunction.apply(xs[i])
    elif kernel == "rmsnorm":
        call = lambda i: LigerRMSNormFunction.apply(xs[i], w, eps, 0.0, "llama", False)
    else:
        call = lambda i: LigerFusedAddRMSNormFunction.apply(xs[i], rs[i], w, eps, 0.0, "llama", True)
    ring = [None] * nb

    def kept(i):
        ring[i] = call(i)

    for name, fn in [("freed", call), ("kept", kept), ("freed-again", call), ("kept-again", kept)]:
        us = graph_time_us(fn, nb)
        print(f"{kernel:18} {rows:6}x{cols:<6} liger outputs {name:12} {us:9.2f} us "
              f"{nbytes / (us * 1e-6) / 1e12:6.3f} TB/s (nb={nb})", flush=True)
    del xs, rs, ring
    torch.cuda.empty_cache()
