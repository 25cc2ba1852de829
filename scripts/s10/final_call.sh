#!/usr/bin/env bash
# Tenth session, call 4 (on the GPU machine, from the repository root, binaries in
# .device-bin/): every GPU test but the every-config ones (among them the programmatic
# launch chain), then the results table on the retuned tables: bench (with its pdl
# column), peers, the copy of each shape's bytes, and the on-GPU check of each table.
set -u
STEPS="rest bench peers memcpy check:softmax check:rmsnorm check:fused_add_rmsnorm" TAG=s10b \
  bash scripts/device_s6.sh
