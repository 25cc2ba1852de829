#!/usr/bin/env bash
# Fourteenth session, last call (on the GPU machine, from the repository root, binaries in
# .device-bin/ built with the retuned tables):
# - every GPU test other than the every-config ones (those ran in call A on this device
#   code), the results table (bench, peers, the copy of each shape's bytes) and the
#   on-GPU check of all tables;
# - the decode floor of a one-pass cluster softmax (decode_floor.cu, loads no longer
#   waiting on each other), built meanwhile.
set -u
R=/tmp/xf; rm -rf $R; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o $R/decode_floor scripts/s14/decode_floor.cu > $R/floor_build.log 2>&1 &
STEPS="rest bench peers memcpy check" TAG=s14f bash scripts/device_s6.sh
wait
head -20 $R/floor_build.log
[ -x $R/decode_floor ] && timeout 90 $R/decode_floor > $R/decode_floor.txt 2>&1
tar czf $OUT/xf.tgz -C $R .
grep -E "^(empty|memcpy)" $R/decode_floor.txt
for s in 1x128256 8x151936 64x128256; do
  for m in copy copy-nc block block-nc cluster; do
    grep "shape=$s" $R/decode_floor.txt | grep "^$m " | sort -t= -k4 -n | head -1
  done
done
