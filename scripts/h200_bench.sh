#!/usr/bin/env bash
# Produces the results of docs/results/{softmax,rmsnorm}.md and docs/report/h200.md on a
# GPU machine. Run from the repository root with the binaries scripts/build_device_bin.sh
# put in .device-bin/, and torch (with Triton) installed; Liger comes from a wheel in
# .whl/ (installed into a temporary folder, no network needed). Everything is written
# under $OUT:
#
#   device.txt                GPU, driver and clocks (nvidia-smi), the binaries' commit
#   gpu-tests/*.log           step `tests`: scripts/gpu_tests.sh, every GPU test (one
#                             process each, KERNELS_REQUIRE_GPU=1: a skip is a failure)
#                             and every served variant against the reference
#   bench.log, ours.jsonl     step `bench`: the criterion bench of our kernels over
#                             benches/shapes/norm_softmax.json: tuned config, analytic
#                             default, a copy kernel moving the same bytes, the tuned config
#                             with programmatic dependent launch, empty kernels, and the
#                             1 GiB device-to-device copy bandwidth the ratios use
#   peers.log, peers.jsonl    step `peers`: torch eager, torch.compile and Liger on the same
#                             shapes, and the driver's copy of each shape's bytes
#                             (scripts/peers_bench.py)
#   tables-check.log          step `check`: every committed table entry re-measured on the
#                             GPU against the analytic default and a quick search
#                             (`kernels tables check`; fails beyond 10%)
#   h200.jsonl, report.md,    step `report`: ours.jsonl and peers.jsonl of this run in one
#   report/h200-*.png         file, and the results table and plots scripts/report.py makes
#                             of it (the plots need matplotlib)
#   overhead.jsonl            step `overhead`: each op's eager per-call cost against a bare
#                             cuLaunchKernel (benches/benches/overhead.rs)
#   gemm-h200.jsonl           step `gemm`: our GEMM and cuBLAS on the same buffers
#                             (benches/benches/gemm.rs; `source` "cublas", `agree` records)
#                             and cuBLAS through torch (scripts/gemm_peers.py), one file
#   moe-h200.jsonl            step `moe`: fused MoE per layer (kernels-moe's moe_bench),
#                             SGLang's Triton kernel (its bench, carried in .device-bin/sglang,
#                             run first: moe-routes.txt records its routings and moe_bench
#                             times the same ones)
#                             and the reference points of scripts/moe_refs.py (a torch loop
#                             over the experts, cuBLAS on dense GEMMs of the same FLOPs);
#                             moe-report.md: the tables of docs/results/moe.md made of it
#                             (scripts/moe_report.py)
#   defaults-check.log        step `defaults` (not in the default steps: it searches every
#                             shape): the analytic default against the best config found on
#                             shapes no table holds (`kernels tables check --defaults
#                             tuned/shapes/defaults --finalists 6`: each search screened, the
#                             6 fastest timed in full; fails beyond 5%; a row is printed as
#                             each search ends). DEFAULTS_KERNEL=softmax (or rmsnorm,
#                             fused_add_rmsnorm) checks one kernel's shapes.
#
# STEPS picks the steps, run in the order given (default: tests bench peers check
# report; overhead, gemm, moe and defaults run when named). The
# bench and the peers belong in one run (the table compares them, and the ratios use
# this run's copy bandwidth); the report step reads $OUT/ours.jsonl and
# $OUT/peers.jsonl. On H200 the steps take about 5 (tests), 3.5 (bench), 2 (peers) and
# 2 (check) minutes; where one command may run 10 minutes, split them:
#
#   STEPS=tests bash scripts/h200_bench.sh
#   STEPS="bench peers check report" bash scripts/h200_bench.sh
#
# To update the committed results: copy $OUT/h200.jsonl to docs/results/h200.jsonl and
# $OUT/report/*.png to docs/report/, put $OUT/report.md's table into docs/report/h200.md,
# and update the figures in docs/results/softmax.md and rmsnorm.md.
#
# The script stops at the first step that fails, with a non-zero exit status; the tests
# step (scripts/gpu_tests.sh) runs every test first and then fails naming the ones that
# failed, so nothing is benchmarked on device code that gives wrong results.
set -euo pipefail

OUT=${OUT:?set OUT to the folder the results go to}
B=.device-bin
STEPS=${STEPS:-tests bench peers check report}

die() {
    echo "h200_bench: $*" >&2
    exit 1
}

[ -f scripts/peers_bench.py ] || die "run from the repository root"
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KERNELS_REQUIRE_GPU=1
# A fresh module and tuning cache: nothing compiled or measured elsewhere is reused.
KERNELS_CACHE_DIR=$(mktemp -d)
export KERNELS_CACHE_DIR
# The defaults an engine gets: serve from the baked tables, plain launches (the bench
# measures programmatic dependent launch through its own runtime).
unset KERNELS_TUNING KERNELS_PDL

need() {
    for bin in "$@"; do
        [ -x "$B/$bin" ] || die "$B/$bin is missing: run scripts/build_device_bin.sh first"
    done
}

# run NAME LIMIT CMD...: CMD with a time limit (seconds), output in $OUT/NAME.log; on
# failure prints the log's tail and stops the script.
run() {
    local name=$1 limit=$2
    shift 2
    local rc=0 start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
    echo "$name: exit $rc after $((SECONDS - start)) s"
    if [ "$rc" != 0 ]; then
        tail -n 20 "$OUT/$name.log" >&2
        [ "$rc" = 124 ] && die "$name ran past its $limit s limit ($OUT/$name.log)"
        die "$name failed with exit status $rc ($OUT/$name.log)"
    fi
    tail -n 4 "$OUT/$name.log"
}

# has FILE KIND: whether the JSON lines FILE holds a record of that kind.
has() {
    [ -s "$1" ] && grep -q "\"kind\": *\"$2\"" "$1"
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv \
    > "$OUT/device.txt" || die "nvidia-smi failed: no NVIDIA GPU here?"
# The binaries' commit (scripts/build_device_bin.sh records it); the tree's own HEAD only where
# they carry no record, since a copied tree may not carry its git history.
if [ -s "$B/COMMIT" ]; then
    echo "binaries built at commit $(cat "$B/COMMIT")" >> "$OUT/device.txt"
elif commit=$(git rev-parse HEAD 2>/dev/null); then
    echo "commit $commit (the tree; the binaries carry no record)" >> "$OUT/device.txt"
fi
cat "$OUT/device.txt"

for step in $STEPS; do
    echo "== $step"
    case $step in
        tests)
            need gpu_core gpu_softmax gpu_rmsnorm gpu_gemm kernels
            # Every GPU test and the served-variant check, one process per test; a
            # failure or a skip stops the script before anything is benchmarked.
            OUT="$OUT" bash scripts/gpu_tests.sh || die "GPU tests failed (logs in $OUT/gpu-tests)"
            ;;
        bench)
            need bench_kernels
            rm -f "$OUT/ours.jsonl"
            KERNELS_BENCH_OUT="$OUT/ours.jsonl" run bench 600 "$B/bench_kernels" --bench
            # Without a GPU the bench says so and exits 0: insist on its records.
            has "$OUT/ours.jsonl" ours || die "the bench wrote no results to $OUT/ours.jsonl (see $OUT/bench.log)"
            ;;
        peers)
            site=$(mktemp -d)
            if ls .whl/*.whl >/dev/null 2>&1; then
                python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
                    --target "$site" .whl/*.whl || die "installing the wheels of .whl/ failed"
            fi
            PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" python3 -c "import torch, liger_kernel" ||
                die "peers need torch and liger_kernel (put liger-kernel 0.8.5's wheel in .whl/)"
            PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" \
                run peers 400 python3 scripts/peers_bench.py --out "$OUT/peers.jsonl"
            has "$OUT/peers.jsonl" peer || die "no peer results in $OUT/peers.jsonl"
            ;;
        check)
            need kernels
            run tables-check 400 "$B/kernels" tables check --sample 6
            ;;
        overhead)
            need bench_overhead
            KERNELS_BENCH_OUT="$OUT/overhead.jsonl" run overhead 300 "$B/bench_overhead"
            has "$OUT/overhead.jsonl" overhead || die "the overhead bench wrote no results"
            ;;
        gemm)
            need bench_gemm
            rm -f "$OUT/gemm-ours.jsonl"
            KERNELS_BENCH_OUT="$OUT/gemm-ours.jsonl" run gemm 600 "$B/bench_gemm"
            run gemm-peers 600 python3 scripts/gemm_peers.py --out "$OUT/gemm-cublas.jsonl"
            cat "$OUT/gemm-ours.jsonl" "$OUT/gemm-cublas.jsonl" > "$OUT/gemm-h200.jsonl"
            ;;
        moe)
            need moe_bench
            [ -f "$B/sglang/sglang_moe_bench.py" ] ||
                die "the MoE peer is missing: scripts/build_device_bin.sh fetches it into $B/sglang where ../shared/peers exists"
            # SGLang's bench first, its routings recorded, then ours on the same routings
            # (the shapes SGLang runs; DeepSeek-V3-tp8 draws its own).
            PYTHONPATH="$B/sglang" run moe-peers 600 sh -c \
                "python3 scripts/sglang_routes.py --routes-out \"$OUT/moe-routes.txt\" --tokens 1,16,64,512,2048,8192 > \"$OUT/moe-sglang.jsonl\""
            MOE_BENCH_ROUTES="$OUT/moe-routes.txt" run moe 600 sh -c \
                "\"$B/moe_bench\" 1,16,64,512,2048,8192 > \"$OUT/moe-ours.jsonl\""
            run moe-refs 600 sh -c \
                "python3 scripts/moe_refs.py --tokens 1,16,64,512,2048,8192 > \"$OUT/moe-refs.jsonl\""
            cat "$OUT/moe-ours.jsonl" "$OUT/moe-sglang.jsonl" "$OUT/moe-refs.jsonl" > "$OUT/moe-h200.jsonl"
            python3 scripts/moe_report.py "$OUT/moe-h200.jsonl" > "$OUT/moe-report.md" ||
                die "scripts/moe_report.py could not tabulate $OUT/moe-h200.jsonl"
            cat "$OUT/moe-report.md"
            ;;
        defaults)
            need kernels
            run defaults-check 1800 "$B/kernels" tables check --defaults tuned/shapes/defaults --finalists 6 \
                ${DEFAULTS_KERNEL:+--kernel "$DEFAULTS_KERNEL"}
            ;;
        report)
            [ -s "$OUT/ours.jsonl" ] && [ -s "$OUT/peers.jsonl" ] ||
                die "report needs the bench's and the peers' results of one run in $OUT (steps bench and peers)"
            cat "$OUT/ours.jsonl" "$OUT/peers.jsonl" > "$OUT/h200.jsonl"
            python3 scripts/report.py "$OUT/h200.jsonl" > "$OUT/report.md"
            cat "$OUT/report.md"
            python3 scripts/report.py "$OUT/h200.jsonl" --png "$OUT/report" > /dev/null ||
                die "the plots need matplotlib; the table is in $OUT/report.md" \
                    "(elsewhere: python3 scripts/report.py h200.jsonl --png docs/report)"
            ;;
        *)
            die "unknown step $step (steps: tests bench peers check report overhead gemm moe defaults)"
            ;;
    esac
done
echo "h200_bench: done ($STEPS); results in $OUT"
