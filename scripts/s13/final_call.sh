#!/usr/bin/env bash
# Thirteenth session, last call (on the GPU machine, from the repository root, binaries in
# .device-bin/):
# - fused add RMSNorm at the shapes that miss, in the nvcc harness with every buffer set
#   once per replay (variants-final.txt, committed rmsnorm.cu), each run twice, and the
#   in-place traffic floor (rmw_floor.cu) again in the same call;
# - every GPU test other than the every-config ones (those ran before the retune), the
#   results table (bench, peers, the copy of each shape's bytes) and the on-GPU check of
#   all tables.
set -u
R=/tmp/xf; rm -rf $R /tmp/s5 /tmp/p; mkdir -p $R/norm /tmp/p
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -arch=sm_90a -o /tmp/p/rmw_floor scripts/s13/rmw_floor.cu > $R/rmw_build.log 2>&1 &
OUT=$R/norm SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s13/variants-final.txt bash scripts/s7/run_twice.sh
wait
timeout 200 /tmp/p/rmw_floor > $R/rmw_floor.txt 2>&1
tar czf $OUT/xf.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/norm/run.log | head -20
cat $R/norm/exp.txt $R/norm/exp-again.txt | grep "median_us" | awk '{print $1, $5, $NF}' | sort
grep -h "blocks_per_sm" $R/norm/exp.txt | awk '{print $1,$2,$3,$4}'
grep -E "^(reference|empty|memcpy)" $R/rmw_floor.txt
STEPS="rest bench peers memcpy check" TAG=s13b bash scripts/device_s6.sh
