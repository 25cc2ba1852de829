#!/usr/bin/env bash
# Tenth session, call 7 (on the GPU machine, from the repository root): softmax with
# the fast block merge (variants-soft7.txt, each run twice in opposite orders), on
# softmax.cu with scripts/s10/xp7-fast-block-merge.patch applied to a copy in /tmp.
set -u
R=/tmp/xp7; rm -rf $R /tmp/s5; mkdir -p $R
cp kernels-softmax/cuda/softmax.cu /tmp/sf.cu
patch -s /tmp/sf.cu scripts/s10/xp7-fast-block-merge.patch || { echo "patch failed"; exit 1; }
OUT=$R SRC=/tmp/sf.cu VARIANTS=scripts/s10/variants-soft7.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp7.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/run.log | head -20
cat $R/exp.txt $R/exp-again.txt | grep -v "blocks_per_sm\|memcpy-same" | awk '{print $1, $5, $9, $10}' | sort
grep -h "blocks_per_sm\|memcpy-same" $R/exp.txt | awk '{print $1,$2,$3,$4,$5}'
