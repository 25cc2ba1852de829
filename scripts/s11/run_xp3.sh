#!/usr/bin/env bash
# Eleventh session, call 3 (on the GPU machine, from the repository root):
# scripts/s11/xp3-bulk-cluster.patch applied to a copy of softmax.cu in /tmp, the variants of
# scripts/s11/variants-soft3.txt in the nvcc harness, each run twice in opposite orders.
set -u
R=/tmp/xp3; rm -rf $R /tmp/s5 /tmp/p; mkdir -p $R /tmp/p
cp kernels-softmax/cuda/softmax.cu /tmp/p/
patch -s /tmp/p/softmax.cu scripts/s11/xp3-bulk-cluster.patch || { echo "patch failed"; exit 1; }
OUT=$R SRC=/tmp/p/softmax.cu VARIANTS=scripts/s11/variants-soft3.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp3.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/run.log | head -20
cat $R/exp.txt $R/exp-again.txt | grep "median_us" | grep -v "memcpy-same" | awk '{print $1, $5, $6, $NF}' | sort
grep -h "blocks_per_sm\|memcpy-same\|succ_rows" $R/exp.txt | awk '{print $1,$2,$3,$4,$5}'
