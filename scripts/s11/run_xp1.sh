#!/usr/bin/env bash
# Eleventh session, call 1 (on the GPU machine, from the repository root): the successor
# L2 prefetch (scripts/s11/xp1-succ-{softmax,rmsnorm}.patch applied to copies in /tmp) in
# the nvcc harnesses, variants-{soft1,norm1}.txt, each run twice in opposite orders.
set -u
R=/tmp/xp1; rm -rf $R /tmp/s5 /tmp/p; mkdir -p $R/norm $R/soft /tmp/p
cp kernels-softmax/cuda/softmax.cu kernels-rmsnorm/cuda/rmsnorm.cu /tmp/p/
patch -s /tmp/p/softmax.cu scripts/s11/xp1-succ-softmax.patch || { echo "patch failed"; exit 1; }
patch -s /tmp/p/rmsnorm.cu scripts/s11/xp1-succ-rmsnorm.patch || { echo "patch failed"; exit 1; }
OUT=$R/soft SRC=/tmp/p/softmax.cu VARIANTS=scripts/s11/variants-soft1.txt bash scripts/s7/run_twice.sh
rm -rf /tmp/s5
OUT=$R/norm SRC=/tmp/p/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s11/variants-norm1.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp1.tgz -C $R .
for d in soft norm; do
  grep -h "BUILD FAILED" -A5 $R/$d/run.log | head -20
  cat $R/$d/exp.txt $R/$d/exp-again.txt | grep "median_us" | grep -v "memcpy-same" | awk '{print $1, $5, $6, $NF}' | sort
  grep -h "blocks_per_sm\|memcpy-same\|succ_rows" $R/$d/exp.txt | awk '{print $1,$2,$3,$4,$5}'
done
