"""Per-call host cost of eager back-to-back calls from Python: rmsnorm 1 x 4096 bf16
through llm_kernels (with and without a given output), through the bare extension
call, and through torch (F.rms_norm, the usual several-op formula, and a one-kernel
copy as a floor for any torch op). Launch-bound: each kernel is a few microseconds
of GPU time, so the calls' rate is set by the host.

For each variant: 1000 warm-up calls, then 5 runs of 10000 calls; per run, the time to
enqueue them (host) and until the GPU finished them (total), per call. The medians go
to stdout and, as JSON, to the file given as the first argument.

    python3 kernels-py/bench/overhead.py overhead.json
"""

import json
import statistics
import sys
import time

import torch

import llm_kernels
from llm_kernels import _ext

ROWS, COLS, EPS, DTYPE = 1, 4096, 1e-6, torch.bfloat16
WARMUP, CALLS, RUNS = 1000, 10000, 5


def measure(fn):
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    host, total = [], []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / CALLS * 1e6)
        total.append((t2 - t0) / CALLS * 1e6)
    return {"host_us": statistics.median(host), "total_us": statistics.median(total), "runs_total_us": total}


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    x = torch.randn(ROWS, COLS, device="cuda", dtype=DTYPE)
    w = torch.rand(COLS, device="cuda", dtype=DTYPE) + 0.5
    y = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream
    llm_kernels.warm([("rmsnorm", DTYPE, ROWS, COLS)])
    args = (y.data_ptr(), COLS, x.data_ptr(), COLS, w.data_ptr(), ROWS, COLS, _ext.BF16, EPS, 0, stream)

    def formula():
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(DTYPE)

    variants = {
        "llm_kernels.rmsnorm(x, w, out=y)": lambda: llm_kernels.rmsnorm(x, w, EPS, out=y),
        "llm_kernels.rmsnorm(x, w)": lambda: llm_kernels.rmsnorm(x, w, EPS),
        "_ext.rmsnorm(<ints>) (binding only)": lambda: _ext.rmsnorm(*args),
        "torch F.rms_norm(x, (4096,), w)": lambda: torch.nn.functional.rms_norm(x, (COLS,), w, EPS),
        "torch formula (x.float() ... .to(bf16))": formula,
        "torch y.copy_(x) (one-kernel floor)": lambda: y.copy_(x),
    }
    results = {}
    print(f"rmsnorm {ROWS}x{COLS} bf16, eager back-to-back, {CALLS} calls x {RUNS} runs (median per call)")
    print(f"{'variant':44} {'host us':>8} {'total us':>9}")
    for name, fn in variants.items():
        r = measure(fn)
        results[name] = r
        print(f"{name:44} {r['host_us']:8.2f} {r['total_us']:9.2f}")
    meta = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "llm_kernels": llm_kernels.__version__,
        "shape": [ROWS, COLS],
        "dtype": "bf16",
        "calls": CALLS,
        "runs": RUNS,
        "results": results,
    }
    if out_path:
        with open(out_path, "w") as f:
            json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
