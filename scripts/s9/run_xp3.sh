#!/usr/bin/env bash
# Ninth session, call 3 (on the GPU machine, from the repository root): the
# cluster softmax kernel's pattern at vocabulary rows (variants-soft3.txt, each run twice).
set -u
R=/tmp/xp3; rm -rf $R /tmp/s5; mkdir -p $R/soft
OUT=$R/soft VARIANTS=scripts/s9/variants-soft3.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp3.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/soft/run.log | head -20
cat $R/soft/exp.txt $R/soft/exp-again.txt | grep -v "blocks_per_sm\|memcpy-same" | awk '{print $1, $2, $5, $9, $10}' | sort
grep -h "blocks_per_sm\|memcpy-same" $R/soft/exp.txt | awk '{print $1,$2,$3,$4,$5}'
