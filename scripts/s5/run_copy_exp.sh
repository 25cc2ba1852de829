#!/usr/bin/env bash
# Session-5 experiment (on the GPU machine, from the repository root): copy kernels with
# the staged softmax's access pattern against cudaMemcpy (scripts/s5/copy_exp.cu), on
# the two vocabulary shapes and one 64K shape; and Nsight Compute's launch statistics of
# the driver's device-to-device copy kernel. Output in $OUT/copy.txt and $OUT/ncu-memcpy.txt.
set -u
export PATH=/usr/local/cuda/bin:$PATH
W=/tmp/s5c; mkdir -p $W
nvcc -O3 -std=c++17 -arch=sm_90a -o $W/copy_exp scripts/s5/copy_exp.cu > $OUT/copy-build.log 2>&1 || { cat $OUT/copy-build.log; exit 1; }
for s in "1024 128256" "2048 151936" "4096 65536"; do timeout 60 $W/copy_exp $s; done 2>&1 | tee $OUT/copy.txt
# One memcpy of the 1024 x 128256 bytes under ncu: kernel name, grid, block, registers.
cat > $W/one.cu <<'CU'
#include <cstdio>
int main() { size_t n = 1024ull * 128256 * 2; void *a, *b; cudaMalloc(&a, n); cudaMalloc(&b, n);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int i = 0; i < 3; ++i) cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s);
  cudaStreamSynchronize(s); printf("done\n"); return 0; }
CU
nvcc -o $W/one $W/one.cu && timeout 60 ncu --launch-skip 1 --launch-count 1 --section LaunchStats --section SpeedOfLight --section MemoryWorkloadAnalysis $W/one > $OUT/ncu-memcpy.txt 2>&1
tail -n 60 $OUT/ncu-memcpy.txt
