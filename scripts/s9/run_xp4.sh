#!/usr/bin/env bash
# Ninth session, call 4 (on the GPU machine, from the repository root): the
# exponentials on the FMA pipe (variants-soft4.txt, each run twice).
set -u
R=/tmp/xp4; rm -rf $R /tmp/s5; mkdir -p $R/soft
OUT=$R/soft VARIANTS=scripts/s9/variants-soft4.txt bash scripts/s7/run_twice.sh
tar czf $OUT/xp4.tgz -C $R .
grep -h "BUILD FAILED" -A5 $R/soft/run.log | head -20
cat $R/soft/exp.txt $R/soft/exp-again.txt | grep -v "blocks_per_sm\|memcpy-same" | awk '{print $1, $5, $8, $9}' | sort
grep -h "memcpy-same" $R/soft/exp.txt | awk '{print $2,$4}'; grep -h blocks_per_sm $R/soft/exp.txt | awk '{print $1,$2,$3}'
