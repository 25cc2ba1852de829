#!/usr/bin/env python3
"""Side-by-side markdown table from one GPU run: our kernels (the `kernels` bench's
--out JSONL) against the peers (scripts/peers_bench.py's --out JSONL), per shape.

    python3 scripts/report.py OURS.jsonl PEERS.jsonl > table.md

Ratios use the device-to-device copy bandwidth the Rust bench measured in the same
run (cudaMemcpy of 1 GiB, bytes read + written). All times are per launch from
CUDA-graph replays over rotating buffers (working set >= 2x L2).
"""
import json
import sys


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def main():
    ours, peers = load(sys.argv[1]), load(sys.argv[2])
    copy = next(r["tbs"] for r in ours if r["kind"] == "copy")
    empty = next((r["us"] for r in ours if r["kind"] == "empty_graph"), None)
    by_shape = {}
    for r in peers:
        if r["kind"] == "peer":
            by_shape.setdefault((r["kernel"], r["rows"], r["cols"]), {})[r["peer"]] = r["us"]
    names = ["torch", "torch.compile", "liger"]
    print(f"Copy bandwidth (same run): {copy:.3f} TB/s. Empty kernel in a graph: {empty:.2f} us.\n")
    print("| kernel | rows x cols | MiB moved | ours us | TB/s | x copy | source | default us | "
          + " | ".join(f"{n} us" for n in names) + " | fastest peer / ours |")
    print("|---|---|---:|---:|---:|---:|---|---:|" + "---:|" * len(names) + "---:|")
    for r in ours:
        if r["kind"] != "ours":
            continue
        p = by_shape.get((r["kernel"], r["rows"], r["cols"]), {})
        cells = [f"{p[n]:.2f}" if n in p else "–" for n in names]
        best = min(p.values()) if p else None
        speed = f"{best / r['us']:.2f}" if best else "–"
        print(f"| {r['kernel']} | {r['rows']} x {r['cols']} | {r['bytes'] / 2**20:.0f} | {r['us']:.2f} | "
              f"{r['tbs']:.3f} | {r['ratio_copy']:.3f} | {r['source']} | {r['default_us']:.2f} | "
              + " | ".join(cells) + f" | {speed} |")


if __name__ == "__main__":
    main()
