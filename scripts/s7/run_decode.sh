#!/usr/bin/env bash
# Seventh session, call 9 (on the GPU machine, from the repository root): the committed
# softmax.cu with scripts/s7/xp-decode.patch applied (experiment switches), then
# scripts/s7/run_twice.sh on scripts/s7/variants-decode.txt.
set -eu
cp kernels-softmax/cuda/softmax.cu /tmp/softmax_xp7.cu
patch -s /tmp/softmax_xp7.cu scripts/s7/xp-decode.patch
SRC=/tmp/softmax_xp7.cu VARIANTS=scripts/s7/variants-decode.txt bash scripts/s7/run_twice.sh
