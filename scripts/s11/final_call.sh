#!/usr/bin/env bash
# Eleventh session, call 7 (on the GPU machine, from the repository root, binaries in
# .device-bin/): the results table on the retuned softmax table (bench with its pdl
# column, peers, the copy of each shape's bytes), then the on-GPU check of that table.
set -u
STEPS="bench peers memcpy check:softmax" TAG=s11b bash scripts/device_s6.sh
