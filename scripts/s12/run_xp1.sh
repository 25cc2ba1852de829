#!/usr/bin/env bash
# Twelfth session, call 1 (on the GPU machine, from the repository root):
# - softmax cluster exchange and exponential experiments (scripts/s12/xp1-softmax.patch,
#   variants-soft1.txt) and RMSNorm over a cluster with pushed partial sums
#   (scripts/s12/xp1-rmsnorm.patch, variants-norm1.txt), in the nvcc harnesses, each
#   variant run twice in opposite orders;
# - the fastest copy found of each size (scripts/s12/copy_floor.cu).
set -u
R=/tmp/xp1; rm -rf $R /tmp/s5 /tmp/p; mkdir -p $R/norm $R/soft /tmp/p
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -arch=sm_90a -o /tmp/p/copy_floor scripts/s12/copy_floor.cu > $R/copy_build.log 2>&1 &
cp kernels-softmax/cuda/softmax.cu kernels-rmsnorm/cuda/rmsnorm.cu /tmp/p/
patch -s /tmp/p/softmax.cu scripts/s12/xp1-softmax.patch || { echo "patch failed"; exit 1; }
patch -s /tmp/p/rmsnorm.cu scripts/s12/xp1-rmsnorm.patch || { echo "patch failed"; exit 1; }
OUT=$R/soft SRC=/tmp/p/softmax.cu VARIANTS=scripts/s12/variants-soft1.txt bash scripts/s7/run_twice.sh
rm -rf /tmp/s5
OUT=$R/norm SRC=/tmp/p/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s12/variants-norm1.txt bash scripts/s7/run_twice.sh
wait
cat $R/copy_build.log
timeout 120 /tmp/p/copy_floor > $R/copy_floor.txt 2>&1
tar czf $OUT/xp1.tgz -C $R .
for d in soft norm; do
  grep -h "BUILD FAILED" -A5 $R/$d/run.log | head -20
  cat $R/$d/exp.txt $R/$d/exp-again.txt | grep "median_us" | grep -v "memcpy-same" | awk '{print $1, $5, $NF}' | sort
  grep -h "blocks_per_sm\|memcpy-same" $R/$d/exp.txt | awk '{print $1,$2,$3,$4,$5}'
done
grep BEST $R/copy_floor.txt
