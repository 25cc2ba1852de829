#!/usr/bin/env bash
# On the GPU machine: `kernels tune` end to end on two RMSNorm shapes with each timing
# method into a scratch tables folder, resumed once (0 searched), and `tables check`
# on one kernel; logs in $OUT/smoke.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/smoke; mkdir -p $R/tables
for m in graph single; do
  $B/kernels tune rmsnorm --shapes scripts/tune_smoke_shapes.json --tables $R/tables --timing $m > $R/tune-$m.log 2>&1
  echo "tune $m exit $?"; tail -n 3 $R/tune-$m.log
done
$B/kernels tune rmsnorm --shapes scripts/tune_smoke_shapes.json --tables $R/tables > $R/tune-resume.log 2>&1
echo "resume exit $?"; tail -n 1 $R/tune-resume.log
head -c 1500 $R/tables/rmsnorm/sm90.json > $R/table-head.txt
timeout 60 $B/kernels tables check --kernel fused_add_rmsnorm --sample 4 > $R/check.log 2>&1
echo "check exit $?"; tail -n 1 $R/check.log
tar czf "$OUT/smoke.tgz" -C $R .
