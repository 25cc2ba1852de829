#!/usr/bin/env bash
# Seventh session, call 1 (on the GPU machine, from the repository root): the split
# softmax experiment (scripts/s7/variants-split.txt through scripts/s5/run_exp.sh on
# the source make_src.sh writes), then the kernels-core GPU tests (the tuning cache
# key with the candidates digest had not run on a GPU).
set -u
mkdir -p /tmp/s7
bash scripts/s7/make_src.sh /tmp/s7/softmax_xp.cu
( time SRC=/tmp/s7/softmax_xp.cu VARIANTS=scripts/s7/variants-split.txt bash scripts/s5/run_exp.sh ) > $OUT/run.log 2>&1
echo "exp done"; grep -c median_us $OUT/exp.txt
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for t in $(.device-bin/gpu_core --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
  timeout 90 .device-bin/gpu_core --exact "$t" --nocapture --test-threads=1 > $OUT/gpu_core-$t.log 2>&1
  echo "gpu_core $t exit $?"
done
