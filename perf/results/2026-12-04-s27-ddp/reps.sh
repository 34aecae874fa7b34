#!/usr/bin/env bash
# DDP overlap on 2 netns hosts x 2 ranks (session 18-25 settings), REPS runs of one build.
# usage: reps.sh OUT REPS BUILD
cd "$(dirname "$0")/../../.." || exit 1
out=$1; reps=$2; b=$3
for rep in $(seq 1 "$reps"); do
  env ALTERNATE=1 BATCH=4096 BUCKET_MB=0.25 W2_BLOCKS=4 SETUPS=net4 \
    EPOCHS=6 MAX_STEPS=80 WARMUP=10 perf/ddp_overlap.sh "$out/run-$rep" 1 "$b" >/dev/null 2>&1
  echo "rep $rep: $(grep -E '^\|' "$out/run-$rep/summary.md" | tail -n +3 | tr -s ' ' | tr '\n' ' ')"
done
