#!/usr/bin/env bash
# Tenth session, call 6 (on the GPU machine, from the repository root): softmax
# 1 x 128256 taken apart (variants-soft6.txt, each run twice in opposite orders), on
# softmax.cu with scripts/s10/xp6-decode-switches.patch applied to a copy in /tmp.
set -u
R=/tmp/xp6; rm -rf $R /tmp/s5; mkdir -p $R
cp kernels-softmax/cuda/softmax.cu /tmp/sx.cu
patch -s /tmp/sx.cu scripts/s10/xp6-decode-switches.patch || { echo "patch failed"; exit 1; }
OUT=$R SRC=/tmp/sx.cu VARIANTS=scripts/s10/variants-soft6.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp6.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/run.log | head -20
cat $R/exp.txt $R/exp-again.txt | grep -v "blocks_per_sm\|memcpy-same" | awk '{print $1, $5, $9, $10}' | sort
grep -h "blocks_per_sm\|memcpy-same" $R/exp.txt | awk '{print $1,$2,$3,$4,$5}'
