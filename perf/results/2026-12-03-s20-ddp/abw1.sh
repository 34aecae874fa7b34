#!/usr/bin/env bash
# W1_BLOCKS alternated per repetition (usage: abw1.sh OUT REPS VALUE...), session 18's other settings
cd /work/main || exit 1
out=$1; reps=$2; shift 2
for rep in $(seq 1 "$reps"); do
  for v in "$@"; do
    env W1_BLOCKS=$v ALTERNATE=1 BATCH=4096 BUCKET_MB=0.25 W2_BLOCKS=4 SETUPS=net4 \
      EPOCHS=6 MAX_STEPS=80 WARMUP=10 perf/ddp_overlap.sh "$out/run-$rep-$v" 1 build >/dev/null 2>&1
    echo "rep $rep W1_BLOCKS=$v: $(grep -E '^\|' "$out/run-$rep-$v/summary.md" | tail -n +3 | tr -s ' ' | tr '\n' ' ')"
  done
done
