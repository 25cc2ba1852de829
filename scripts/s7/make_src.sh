#!/usr/bin/env bash
# Writes $1: kernels-softmax/cuda/softmax.cu with scripts/s7/split.cuh inserted before
# the final "#else" of the strategy chain (seventh-session experiment).
set -eu
n=$(grep -n '^#error "STRATEGY must be' kernels-softmax/cuda/softmax.cu | cut -d: -f1)
head -n $((n - 2)) kernels-softmax/cuda/softmax.cu > "$1"
cat scripts/s7/split.cuh >> "$1"
tail -n +$((n - 1)) kernels-softmax/cuda/softmax.cu >> "$1"
