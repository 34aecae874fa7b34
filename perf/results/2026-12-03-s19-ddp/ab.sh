#!/usr/bin/env bash
# DDP overlap on 2 netns hosts x 2 ranks: default direct blocks against BRAID_DIRECT_BLOCK=1M
# (the block before session 18's oversubscribed rule), alternated per repetition.
# usage: ab.sh OUT_DIR REPS
cd "$(dirname "$0")/../../.." || exit 1
out=$1; reps=$2
for rep in $(seq 1 "$reps"); do
  for v in ${VALUES:-auto 1M}; do
    env BRAID_DIRECT_BLOCK=$v ALTERNATE=1 BATCH=4096 BUCKET_MB=0.25 W2_BLOCKS=4 SETUPS=net4 \
      EPOCHS=6 MAX_STEPS=80 WARMUP=10 perf/ddp_overlap.sh "$out/run-$rep-$v" 1 build >/dev/null 2>&1
    echo "rep $rep BRAID_DIRECT_BLOCK=$v: $(grep -E '^\|' "$out/run-$rep-$v/summary.md" | tail -n +3 | tr -s ' ' | tr '\n' ' ')"
  done
done
