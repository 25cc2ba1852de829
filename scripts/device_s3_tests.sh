#!/usr/bin/env bash
# On the GPU machine: every GPU test (kernels-core and the kernel families), one process
# each; logs in $OUT/tests.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/tests; mkdir -p $R
for bin in gpu_core gpu_kernels; do
  for t in $($B/$bin --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
    timeout 150 $B/$bin --exact "$t" --nocapture --test-threads=1 > $R/$bin-$t.log 2>&1
    echo "$bin $t exit $?"
  done
done
grep -h "runs checked" $R/*.log
tar czf "$OUT/tests.tgz" -C $R .
