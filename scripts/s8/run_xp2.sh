#!/usr/bin/env bash
# Eighth session, call 3 (on the GPU machine, from the repository root): one y buffer
# for every launch against rotating ones, in our harnesses (variants-{soft2,norm2}.txt,
# each run twice) and for Liger (liger_rot.py). Results in $OUT/xp2.tgz.
set -u
R=/tmp/xp2; rm -rf $R /tmp/s5; mkdir -p $R/soft $R/norm
OUT=$R/soft VARIANTS=scripts/s8/variants-soft2.txt bash scripts/s7/run_twice.sh
rm -rf /tmp/s5
OUT=$R/norm SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s8/variants-norm2.txt bash scripts/s7/run_twice.sh
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site timeout 200 python3 scripts/s8/liger_rot.py > $R/liger-rot.txt 2>&1
tar czf $OUT/xp2.tgz -C $R .
cat $R/soft/exp.txt $R/soft/exp-again.txt $R/norm/exp.txt $R/norm/exp-again.txt $R/liger-rot.txt | grep -v blocks_per_sm
