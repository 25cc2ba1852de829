#!/usr/bin/env bash
# Eleventh session, call 5 (on the GPU machine, from the repository root):
# scripts/s11/xp5-cluster-fences.patch applied to a copy of softmax.cu in /tmp, the variants
# of scripts/s11/variants-soft5.txt in the nvcc harness, each run twice in opposite orders;
# then the memory barriers and fences in the SASS of three of them.
set -u
export PATH=/usr/local/cuda/bin:$PATH
R=/tmp/xp5; rm -rf $R /tmp/s5 /tmp/p; mkdir -p $R /tmp/p
cp kernels-softmax/cuda/softmax.cu /tmp/p/
patch -s /tmp/p/softmax.cu scripts/s11/xp5-cluster-fences.patch || { echo "patch failed"; exit 1; }
OUT=$R SRC=/tmp/p/softmax.cu VARIANTS=scripts/s11/variants-soft5.txt bash scripts/s7/run_twice.sh
for v in a-ref a-rel a-relcta; do
  cuobjdump -sass /tmp/s5/$v > $R/sass-$v.txt 2>&1
  echo "== $v: $(grep -c . $R/sass-$v.txt) lines"; grep -n -E "MEMBAR|FENCE|CCTL|ERRBAR|UCGABAR|SYNCS|CGAERRBAR" $R/sass-$v.txt | head -20
done
tar czf $OUT/xp5.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/run.log | head -20
cat $R/exp.txt $R/exp-again.txt | grep "median_us" | grep -v "memcpy-same" | awk '{print $1, $5, $6, $NF}' | sort
grep -h "blocks_per_sm\|memcpy-same" $R/exp.txt | awk '{print $1,$2,$3,$4,$5}'
