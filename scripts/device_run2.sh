#!/usr/bin/env bash
# On the GPU machine: correctness of every softmax config, then retune the three sm90
# tables into $OUT/r/tables; logs, tables and tuning records come back as one archive.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/r; mkdir -p $R/tables; cp -r tuned/tables/. $R/tables/
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
for t in ${TESTS:-softmax_every_config_matches_reference in_place_softmax_and_safe_ops}; do
  ( time $B/gpu_kernels --exact "$t" --nocapture ) > "$R/test_$t.log" 2>&1
  echo "test $t exit $?"; grep -E "test result|checked|FAILED|panicked" "$R/test_$t.log" | head -5
done
for k in ${TUNE_KERNELS:-rmsnorm fused_add_rmsnorm softmax}; do
  ( time $B/kernels tune "$k" --shapes "tuned/shapes/$k.json" --tables $R/tables --reps 15 --retune ) > "$R/tune_$k.log" 2>&1
  echo "tune $k exit $?"; tail -4 "$R/tune_$k.log"
done
cp -r /tmp/kc/v1/tuning $R/records 2>/dev/null
tar czf "$OUT/run.tgz" -C $R .
