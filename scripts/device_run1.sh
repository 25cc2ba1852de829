#!/usr/bin/env bash
# On the GPU machine: correctness of every config, then retune the three sm90 tables
# into $OUT/tables and keep the tuning records (every candidate's time) for analysis.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
mkdir -p "$OUT/tables"
cp -r tuned/tables/. "$OUT/tables/"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt"
for t in rmsnorm_every_config_matches_reference softmax_every_config_matches_reference \
         in_place_softmax_and_safe_ops fused_add_rmsnorm_tuned_online_leaves_one_plain_run; do
  ( time $B/gpu_kernels --exact "$t" --nocapture ) > "$OUT/test_$t.log" 2>&1
  echo "test $t exit $?"; grep -E "test result|checked|FAILED|panicked" "$OUT/test_$t.log" | head -5
done
for k in ${TUNE_KERNELS:-rmsnorm fused_add_rmsnorm softmax}; do
  ( time $B/kernels tune "$k" --shapes "tuned/shapes/$k.json" --tables "$OUT/tables" --reps 15 --retune ) > "$OUT/tune_$k.log" 2>&1
  echo "tune $k exit $?"; tail -4 "$OUT/tune_$k.log"
done
tar czf "$OUT/tuning-records.tgz" -C /tmp/kc tuning
