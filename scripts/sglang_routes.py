#!/usr/bin/env python3
"""Runs SGLang's fused-MoE bench (sglang_moe_bench.py from ../shared/peers, found on
PYTHONPATH) as it is, and writes the expert ids of every routing it times to a file, so that
moe_bench times the very same routings (`MOE_BENCH_ROUTES=<file>`).

Both benches draw uniform routings of their own otherwise; with four routings a shape the
number of active experts, which sets the bytes a decode step streams, differs between the two
by a few percent (Qwen3-30B-A3B at T = 16: 80.5 against 83.75 experts in one run), which is as
large as the differences being measured.

    PYTHONPATH=DEST:../shared/peers python3 scripts/sglang_routes.py --routes-out ROUTES [bench arguments...]

(DEST from ../shared/peers/fetch_sglang_moe.sh; `scripts/build_device_bin.sh` puts the bench
beside it in .device-bin/sglang, so there PYTHONPATH=.device-bin/sglang suffices.)

The bench's own output (JSON lines on stdout) is unchanged: the recording wraps its routing
function without drawing any random numbers. ROUTES holds one line per routing, in the order
drawn: `<model> <T> <routing index> <T * topk expert ids, token-major>`.
"""
import os
import sys


def main():
    args = sys.argv[1:]
    if "--routes-out" not in args or args.index("--routes-out") + 1 >= len(args):
        sys.exit("usage: sglang_routes.py --routes-out ROUTES [sglang_moe_bench.py arguments...]")
    i = args.index("--routes-out")
    out_path = args[i + 1]
    del args[i:i + 2]

    import sglang_moe_bench as bench

    # The bench's routing function knows E and topk, not the model: map them back, and refuse
    # a model list where two models share them.
    names = {}
    for name, experts, topk, *_ in bench.MODELS:
        if (experts, topk) in names:
            sys.exit(f"models {names[(experts, topk)]} and {name} share E = {experts}, topk = {topk}: "
                     "their routings cannot be told apart")
        names[(experts, topk)] = name
    drawn = {}
    lines = []
    route = bench.route

    def recording_route(tokens, experts, topk):
        weights, ids = route(tokens, experts, topk)
        model = names[(experts, topk)]
        index = drawn.get((model, tokens), 0)
        drawn[(model, tokens)] = index + 1
        flat = ids.flatten().tolist()
        lines.append(f"{model} {tokens} {index} " + " ".join(map(str, flat)) + "\n")
        return weights, ids

    bench.route = recording_route
    sys.argv = [bench.__file__] + args
    bench.main()
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(lines)
    os.replace(tmp, out_path)
    print(f"recorded {len(lines)} routings in {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
