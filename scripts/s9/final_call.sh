#!/usr/bin/env bash
# Ninth session, call 8 (on the GPU machine, from the repository root): the results
# table (bench, peers, the copy of each shape's bytes), the on-GPU softmax table check,
# then call 7's chunked pass-1 experiment if time is left (capped at 100 s).
set -u
STEPS="bench peers memcpy check:softmax" TAG=s9b bash scripts/device_s6.sh
timeout 100 bash scripts/s9/run_xp7.sh
