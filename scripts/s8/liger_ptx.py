#!/usr/bin/env python3
"""Eighth session: run Liger's kernels once at the shapes where it led ours, so that
Triton writes their PTX into $TRITON_CACHE_DIR (read offline, not copied)."""
import torch
from liger_kernel.ops.softmax import LigerSoftmaxFunction
from liger_kernel.ops.rms_norm import LigerRMSNormFunction
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

dt = torch.bfloat16
x = torch.randn(16384, 8192, dtype=dt, device="cuda")
LigerSoftmaxFunction.apply(x)
x = torch.randn(32768, 4096, dtype=dt, device="cuda")
w = torch.randn(4096, dtype=dt, device="cuda")
LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
x = torch.randn(16384, 8192, dtype=dt, device="cuda")
r = torch.randn(16384, 8192, dtype=dt, device="cuda")
w = torch.randn(8192, dtype=dt, device="cuda")
LigerFusedAddRMSNormFunction.apply(x, r, w, 1e-6, 0.0, "llama", True)
torch.cuda.synchronize()
print("ok")
