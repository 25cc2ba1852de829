#!/usr/bin/env bash
# On the GPU machine (session 3): retune the three sm90 tables with graph timing
# (`kernels tune`'s default), then the kernels-core GPU tests one process each; the
# tables, logs and tuning records come back in $OUT/tune.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/s3; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
cp -r tuned/tables $R/tables
pack() { cp -r /tmp/kc/v1/tuning $R/ 2>/dev/null; tar czf "$OUT/tune.tgz" -C $R . ; }
for k in softmax rmsnorm fused_add_rmsnorm; do
  ( time timeout 170 $B/kernels tune $k --shapes tuned/shapes/$k.json --tables $R/tables --retune ) > $R/tune-$k.log 2>&1
  echo "tune $k exit $?"; tail -n 4 $R/tune-$k.log
  pack
done
for t in $($B/gpu_core --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
  timeout 120 $B/gpu_core --exact "$t" --nocapture --test-threads=1 > $R/core-$t.log 2>&1
  echo "core $t exit $?"
done
pack
