#!/usr/bin/env bash
# Eleventh session, call 4 (on the GPU machine, from the repository root): builds the
# nvcc harness variants of scripts/s11/variants-ncu.txt and profiles the second launch of
# each (the first graph replay's first kernel) with Nsight Compute, clocks left as the card
# runs them (--clock-control none), into $OUT/ncu-NAME.txt.
set -u
export PATH=/usr/local/cuda/bin:$PATH
R=/tmp/ncu; rm -rf $R /tmp/s5; mkdir -p $R
OUT0=$OUT; OUT=$R VARIANTS=scripts/s11/variants-ncu.txt bash scripts/s5/run_exp.sh > $R/run.log 2>&1; OUT=$OUT0
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
while IFS='|' read -r name src rows defs mc grid; do
  name=$(echo $name); [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  timeout 150 $NCU --clock-control none --kernel-name regex:softmax_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats \
    --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,sm__cycles_elapsed.avg.per_second,smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum \
    /tmp/s5/$name $name $(echo $rows) - 0 > $OUT/ncu-$name.txt 2>&1
  echo "== $name exit $?"
  grep -E "stalled|SM Frequency|Duration|DRAM Throughput|Issue Slots Busy|Stall|No Eligible|Active Warps Per|Achieved Occupancy|xu|dram__bytes|Warp Cycles Per Issued" $OUT/ncu-$name.txt | head -45
done < scripts/s11/variants-ncu.txt
cp $R/exp.txt $OUT/ 2>/dev/null
