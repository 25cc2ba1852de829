#!/usr/bin/env python3
"""Reference points beside the fused-MoE bench (bf16, CUDA-graph timed as our bench and the
SGLang peer time a layer call):

- torch_loop: the layer as torch does it without a fused kernel, a loop over the active
  experts: gather the expert's tokens, gate-up matmul, SiLU(gate) * up, down matmul, the
  routing weight, and an index_add into the output;
- cublas_dense: cuBLAS (torch matmul) on dense GEMMs of the layer's FLOPs, the T * topk
  rows through one gate-up weight [2I, H] and one down weight [H, I].

Routing is uniform: distinct top-k experts per token, softmax weights; NROT routings are
rotated through so a small T's active experts do not stay in L2. Before timing, the loop
is checked against a per-token fp32 computation at a few tokens.

    python3 scripts/moe_refs.py [--models Mixtral,Qwen3] [--tokens 1,16,64] [--out FILE.jsonl]

Prints one JSON line per (model, tokens, reference).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

# name, experts, topk, hidden H, expert intermediate I (all experts on one GPU)
MODELS = [
    ("Mixtral-8x7B", 8, 2, 4096, 14336),
    ("Qwen3-30B-A3B", 128, 8, 2048, 768),
    ("DeepSeek-V3", 256, 8, 7168, 2048),
]
TOKENS = [1, 16, 64, 512, 2048, 8192]
NROT = 4
CHECK_TOKENS, CHECK_TOL = 4, 2e-2


def graph_us(fn, calls: int, reps: int = 7) -> float:
    """Microseconds per fn(i) call, i in 0..calls, all captured in one CUDA graph; median
    over replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(calls):
            fn(i)  # warm-up (cuBLAS workspaces, allocations) outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    del graph
    return statistics.median(times)


def routing(tokens: int, experts: int, topk: int, gen: torch.Generator):
    """(ids [T, topk], weights [T, topk] fp32, plan): the plan lists, per active expert,
    its tokens and their weights as fixed tensors (so the loop captures into a graph)."""
    ids = torch.rand(tokens, experts, device="cuda", generator=gen).topk(topk, dim=1).indices
    weights = torch.softmax(torch.randn(tokens, topk, device="cuda", generator=gen), -1)
    flat_ids, flat_w = ids.flatten(), weights.flatten()
    plan = []
    for e in torch.unique(flat_ids).tolist():
        pairs = (flat_ids == e).nonzero().flatten()
        plan.append((e, pairs // topk, flat_w[pairs].to(torch.bfloat16).unsqueeze(1)))
    return ids, weights, plan


def loop_layer(x, w13, w2, plan, out, inter: int):
    out.zero_()
    for e, tok, wt in plan:
        h = x.index_select(0, tok) @ w13[e].t()
        act = F.silu(h[:, :inter]) * h[:, inter:]
        out.index_add_(0, tok, (act @ w2[e].t()) * wt)
    return out


def per_token(x, w13, w2, ids, weights, inter: int):
    """The layer token by token in fp32: the check of the loop."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device="cuda")
    for t in range(x.shape[0]):
        xt = x[t].float()
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w13[e].float() @ xt
            act = F.silu(h[:inter]) * h[inter:]
            out[t] += float(weights[t, j]) * (w2[e].float() @ act)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="", help="comma-separated substrings of model names (default: all)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--out")
    args = ap.parse_args()
    wanted = [m for m in args.models.split(",") if m]
    tokens_list = [int(t) for t in args.tokens.split(",")]
    out_file = open(args.out, "w") if args.out else None
    props = torch.cuda.get_device_properties(0)
    print(f"# device: {props.name}, torch {torch.__version__}", flush=True)
    gen = torch.Generator(device="cuda")
    for name, experts, topk, hidden, inter in MODELS:
        if wanted and not any(w in name for w in wanted):
            continue
        gen.manual_seed(7)
        w13 = torch.randn(experts, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        w13 *= hidden**-0.5
        w2 = torch.randn(experts, hidden, inter, device="cuda", dtype=torch.bfloat16, generator=gen)
        w2 *= inter**-0.5

        # The loop against the per-token computation.
        x = torch.randn(CHECK_TOKENS, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        ids, weights, plan = routing(CHECK_TOKENS, experts, topk, gen)
        got = loop_layer(x, w13, w2, plan, torch.empty_like(x), inter).float()
        want = per_token(x, w13, w2, ids, weights, inter)
        err = ((got - want).norm() / want.norm()).item()
        if not err < CHECK_TOL:
            raise SystemExit(f"{name}: the torch loop is off the per-token reference by {err:.3e}")

        for tokens in tokens_list:
            flops = 6.0 * tokens * topk * inter * hidden
            xs = [torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(NROT)]
            plans = [routing(tokens, experts, topk, gen)[2] for _ in range(NROT)]
            outs = [torch.empty_like(x) for x in xs]
            loop_us = graph_us(lambda i: loop_layer(xs[i], w13, w2, plans[i], outs[i], inter), NROT)

            rows = tokens * topk
            xd = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
            hd = torch.empty(rows, 2 * inter, device="cuda", dtype=torch.bfloat16)
            yd = torch.empty(rows, hidden, device="cuda", dtype=torch.bfloat16)

            def dense(_i):
                torch.matmul(xd, w13[0].t(), out=hd)
                torch.matmul(hd[:, :inter], w2[0].t(), out=yd)

            dense_us = graph_us(dense, NROT)
            for ref, us in (("torch_loop", loop_us), ("cublas_dense", dense_us)):
                row = dict(kind="moe_ref", ref=ref, model=name, tokens=tokens, us=round(us, 2),
                           tflops=round(flops / us / 1e6, 1), device=props.name)
                print(json.dumps(row), flush=True)
                if out_file:
                    out_file.write(json.dumps(row) + "\n")
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
