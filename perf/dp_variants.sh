#!/usr/bin/env bash
# Data-parallel variants of the Fashion-MNIST trainer (examples/ddp_mlp): per setup, one full
# training run per row of ROWS below, then a step-time pass of short runs, and one table: final
# test accuracy and training time to 85% test accuracy (from the full runs), bytes sent per step
# per rank, gradient + optimizer state bytes per rank, and the step time (from the step-time
# pass); and a PNG of test accuracy against training time (evaluations excluded) per setup.
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
# TEST_LIMIT (0 = all), ONLY (row names to run, default all), TIMEOUT (the cap of each full run,
# in seconds, default 120 per epoch: a run past it is killed and its row reported as timed out,
# and the script goes on with the next run).
# Step-time pass: ROUNDS (default 3; 0 skips the pass) rounds; in each, every row and setup runs
# once (rows interleaved round by round, so that a slow minute of the machine hits every row
# alike), STEP_WARMUP + STEPS steps (defaults 16 + 96: multiples of 16, so that the measured
# steps hold whole periods of local SGD's k = 4 and 16, averaging steps included), on the first
# (STEP_WARMUP + STEPS) x BATCH training images (one epoch), with no evaluation; STEP_TIMEOUT caps
# each of these runs (default 120 s). A run's step time is the trainer's mean_step_ms: the mean
# wall time of rank 0's steps after the warm-up, from taking the batch to the step's end
# (sync: forward, backward, the reduction, the optimizer, ZeRO's all-gather, local SGD's
# averaging on its k-th steps; async: worker 0's forward, backward and push_pull, i.e. the
# per-worker step). The table gives the median of the ROUNDS runs and their min-max.
# Time, SETUPS="shm2 net2" EPOCHS=3 on the 2-vCPU VM with nothing else running: about 19
# minutes, estimated from the rows' step times of session 7 (perf/RESULTS.md): the 18 full
# runs about 14.5 (1404 steps each, net2 async the longest at about 2), the 54 step-time runs
# about 4.5 (112 steps and about 1 s of start-up each). OUT_DIR/run.txt records each run's
# time and the load average at its start, and the total.
# Outputs in OUT_DIR: <setup>-<row>.log (the trainer's output), steps/<setup>-<row>.<round>.log,
# run.txt, table.md, accuracy_vs_time.png.
#
# bytes/step: what one rank sends per step with ring algorithms (the trainer's
# comm_bytes_per_step: 2(n-1)/n of an all-reduce's bytes; ZeRO: reduce-scatter + all-gather).
# state: the gradients the DDP layer keeps + the optimizer state (+ ZeRO-2's staging buffers,
# + PowerSGD's error-feedback/Q buffers), per rank (the trainer's state_bytes).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/dp_variants.sh OUT_DIR [BUILD_DIR]}
bin=$(cd "${2:-build}/bin" && pwd) || exit 1
mkdir -p "$out/steps"
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
epochs=${EPOCHS:-5}
batch=${BATCH:-128}
common=(--batch "$batch" --bucket-mb "${BUCKET_MB:-0.25}")
full=(--epochs "$epochs" --eval-every "${EVAL_EVERY:-100}" --train-limit "${TRAIN_LIMIT:-0}"
    --test-limit "${TEST_LIMIT:-0}")
warm=${STEP_WARMUP:-16}
nsteps=${STEPS:-96}
short=(--epochs 1 --eval-every 0 --max-steps $((warm + nsteps)) --warmup "$warm"
    --train-limit $(((warm + nsteps) * batch)) --test-limit 1000)
tmo=${TIMEOUT:-$((120 * epochs))}
step_tmo=${STEP_TIMEOUT:-120}
rounds=${ROUNDS:-3}
fail=0
t_start=$(date +%s)
: >"$out/run.txt"
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/run.txt"

# run SETUP LOG CAP ARGS...: the trainer on SETUP with ARGS, output in LOG, killed after CAP s;
# appends `dp_variants.sh: exit RC after S s` to LOG (RC 124: the cap).
run() {
    local s=$1 log=$2 cap=$3 t0 rc
    shift 3
    t0=$(date +%s)
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    case $s in
    shm2) "$bin/braid-run" -n 2 --timeout "$cap" "$bin/ddp_mlp" "$@" >"$log" 2>&1 ;;
    net2) tests/net/netns.sh --timeout "$cap" --hosts 2 --ranks-per-host 1 --rate 1gbit \
        --burst 128kb --bind -- "$bin/ddp_mlp" "$@" >"$log" 2>&1 ;;
    *)
        echo "unknown setup $s" >&2
        exit 2
        ;;
    esac
    rc=$?
    echo "dp_variants.sh: exit $rc after $(($(date +%s) - t0)) s (cap $cap s)" >>"$log"
    echo "$(basename "$log") exit $rc $(($(date +%s) - t0)) s load $load" >>"$out/run.txt"
    return $rc
}

names=()
while read -r name args; do
    [ -n "$name" ] || continue
    if [ -n "${ONLY:-}" ] && ! grep -qw -- "$name" <<<"$ONLY"; then continue; fi
    names+=("$name")
    for s in $setups; do
        log="$out/$s-$name.log"
        # shellcheck disable=SC2086 # args: the row's switches, split on purpose
        run "$s" "$log" "$tmo" "${common[@]}" "${full[@]}" $args
        rc=$?
        echo "$s $name: exit $rc, $(grep -c '^eval ' "$log") evaluations"
        [ $rc -eq 0 ] || fail=1
    done
done <<<"$ROWS"

for ((k = 1; k <= rounds; k++)); do
    while read -r name args; do
        [ -n "$name" ] || continue
        if [ -n "${ONLY:-}" ] && ! grep -qw -- "$name" <<<"$ONLY"; then continue; fi
        for s in $setups; do
            log="$out/steps/$s-$name.$k.log"
            # shellcheck disable=SC2086
            run "$s" "$log" "$step_tmo" "${common[@]}" "${short[@]}" $args || fail=1
        done
    done <<<"$ROWS"
    echo "step-time round $k of $rounds done"
done
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) total $(($(date +%s) - t_start)) s" \
    >>"$out/run.txt"
tail -n 1 "$out/run.txt"
python3 perf/dp_variants.py "$out" "${names[@]}" --setups $setups --rounds "$rounds" || fail=1
exit $fail
