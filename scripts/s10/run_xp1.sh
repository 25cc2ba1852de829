#!/usr/bin/env bash
# Tenth session, call 1 (on the GPU machine, from the repository root): programmatic
# dependent launch with the trigger at three places, in the nvcc harnesses
# (variants-{norm1,soft1}.txt, each run twice in opposite orders). "base" needs
# scripts/s5/base/{prelude.cuh,softmax.cu,rmsnorm.cu} from commit 1a2c01e (not committed).
set -u
R=/tmp/xp1; rm -rf $R /tmp/s5; mkdir -p $R/norm $R/soft
OUT=$R/soft VARIANTS=scripts/s10/variants-soft1.txt bash scripts/s7/run_twice.sh
rm -rf /tmp/s5
OUT=$R/norm SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s10/variants-norm1.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp1.tgz -C $R .
for d in soft norm; do grep -h "BUILD FAILED" -A5 $R/$d/run.log | head -20; cat $R/$d/exp.txt $R/$d/exp-again.txt | grep -v "blocks_per_sm\|memcpy-same" | awk '{print $1, $5}' | sort; grep -h "blocks_per_sm\|memcpy-same" $R/$d/exp.txt | awk '{print $1,$2,$3,$4,$5}'; done
