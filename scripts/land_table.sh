#!/usr/bin/env bash
# Lands a table that scripts/tune_device.sh (or `kernels tune`) wrote: copies it over the
# committed one, marks entries that do not beat the analytic default as default markers
# (`kernels tables prune`), rebuilds the CLI with the table baked in under TUNED_STRICT=1,
# runs the offline guard (`kernels tables check --offline`) and records the served
# variants (`kernels tables lock`). Runs on any machine with the Rust toolchain, no GPU:
#
#   bash scripts/land_table.sh <dir>/tables/KERNEL/<target>.json
#
# Stops at the first step that fails; then the working tree holds the copied table, for
# `git diff` or `git checkout` of it.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# = 1 ] && [ -f "$1" ] || { echo "usage: bash scripts/land_table.sh TABLE.json" >&2; exit 2; }
read -r kernel target < <(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
print(t["kernel"], t["target"])
' "$1")
folder=$(ls -d kernels-*/tables/"$kernel" 2>/dev/null | head -n 1)
[ -n "$folder" ] || { echo "land_table: no crate holds tables/$kernel" >&2; exit 2; }
dest="$folder/$target.json"
cp "$1" "$dest"
chmod u+w "$dest"
echo "== $dest"
export TUNED_STRICT=1
cargo build --release -q -p kernels
bin=${CARGO_TARGET_DIR:-target}/release/kernels
# Its first line is the summary; the rest lists each entry it marked.
pruned=$("$bin" tables prune "$dest")
echo "${pruned%%$'\n'*}"
# prune rewrote the file: bake that.
cargo build --release -q -p kernels
"$bin" tables check --offline
"$bin" tables lock
"$bin" tables list
git diff --stat -- "$dest" tuned/variants.lock
