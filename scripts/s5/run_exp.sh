#!/usr/bin/env bash
# Session-5 device-code experiment (on the GPU machine, from the repository root):
# builds every line of scripts/s5/variants.txt (or $VARIANTS) with nvcc, the prelude
# and softmax.cu of the named tree concatenated before scripts/s5/harness.cu, runs
# each one after another and writes $OUT/exp.txt (and the build logs).
# Source "base" is scripts/s5/base/{prelude.cuh,softmax.cu}, not committed: the files of
# the commit to compare against, e.g. `git show 7864f0d:kernels-softmax/cuda/softmax.cu`.
# Source "new" is the working tree. Variant files: scripts/s5/variants*.txt; their
# XP_* defines were experiment switches in the working tree of the time (see
# docs/results/2026-11-30-h200-session5.md), not in the committed softmax.cu.
# Sixth session: SRC (default kernels-softmax/cuda/softmax.cu) and HARNESS (default
# scripts/s5/harness.cu) pick another kernel file and harness, e.g.
# SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu; "base" then
# reads scripts/s5/base/ and the file's own name there.
set -u
V=${VARIANTS:-scripts/s5/variants.txt}
SRC=${SRC:-kernels-softmax/cuda/softmax.cu}
HARNESS=${HARNESS:-scripts/s5/harness.cu}
W=/tmp/s5; mkdir -p $W
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $OUT/device.txt
build() {
  local name=$1 src=$2 defs=$3
  local dir=.; [ "$src" = base ] && dir=scripts/s5/base
  local pre=$dir/prelude.cuh sm=$dir/$(basename $SRC)
  [ "$src" = new ] && pre=kernels-core/cuda/prelude.cuh && sm=$SRC
  cat $pre $sm $HARNESS > $W/$name.cu
  local splits=-DSPLITS=1; case "$defs" in *SPLITS*) splits=;; esac
  nvcc -O3 -std=c++17 -I$PWD -arch=sm_90a -DDTYPE=2 -DROWS=1 -DLOG_SOFTMAX=0 $splits $defs -o $W/$name $W/$name.cu > $W/$name.build 2>&1 \
    || { echo "BUILD FAILED $name"; cat $W/$name.build; }
}
while IFS='|' read -r name src rows defs mc grid; do
  name=$(echo $name); src=$(echo $src); [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  build "$name" "$src" "$defs" &
  while [ $(jobs -r | wc -l) -ge 14 ]; do sleep 0.5; done
done < $V
wait
cat $W/*.build > $OUT/build.log 2>/dev/null
while IFS='|' read -r name src rows defs mc grid; do
  name=$(echo $name); [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  mc=$(echo $mc); grid=$(echo $grid)
  [ -x $W/$name ] && timeout 60 $W/$name $name $(echo $rows) ${mc:--} ${grid:-0} 2>&1 | tee -a $OUT/exp.txt
done < $V
