#!/usr/bin/env bash
# Every GPU test, and the check of every served variant against the reference, on an
# NVIDIA GPU: one command with an honest exit status. Run from the repository root
# with the binaries scripts/build_device_bin.sh put in .device-bin/ (the GPU machine
# needs no Rust toolchain):
#
#   bash scripts/gpu_tests.sh                 # everything
#   bash scripts/gpu_tests.sh gpu_softmax     # one test binary (or a `served` step)
#
#   gpu_core      kernels-core/tests/gpu.rs      runtime, caches, tuner, capture
#   gpu_softmax   kernels-softmax/tests/gpu.rs   every config, ops, PDL, the 1% check
#   gpu_rmsnorm   kernels-rmsnorm/tests/gpu.rs   every config, ops, online tuning, PDL
#   gpu_gemm      kernels-gemm/tests/gpu.rs      GEMM against its reference
#   gpu_moe       kernels-moe/tests/gpu.rs       routing, alignment and fused MoE against theirs
#   served        `kernels tables check --served`: every variant the committed tables
#                 and the analytic defaults serve, on its exact static key, against
#                 the CPU reference: softmax, rmsnorm and fused_add_rmsnorm, one run each
#   served-gemm   the same for GEMM (a few minutes: weights up to 1 GB)
#   served-moe    the same for fused MoE
#
# GPU_TESTS_BIN and GPU_TESTS_SHAPES name other folders for the binaries and the shape
# sets; GPU_TESTS_ONLY (an extended regular expression) runs only the tests whose
# names match it. Each test runs in its own process (one at a time, so timings in the tuner tests are
# not disturbed) with KERNELS_REQUIRE_GPU=1: a test that finds no GPU, or cannot test
# what it is for (programmatic dependent launch below sm_90), fails instead of
# skipping. Logs go to $OUT/gpu-tests/ when OUT is set, else to a temporary folder.
# The last lines are a table of every test and its result; the exit status is 0 only
# when every one passed.
set -uo pipefail
cd "$(dirname "$0")/.."

B=${GPU_TESTS_BIN:-.device-bin}
SHAPES=${GPU_TESTS_SHAPES:-tuned/shapes}
LOGS=${OUT:+$OUT/gpu-tests}
LOGS=${LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"
export KERNELS_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# A fresh module and tuning cache: nothing compiled or measured elsewhere is reused.
KERNELS_CACHE_DIR=$(mktemp -d)
export KERNELS_CACHE_DIR
# The defaults an engine gets: serve from the baked tables, plain launches.
unset KERNELS_TUNING KERNELS_PDL

SELECTED=("$@")
[ ${#SELECTED[@]} -gt 0 ] || SELECTED=(gpu_core gpu_softmax gpu_rmsnorm gpu_gemm gpu_moe served served-gemm served-moe)

results=()
failed=0
passed=0

# record NAME RC LOG: one line of the summary.
record() {
    local verdict=pass
    if [ "$2" != 0 ]; then
        verdict="FAIL (exit $2)"
    elif grep -q '^SKIPPED' "$3"; then
        # KERNELS_REQUIRE_GPU=1 turns skips into failures; a skip here is a harness bug.
        verdict="FAIL (skipped)"
    fi
    if [ "$verdict" = pass ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        tail -n 15 "$3" | sed "s/^/  $1: /" >&2
    fi
    results+=("$(printf '%-72s %s' "$1" "$verdict")")
    echo "$1: $verdict"
}

for bin in "${SELECTED[@]}"; do
    case "$bin" in
        served) kernels=(softmax rmsnorm fused_add_rmsnorm) ;;
        served-gemm) kernels=(gemm) ;;
        served-moe) kernels=(moe) ;;
        *) kernels=() ;;
    esac
    if [ ${#kernels[@]} -gt 0 ]; then
        if [ ! -x "$B/kernels" ]; then
            record "$bin: $B/kernels missing (scripts/build_device_bin.sh)" 127 /dev/null
            continue
        fi
        for kernel in "${kernels[@]}"; do
            log="$LOGS/served-$kernel.log"
            rc=0
            timeout 600 "$B/kernels" tables check --served --kernel "$kernel" --shapes "$SHAPES" > "$log" 2>&1 || rc=$?
            tail -n 1 "$log"
            record "served $kernel variants (kernels tables check --served --kernel $kernel)" "$rc" "$log"
        done
        continue
    fi
    if [ ! -x "$B/$bin" ]; then
        record "$bin: $B/$bin missing (scripts/build_device_bin.sh)" 127 /dev/null
        continue
    fi
    tests=$("$B/$bin" --list 2>/dev/null | sed -n 's/: test$//p' | grep -E "${GPU_TESTS_ONLY:-.}")
    if [ -z "$tests" ]; then
        record "$bin: lists no tests" 1 /dev/null
        continue
    fi
    for t in $tests; do
        limit=180
        case $t in *every_config*) limit=400 ;; esac
        log="$LOGS/$bin-$t.log"
        rc=0
        timeout "$limit" "$B/$bin" --exact "$t" --nocapture --test-threads=1 > "$log" 2>&1 || rc=$?
        record "$bin $t" "$rc" "$log"
    done
done

echo
echo "== GPU tests: $passed passed, $failed failed (logs in $LOGS)"
printf '%s\n' "${results[@]}"
[ "$failed" = 0 ]
