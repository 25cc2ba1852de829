#!/usr/bin/env python3
"""The GEMM results tables of docs/results/gemm.md from one run's records.

    python3 scripts/gemm_report.py gemm-h200.jsonl > tables.md

Reads the records `STEPS=gemm bash scripts/h200_bench.sh` writes (gemm-h200.jsonl: ours with
the table's `source`, the bench's cuBLAS with `source` "cublas", `agree`, `read_floor` and
`copy_floor` records, and the torch-timed cuBLAS of scripts/gemm_peers.py, which has no
`source`, beside its `copy_tbs`) and prints, in Markdown:

- every point: ours and cuBLAS us, the ratio cuBLAS / ours, weight-stream TB/s (with its
  fraction of the 1 GiB copy) at m <= 64 or TFLOP/s above, torch's us and the source;
- per m, the geometric mean, least and largest ratio over the shapes, and torch's cuBLAS
  over the bench's;
- per weight, the copy floor against the 1 GiB copy, and ours and cuBLAS at m = 1 against it;
- the largest disagreement between ours and cuBLAS.

Two builds side by side (an A/B of a kernel-source change on the same configs: bench_gemm of
each build with `GEMM_BENCH_TABLE=<one table> GEMM_BENCH_ANY_SOURCE=1`, in one device call):

    python3 scripts/gemm_report.py a-*.jsonl --against b-*.jsonl

prints every point both runs have: A's and B's us, A / B (above 1: B faster) and each against
the cuBLAS timed beside it, then per m the geometric means of A / B and of B's cuBLAS ratio
over A's (the same comparison with each run's drift divided out). Several files a side are
merged (a run split m by m).
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def short(model, layer):
    return ("8B" if model == "Llama-3.1-8B" else model.replace("Llama-3.1-", "")) + " " + layer


def load(path):
    ours, cublas, torch, agree, floors, copy = {}, {}, {}, {}, {}, None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "copy_tbs" in r:
                copy = r["copy_tbs"]
                continue
            kind = r.get("kind")
            if kind == "agree":
                agree[(r["model"], r["layer"], r["m"])] = r["rel_diff"]
                continue
            if kind in ("read_floor", "copy_floor"):
                floors[(r["model"], r["layer"], kind)] = r
                continue
            if kind is not None or "m" not in r:
                continue
            key = (r["model"], r["layer"], r["m"])
            source = r.get("source")
            if source is None:
                torch[key] = r
            elif source == "cublas":
                cublas[key] = r
            elif source not in ("pdl", "alt", "config"):
                ours[key] = r
    return ours, cublas, torch, agree, floors, copy


def load_all(paths):
    """`load` of several record files merged (later files win a point both hold)."""
    maps, copy = [{}, {}, {}, {}, {}], None
    for path in paths:
        *parts, path_copy = load(path)
        for merged, part in zip(maps, parts):
            merged.update(part)
        copy = path_copy if path_copy is not None else copy
    return (*maps, copy)


def compare(a_paths, b_paths):
    a_ours, a_cublas = load_all(a_paths)[:2]
    b_ours, b_cublas = load_all(b_paths)[:2]
    keys = [k for k in a_ours if k in b_ours and k in a_cublas and k in b_cublas]
    if not keys:
        sys.exit("no point has ours and the bench's cuBLAS in both runs")
    print("| model | layer | m | A us | B us | A / B | A vs cuBLAS | B vs cuBLAS |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for key in sorted(keys, key=lambda k: (k[2], k[0], k[1])):
        a, b = a_ours[key]["us"], b_ours[key]["us"]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {a:.1f} | {b:.1f} | {a / b:.3f} | "
              f"{a_cublas[key]['us'] / a:.2f} | {b_cublas[key]['us'] / b:.2f} |")
    print()
    print("| m | points | A / B geomean | min | max | B's cuBLAS ratio / A's |")
    print("|---:|---:|---:|---:|---:|---:|")
    for m in sorted({k[2] for k in keys}):
        at = [k for k in keys if k[2] == m]
        speed = {k: a_ours[k]["us"] / b_ours[k]["us"] for k in at}
        lo, hi = min(speed, key=speed.get), max(speed, key=speed.get)
        drift = geomean((b_cublas[k]["us"] / b_ours[k]["us"]) / (a_cublas[k]["us"] / a_ours[k]["us"]) for k in at)
        print(f"| {m} | {len(at)} | {geomean(speed.values()):.3f} | {speed[lo]:.3f} ({short(*lo[:2])}) | "
              f"{speed[hi]:.3f} ({short(*hi[:2])}) | {drift:.3f} |")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+")
    ap.add_argument("--against", nargs="+", metavar="B", help="another build's records: an A/B of the two")
    args = ap.parse_args()
    if args.against:
        return compare(args.records, args.against)
    ours, cublas, torch, agree, floors, copy = load_all(args.records)
    if not ours or not cublas:
        sys.exit(f"{' '.join(args.records)}: no points of ours and of the bench's cuBLAS (source \"cublas\")")
    if not copy:
        sys.exit(f"{' '.join(args.records)}: no copy_tbs record (scripts/gemm_peers.py writes it)")
    ms = sorted({k[2] for k in ours})
    shapes = list(dict.fromkeys(k[:2] for k in ours))

    print("| model | layer | n | k | m | ours us | cuBLAS us | ratio | perf ours / cuBLAS | torch us | source |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for model, layer in shapes:
        for m in ms:
            key = (model, layer, m)
            if key not in ours or key not in cublas:
                continue
            o, c, t = ours[key], cublas[key], torch.get(key)
            if m <= 64:
                perf = f"{o['weight_tbs']:.2f} ({o['weight_tbs'] / copy:.2f}) / {c['weight_tbs']:.2f}"
            else:
                perf = f"{o['tflops']:.1f} / {c['tflops']:.1f}"
            source = o["source"].replace(" (the default measured best at this batch)", "")
            torch_us = f"{t['us']:.1f}" if t else "–"
            print(f"| {model} | {layer} | {o['n']} | {o['k']} | {m} | {o['us']:.1f} | {c['us']:.1f} | "
                  f"{c['us'] / o['us']:.2f} | {perf} | {torch_us} | {source} |")

    print()
    print("| m | geomean | min | max | torch cuBLAS / bench cuBLAS |")
    print("|---:|---:|---:|---:|---:|")
    for m in ms:
        keys = [k for k in ours if k[2] == m and k in cublas]
        ratios = {k: cublas[k]["us"] / ours[k]["us"] for k in keys}
        lo, hi = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
        both = [k for k in keys if k in torch]
        vs_torch = f"{geomean(torch[k]['us'] / cublas[k]['us'] for k in both):.2f}" if both else "–"
        print(f"| {m} | {geomean(ratios.values()):.2f} | {ratios[lo]:.2f} ({short(*lo[:2])}) | "
              f"{ratios[hi]:.2f} ({short(*hi[:2])}) | {vs_torch} |")

    print()
    print("| weight | MiB | copy us | copy TB/s | of 1 GiB copy | ours m = 1, TB/s | ours / same-size copy "
          "| cuBLAS m = 1, TB/s | cuBLAS / same-size copy |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for (model, layer, kind), f in floors.items():
        if kind == "copy_floor" and (model, layer, 1) in ours and (model, layer, 1) in cublas:
            rows.append((f["n"] * f["k"] * 2 / 2**20, model, layer, f))
    for mib, model, layer, f in sorted(rows):
        o = ours[(model, layer, 1)]["weight_tbs"]
        c = cublas[(model, layer, 1)]["weight_tbs"]
        print(f"| {short(model, layer)} | {mib:.0f} | {f['us']:.1f} | {f['weight_tbs']:.2f} | "
              f"{f['weight_tbs'] / copy:.2f} | {o:.2f} | {o / f['weight_tbs']:.2f} | {c:.2f} | "
              f"{c / f['weight_tbs']:.2f} |")

    print()
    if agree:
        worst = max(agree, key=agree.get)
        print(f"Largest |ours - cuBLAS| / max |cuBLAS| over {len(agree)} points: {agree[worst]:.2e} "
              f"({short(*worst[:2])}, m = {worst[2]}). 1 GiB copy: {copy:.3f} TB/s.")
    else:
        print(f"No agreement records. 1 GiB copy: {copy:.3f} TB/s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
