#!/usr/bin/env bash
# BRAID_WORKER_YIELD existed only in the prototype build measured here (session 18); it was not landed,
# so on main the variable is unknown and both halves run the default.
# A/B of BRAID_WORKER_YIELD on the DDP overlap benchmark, alternated per repetition.
# usage: ab.sh OUT_DIR REPS SETUPS
cd "$(dirname "$0")/../../.." || exit 1
out=$1; reps=$2; setups=$3
for rep in $(seq 1 "$reps"); do
  for v in 1 0; do
    env BRAID_WORKER_YIELD=$v ALTERNATE=1 BATCH=4096 BUCKET_MB=0.25 W2_BLOCKS=4 SETUPS="$setups" \
      EPOCHS=6 MAX_STEPS=80 WARMUP=10 perf/ddp_overlap.sh "$out/run-$rep-$v" 1 build >/dev/null 2>&1
    echo "rep $rep WORKER_YIELD=$v: $(grep -E '^\|' "$out/run-$rep-$v/summary.md" | tail -n +3 | tr -s ' ' | tr '\n' ' ')"
  done
done
