#!/usr/bin/env bash
# Data-parallel variants of the Fashion-MNIST trainer (examples/ddp_mlp), one run per row of
# ROWS below and per setup, and one table: final test accuracy, training time to 85% test
# accuracy, bytes sent per step per rank, gradient + optimizer state bytes per rank, mean step
# time; and a PNG of test accuracy against training time (evaluations excluded) per setup.
#
#   perf/dp_variants.sh OUT_DIR [BUILD_DIR]
#
# Setups (SETUPS, default "shm2"):
#   shm2  2 ranks on this machine over shared memory (braid-run)
#   net2  2 network-namespace hosts, 1 rank each, links shaped to 1 Gbit/s (tests/net/netns.sh
#         --rate 1gbit --burst 128kb --bind, as perf/ddp_overlap.sh; needs root)
# Environment: EPOCHS (default 5), BATCH (global, default 128), BUCKET_MB (default 0.25: with
# the default 25 MiB the 2.7 MB model is 2 buckets and ZeRO-2's 2 staging buffers hold all of
# it; the zero2 row registers W2 as 4 row blocks of 0.25 MiB, so that its largest buckets, and
# so its staging buffers, are 0.25 MiB rather than W2's 1 MiB: the same parameters, bit for
# bit), EVAL_EVERY (steps between evaluations on the test set, default 100), TRAIN_LIMIT /
# TEST_LIMIT (0 = all), ONLY (row names to run, default all), TIMEOUT (per run, default 1800).
# Outputs in OUT_DIR: <setup>-<row>.log (the trainer's output), table.md, accuracy_vs_time.png.
#
# bytes/step: what one rank sends per step with ring algorithms (the trainer's
# comm_bytes_per_step: 2(n-1)/n of an all-reduce's bytes; ZeRO: reduce-scatter + all-gather).
# state: the gradients the DDP layer keeps + the optimizer state (+ ZeRO-2's staging buffers,
# + PowerSGD's error-feedback/Q buffers), per rank (the trainer's state_bytes).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/dp_variants.sh OUT_DIR [BUILD_DIR]}
bin=$(cd "${2:-build}/bin" && pwd) || exit 1
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One row per line: name, then the trainer's switches for it. Add rows here.
ROWS='
ddp
zero1       --zero 1
zero2       --zero 2 --w2-blocks 4
fp16        --compress fp16
bf16        --compress bf16
powersgd    --compress powersgd --powersgd-rank 4
localsgd4   --local-sgd 4
localsgd16  --local-sgd 16
async       --async
'

setups=${SETUPS:-shm2}
common=(--epochs "${EPOCHS:-5}" --batch "${BATCH:-128}" --bucket-mb "${BUCKET_MB:-0.25}"
    --eval-every "${EVAL_EVERY:-100}" --train-limit "${TRAIN_LIMIT:-0}"
    --test-limit "${TEST_LIMIT:-0}")
tmo=${TIMEOUT:-1800}
fail=0
while read -r name args; do
    [ -n "$name" ] || continue
    if [ -n "${ONLY:-}" ] && ! grep -qw -- "$name" <<<"$ONLY"; then continue; fi
    for s in $setups; do
        log="$out/$s-$name.log"
        # shellcheck disable=SC2086 # args: the row's switches, split on purpose
        case $s in
        shm2) "$bin/braid-run" -n 2 --timeout "$tmo" "$bin/ddp_mlp" "${common[@]}" $args \
            >"$log" 2>&1 ;;
        net2) tests/net/netns.sh --timeout "$tmo" --hosts 2 --ranks-per-host 1 --rate 1gbit \
            --burst 128kb --bind -- "$bin/ddp_mlp" "${common[@]}" $args >"$log" 2>&1 ;;
        *)
            echo "unknown setup $s" >&2
            exit 2
            ;;
        esac
        rc=$?
        echo "$s $name: exit $rc, $(grep -c '^eval ' "$log") evaluations"
        [ $rc -eq 0 ] || fail=1
    done
done <<<"$ROWS"
python3 perf/dp_variants.py "$out" $(sed -n 's/^\([a-z0-9_]\+\).*/\1/p' <<<"$ROWS") \
    --setups $setups || fail=1
exit $fail
