#!/usr/bin/env bash
# Thirteenth session, call 1 (on the GPU machine, from the repository root):
# - the memory traffic of fused add RMSNorm without its arithmetic (scripts/s13/rmw_floor.cu):
#   in place, out of place, with and without a barrier, against the driver's copy;
# - switches of the fused kernel (scripts/s13/xp1-rmsnorm.patch, variants-norm1.txt) in the
#   nvcc harness, each variant run twice in opposite orders.
set -u
R=/tmp/xp1; rm -rf $R /tmp/s5 /tmp/p; mkdir -p $R/norm /tmp/p
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -arch=sm_90a -o /tmp/p/rmw_floor scripts/s13/rmw_floor.cu > $R/rmw_build.log 2>&1 &
cp kernels-rmsnorm/cuda/rmsnorm.cu /tmp/p/
patch -s /tmp/p/rmsnorm.cu scripts/s13/xp1-rmsnorm.patch || { echo "patch failed"; exit 1; }
OUT=$R/norm SRC=/tmp/p/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s13/variants-norm1.txt bash scripts/s7/run_twice.sh
wait
cat $R/rmw_build.log
timeout 200 /tmp/p/rmw_floor > $R/rmw_floor.txt 2>&1
tar czf $OUT/xp1.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/norm/run.log | head -20
cat $R/norm/exp.txt $R/norm/exp-again.txt | grep "median_us" | awk '{print $1, $5, $NF}' | sort
grep -h "blocks_per_sm" $R/norm/exp.txt | awk '{print $1,$2,$3,$4}'
cat $R/rmw_floor.txt
