#!/usr/bin/env python3
"""Print the fastest candidates of every tuning record in a kernels cache folder.

Usage: python3 scripts/tune_records_top.py [CACHE_DIR] [--top N]

Reads <CACHE_DIR>/v1/tuning/*.kc (the header layout is documented in
kernels-core/src/cache.rs: magic, key length, kind length, payload length, checksum,
then key text, kind and a JSON payload), and prints, per record, its key text, the
N fastest candidates and the fastest candidate of each strategy (first config value).
"""

import glob
import json
import os
import struct
import sys


def records(root):
    for path in sorted(glob.glob(os.path.join(root, "v1", "tuning", "*.kc"))):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 32 or data[:8] != b"KRNLCCH1":
            continue
        klen, kindlen = struct.unpack_from("<II", data, 8)
        (plen,) = struct.unpack_from("<Q", data, 16)
        key = data[32 : 32 + klen].decode()
        payload = data[32 + klen + kindlen : 32 + klen + kindlen + plen]
        try:
            yield key, json.loads(payload)
        except ValueError:
            continue


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    top = 8
    if "--top" in sys.argv:
        top = int(sys.argv[sys.argv.index("--top") + 1])
        args = [a for a in args if a != str(top)]
    root = args[0] if args else os.environ.get("KERNELS_CACHE_DIR", "/tmp/kc")
    for key, rec in records(root):
        ok = [(c["us"], c["config"]) for c in rec.get("candidates", []) if "us" in c]
        ok.sort(key=lambda t: t[0])
        print(key)
        for us, cfg in ok[:top]:
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
