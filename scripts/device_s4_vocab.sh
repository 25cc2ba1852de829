#!/usr/bin/env bash
# On the GPU machine (session 4): with the prefetch limited to stages of at most
# 128 KiB, retune the softmax table's vocabulary columns (128256, 129280, 151936,
# 152064; their staged variants changed), merging into the table whose other entries
# the previous call tuned; table, log and records in $OUT/vocab.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/vocab; mkdir -p $R
cp -r tuned/tables $R/tables
pack() { cp -r /tmp/kc/v1/tuning $R/ 2>/dev/null; tar czf "$OUT/vocab.tgz" -C $R . ; }
( time timeout 230 $B/kernels tune softmax --shapes scripts/vocab_shapes.json --tables $R/tables ) > $R/tune-vocab.log 2>&1
echo "vocab tune exit $?"; grep -E "batch (64|256|512|1024):" $R/tune-vocab.log | grep -v searching; tail -n 4 $R/tune-vocab.log
pack
