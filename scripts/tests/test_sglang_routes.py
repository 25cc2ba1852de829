"""scripts/sglang_routes.py against a stand-in for SGLang's bench (GPU-free): the routings it
records are the ones the bench drew, in order and in the line format moe_bench reads, and the
bench's own output is unchanged."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "sglang_routes.py")

STAND_IN = textwrap.dedent('''
    import json, random, sys
    MODELS = {models}

    class Ids:
        def __init__(self, rows): self.rows = rows
        def flatten(self): return self
        def tolist(self): return [x for r in self.rows for x in r]

    def route(tokens, experts, topk):
        rows = [random.sample(range(experts), topk) for _ in range(tokens)]
        print(json.dumps({{"drew": rows}}))
        return None, Ids(rows)

    def main():
        print(json.dumps({{"args": sys.argv[1:]}}))
        for name, experts, topk, *_ in MODELS:
            for t in (1, 3):
                for _ in range(2):
                    route(t, experts, topk)
''')


def run(tmp_path, models, *args):
    (tmp_path / "sglang_moe_bench.py").write_text(STAND_IN.format(models=models))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True)


def test_records_each_drawn_routing_in_order(tmp_path):
    routes = tmp_path / "routes.txt"
    models = '[("Mixtral-8x7B", 8, 2, 4096, 14336), ("Qwen3-30B-A3B", 128, 8, 2048, 768)]'
    r = run(tmp_path, models, "--routes-out", str(routes), "--tokens", "1,3")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == '{"args": ["--tokens", "1,3"]}', "the bench gets its own arguments"
    drawn = [json.loads(line)["drew"] for line in out[1:]]
    lines = routes.read_text().splitlines()
    assert len(lines) == len(drawn) == 8
    expect = []
    for name, topk in (("Mixtral-8x7B", 2), ("Qwen3-30B-A3B", 8)):
        for t in (1, 3):
            for index in range(2):
                expect.append((name, t, index))
    for line, rows, (name, t, index) in zip(lines, drawn, expect):
        fields = line.split()
        assert fields[:3] == [name, str(t), str(index)]
        assert [int(x) for x in fields[3:]] == [x for row in rows for x in row]


def test_refuses_models_it_cannot_tell_apart(tmp_path):
    models = '[("A", 8, 2, 64, 64), ("B", 8, 2, 32, 32)]'
    r = run(tmp_path, models, "--routes-out", str(tmp_path / "r.txt"))
    assert r.returncode != 0
    assert "share E = 8, topk = 2" in r.stderr
    assert not (tmp_path / "r.txt").exists()


@pytest.mark.parametrize("args", [[], ["--routes-out"]])
def test_needs_a_routes_file(tmp_path, args):
    r = run(tmp_path, "[]", *args)
    assert r.returncode != 0 and "usage" in r.stderr
