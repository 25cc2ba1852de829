#!/usr/bin/env bash
# On the GPU machine (session 4, second call): the pipelined softmax with relaxed slot
# releases and asynchronous cluster stores: a tune of the vocabulary and large shapes
# keeping every candidate, then every softmax config against the CPU reference.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/s4b; mkdir -p $R
cp -r tuned/tables /tmp/tables
( time timeout 200 $B/kernels tune softmax --shapes scripts/exp_shapes.json --tables /tmp/tables --retune ) > $R/tune.log 2>&1
echo "tune exit $?"; grep -E "tuned|cached" $R/tune.log | tail -n 12
python3 scripts/tune_records_top.py /tmp/kc --top 40 > $R/top.txt 2>&1; grep -E "static_key|batch =|best per|pipelined" $R/top.txt | head -120
cp -r /tmp/kc/v1/tuning $R/
tar czf "$OUT/s4b.tgz" -C $R .
( time timeout 200 $B/gpu_kernels --exact softmax_every_config_matches_reference --nocapture ) > $R/test-softmax.log 2>&1
echo "softmax test exit $?"; tail -n 8 $R/test-softmax.log
tar czf "$OUT/s4b.tgz" -C $R .
