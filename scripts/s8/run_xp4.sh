#!/usr/bin/env bash
# Eighth session, call 7 (on the GPU machine, from the repository root): norms with blocks per SM capped
# (variants-norm4.txt, each run twice).
set -u
R=/tmp/xp4; rm -rf $R /tmp/s5; mkdir -p $R
OUT=$R SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s8/variants-norm4.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp4.tgz -C $R .
cat $R/exp.txt $R/exp-again.txt | grep -v blocks_per_sm
