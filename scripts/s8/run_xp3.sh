#!/usr/bin/env bash
# Eighth session, call 4 (on the GPU machine, from the repository root): rmsnorm's x by
# plain loads against ld.global.nc (variants-norm3.txt, each run twice).
set -u
R=/tmp/xp3; rm -rf $R /tmp/s5; mkdir -p $R
OUT=$R SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s8/variants-norm3.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp3.tgz -C $R .
cat $R/exp.txt $R/exp-again.txt | grep -v blocks_per_sm
