#!/usr/bin/env bash
# Twelfth session, call 5 (on the GPU machine, from the repository root): the 64-128 MiB
# norm shapes on clusters per row (variants-norm5.txt, committed rmsnorm.cu), each variant
# run twice in opposite orders.
set -u
R=/tmp/xp5; rm -rf $R /tmp/s5; mkdir -p $R
OUT=$R SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s12/variants-norm5.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp5.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/run.log | head -20
cat $R/exp.txt $R/exp-again.txt | grep "median_us" | awk '{print $1, $5, $NF}' | sort
grep -h "blocks_per_sm" $R/exp.txt | awk '{print $1,$2,$3}'
