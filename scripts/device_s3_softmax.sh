#!/usr/bin/env bash
# On the GPU machine (session 3, second call): finish the softmax retune (resumed from
# the tuning records of the first call, carried in .device-bin/kc), then the kernel
# GPU tests and the graph-timed tuner test, one process each; all in $OUT/sm.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/s3b; mkdir -p $R /tmp/kc
cp -r $B/kc/v1 /tmp/kc/
cp -r tuned/tables $R/tables
pack() { tar czf "$OUT/sm.tgz" -C $R . ; }
( time timeout 300 $B/kernels tune softmax --shapes tuned/shapes/softmax.json --tables $R/tables ) > $R/tune-softmax.log 2>&1
echo "tune softmax exit $?"; tail -n 4 $R/tune-softmax.log
pack
timeout 60 $B/gpu_core --exact graph_timed_tuning_rotates_problems_and_restores_the_callers_buffer --nocapture > $R/core-graph.log 2>&1
echo "core graph test exit $?"; grep -E "test result|panicked" $R/core-graph.log
for t in $($B/gpu_kernels --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
  ( time timeout 150 $B/gpu_kernels --exact "$t" --nocapture ) > $R/kernels-$t.log 2>&1
  echo "kernels $t exit $?"; grep -E "test result|checked" $R/kernels-$t.log | tail -2
  pack
done
