#!/usr/bin/env python3
"""Eighth session: one launch each of our rmsnorm / fused kernels and Liger's at the
shapes where Liger led in scripts/s8/same_harness.py, for Nsight Compute:

    ncu --section LaunchStats --section Occupancy --section SpeedOfLight \
        --section MemoryWorkloadAnalysis python3 scripts/s8/ncu_pair.py
"""
import ctypes
import sys

import torch

sys.path.insert(0, "scripts/s8")
from same_harness import F, L, P, launch, load  # noqa: E402
from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: E402
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction  # noqa: E402

dt = torch.bfloat16
eps = 1e-6
torch.zeros(1, device="cuda")
rows, cols = 32768, 4096
x = torch.randn(rows, cols, dtype=dt, device="cuda")
y = torch.empty_like(x)
w = torch.randn(cols, dtype=dt, device="cuda")
fn = load("kernels-rmsnorm/cuda/rmsnorm.cu", dict(DTYPE=2, COLS=cols, ROWS=1, THREADS=256, VEC=8), "rmsnorm_kernel")
launch(fn, rows, 256, [P(x.data_ptr()), L(cols), P(w.data_ptr()), P(y.data_ptr()), L(cols), L(rows), F(eps)])
LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)
rows, cols = 16384, 8192
x = torch.randn(rows, cols, dtype=dt, device="cuda")
r = torch.randn(rows, cols, dtype=dt, device="cuda")
w = torch.randn(cols, dtype=dt, device="cuda")
fn = load("kernels-rmsnorm/cuda/rmsnorm.cu", dict(DTYPE=2, COLS=cols, ROWS=1, THREADS=512, VEC=8), "fused_add_rmsnorm_kernel")
launch(fn, rows, 512, [P(x.data_ptr()), L(cols), P(r.data_ptr()), L(cols), P(w.data_ptr()), L(rows), F(eps)])
LigerFusedAddRMSNormFunction.apply(x, r, w, eps, 0.0, "llama", True)
torch.cuda.synchronize()
print("ok")
