"""scripts/gemm_report.py on a made-up run of two shapes (GPU-free): each point's ratio is the
bench's cuBLAS time over ours, the per-m summary is their geometric mean, decode points show
the weight stream against the 1 GiB copy, and a run without the bench's cuBLAS is refused."""
import json
import math
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "gemm_report.py")


def point(layer, n, k, m, us, source=None):
    r = {"model": "Llama-3.1-8B", "layer": layer, "n": n, "k": k, "m": m, "us": us,
         "tflops": 2 * m * n * k / us / 1e6, "weight_tbs": 2 * n * k / us / 1e6}
    if source is not None:
        r["source"] = source
    return r


def run(tmp_path, records):
    path = tmp_path / "gemm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return subprocess.run([sys.executable, SCRIPT, str(path)], capture_output=True, text=True)


def test_ratios_and_geomeans(tmp_path):
    records = [{"copy_tbs": 4.0}]
    for layer, n, k, ours, cublas in (("o", 4096, 4096, 10.0, 12.0), ("qkv", 6144, 4096, 20.0, 15.0)):
        records += [point(layer, n, k, 1, ours, "table-exact"), point(layer, n, k, 1, cublas, "cublas"),
                    point(layer, n, k, 1, cublas * 1.1),
                    {"kind": "agree", "model": "Llama-3.1-8B", "layer": layer, "n": n, "k": k, "m": 1,
                     "rows": 1, "rel_diff": 1e-3 if layer == "o" else 2e-3},
                    {"kind": "copy_floor", "model": "Llama-3.1-8B", "layer": layer, "n": n, "k": k,
                     "us": ours / 2, "weight_tbs": 2 * n * k / (ours / 2) / 1e6}]
    out = run(tmp_path, records)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    o_row = next(x for x in lines if x.startswith("| Llama-3.1-8B | o |"))
    cells = [c.strip() for c in o_row.split("|")]
    assert cells[6:9] == ["10.0", "12.0", "1.20"]
    # 8B o streams 32 MiB in 10 us: 3.36 TB/s, 0.84 of the 4.0 TB/s copy.
    assert cells[9].startswith("3.36 (0.84)")
    assert cells[10] == "13.2"
    summary = next(x for x in lines if x.startswith("| 1 |"))
    # geomean of 1.2 and 0.75 is 0.95; torch is 1.1x the bench's cuBLAS on both.
    assert [c.strip() for c in summary.split("|")][2:6] == ["0.95", "0.75 (8B qkv)", "1.20 (8B o)", "1.10"]
    assert "2.00e-03 (8B qkv, m = 1)" in lines[-1]


def test_a_run_without_the_bench_cublas_is_refused(tmp_path):
    out = run(tmp_path, [{"copy_tbs": 4.0}, point("o", 4096, 4096, 1, 10.0, "table-exact")])
    assert out.returncode != 0
    assert "cuBLAS" in out.stderr


def write(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_two_builds_side_by_side(tmp_path):
    # A split m by m into two files, as a run of one m per call writes it; B in one file.
    a1 = write(tmp_path, "a-1.jsonl", [point("o", 4096, 4096, 1, 10.0, "file:table-exact"),
                                       point("o", 4096, 4096, 1, 12.0, "cublas")])
    a256 = write(tmp_path, "a-256.jsonl", [point("o", 4096, 4096, 256, 20.0, "file:table-exact"),
                                           point("o", 4096, 4096, 256, 18.0, "cublas"),
                                           point("qkv", 6144, 4096, 256, 30.0, "file:table-exact"),
                                           point("qkv", 6144, 4096, 256, 27.0, "cublas")])
    b = write(tmp_path, "b.jsonl", [point("o", 4096, 4096, 1, 8.0, "file:table-exact"),
                                    point("o", 4096, 4096, 1, 12.0, "cublas"),
                                    point("o", 4096, 4096, 256, 16.0, "file:table-exact"),
                                    point("o", 4096, 4096, 256, 19.8, "cublas"),
                                    point("qkv", 6144, 4096, 256, 25.0, "file:table-exact"),
                                    point("qkv", 6144, 4096, 256, 27.0, "cublas")])
    out = subprocess.run([sys.executable, SCRIPT, a1, a256, "--against", b], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    row = next(x for x in lines if x.startswith("| Llama-3.1-8B | o | 256 |"))
    assert [c.strip() for c in row.split("|")][4:9] == ["20.0", "16.0", "1.250", "0.90", "1.24"]
    one = [c.strip() for c in next(x for x in lines if x.startswith("| 1 |")).split("|")]
    assert one[2:4] == ["1", "1.250"]
    m256 = [c.strip() for c in next(x for x in lines if x.startswith("| 256 |")).split("|")]
    # A / B: 1.25 (o) and 1.2 (qkv), geomean 1.225; cuBLAS ratios over A's: 1.1 * 1.25 and 1.2.
    assert m256[2:6] == ["2", "1.225", "1.200 (8B qkv)", "1.250 (8B o)"]
    assert m256[6] == f"{math.sqrt(1.1 * 1.25 * 1.2):.3f}"


def test_no_common_point_is_refused(tmp_path):
    a = write(tmp_path, "a.jsonl", [point("o", 4096, 4096, 1, 10.0, "table-exact"), point("o", 4096, 4096, 1, 12.0, "cublas")])
    b = write(tmp_path, "b.jsonl", [point("o", 4096, 4096, 16, 10.0, "table-exact"), point("o", 4096, 4096, 16, 12.0, "cublas")])
    out = subprocess.run([sys.executable, SCRIPT, a, "--against", b], capture_output=True, text=True)
    assert out.returncode != 0
    assert "both runs" in out.stderr
