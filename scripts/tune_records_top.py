#!/usr/bin/env python3
"""Print the fastest candidates of every tuning record in a kernels cache folder.

Usage: python3 scripts/tune_records_top.py [CACHE_DIR] [--top N]

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


def main():
    ap = argparse.ArgumentParser(description="fastest candidates of every tuning record")
    ap.add_argument("cache_dir", nargs="?", default=os.environ.get("KERNELS_CACHE_DIR", "/tmp/kc"))
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
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
