"""scripts/moe_report.py (GPU-free): on the committed H200 run it prints the rows and geometric
means of docs/results/moe.md's H200 table; on a made-up run the ratio is SGLang's us_graph over
our no-align time, the copy fraction and TFLOP/s follow the shape, our points without an
SGLang figure and no-align spans slower than the whole call are listed, and a run without
records of ours or of SGLang's, or with a broken line, is refused with the file named."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "..", "moe_report.py")
H200_RUN = os.path.join(HERE, "..", "..", "docs", "results", "moe-h200.jsonl")


def run(*paths):
    return subprocess.run([sys.executable, SCRIPT, *map(str, paths)], capture_output=True, text=True,
                          encoding="utf-8")


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_row(lines, model, t):
    return next(x for x in lines if x.startswith(f"| {model} | {t} |"))


def geomeans(lines):
    """{points: [geomean ratio, against the faster path]} of the summary table."""
    rows = [cells(x) for x in lines if x.startswith(("| T ", "| all |"))]
    return {r[0]: r[2:4] for r in rows}


def test_the_h200_run_gives_the_docs_table():
    out = run(H200_RUN)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # Three rows as docs/results/moe.md prints them, every cell.
    assert table_row(lines, "Mixtral-8x7B", 512) == (
        "| Mixtral-8x7B | 512 | 982.3 | 1116.2 | `wgmma block_m=128 block_n=64 block_k=64 warps=8 stages=5` "
        "| file:table-exact | 1020.0 | 0.91 | 0.60 | 0.65 | 323.2 | 353.7 | 955.8 |")
    assert table_row(lines, "Qwen3-30B-A3B", 1) == (
        "| Qwen3-30B-A3B | 1 | 30.7 | 28.8 | `wgmma_swap block_m=16 block_n=64 block_k=64 warps=4 stages=6` "
        "| file:table-exact | 27.7 | 0.96 | 0.62 | 0.65 | 2.6 | 2.7 | 25.9 |")
    assert table_row(lines, "DeepSeek-V3", 8192) == (
        "| DeepSeek-V3 | 8192 | 13064.8 | 12622.9 | `wgmma block_m=128 block_n=128 block_k=64 warps=8 stages=4` "
        "| file:default | 26013.7 | 2.06 | 0.42 | 0.20 | 457.3 | 221.9 | 26362.9 |")
    # A table-default source loses its note; the rows run by model name, then T.
    assert cells(table_row(lines, "Qwen3-30B-A3B", 8192))[5] == "file:table-default"
    rows = [cells(x)[:2] for x in lines if x.startswith(("| DeepSeek", "| Mixtral", "| Qwen3"))]
    assert rows[:18] == [[m, str(t)] for m in ("DeepSeek-V3", "Mixtral-8x7B", "Qwen3-30B-A3B")
                         for t in (1, 16, 64, 512, 2048, 8192)]
    means = geomeans(lines)
    assert means["T ≤ 64"][0] == "1.008"
    assert means["T ≥ 512"][0] == "1.199"
    assert abs(float(means["all"][0]) - 1.10) < 0.005
    assert abs(float(means["all"][1]) - 1.06) < 0.005, "against the faster of SGLang's paths"
    # DeepSeek-V3-tp8, which SGLang does not run, by its no-align time.
    assert "- DeepSeek-V3-tp8 T = 1: 44.4 µs" in lines
    assert "- DeepSeek-V3-tp8 T = 8192: 2040.2 µs" in lines
    flagged = [x for x in lines if x.startswith("- Mixtral-8x7B T = ") and "whole" in x]
    assert [x.split(":")[0] for x in flagged] == ["- Mixtral-8x7B T = 512", "- Mixtral-8x7B T = 2048"]
    # The reference points at T = 8192: torch's per-expert loop us, cuBLAS's dense TFLOP/s.
    assert "| Mixtral-8x7B | 8192 | 10211 | 685 |" in lines


def ours(model, t, whole, span, active, **extra):
    return {"model": model, "T": t, "routing": "recorded", "us_served": whole, "us_served_no_align": span,
            "source": "file:table-exact", "served": "path=wgmma block_m=64", "active_experts": active, **extra}


def sglang(t, us, fused, active):
    return {"model": "M", "E": 8, "topk": 2, "H": 1024, "I": 512, "T": t, "us_graph": us,
            "us_graph_fused": fused, "active_experts": active, "weight_bytes": active * 3 * 1024 * 512 * 2}


def write(tmp_path, records, name="moe.jsonl"):
    path = tmp_path / name
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))
    return path


def made_up_run():
    return [{"device": "GPU X", "sms": 10},
            ours("M", 4, 110.0, 100.0, 2, source="file:table-default (the default measured best at this batch)"),
            ours("M", 1024, 400.0, 500.0, 8, us_served_steps=410.0),
            ours("Solo", 4, 30.0, 25.0, 2),
            {"device": "GPU X", "copy_GBps": 50},
            sglang(4, 150.0, 120.0, 2),
            {"model": "M", "check_T": 4, "rel_err": 1e-3, "ok": True},
            {"model": "M", "check_T": 64, "rel_err": 0.5, "ok": False},
            sglang(1024, 400.0, None, 8),
            "# device: GPU X\n",
            {"kind": "moe_ref", "ref": "torch_loop", "model": "M", "tokens": 4, "us": 900.0, "tflops": 0.1},
            {"kind": "moe_ref", "ref": "torch_loop", "model": "M", "tokens": 1024, "us": 2000.0, "tflops": 3.2},
            {"kind": "moe_ref", "ref": "cublas_dense", "model": "M", "tokens": 1024, "us": 30.0, "tflops": 600.4}]


def test_ratio_copy_fraction_and_tflops(tmp_path):
    out = run(write(tmp_path, made_up_run()))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    small = cells(table_row(lines, "M", 4))
    assert small[2:6] == ["110.0", "100.0", "`wgmma block_m=64`", "file:table-default"]
    # 150 / 100; two experts' w13 and w2 (6 MiB) in 100 and 150 us over a 50 GB/s copy.
    assert small[6:10] == ["150.0", "1.50", "1.26", "0.84"]
    assert small[12] == "120.0"
    big = cells(table_row(lines, "M", 1024))
    # 2 * 1024 * 2 * 3 * 1024 * 512 FLOPs in 500 and 400 us; no fused-SwiGLU figure.
    assert big[7] == "0.80"
    assert big[10:13] == ["12.9", "16.1", "–"]
    means = geomeans(lines)
    assert means["T ≤ 64"] == ["1.500", "1.200"]
    assert means["T ≥ 512"] == ["0.800", "0.800"]
    assert means["all"] == [f"{1.2 ** 0.5:.3f}", f"{0.96 ** 0.5:.3f}"]
    assert "- Solo T = 4: 25.0 µs" in lines
    assert ("- M T = 1024: no align 500.0 µs against 400.0 whole (+25.0%); "
            "all four steps by the span's loop 410.0 µs") in lines
    assert not any(x.startswith("- M T = 4: no align") for x in lines)
    assert "| M | 1024 | 2000 | 600 |" in lines
    assert "SGLang's own checks against its reference: 1 passed, 1 failed; M T = 64 failed." in lines


def test_a_run_without_ours_or_sglang_is_refused(tmp_path):
    records = made_up_run()
    only_sglang = write(tmp_path, [r for r in records if isinstance(r, str) or "us_served" not in r], "sg.jsonl")
    out = run(only_sglang)
    assert out.returncode == 2
    assert str(only_sglang) in out.stderr and "no records of ours" in out.stderr
    only_ours = write(tmp_path, [r for r in records if isinstance(r, str) or "us_graph" not in r], "ours.jsonl")
    out = run(only_ours)
    assert out.returncode == 2
    assert str(only_ours) in out.stderr and "SGLang" in out.stderr


def test_a_broken_line_is_named(tmp_path):
    path = write(tmp_path, made_up_run()[:3] + ['{"model": "M", "T": 16, "us_served": 1.0\n'])
    out = run(path)
    assert out.returncode == 2
    assert f"{path}:4:" in out.stderr
    path = write(tmp_path, [ours("M", 4, 110.0, 100.0, 2), {"model": "M", "T": 4, "us_graph": 150.0}])
    out = run(path)
    assert out.returncode == 2
    assert f"{path}:2:" in out.stderr and "topk" in out.stderr
