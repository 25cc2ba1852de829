#!/usr/bin/env bash
# Fourteenth session, call A (on the GPU machine, from the repository root, binaries in
# .device-bin/), after the cluster exchange moved into the prelude:
# - the every-config GPU tests of softmax and RMSNorm on the moved code (each stops the
#   script on a failure, so nothing is tuned on broken device code);
# - the fused add RMSNorm table retuned (the prelude is part of every table's fingerprint);
# - the decode floor of a one-pass cluster softmax (decode_floor.cu), built meanwhile.
set -u
R=/tmp/xa; rm -rf $R; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o $R/decode_floor scripts/s14/decode_floor.cu > $R/floor_build.log 2>&1 &
STEPS="every:softmax every:rmsnorm tune:fused_add_rmsnorm" TAG=s14a TUNE_LIMIT=300 bash scripts/device_s6.sh
wait
cat $R/floor_build.log | head -20
[ -x $R/decode_floor ] && timeout 90 $R/decode_floor > $R/decode_floor.txt 2>&1
tar czf $OUT/xa.tgz -C $R .
grep -E "^(empty|memcpy)" $R/decode_floor.txt
for s in 1x128256 8x151936 64x128256; do
  for m in copy copy-nc block block-nc cluster; do
    grep "shape=$s" $R/decode_floor.txt | grep "^$m " | sort -t= -k4 -n | head -1
  done
done
