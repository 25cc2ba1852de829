#!/usr/bin/env bash
# On the GPU machine (session 4): the staged softmax with the L2 prefetch of the next
# wave's row. The vocabulary shapes first (a quick look), then the whole softmax table
# (resuming from those records), then every GPU test, one process each; the table,
# logs and tuning records in $OUT/rt.tgz after each step.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/rt; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
cp -r tuned/tables $R/tables
pack() { cp -r /tmp/kc/v1/tuning $R/ 2>/dev/null; tar czf "$OUT/rt.tgz" -C $R . ; }
( time timeout 70 $B/kernels tune softmax --shapes scripts/exp_occ_shapes.json --tables $R/tables ) > $R/tune-vocab.log 2>&1
echo "vocab tune exit $?"; grep -E "tuned|cached" $R/tune-vocab.log
pack
( time timeout 330 $B/kernels tune softmax --shapes tuned/shapes/softmax.json --tables $R/tables ) > $R/tune-softmax.log 2>&1
echo "softmax tune exit $?"; tail -n 5 $R/tune-softmax.log
pack
( time timeout 150 $B/gpu_kernels --exact softmax_every_config_matches_reference --nocapture ) > $R/kernels-softmax.log 2>&1
echo "softmax test exit $?"; grep -E "checked|test result" $R/kernels-softmax.log
pack
for bin in gpu_kernels gpu_core; do
  for t in $($B/$bin --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
    [ "$t" = softmax_every_config_matches_reference ] && continue
    timeout 60 $B/$bin --exact "$t" --nocapture --test-threads=1 > $R/$bin-$t.log 2>&1
    echo "$bin $t exit $?"
  done
done
grep -h "runs checked" $R/*.log
pack
