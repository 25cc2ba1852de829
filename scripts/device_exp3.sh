#!/usr/bin/env bash
# On the GPU machine (session 3 experiment): the persistent staged softmax. Every
# softmax config against the CPU reference, a tune of the vocabulary shapes (all
# candidates kept in the tuning records), and the softmax benches; all in $OUT/exp.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/exp; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
cp -r tuned/tables /tmp/tables
( time $B/kernels tune softmax --shapes scripts/exp_shapes.json --tables /tmp/tables --retune ) > $R/tune.log 2>&1
echo "tune exit $?"; grep tuned $R/tune.log | tail -n 12
tar czf "$OUT/exp.tgz" -C $R . ; cp -r /tmp/kc/v1/tuning $R/ 2>/dev/null
( time KERNELS_BENCH_OUT=$R/ours.jsonl timeout 200 $B/bench_kernels --bench softmax ) > $R/bench.log 2>&1
echo "bench exit $?"; tail -n 14 $R/bench.log
tar czf "$OUT/exp.tgz" -C $R .
( time timeout 240 $B/gpu_kernels --exact softmax_every_config_matches_reference --nocapture ) > $R/test.log 2>&1
echo "test exit $?"; tail -n 5 $R/test.log
tar czf "$OUT/exp.tgz" -C $R .
