#!/usr/bin/env bash
# On the GPU machine, from the repository root, after scripts/build_bind_bin.sh has
# filled .bind-bin/ (carried there): installs the wheel, runs the C program, the
# host-overhead timing, then every Python test (GPU ones required). Logs and the
# timing JSON go to $OUT. Exit status: non-zero when any step failed.
#
#   OUT=<folder> bash scripts/bind_device.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder for logs}"
REPO=$PWD
# NVRTC from the CUDA toolkit.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KERNELS_REQUIRE_GPU=1 PYTHONUNBUFFERED=1 KERNELS_CACHE_DIR=/tmp/kernels-cache

python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .bind-bin/llm_kernels-*.whl \
    || python3 -m zipfile -e .bind-bin/llm_kernels-*.whl /tmp/site || exit 1
export PYTHONPATH=/tmp/site
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    cat .bind-bin/COMMIT
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

status=0
echo "== C program"
.bind-bin/capi_check 2>&1 | tee "$OUT/capi_check.log" || status=1
echo "== host overhead"
python3 kernels-py/bench/overhead.py "$OUT/overhead.json" 2>&1 | tee "$OUT/overhead.log" || status=1
echo "== pytest kernels-py/tests"
(cd /tmp && timeout 420 python3 -m pytest -p no:cacheprovider -v -rs "$REPO/kernels-py/tests") 2>&1 | tee "$OUT/pytest.log" || status=1
exit $status
