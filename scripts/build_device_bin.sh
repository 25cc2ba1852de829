#!/usr/bin/env bash
# Builds the release binaries scripts/gpu_tests.sh and scripts/h200_bench.sh run on the
# GPU machine and copies them into .device-bin/ (git-ignored). Runs on any Linux machine
# with the Rust toolchain: the binaries load the CUDA driver and NVRTC at run time, so
# no CUDA install is needed here.
#
#   .device-bin/kernels        the CLI (`kernels tables check`, `--served`)
#                              cargo build --release -p kernels
#   .device-bin/gpu_core       kernels-core's GPU tests (kernels-core/tests/gpu.rs)
#                              cargo test --release --no-run -p kernels-core --test gpu
#   .device-bin/gpu_softmax    softmax's GPU tests (kernels-softmax/tests/gpu.rs)
#                              cargo test --release --no-run -p kernels-softmax --test gpu
#   .device-bin/gpu_rmsnorm    RMSNorm's GPU tests (kernels-rmsnorm/tests/gpu.rs)
#                              cargo test --release --no-run -p kernels-rmsnorm --test gpu
#   .device-bin/gpu_gemm       GEMM's GPU tests (kernels-gemm/tests/gpu.rs)
#                              cargo test --release --no-run -p kernels-gemm --test gpu
#   .device-bin/gpu_moe        fused MoE's GPU tests (kernels-moe/tests/gpu.rs)
#                              cargo test --release --no-run -p kernels-moe --test gpu
#   .device-bin/bench_kernels  the criterion GPU bench (benches/benches/kernels.rs)
#                              cargo bench --no-run -p benches --bench kernels
#   .device-bin/bench_overhead host overhead per call (benches/benches/overhead.rs)
#   .device-bin/bench_gemm     GEMM against the bench's shapes (benches/benches/gemm.rs)
#   .device-bin/moe_bench      fused MoE per layer (kernels-moe/examples/moe_bench.rs)
#   .device-bin/sglang/        SGLang's fused-MoE peer and its bench, where
#                              ../shared/peers/ is present (fetched from the package
#                              index by its own script; git-ignored, never committed)
#
# The tables are baked into these binaries, so build from the commit whose tables the
# results are for. TUNED_STRICT=1 (the default here, as in CI) makes a table whose
# fingerprint does not match its kernel source fail the build instead of warning.
# CARGO_TARGET_DIR is honoured; BUILD_BENCH=0 leaves out the bench (what
# scripts/gpu_tests.sh alone does not need). Usage, from anywhere in the repository:
#
#   bash scripts/build_device_bin.sh
set -euo pipefail
cd "$(dirname "$0")/.."

export TUNED_STRICT="${TUNED_STRICT:-1}"
DEST=.device-bin
mkdir -p "$DEST"

# The executable cargo built for target NAME of kind KIND (bin, test, bench), read from
# its JSON messages on stdin; fails when there is none.
executable() {
    python3 -c '
import json, sys
name, kind = sys.argv[1], sys.argv[2]
found = []
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and t.get("name") == name and kind in t.get("kind", []) and m.get("executable"):
        found.append(m["executable"])
if not found:
    sys.exit(f"build_device_bin: cargo reported no {kind} executable named {name}")
print(found[-1])
' "$1" "$2"
}

# build DEST_NAME TARGET_NAME KIND CARGO_ARGS...: runs cargo, copies the executable.
build() {
    local dest=$1 name=$2 kind=$3
    shift 3
    echo "== cargo $* -> $DEST/$dest"
    local exe
    exe=$(cargo "$@" --message-format=json-render-diagnostics | executable "$name" "$kind")
    cp "$exe" "$DEST/$dest"
}

build kernels kernels bin build --release -p kernels
build gpu_core gpu test test --release --no-run -p kernels-core --test gpu
build gpu_softmax gpu test test --release --no-run -p kernels-softmax --test gpu
build gpu_rmsnorm gpu test test --release --no-run -p kernels-rmsnorm --test gpu
build gpu_gemm gpu test test --release --no-run -p kernels-gemm --test gpu
build gpu_moe gpu test test --release --no-run -p kernels-moe --test gpu
if [ "${BUILD_BENCH:-1}" != 0 ]; then
    build bench_kernels kernels bench bench --no-run -p benches --bench kernels
    build bench_overhead overhead bench bench --no-run -p benches --bench overhead
    build bench_gemm gemm bench bench --no-run -p benches --bench gemm
    build moe_bench moe_bench example build --release -p kernels-moe --example moe_bench
    peers=../shared/peers
    if [ -x "$peers/fetch_sglang_moe.sh" ] && [ ! -d "$DEST/sglang/sglang" ]; then
        bash "$peers/fetch_sglang_moe.sh" "$DEST/sglang" || echo "note: the SGLang peer was not fetched" >&2
    fi
    [ -f "$peers/sglang_moe_bench.py" ] && [ -d "$DEST/sglang" ] && cp "$peers/sglang_moe_bench.py" "$DEST/sglang/"
fi

# The commit the binaries were built from (with "-dirty" when tracked files differed), for
# the results' records: the GPU machine's copy of the tree may not carry the git history.
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
echo "$commit" > "$DEST/COMMIT"
ls -l "$DEST"
if ! ls .whl/liger_kernel-*.whl >/dev/null 2>&1; then
    echo "note: no Liger wheel in .whl/; the peers step of scripts/h200_bench.sh needs one" \
        "(python3 -m pip download --no-deps -d .whl liger-kernel==0.8.5) where the GPU machine has no network" >&2
fi
