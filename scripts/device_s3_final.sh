#!/usr/bin/env bash
# On the GPU machine (session 3, last call), on the committed sources and tables: the
# GPU tests (one process each), the criterion GPU bench, the peers, and the on-GPU
# table check with graph timing; everything in $OUT/final.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/final; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
pack() { tar czf "$OUT/final.tgz" -C $R . ; }
for t in $($B/gpu_kernels --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
  timeout 150 $B/gpu_kernels --exact "$t" --nocapture > $R/kernels-$t.log 2>&1
  echo "kernels $t exit $?"
done
for t in $($B/gpu_core --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
  timeout 60 $B/gpu_core --exact "$t" --nocapture --test-threads=1 > $R/core-$t.log 2>&1
  echo "core $t exit $?"
done
pack
( time KERNELS_BENCH_OUT=$R/ours.jsonl timeout 220 $B/bench_kernels --bench ) > $R/bench.log 2>&1
echo "bench exit $?"; tail -n 36 $R/bench.log
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
( time timeout 100 python3 scripts/peers_bench.py --out $R/peers.jsonl ) > $R/peers.log 2>&1
echo "peers exit $?"; tail -n 3 $R/peers.log
pack
( time timeout 140 $B/kernels tables check --sample 6 ) > $R/tables-check.log 2>&1
echo "check exit $?"; tail -n 3 $R/tables-check.log
pack
