#!/usr/bin/env python3
"""cuBLAS (through torch F.linear, bf16) on the GEMM bench's shapes, timed as
benches/benches/gemm.rs times ours: CUDA-graph replays of back-to-back launches rotating
over copies of the operands (working set at least 2x L2, at most 64 copies), median
microseconds per launch over the replays.

    python3 scripts/gemm_peers.py [--m 1,16,64,256,1024,4096,8192] [--layers qkv,o,...] [--out FILE.jsonl]

--layers keeps the layers named, as GEMM_BENCH_SHAPES does for our bench.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

SHAPES = [
    ("Llama-3.1-8B", "qkv", 6144, 4096),
    ("Llama-3.1-8B", "o", 4096, 4096),
    ("Llama-3.1-8B", "gate_up", 28672, 4096),
    ("Llama-3.1-8B", "down", 4096, 14336),
    ("Llama-3.1-8B", "lm_head", 128256, 4096),
    ("Llama-3.1-70B-tp8", "qkv", 1280, 8192),
    ("Llama-3.1-70B-tp8", "o", 8192, 1024),
    ("Llama-3.1-70B-tp8", "gate_up", 7168, 8192),
    ("Llama-3.1-70B-tp8", "down", 8192, 3584),
]


def rotation(bytes_per_call: int, l2: int) -> int:
    # kernels-core timing::rotation
    return max(1, min(64, -(-2 * l2 // max(bytes_per_call, 1))))


def graph_launches(bytes_per_call: int, copies: int) -> int:
    # kernels-core timing::graph_launches
    est_us = max(bytes_per_call / 3e6, 0.5)
    by_time = int(-(-100.0 // est_us))
    return max(min(max(by_time, 3), 20), copies)


def time_point(ws, xs, outs, launches, reps=10, warmup=2):
    copies = len(ws)
    for i in range(warmup):
        F.linear(xs[i % copies], ws[i % copies], out=None)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            for i in range(launches):
                j = i % copies
                torch.matmul(xs[j], ws[j].t(), out=outs[j])
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / launches)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", default="1,16,64,256,1024,4096,8192")
    ap.add_argument("--layers", help="comma-separated layer names to keep (default: all)")
    ap.add_argument("--out")
    args = ap.parse_args()
    layers = set(args.layers.split(",")) if args.layers else None
    ms = [int(x) for x in args.m.split(",")]
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    print(f"device: {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}")
    out = open(args.out, "w") if args.out else None
    # Device copy bandwidth (bytes read + written), the ceiling of a weight stream.
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    ts = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1000.0)
    copy_tbs = 2 * x.numel() / statistics.median(ts) / 1e12
    print(f"device copy: {copy_tbs:.2f} TB/s (1 GiB, read + write)")
    if out:
        out.write(json.dumps(dict(copy_tbs=round(copy_tbs, 3))) + "\n")
    del x, y
    for model, layer, n, k in SHAPES:
        if layers is not None and layer not in layers:
            continue
        wbytes = n * k * 2
        copies = rotation(wbytes, l2)
        ws = [torch.empty(n, k, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1) for _ in range(copies)]
        for m in ms:
            xs = [torch.empty(m, k, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1) for _ in range(copies)]
            outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
            bytes_call = (n * k + m * (k + n)) * 2
            us = time_point(ws, xs, outs, graph_launches(bytes_call, copies))
            tflops = 2.0 * m * n * k / us / 1e6
            wtbs = wbytes / us / 1e6
            print(f"{model:<18} {layer:<8} {n:>6} {k:>6} {m:>5} {us:>10.1f} {tflops:>9.1f} {wtbs:>8.2f}  cublas")
            if out:
                out.write(json.dumps(dict(model=model, layer=layer, n=n, k=k, m=m, us=round(us, 3),
                                          tflops=round(tflops, 2), weight_tbs=round(wtbs, 3))) + "\n")
            del xs, outs
        del ws
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
