#!/usr/bin/env bash
# On the GPU machine (sixth session), from the repository root, with the binaries in
# .device-bin/ (kernels, gpu_kernels, gpu_core, bench_kernels) and Liger's wheel in
# .whl/. STEPS lists what to run, in order (default: every):
#   every:K   the every-config GPU test of kernel K (softmax or rmsnorm); stops the
#             script when it fails, so nothing is tuned on broken device code
#   rest      every other GPU test (gpu_kernels and gpu_core)
#   tune:K    kernel K tuned over tuned/shapes/K.json into a copy of tuned/tables
#   bench     the criterion GPU bench (KERNELS_BENCH_OUT)
#   peers     torch, torch.compile and Liger on the same shapes
#   memcpy    the driver's copy of each shape's bytes
#   check     the on-GPU table check (graph timing)
#   check:K   the same for kernel K only (eighth session)
# Logs, tables, tuning records and results go to $OUT/$TAG.tgz after each step.
# Seventh session: TAG (default s6) names the work folder and the archive; TUNE_LIMIT
# (seconds) overrides the tune step's time limit (default 330 for softmax, 150 else).
# Eleventh session: the check steps' limits raised to 200 s per kernel, 240 s for all (the
# softmax table's check took 99.6 s and hit the old 100 s limit once).
set -u
TAG=${TAG:-s6}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KERNELS_CACHE_DIR=/tmp/kc KERNELS_REQUIRE_GPU=1
B=.device-bin
R=/tmp/$TAG; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $R/device.txt
[ -d $R/tables ] || cp -r tuned/tables $R/tables
pack() { cp -r /tmp/kc/v1/tuning $R/ 2>/dev/null; tar czf "$OUT/$TAG.tgz" -C $R . ; }
peers_env() {
  [ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
}
for step in ${STEPS:-every:softmax}; do
  case $step in
    every:*)
      t=${step#every:}_every_config_matches_reference
      ( time timeout 280 $B/gpu_kernels --exact $t --nocapture ) > $R/gpu-$t.log 2>&1
      rc=$?; echo "$t exit $rc"; grep -E "checked|test result|^real" $R/gpu-$t.log
      pack; [ $rc != 0 ] && exit 1 ;;
    rest)
      for bin in gpu_kernels gpu_core; do
        for t in $($B/$bin --list 2>/dev/null | grep ': test' | sed 's/: test//'); do
          case $t in *every_config*) continue;; esac
          timeout 60 $B/$bin --exact "$t" --nocapture --test-threads=1 > $R/$bin-$t.log 2>&1
          echo "$bin $t exit $?"
        done
      done
      pack ;;
    tune:*)
      k=${step#tune:}; lim=150; [ $k = softmax ] && lim=330; lim=${TUNE_LIMIT:-$lim}
      ( time timeout $lim $B/kernels tune $k --shapes tuned/shapes/$k.json --tables $R/tables ) > $R/tune-$k.log 2>&1
      echo "$k tune exit $?"; tail -n 4 $R/tune-$k.log; pack ;;
    bench)
      ( time KERNELS_BENCH_OUT=$R/ours.jsonl timeout 300 $B/bench_kernels --bench ) > $R/bench.log 2>&1
      echo "bench exit $?"; tail -n 5 $R/bench.log; pack ;;
    peers)
      peers_env
      ( time timeout 110 python3 scripts/peers_bench.py --out $R/peers.jsonl ) > $R/peers.log 2>&1
      echo "peers exit $?"; tail -n 3 $R/peers.log; pack ;;
    memcpy)
      peers_env
      ( time timeout 70 python3 scripts/peers_bench.py --copy-only --out $R/memcpy.jsonl ) > $R/memcpy.log 2>&1
      echo "memcpy exit $?"; tail -n 3 $R/memcpy.log; pack ;;
    check)
      ( time timeout 240 $B/kernels tables check --sample 6 ) > $R/tables-check.log 2>&1
      echo "check exit $?"; tail -n 3 $R/tables-check.log; pack ;;
    check:*)
      k=${step#check:}
      ( time timeout 200 $B/kernels tables check --sample 6 --kernel $k ) > $R/tables-check-$k.log 2>&1
      echo "check $k exit $?"; tail -n 3 $R/tables-check-$k.log; pack ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
