#!/usr/bin/env python3
"""Side-by-side markdown table from one GPU run: our kernels (the records the `kernels`
bench writes to KERNELS_BENCH_OUT) against the peers (scripts/peers_bench.py's --out),
per shape; with --png DIR, one plot per kernel of TB/s against the copy bandwidth
(matplotlib).

    python3 scripts/report.py RUN.jsonl [MORE.jsonl ...] [--png docs/report] > table.md

The files' records are read together (scripts/h200_bench.sh writes both kinds into one
file, as docs/results/h200.jsonl holds them; the bench's and the peers' files may also
be given separately). Ratios use the device-to-device copy bandwidth the Rust bench
measured in the same run (cudaMemcpy of 1 GiB, bytes read + written). All times are per
launch from CUDA-graph replays over rotating buffers (working set >= 2x L2). `pdl us` is
our tuned config launched with programmatic dependent launch (where the bench measured
it).
"""
import json
import sys


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def plot(ours, peers, copy, out_dir, prefix):
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    for kernel in ["softmax", "rmsnorm", "fused_add_rmsnorm"]:
        rows = [r for r in ours if r["kind"] == "ours" and r["kernel"] == kernel]
        if not rows:
            continue
        labels = [f"{r['rows']}x{r['cols']}" for r in rows]
        x = list(range(len(rows)))
        fig, ax = plt.subplots(figsize=(11, 4.5))
        ax.plot(x, [r["tbs"] for r in rows], "o-", label="ours (tuned table)", linewidth=2)
        for name, style in [("torch", "s"), ("torch.compile", "^"), ("liger", "D")]:
            pts = [(i, r["bytes"] / (p["us"] * 1e-6) / 1e12) for i, r in enumerate(rows)
                   for p in peers if p.get("kind") == "peer" and p["peer"] == name and p["kernel"] == kernel
                   and p["rows"] == r["rows"] and p["cols"] == r["cols"]]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name, alpha=0.8)
        ax.axhline(copy, color="k", linestyle=":", label=f"device copy {copy:.2f} TB/s")
        ax.axhline(0.95 * copy, color="gray", linestyle=":", label="0.95 x copy")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("TB/s (bytes read + written / time)")
        ax.set_title(f"{kernel}, bf16, H200: per-launch time from CUDA-graph replays")
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"{prefix}-{kernel}.png"), dpi=110)
        plt.close(fig)


def main():
    args = sys.argv[1:]
    png = None
    if "--png" in args:
        i = args.index("--png")
        png = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit("usage: report.py RUN.jsonl [MORE.jsonl ...] [--png DIR]")
    records = [r for path in args for r in load(path)]
    ours = [r for r in records if r["kind"] in ("ours", "copy", "empty_graph", "empty_graph_pdl")]
    peers = [r for r in records if r["kind"] == "peer"]
    copy = next((r["tbs"] for r in ours if r["kind"] == "copy"), None)
    if copy is None:
        sys.exit("report.py: no copy bandwidth record (kind `copy`, from the bench) in " + " ".join(args))
    empty = next((r["us"] for r in ours if r["kind"] == "empty_graph"), None)
    empty_pdl = next((r["us"] for r in ours if r["kind"] == "empty_graph_pdl"), None)
    if png:
        plot(ours, peers, copy, png, "h200")
    by_shape = {}
    for r in peers:
        if r["kind"] == "peer":
            by_shape.setdefault((r["kernel"], r["rows"], r["cols"]), {})[r["peer"]] = r["us"]
    names = ["torch", "torch.compile", "liger"]
    pdl_note = "" if empty_pdl is None else (
        f" With programmatic dependent launch (`pdl us`, ours only): empty kernel {empty_pdl:.2f} us.")
    print(f"Copy bandwidth (same run): {copy:.3f} TB/s. Empty kernel in a graph: {empty:.2f} us.{pdl_note}\n")
    print("| kernel | rows x cols | MiB moved | ours us | TB/s | x copy | source | default us | "
          + " | ".join(f"{n} us" for n in names) + " | fastest peer / ours | pdl us |")
    print("|---|---|---:|---:|---:|---:|---|---:|" + "---:|" * len(names) + "---:|---:|")
    for r in ours:
        if r["kind"] != "ours":
            continue
        p = by_shape.get((r["kernel"], r["rows"], r["cols"]), {})
        cells = [f"{p[n]:.2f}" if n in p else "–" for n in names]
        best = min(p.values()) if p else None
        speed = f"{best / r['us']:.2f}" if best else "–"
        print(f"| {r['kernel']} | {r['rows']} x {r['cols']} | {r['bytes'] / 2**20:.0f} | {r['us']:.2f} | "
              f"{r['tbs']:.3f} | {r['ratio_copy']:.3f} | {r['source']} | {r['default_us']:.2f} | "
              + " | ".join(cells) + f" | {speed} | " + (f"{r['pdl_us']:.2f}" if "pdl_us" in r else "–") + " |")


if __name__ == "__main__":
    main()
