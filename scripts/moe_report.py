#!/usr/bin/env python3
"""The fused-MoE speed table of docs/results/moe.md from one device call's records.

    python3 scripts/moe_report.py moe-h200.jsonl > tables.md

Reads the JSON lines one call writes (moe-h200.jsonl) and tells three families of records
apart; lines starting with "#" and blank lines are skipped, anything else is left out:

- ours (kernels-moe/examples/moe_bench.rs): a header with "sms", then a line per shape with
  "model", "T", "us_served", "us_served_no_align", the served config, its "source" and the
  distinct experts its routings touched ("active_experts", averaged over the routings);
- SGLang's (scripts/sglang_routes.py running ../shared/peers/sglang_moe_bench.py): a header
  with the device copy "copy_GBps", then a line per shape with "E", "topk", "H", "I", "T",
  "us_graph" (its two GEMMs, activation and top-k sum), "us_graph_fused" (its opt-in
  fused-SwiGLU path; null where skipped), "active_experts" and "weight_bytes"; a shape it
  could not run is a line with "error"; "check_T" lines are its correctness checks (counted, each failure named);
- references (scripts/moe_refs.py): "kind": "moe_ref", "ref" "torch_loop" or "cublas_dense",
  "model", "tokens", "us", "tflops".

Prints, in Markdown:

- for every (model, T) both sides have, sorted by model name then T, the doc's columns: ours
  with and without the align step, the served config and source, SGLang's time, the ratio,
  each side's copy fraction and TFLOP/s, and SGLang's fused-SwiGLU time;
- the geometric mean of the ratio at T <= 64, at T >= 512 and over all those points, and the
  same against the faster of SGLang's two paths (min of us_graph and us_graph_fused);
- our points with no SGLang figure (DeepSeek-V3-tp8, which SGLang does not run, or a shape
  its bench refused) and SGLang's with none of ours;
- our points whose no-align span took more than 5% longer than the whole call of the same
  config (a measurement flag: the span is a subset of the call), with `us_served_steps`
  (all four steps timed by the span's loop) where the record has it;
- the reference points at each model's largest T: torch's per-expert loop us and cuBLAS's
  dense-GEMM TFLOP/s.

Formulas (bf16 weights, w13 [E, 2I, H] and w2 [E, H, I]; topk, H and I from SGLang's record
of the same shape, which both benches run at), the ones that reproduce the doc's tables to
the digit:

- ratio = SGLang us_graph / our us_served_no_align (above 1: we are faster); the no-align
  span is the one SGLang's figure covers, its alignment being outside its timing;
- active-expert weight bytes = active_experts * 3 * H * I * 2 (each touched expert's gate,
  up and down rows once, 2 bytes an element), active_experts the distinct experts the
  routings touched, averaged over them;
- copy fraction = bytes / time / copy bandwidth: ours our record's active_experts (SGLang's
  where ours lacks it) over the no-align time and the copy_GBps of SGLang's header; SGLang's its record's frac_of_copy
  (its weight_bytes over us_graph and its unrounded copy, to 3 decimals), else recomputed;
- FLOPs = 2 * T * topk * 3 * H * I (gate-up [T*topk, H] x [H, 2I] plus down
  [T*topk, I] x [I, H]); SGLang's TFLOP/s its record's tflops (FLOPs / us_graph, to one
  decimal), else recomputed; ours the same FLOPs over our no-align time.

Exits with status 2 and a message naming the file where it holds no records of ours or none
of SGLang's, and naming the file and line where a line is not a JSON object or a record
lacks a field the table needs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

SLOW_SPAN = 1.05  # no-align span over the whole call above which a point is flagged

OURS_FIELDS = ("model", "T", "us_served", "us_served_no_align")
SGLANG_FIELDS = ("model", "T", "topk", "H", "I", "us_graph")


class RecordError(Exception):
    """A record file that cannot be read as one call's MoE records; exit status 2."""


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def require(record, fields, where):
    missing = [f for f in fields if record.get(f) is None]
    if missing:
        raise RecordError(f"{where}: no {', '.join(missing)} in this record")


def load(paths):
    """The records of `paths` (later files win a point both hold), by family."""
    run = {"ours": {}, "sglang": {}, "sglang_errors": {}, "refs": {}, "checks": [], "copy": None,
           "device": None, "sms": None}
    for path in paths:
        try:
            f = open(path, encoding="utf-8")
        except OSError as err:
            raise RecordError(f"{path}: {err.strerror}") from None
        with f:
            for number, line in enumerate(f, 1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                where = f"{path}:{number}"
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as err:
                    raise RecordError(f"{where}: not a JSON line ({err.msg})") from None
                if not isinstance(r, dict):
                    raise RecordError(f"{where}: not a JSON object")
                add(run, r, where)
    return run


def add(run, r, where):
    """File record `r` (read at `where`) under its family in `run`."""
    if r.get("kind") == "moe_ref":
        require(r, ("ref", "model", "tokens"), where)
        run["refs"][(r["ref"], r["model"], r["tokens"])] = r
    elif "check_T" in r:
        run["checks"].append(r)
    elif "us_served" in r:
        require(r, OURS_FIELDS, where)
        run["ours"][(r["model"], r["T"])] = r
    elif "error" in r and "model" in r:
        run["sglang_errors"][(r["model"], r.get("T"))] = r["error"]
    elif "us_graph" in r:
        require(r, SGLANG_FIELDS, where)
        run["sglang"][(r["model"], r["T"])] = r
        if run["copy"] is None and r.get("copy_GBps"):
            run["copy"] = r["copy_GBps"]
    elif "model" not in r:
        if "copy_GBps" in r:
            run["copy"] = r["copy_GBps"]
        if "sms" in r:
            run["device"], run["sms"] = r.get("device"), r["sms"]


def weight_bytes(active, s):
    """Bytes of `active` experts' w13 and w2 at the shape of SGLang record `s` (bf16)."""
    return None if active is None else active * 3 * s["H"] * s["I"] * 2


def flops(s):
    return 2 * s["T"] * s["topk"] * 3 * s["H"] * s["I"]


def copy_fraction(nbytes, us, copy):
    """`nbytes` in `us` microseconds over a copy of `copy` GB/s."""
    return nbytes / us / 1e3 / copy if nbytes is not None and copy else None


def row(o, s, copy):
    """The doc's table cells of our record `o` and SGLang's `s` of the same shape."""
    us, us_sg = o["us_served_no_align"], s["us_graph"]
    ratio = us_sg / us
    ours_frac = copy_fraction(weight_bytes(o.get("active_experts", s.get("active_experts")), s), us, copy)
    sg_frac = s.get("frac_of_copy")
    if sg_frac is None:
        sg_bytes = s.get("weight_bytes") or weight_bytes(s.get("active_experts"), s)
        sg_frac = copy_fraction(sg_bytes, us_sg, copy)
    sg_tflops = s.get("tflops") or flops(s) / us_sg / 1e6
    served = o.get("served", "")
    served = served[len("path="):] if served.startswith("path=") else served
    return [o["model"], str(o["T"]), f"{o['us_served']:.1f}", f"{us:.1f}",
            f"`{served}`" if served else "–", o.get("source", "–").split(" (")[0],
            f"{us_sg:.1f}", f"{ratio:.2f}", fmt(ours_frac, ".2f"), fmt(sg_frac, ".2f"),
            f"{flops(s) / us / 1e6:.1f}", f"{sg_tflops:.1f}", fmt(s.get("us_graph_fused"), ".1f")]


def print_table(run, keys):
    print("| model | T | ours µs | ours no align µs | served config | source | SGLang µs | ratio | "
          "ours copy frac | SGLang copy frac | ours TFLOP/s | SGLang TFLOP/s | SGLang fused-SwiGLU µs |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in keys:
        print("| " + " | ".join(row(run["ours"][key], run["sglang"][key], run["copy"])) + " |")


def print_geomeans(run, keys):
    def ratio(key, faster):
        s = run["sglang"][key]
        sg = s["us_graph"]
        if faster and s.get("us_graph_fused") is not None:
            sg = min(sg, s["us_graph_fused"])
        return sg / run["ours"][key]["us_served_no_align"]

    print("| points | shapes | geomean ratio | against the faster SGLang path |")
    print("|---|---:|---:|---:|")
    for label, pick in (("T ≤ 64", lambda t: t <= 64), ("T ≥ 512", lambda t: t >= 512),
                        ("all", lambda t: True)):
        at = [k for k in keys if pick(k[1])]
        print(f"| {label} | {len(at)} | {fmt(geomean(ratio(k, False) for k in at), '.3f')} | "
              f"{fmt(geomean(ratio(k, True) for k in at), '.3f')} |")


def print_unmatched(run):
    ours, sglang, errors = run["ours"], run["sglang"], run["sglang_errors"]
    lone = sorted(k for k in ours if k not in sglang)
    if lone:
        print("Ours without an SGLang figure (no align):")
        print()
        for key in lone:
            why = f" (SGLang: {errors[key][:100]})" if key in errors else ""
            print(f"- {key[0]} T = {key[1]}: {ours[key]['us_served_no_align']:.1f} µs{why}")
        print()
    lone = sorted(k for k in sglang if k not in ours)
    if lone:
        print("SGLang without a figure of ours:")
        print()
        for key in lone:
            print(f"- {key[0]} T = {key[1]}: {sglang[key]['us_graph']:.1f} µs")
        print()


def print_slow_spans(run):
    slow = sorted(k for k, o in run["ours"].items()
                  if o["us_served_no_align"] > SLOW_SPAN * o["us_served"])
    print(f"No-align span more than {(SLOW_SPAN - 1) * 100:.0f}% slower than the whole call "
          "(a measurement flag):")
    print()
    if not slow:
        print("- none")
    for key in slow:
        o = run["ours"][key]
        span, whole = o["us_served_no_align"], o["us_served"]
        steps = o.get("us_served_steps")
        steps = f"; all four steps by the span's loop {steps:.1f} µs" if steps is not None else ""
        print(f"- {key[0]} T = {key[1]}: no align {span:.1f} µs against {whole:.1f} whole "
              f"(+{(span / whole - 1) * 100:.1f}%){steps}")
    print()


def print_refs(run):
    refs = run["refs"]
    models = sorted({m for _, m, _ in refs})
    if not models:
        return
    print("Reference points (scripts/moe_refs.py) at each model's largest T:")
    print()
    print("| model | T | torch loop µs | cuBLAS dense TFLOP/s |")
    print("|---|---:|---:|---:|")
    for model in models:
        t = max(tokens for _, m, tokens in refs if m == model)
        loop, dense = refs.get(("torch_loop", model, t)), refs.get(("cublas_dense", model, t))
        print(f"| {model} | {t} | {fmt(loop and loop.get('us'), '.0f')} | "
              f"{fmt(dense and dense.get('tflops'), '.0f')} |")
    print()


def report(paths):
    run = load(paths)
    named = " ".join(paths)
    if not run["ours"]:
        raise RecordError(f"{named}: no records of ours (moe_bench lines with us_served)")
    if not run["sglang"]:
        raise RecordError(f"{named}: no records of SGLang's (sglang_moe_bench lines with us_graph)")
    keys = sorted(k for k in run["ours"] if k in run["sglang"])
    if not keys:
        raise RecordError(f"{named}: no (model, T) has both a record of ours and one of SGLang's")
    device = run["device"] or "device not recorded"
    sms = f" ({run['sms']} SMs)" if run["sms"] else ""
    copy = f"{run['copy']} GB/s" if run["copy"] else "not recorded"
    print(f"{device}{sms}; device copy measured by SGLang's script: {copy}.")
    failed = [c for c in run["checks"] if not c.get("ok")]
    if run["checks"]:
        print(f"SGLang's own checks against its reference: {len(run['checks']) - len(failed)} passed, "
              f"{len(failed)} failed" + "".join(f"; {c.get('model')} T = {c['check_T']} failed" for c in failed) + ".")
    print()
    print_table(run, keys)
    print()
    print_geomeans(run, keys)
    print()
    print_unmatched(run)
    print_slow_spans(run)
    print_refs(run)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", help="JSON-lines files of one call (several are merged)")
    args = ap.parse_args()
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    try:
        report(args.records)
    except RecordError as err:
        print(f"moe_report: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
