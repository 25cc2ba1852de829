#!/usr/bin/env bash
# Ninth session, call 7 (on the GPU machine, from the repository root): the cluster
# kernel's pass 1 in chunks (variants-soft7.txt, each run twice), on softmax.cu with
# scripts/s9/xp7-chunk-switch.patch applied in /tmp (the working tree stays as committed).
set -u
R=/tmp/xp7; rm -rf $R /tmp/s5; mkdir -p $R/soft
cp kernels-softmax/cuda/softmax.cu /tmp/softmax-chunk.cu
if command -v patch > /dev/null; then
  patch -s /tmp/softmax-chunk.cu < scripts/s9/xp7-chunk-switch.patch || { echo "patch failed"; exit 1; }
else
  cp scripts/s9/softmax-chunk-patched.cu /tmp/softmax-chunk.cu  # a local patched copy carried for call 7, not committed (patch was present there)
fi
OUT=$R/soft SRC=/tmp/softmax-chunk.cu VARIANTS=scripts/s9/variants-soft7.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp7.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/soft/run.log | head -20
cat $R/soft/exp.txt $R/soft/exp-again.txt | grep -v "blocks_per_sm\|memcpy-same" | awk '{print $1, $5, $8, $9}' | sort
grep -h "memcpy-same" $R/soft/exp.txt | awk '{print $2,$4}'; grep -h blocks_per_sm $R/soft/exp.txt | awk '{print $1,$2,$3}'
