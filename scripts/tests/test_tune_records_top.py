"""scripts/tune_records_top.py --phases on a made-up cache folder (GPU-free): the phases of
the measured records are summed with their shares, the longest searches come first with
their candidate counts, and a record written before phases were recorded is counted apart."""
import json
import os
import struct
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "tune_records_top.py")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tune_records_top  # noqa: E402


def write_record(folder, name, key, record):
    """A tuning cache file as kernels-core writes it: magic, key and kind lengths, payload
    length, checksum, then key, kind and the JSON payload."""
    key_b, kind_b = key.encode(), b"tune"
    payload = json.dumps(record).encode()
    checksum = tune_records_top.fnv1a64(key_b + b"\0" + kind_b + b"\0" + payload)
    head = b"KRNLCCH1" + struct.pack("<II", len(key_b), len(kind_b)) + struct.pack("<QQ", len(payload), checksum)
    (folder / f"{name}.kc").write_bytes(head + key_b + kind_b + payload)


def record(phases, candidates):
    r = {"config": [1], "us": 1.0, "default_us": 1.0, "device": "d", "compiler": "c", "tuned_at": "2026-12-05",
         "candidates": [{"config": [i], "us": 1.0 + i} for i in range(candidates)]}
    if phases is not None:
        r["phases"] = phases
    return r


def test_phases_are_summed_and_the_longest_searches_listed(tmp_path):
    folder = tmp_path / "v1" / "tuning"
    folder.mkdir(parents=True)
    short = dict(inputs=0.5, compile=1.0, setup=0.5, screen=2.0, full=1.0, finish=0.0)
    long = dict(inputs=2.0, compile=0.0, setup=1.0, screen=12.0, full=4.0, finish=1.0)
    write_record(folder, "a", "gemm short", record(short, 10))
    write_record(folder, "b", "gemm long", record(long, 200))
    write_record(folder, "c", "gemm old", record(None, 5))
    out = subprocess.run([sys.executable, SCRIPT, str(tmp_path), "--phases", "--top", "2"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "2 searches measured, 1 without phases; 25.0 s in all"
    assert out[4].split() == ["screen", "14.0", "s", "56.0%"]
    assert out[7].startswith("   20.00 s  200 candidates  gemm long")
    assert out[8].startswith("    5.00 s  10 candidates  gemm short")
    assert len(out) == 9


def test_a_cache_key_is_shown_as_kernel_static_key_and_batch():
    key = "kernels cache key v2\nkernel = \"gemm\"\nsource_fingerprint = \"fnv1a64:1\"\n" \
          "static_key = \"dtype=bf16,layout=nt,n=128,k=2048\"\nbatch = 256\nalignment = 16"
    assert tune_records_top.key_label(key) == "gemm dtype=bf16,layout=nt,n=128,k=2048 batch=256"
    assert tune_records_top.key_label("gemm long") == "gemm long"
