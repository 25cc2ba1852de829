#!/usr/bin/env bash
# On the GPU machine (session 4): Nsight Compute on the pipelined softmax experiment
# (scripts/ncu_profile.py softmax-pipe, a case that existed only during the experiment:
# the 8192 x 32768 bf16 pipelined variant, 1024 threads, 132 blocks, a ring of 28 chunks
# of 512 vectors, launched 3 times; its kernel is in
# docs/results/2026-11-30-h200-session4-pipelined-softmax.patch).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=/tmp/ncu; mkdir -p $R
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 200 $NCU --kernel-name regex:'softmax_kernel' --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SourceCounters --section SchedulerStats \
  python3 scripts/ncu_profile.py softmax-pipe > $R/ncu-softmax-pipe.txt 2>&1
echo "exit $?"
grep -E "Duration|DRAM Throughput|Memory Throughput|Stall|stall|Warp Cycles|Issued|Eligible|Active Warps" $R/ncu-softmax-pipe.txt | head -40
tar czf "$OUT/ncu.tgz" -C $R .
