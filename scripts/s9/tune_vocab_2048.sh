#!/usr/bin/env bash
# Ninth session, call 6 (on the GPU machine, from the repository root): the softmax
# vocabulary rows at batch 2048 (scripts/s9/vocab-2048.json), tuned and merged into a
# copy of the committed table (call 5's retune, pruned). Binaries in .device-bin/.
set -u
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
R=/tmp/s9v; rm -rf $R; mkdir -p $R; cp -r tuned/tables $R/tables
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $R/device.txt
( time timeout 300 .device-bin/kernels tune softmax --shapes scripts/s9/vocab-2048.json --tables $R/tables ) > $R/tune.log 2>&1
echo "tune exit $?"; tail -n 8 $R/tune.log
cp -r /tmp/kc/v1/tuning $R/ 2>/dev/null
tar czf $OUT/s9v.tgz -C $R .
