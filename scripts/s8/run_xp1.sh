#!/usr/bin/env bash
# Eighth session, call 1 (on the GPU machine, from the repository root): the softmax and
# norm harness variants of scripts/s8/variants-{soft1,norm1}.txt, each run twice
# (scripts/s7/run_twice.sh), then Liger's Triton PTX at the shapes where it led.
set -u
mkdir -p $OUT/soft $OUT/norm
OUT=$OUT/soft VARIANTS=scripts/s8/variants-soft1.txt bash scripts/s7/run_twice.sh
rm -rf /tmp/s5
OUT=$OUT/norm SRC=kernels-rmsnorm/cuda/rmsnorm.cu HARNESS=scripts/s6/norm_harness.cu \
  VARIANTS=scripts/s8/variants-norm1.txt bash scripts/s7/run_twice.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
mkdir -p $OUT/triton
TRITON_CACHE_DIR=/tmp/tc PYTHONPATH=/tmp/site timeout 120 python3 scripts/s8/liger_ptx.py > $OUT/triton/run.log 2>&1
find /tmp/tc -name "*.ptx" | while read f; do cp "$f" $OUT/triton/$(basename $(dirname "$f"))-$(basename "$f"); done
ls -la $OUT/triton
