#!/usr/bin/env python3
"""Print the fastest candidates of every tuning record in a kernels cache folder, or
where the searches' time went.

Usage: python3 scripts/tune_records_top.py [CACHE_DIR] [--top N]
       python3 scripts/tune_records_top.py [CACHE_DIR] --phases [--top N]

--phases: the seconds of every phase (inputs, compile, setup, screen, full, finish, as
`kernels tune` records them) summed over the records, then the N records whose searches
took longest, with their phases: what a retune's device time went to. Records written
before phases were recorded count as unmeasured.

Reads <CACHE_DIR>/v1/tuning/*.kc (the header layout is documented in
kernels-core/src/cache/mod.rs: magic, key length, kind length, payload length, checksum,
then key text, kind and a JSON payload; files failing the checksum are skipped), and prints, per record, its key text, the
N fastest candidates and the fastest candidate of each strategy (first config value).
"""

import argparse
import glob
import json
import os
import struct
import sys


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def records(root):
    """(key text, record) of every intact tuning file; a file that is short, mis-tagged,
    of the wrong length or fails its checksum is reported on stderr and skipped, as
    the Rust reader does."""
    for path in sorted(glob.glob(os.path.join(root, "v1", "tuning", "*.kc"))):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 32 or data[:8] != b"KRNLCCH1":
            print(f"skipped {path}: not a kernels cache file", file=sys.stderr)
            continue
        klen, kindlen = struct.unpack_from("<II", data, 8)
        plen, checksum = struct.unpack_from("<QQ", data, 16)
        if len(data) != 32 + klen + kindlen + plen:
            print(f"skipped {path}: truncated or padded", file=sys.stderr)
            continue
        key = data[32 : 32 + klen]
        kind = data[32 + klen : 32 + klen + kindlen]
        payload = data[32 + klen + kindlen :]
        if fnv1a64(key + b"\0" + kind + b"\0" + payload) != checksum:
            print(f"skipped {path}: checksum mismatch", file=sys.stderr)
            continue
        try:
            yield key.decode(), json.loads(payload)
        except ValueError:
            print(f"skipped {path}: payload is not a tuning record", file=sys.stderr)


PHASES = ("inputs", "compile", "setup", "screen", "full", "finish")


def key_label(key):
    """A record's key in one line: its kernel, static key and batch where the key text has
    them (the cache key is one `name = value` line per field), else the text itself."""
    fields = {}
    for line in key.splitlines():
        name, sep, value = line.partition(" = ")
        if sep:
            fields[name.strip()] = value.strip().strip('"')
    if "static_key" not in fields:
        return " ".join(key.split())
    return " ".join(f"{f}={fields[f]}" if f == "batch" else fields[f]
                    for f in ("kernel", "static_key", "batch") if f in fields)


def phase_summary(recs, top):
    """Lines: the phases summed over `recs` ((key, record) pairs), then the `top` records
    of the longest searches with their phases and candidate counts."""
    totals = dict.fromkeys(PHASES, 0.0)
    timed = []
    unmeasured = 0
    for key, rec in recs:
        ph = rec.get("phases") or {}
        secs = {p: float(ph.get(p, 0.0)) for p in PHASES}
        if not any(secs.values()):
            unmeasured += 1
            continue
        for p in PHASES:
            totals[p] += secs[p]
        timed.append((sum(secs.values()), key, secs, len(rec.get("candidates", []))))
    whole = sum(totals.values())
    lines = [f"{len(timed)} searches measured, {unmeasured} without phases; {whole:.1f} s in all"]
    for p in PHASES:
        share = totals[p] / whole if whole else 0.0
        lines.append(f"  {p:8s} {totals[p]:9.1f} s  {share:6.1%}")
    timed.sort(key=lambda t: -t[0])
    for total, key, secs, n in timed[:top]:
        parts = ", ".join(f"{p} {secs[p]:.2f}" for p in PHASES)
        lines.append(f"{total:8.2f} s  {n} candidates  {key_label(key)}  ({parts})")
    return lines


def main():
    ap = argparse.ArgumentParser(description="fastest candidates of every tuning record")
    ap.add_argument("cache_dir", nargs="?", default=os.environ.get("KERNELS_CACHE_DIR", "/tmp/kc"))
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--phases", action="store_true", help="where the searches' time went")
    args = ap.parse_args()
    if args.phases:
        print("\n".join(phase_summary(list(records(args.cache_dir)), args.top)))
        return
    for key, rec in records(args.cache_dir):
        ok = [(c["us"], c["config"]) for c in rec.get("candidates", []) if "us" in c]
        ok.sort(key=lambda t: t[0])
        print(key)
        for us, cfg in ok[: args.top]:
            print(f"  {us:10.3f}  {' '.join(str(v) for v in cfg)}")
        best = {}
        for us, cfg in ok:
            best.setdefault(str(cfg[0]), (us, cfg))
        print("  best per strategy: " + ", ".join(f"{k} {v[0]:.3f}" for k, v in sorted(best.items(), key=lambda kv: kv[1][0])))
        errs = [c for c in rec.get("candidates", []) if "error" in c]
        for c in errs[:5]:
            print(f"  error {' '.join(str(v) for v in c['config'])}: {c['error'][:200]}")


if __name__ == "__main__":
    main()
