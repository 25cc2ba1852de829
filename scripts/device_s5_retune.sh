#!/usr/bin/env bash
# On the GPU machine (session 5): after the instruction-count changes to the prelude
# (bf16 pairs unpacked through their word) and softmax.cu (packed max, the sum folded
# into the exponent), every table's fingerprint changed.
#   KS="softmax" (default): first the softmax and RMSNorm every-config GPU tests (no
#   tuning if softmax fails), then each kernel of KS tuned again over its shape file;
#   TESTS=rest instead runs every other GPU test (gpu_kernels and gpu_core).
# Tables, logs and tuning records in $OUT/rt.tgz after each step.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/rt; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
cp -r tuned/tables $R/tables
pack() { cp -r /tmp/kc/v1/tuning $R/ 2>/dev/null; tar czf "$OUT/rt.tgz" -C $R . ; }
if [ "${TESTS:-every}" = every ]; then
  for t in softmax_every_config_matches_reference rmsnorm_every_config_matches_reference; do
    ( time timeout 280 $B/gpu_kernels --exact $t --nocapture ) > $R/gpu_kernels-$t.log 2>&1
    rc=$?; echo "$t exit $rc"; grep -E "checked|test result|^real" $R/gpu_kernels-$t.log
    pack
    [ $t = softmax_every_config_matches_reference ] && [ $rc != 0 ] && exit 1
  done
else
  for bin in gpu_kernels gpu_core; do
    for t in $($B/$bin --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
      case $t in *every_config*) continue;; esac
      timeout 60 $B/$bin --exact "$t" --nocapture --test-threads=1 > $R/$bin-$t.log 2>&1
      echo "$bin $t exit $?"
    done
  done
  pack
fi
for k in ${KS:-softmax}; do
  lim=150; [ $k = softmax ] && lim=320
  ( time timeout $lim $B/kernels tune $k --shapes tuned/shapes/$k.json --tables $R/tables ) > $R/tune-$k.log 2>&1
  echo "$k tune exit $?"; tail -n 4 $R/tune-$k.log
  pack
done
