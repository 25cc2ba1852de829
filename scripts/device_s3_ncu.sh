#!/usr/bin/env bash
# On the GPU machine (session 3): Nsight Compute on the vocabulary softmax and a 64 MiB
# RMSNorm (scripts/ncu_profile.py), to see what limits them; reports in $OUT/ncu.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=/tmp/ncu; mkdir -p $R
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for c in softmax-vocab rmsnorm-64mib; do
  timeout 150 $NCU --kernel-name regex:'softmax_kernel|rmsnorm_kernel' --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats \
    --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    python3 scripts/ncu_profile.py $c > $R/ncu-$c.txt 2>&1
  echo "$c exit $?"; grep -E "Duration|DRAM Throughput|Memory Throughput|pipe_xu|Achieved Occupancy" $R/ncu-$c.txt | head -8
done
tar czf "$OUT/ncu.tgz" -C $R .
