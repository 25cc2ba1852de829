#!/usr/bin/env bash
# On the GPU machine, one call: the criterion GPU bench (tuned vs default vs same-size
# copy), then the peers (torch, torch.compile, Liger) on the same shapes; both come
# back in $OUT/bench.tgz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/bench; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/device.txt
( time KERNELS_BENCH_OUT=$R/ours.jsonl $B/bench_kernels --bench ) > $R/bench.log 2>&1
echo "bench exit $?"; tail -n 36 $R/bench.log
tar czf "$OUT/bench.tgz" -C $R .
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
( time timeout ${PEERS_TIMEOUT:-200} python3 scripts/peers_bench.py --out $R/peers.jsonl ) > $R/peers.log 2>&1
echo "peers exit $?"; tail -n 3 $R/peers.log
tar czf "$OUT/bench.tgz" -C $R .
