#!/usr/bin/env bash
# On the GPU machine (session 4, first call): the pipelined softmax's correctness over
# every softmax config, a tune of the vocabulary and large shapes keeping every
# candidate (top candidates printed), then every other GPU test; all in $OUT/s4.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/s4; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
( time timeout 200 $B/gpu_kernels --exact softmax_every_config_matches_reference --nocapture ) > $R/test-softmax.log 2>&1
echo "softmax test exit $?"; tail -n 12 $R/test-softmax.log
tar czf "$OUT/s4.tgz" -C $R .
cp -r tuned/tables /tmp/tables
( time timeout 200 $B/kernels tune softmax --shapes scripts/exp_shapes.json --tables /tmp/tables --retune ) > $R/tune.log 2>&1
echo "tune exit $?"; grep -E "tuned|cached" $R/tune.log | tail -n 12
python3 scripts/tune_records_top.py /tmp/kc --top 6 > $R/top.txt 2>&1; cat $R/top.txt
tar czf "$OUT/s4.tgz" -C $R .
for bin in gpu_core gpu_kernels; do
  for t in $($B/$bin --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
    [ "$t" = softmax_every_config_matches_reference ] && continue
    timeout 150 $B/$bin --exact "$t" --nocapture --test-threads=1 > $R/$bin-$t.log 2>&1
    echo "$bin $t exit $?"
  done
done
grep -h "runs checked" $R/*.log
tar czf "$OUT/s4.tgz" -C $R .
