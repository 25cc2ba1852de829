#!/usr/bin/env bash
# Tenth session, call 5 (on the GPU machine, from the repository root): programmatic
# dependent launch after a plain kernel that does not trigger (XP_PREV), in the nvcc
# harnesses (variants-{soft2,norm2}.txt, each run twice in opposite orders).
set -u
R=/tmp/xp5; rm -rf $R /tmp/s5; mkdir -p $R/norm $R/soft
OUT=$R/soft VARIANTS=scripts/s10/variants-soft2.txt bash scripts/s7/run_twice.sh
rm -rf /tmp/s5
OUT=$R/norm SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s10/variants-norm2.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp5.tgz -C $R .
for d in soft norm; do grep -h "BUILD FAILED" -A5 $R/$d/run.log | head -20; cat $R/$d/exp.txt $R/$d/exp-again.txt | grep -v "blocks_per_sm\\|memcpy-same" | awk '{print $1, $5}' | sort; grep -h "blocks_per_sm" $R/$d/exp.txt $R/$d/exp-again.txt | awk '{print $1,$4,$5}'; done
