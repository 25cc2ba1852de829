#!/usr/bin/env bash
# Tunes one kernel's table on a GPU machine whose calls have a time limit, resumably:
# each call searches until DEADLINE, writes the committed table merged with every whole
# key found so far (`kernels tune --deadline` holds back a key it did not finish), and
# returns every tuning record, so the next call resumes where this one stopped, on the
# same machine (its cache folder) or on a fresh one (RECORDS). Run from the repository
# root with the CLI scripts/build_device_bin.sh put in .device-bin/:
#
#   OUT=<dir> [DEADLINE=480] [TUNE_CACHE=<folder>] [RECORDS=<records.tgz>] \
#       bash scripts/tune_device.sh KERNEL SHAPES [more `kernels tune` arguments]
#
#   KERNEL     softmax, rmsnorm, fused_add_rmsnorm, gemm or moe
#   SHAPES     its shape file (tuned/shapes/KERNEL.json, or part of it)
#   DEADLINE   seconds after which no search starts (default 480, for 600-second calls)
#   TUNE_CACHE the module and tuning cache (default /tmp/kernels-tune-cache: kept while
#              the machine is)
#   RECORDS    records.tgz of an earlier call, unpacked into an empty cache first (with
#              `--carry-from DIR` among the arguments, an earlier source's records too:
#              docs/tuning.md, carrying searches across a source change)
#
# Writes under $OUT: tune.log; tables/KERNEL/<target>.json (land it with
# scripts/land_table.sh); records.tgz (the cache's v1/tuning: carry it to the next call
# as RECORDS). The exit status is kernels tune's.
set -uo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "tune_device: $*" >&2
    exit 2
}

[ $# -ge 2 ] || die "usage: OUT=<dir> bash scripts/tune_device.sh KERNEL SHAPES [kernels tune args...]"
KERNEL=$1
SHAPES=$2
shift 2
OUT=${OUT:?set OUT to the folder the results go to}
B=${TUNE_BIN:-.device-bin}
[ -x "$B/kernels" ] || die "$B/kernels is missing: run scripts/build_device_bin.sh first"
[ -f "$SHAPES" ] || die "no shape file $SHAPES"
committed=$(ls -d kernels-*/tables/"$KERNEL" 2>/dev/null | head -n 1)
[ -n "$committed" ] || die "no crate holds tables/$KERNEL (softmax, rmsnorm, fused_add_rmsnorm, gemm, moe)"

export KERNELS_CACHE_DIR=${TUNE_CACHE:-/tmp/kernels-tune-cache}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset KERNELS_TUNING KERNELS_PDL
mkdir -p "$OUT/tables" "$KERNELS_CACHE_DIR"
if [ -n "${RECORDS:-}" ] && [ ! -d "$KERNELS_CACHE_DIR/v1/tuning" ]; then
    tar xzf "$RECORDS" -C "$KERNELS_CACHE_DIR" || die "cannot unpack $RECORDS"
    echo "resumed from $RECORDS: $(ls "$KERNELS_CACHE_DIR/v1/tuning" | wc -l) records"
fi
cp -r "$committed" "$OUT/tables/"
chmod -R u+w "$OUT/tables"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv
start=$SECONDS
rc=0
"$B/kernels" tune "$KERNEL" --shapes "$SHAPES" --tables "$OUT/tables" --deadline "${DEADLINE:-480}" "$@" \
    > "$OUT/tune.log" 2>&1 || rc=$?
echo "kernels tune: exit $rc after $((SECONDS - start)) s"
grep -E "^(carry:|wrote|held back|failed|nothing to write)|not searched" "$OUT/tune.log"
if [ -d "$KERNELS_CACHE_DIR/v1/tuning" ]; then
    tar czf "$OUT/records.tgz" -C "$KERNELS_CACHE_DIR" v1/tuning
    echo "records: $(ls "$KERNELS_CACHE_DIR/v1/tuning" | wc -l) in $OUT/records.tgz"
fi
exit "$rc"
