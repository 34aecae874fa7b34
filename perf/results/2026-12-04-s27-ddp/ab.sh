#!/usr/bin/env bash
# DDP overlap on 2 netns hosts x 2 ranks (session 18's ab.sh settings): two builds, alternated per
# repetition; a build is a folder whose bin/ holds ddp_mlp (a wrapper script will do).
# usage: ab.sh OUT REPS BUILD_A BUILD_B
cd "$(dirname "$0")/../../.." || exit 1
out=$1; reps=$2; shift 2
for rep in $(seq 1 "$reps"); do
  for b in "$@"; do
    tag=$(basename "$b")
    env ALTERNATE=1 BATCH=4096 BUCKET_MB=0.25 W2_BLOCKS=4 SETUPS=net4 \
      EPOCHS=6 MAX_STEPS=80 WARMUP=10 perf/ddp_overlap.sh "$out/run-$rep-$tag" 1 "$b" >/dev/null 2>&1
    echo "rep $rep $tag: $(grep -E '^\|' "$out/run-$rep-$tag/summary.md" | tail -n +3 | tr -s ' ' | tr '\n' ' ')"
  done
done
