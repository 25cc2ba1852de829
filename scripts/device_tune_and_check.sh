#!/usr/bin/env bash
# On the GPU machine: correctness of every config (GPU tests), then the sm90 tables
# for softmax, rmsnorm and fused_add_rmsnorm with `kernels tune`. Expects the release
# binaries in .device-bin/ (kernels, gpu_kernels); writes logs and tables under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kernels-cache KERNELS_REQUIRE_GPU=1
B=.device-bin
mkdir -p "$OUT/tables"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.txt"
$B/kernels info | tee -a "$OUT/device.txt"
( time $B/gpu_kernels --test-threads=1 --nocapture ) > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?"; grep -E "test result|checked|FAILED|panicked" "$OUT/gpu_tests.log" | head -20
for k in ${TUNE_KERNELS:-rmsnorm fused_add_rmsnorm softmax}; do
  ( time $B/kernels tune "$k" --shapes "tuned/shapes/$k.json" --tables "$OUT/tables" ${TUNE_FLAGS:-} ) > "$OUT/tune_$k.log" 2>&1
  echo "tune $k exit $?"; tail -3 "$OUT/tune_$k.log"
done
ls -R "$OUT/tables"
