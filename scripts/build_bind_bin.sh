#!/usr/bin/env bash
# Builds what scripts/bind_device.sh runs on the GPU machine (which has Python, torch
# and the CUDA driver but no Rust toolchain) into .bind-bin/ (git-ignored):
#
#   .bind-bin/llm_kernels-*.whl    the Python package, release, abi3 (maturin)
#   .bind-bin/libkernels_capi.so   the C ABI library, release
#   .bind-bin/capi_check           kernels-capi/tests/c/capi_check.c, linked to the
#                                  library beside it (rpath $ORIGIN)
#   .bind-bin/COMMIT               the commit they were built from
#
# Needs maturin (python3 -m pip install "maturin>=1.9.4,<2") and cc. The tables are
# baked in, so build from the commit whose results you report. Usage:
#
#   bash scripts/build_bind_bin.sh
set -euo pipefail
cd "$(dirname "$0")/.."

export TUNED_STRICT="${TUNED_STRICT:-1}"
DEST=.bind-bin
TARGET="${CARGO_TARGET_DIR:-target}"
rm -rf "$DEST"
mkdir -p "$DEST"

maturin build --release -m kernels-py/Cargo.toml --out "$DEST"
cargo build --release -p kernels-capi
cp "$TARGET/release/libkernels_capi.so" "$DEST/"
cc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Werror -I kernels-capi/include \
    kernels-capi/tests/c/capi_check.c -o "$DEST/capi_check" \
    -L "$DEST" -Wl,-rpath,'$ORIGIN' -lkernels_capi -ldl -lpthread -lm
git rev-parse HEAD > "$DEST/COMMIT"
git diff --quiet HEAD -- . ':!.bind-bin' || echo "dirty" >> "$DEST/COMMIT"
ls -l "$DEST"
