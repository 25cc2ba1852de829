#!/usr/bin/env bash
# On the GPU machine (session 5, last call), on the committed sources and the tables
# tuned this session: the criterion GPU bench, the peers, the memcpy of each shape's
# bytes and the on-GPU table check with graph timing; everything in $OUT/final.tgz.
# (The GPU tests ran on these sources in scripts/device_s5_retune.sh.)
# NO_CHECK=1 leaves the table check out (the second run, after the copy peer changed).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/final; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $R/device.txt
pack() { tar czf "$OUT/final.tgz" -C $R . ; }
( time KERNELS_BENCH_OUT=$R/ours.jsonl timeout 220 $B/bench_kernels --bench ) > $R/bench.log 2>&1
echo "bench exit $?"; tail -n 5 $R/bench.log
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
( time timeout 110 python3 scripts/peers_bench.py --out $R/peers.jsonl ) > $R/peers.log 2>&1
echo "peers exit $?"; tail -n 3 $R/peers.log
pack
( time timeout 70 python3 scripts/peers_bench.py --copy-only --out $R/memcpy.jsonl ) > $R/memcpy.log 2>&1
echo "memcpy exit $?"; tail -n 3 $R/memcpy.log
pack
[ -n "${NO_CHECK:-}" ] && exit 0
( time timeout 100 $B/kernels tables check --sample 6 ) > $R/tables-check.log 2>&1
echo "check exit $?"; tail -n 3 $R/tables-check.log
pack
