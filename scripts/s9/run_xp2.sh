#!/usr/bin/env bash
# Ninth session, call 2 (on the GPU machine, from the repository root): the pipelined
# softmax strategy in the nvcc harness (variants-soft2.txt, each run twice).
set -u
R=/tmp/xp2; rm -rf $R /tmp/s5; mkdir -p $R/soft
OUT=$R/soft VARIANTS=scripts/s9/variants-soft2.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp2.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/soft/run.log | head -20
cat $R/soft/exp.txt $R/soft/exp-again.txt | grep -v "blocks_per_sm\|memcpy-same" | awk '{print $1, $2, $5, $9, $10}' | sort
grep -h "blocks_per_sm\|memcpy-same" $R/soft/exp.txt | awk '{print $1,$2,$3,$4,$5}'
