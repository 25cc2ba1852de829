#!/usr/bin/env bash
# On the GPU machine (session 4, third and fourth calls): builds of the pipelined softmax
# (mbarrier waits with a suspend-time hint / a test_wait spin; 8 KiB / 16 KiB chunks),
# each tuned on three large shapes with every candidate kept; all in $OUT/s4c.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/s4c; mkdir -p $R
cp -r tuned/tables /tmp/tables
for k in ${KS:-k_cpa k_cpa16}; do
  ( time KERNELS_CACHE_DIR=/tmp/kc-$k timeout ${TUNE_TIMEOUT:-150} $B/$k tune softmax --shapes ${SHAPES:-scripts/exp_pipe_shapes.json} --tables /tmp/tables --retune ) > $R/tune-$k.log 2>&1
  echo "$k tune exit $?"
  python3 scripts/tune_records_top.py /tmp/kc-$k --top 200 > $R/top-$k.txt 2>&1
  grep -E "static_key|best per|${PAT:-pipelined}" $R/top-$k.txt | head -${LINES_MAX:-40}
  tar czf "$OUT/s4c.tgz" -C $R .
done
