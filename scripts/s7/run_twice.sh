#!/usr/bin/env bash
# Seventh session (on the GPU machine, from the repository root): scripts/s5/run_exp.sh
# on $VARIANTS, then every built variant run again in reverse order into
# $OUT/exp-again.txt, so each comparison has two samples taken at different times.
set -u
bash scripts/s5/run_exp.sh > $OUT/run.log 2>&1
tac "$VARIANTS" | while IFS='|' read -r name src rows defs mc grid; do
  name=$(echo $name); [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  grid=$(echo $grid)
  [ -x /tmp/s5/$name ] && timeout 60 /tmp/s5/$name $name $(echo $rows) - ${grid:-0} >> $OUT/exp-again.txt 2>&1
done
echo done
