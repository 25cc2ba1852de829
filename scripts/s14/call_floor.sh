#!/usr/bin/env bash
# Fourteenth session, after the last call: decode_floor.cu again, with the exchange
# through global memory added (more blocks per row than a cluster holds).
set -u
R=/tmp/xg; rm -rf $R; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o $R/decode_floor scripts/s14/decode_floor.cu > $R/floor_build.log 2>&1
head -20 $R/floor_build.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $R/device.txt
[ -x $R/decode_floor ] && timeout 150 $R/decode_floor > $R/decode_floor.txt 2>&1
tar czf $OUT/xg.tgz -C $R .
grep -E "^(empty|memcpy)" $R/decode_floor.txt
for s in 1x128256 8x151936 64x128256; do
  for m in copy-nc block-nc cluster global-nc; do
    grep "shape=$s" $R/decode_floor.txt | grep "^$m " | sort -t= -k4 -n | head -2
  done
done
