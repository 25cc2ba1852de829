#!/usr/bin/env bash
# On the GPU machine (session 4, calls 3, 4, 6 and 8): experimental builds of the kernels
# binary named by KS (default k_cpa k_cpa16; also k_hint, k_spin, k_hint16, k_t2048,
# k_t4096 for the pipelined softmax and k_occ2 for staged two-per-SM), each tuned over
# SHAPES (default scripts/exp_pipe_shapes.json) with every candidate kept in its own
# cache; the candidates matching PAT are printed; all in $OUT/s4c.tgz.
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
