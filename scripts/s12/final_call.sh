#!/usr/bin/env bash
# Twelfth session, last call (on the GPU machine, from the repository root, binaries in
# .device-bin/): every GPU test other than the every-config ones (those ran before the
# retunes), the results table (bench with its pdl column, peers, the copy of each shape's
# bytes) on the retuned softmax and RMSNorm tables, then the on-GPU check of all tables.
set -u
STEPS="rest bench peers memcpy check" TAG=s12b bash scripts/device_s6.sh
