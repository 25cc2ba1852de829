#!/usr/bin/env bash
# Eighth session, call 8 (on the GPU machine, from the repository root): dynamic shared
# memory and the carveout, separately (variants-{norm5,soft3}.txt, each run twice).
set -u
R=/tmp/xp5; rm -rf $R /tmp/s5; mkdir -p $R/norm $R/soft
OUT=$R/norm SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s8/variants-norm5.txt bash scripts/s7/run_twice.sh
rm -rf /tmp/s5
OUT=$R/soft VARIANTS=scripts/s8/variants-soft3.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp5.tgz -C $R .
for d in norm soft; do cat $R/$d/exp.txt $R/$d/exp-again.txt | grep -v blocks_per_sm | awk '{print $1, $5}' | sort; grep blocks_per $R/$d/exp.txt | awk '{print $1,$2,$3}'; done
