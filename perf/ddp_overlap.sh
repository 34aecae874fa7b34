#!/usr/bin/env bash
# DDP overlap benchmark: the trainer's step time with the buckets' all-reduces started during
# backward (overlap) against the same step with every bucket reduced only after the whole
# backward pass (ddp_mlp --no-overlap), on 2 and 4 ranks over shared memory (braid-run) and
# over 2 network-namespace hosts whose links are shaped to 1 Gbit/s (tests/net/netns.sh
# --rate 1gbit --burst 128kb --bind; needs root), 1 or 2 ranks per host.
#
# Each run trains MAX_STEPS steps (default 60) of the 784-512-512-10 MLP on Fashion-MNIST and
# prints the medians over the steps after the first WARMUP (default 10): step_ms, backward_ms
# (forward excluded; includes grad_ready) and finish_ms (the wait for the reductions left
# when backward is done). ROUNDS rounds (default 3), overlap and no-overlap alternating in
# order; the summary is the median over rounds of each figure.
#   comm_ms   = finish_ms without overlap: the all-reduce time of a step (nothing hides it)
#   hidden    = (step_noov - step_ov) / comm_ms: the fraction of it the overlap removed
#   exposed   = finish_ms with overlap
# A timeline of one overlapped step per setup is drawn by perf/ddp_timeline.py into OUT_DIR.
#
#   perf/ddp_overlap.sh OUT_DIR [ROUNDS] [BUILD_DIR]
# Environment: BATCH (global batch, default 128 per rank), BUCKET_MB (default 1), W2_BLOCKS
# (ddp_mlp --w2-blocks, default 1: W2 registered as that many row blocks, so with small buckets
# its first gradients travel while the rest of W2's are computed), W1_BLOCKS (ddp_mlp
# --w1-blocks, default the trainer's 8), MAX_STEPS, WARMUP, SETUPS
# (default "shm2 shm4 net2 net4"), EPOCHS (default 1: at most one epoch's steps are run).
# The summary's last column, "hidden (pairs)", is the median over rounds of each round's own
# (step_noov - step_ov) / comm_ms: on a machine whose speed changes between runs the two runs
# of a round, taken one after the other, are the likeliest to have met the same speed.
# ALTERNATE=1: each round is one run per setup with `ddp_mlp --alternate` (steps with and
# without overlap in turn, ~100 ms apart), whose two halves give that round's overlap and
# no-overlap figures: they meet the same machine speed, which separate runs seconds apart on a
# shared or throttled machine do not.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/ddp_overlap.sh OUT_DIR [ROUNDS] [BUILD_DIR]}
rounds=${2:-3}
bin=$(cd "${3:-build}/bin" && pwd)
bucket=${BUCKET_MB:-1}
w2blocks=${W2_BLOCKS:-1}
w1blocks=${W1_BLOCKS:-8}
steps=${MAX_STEPS:-60}
warm=${WARMUP:-10}
setups=${SETUPS:-"shm2 shm4 net2 net4"}
mkdir -p "$out"
out=$(cd "$out" && pwd)
raw="$out/raw.txt"
: >"$raw"
run() { # setup mode round
    local setup=$1 mode=$2 round=$3 n extra=() tl=""
    case $setup in
    shm2 | net2) n=2 ;;
    shm4 | net4) n=4 ;;
    esac
    local batch=${BATCH:-$((128 * n))}
    [ "$mode" = noov ] && extra=(--no-overlap)
    [ "$mode" = alt ] && extra=(--alternate)
    [ "$round" = 1 ] && [ "$mode" != alt ] && tl=(--timeline "$out/timeline-$setup-$mode")
    local args=(--epochs "${EPOCHS:-1}" --batch "$batch" --bucket-mb "$bucket" --w1-blocks "$w1blocks" --w2-blocks "$w2blocks" --max-steps "$steps"
        --warmup "$warm" --train-limit 60000 --test-limit 100 "${extra[@]}" ${tl:+"${tl[@]}"})
    local lines
    case $setup in
    shm*) lines=$("$bin/braid-run" -n "$n" --timeout 600 "$bin/ddp_mlp" "${args[@]}" 2>&1 |
        grep -E '^(overlap |no_overlap )?step_ms') ;;
    net*) lines=$(tests/net/netns.sh --timeout 600 --hosts 2 --ranks-per-host $((n / 2)) \
        --rate 1gbit --burst 128kb --bind -- "$bin/ddp_mlp" "${args[@]}" 2>&1 |
        grep -E '^(overlap |no_overlap )?step_ms') ;;
    esac
    local m line
    for m in ov noov; do
        line=$lines
        if [ "$mode" = alt ]; then
            line=$(grep "^overlap " <<<"$lines")
            [ $m = noov ] && line=$(grep "^no_overlap " <<<"$lines")
            line=${line#* }
        elif [ "$mode" != $m ]; then
            continue
        fi
        echo "$setup $m round $round batch $batch bucket_mb $bucket w2_blocks $w2blocks $line" |
            tee -a "$raw"
    done
}
for r in $(seq 1 "$rounds"); do
    for s in $setups; do
        if [ "${ALTERNATE:-0}" = 1 ]; then
            run "$s" alt "$r"
        elif [ $((r % 2)) -eq 1 ]; then
            run "$s" ov "$r"
            run "$s" noov "$r"
        else
            run "$s" noov "$r"
            run "$s" ov "$r"
        fi
    done
done
python3 - "$raw" <<'PY' | tee "$out/summary.md"
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if "step_ms" not in f:
        continue
    kv = {f[i]: f[i + 1] for i in range(len(f) - 1)}
    rows.setdefault((f[0], f[1]), []).append(
        (float(kv["step_ms"]), float(kv["backward_ms"]), float(kv["finish_ms"]), kv["batch"],
         int(kv["round"])))
print("| setup | ranks | global batch | step ms (overlap) | step ms (no overlap) | comm ms (no-overlap finish) | exposed ms (overlap finish) | hidden | hidden (pairs) |")
print("|---|---|---|---|---|---|---|---|---|")
names = {"shm2": ("shm", 2), "shm4": ("shm", 4), "net2": ("2 hosts x 1, 1 Gbit/s", 2),
         "net4": ("2 hosts x 2, 1 Gbit/s", 4)}
for s in ["shm2", "shm4", "net2", "net4"]:
    if (s, "ov") not in rows or (s, "noov") not in rows:
        continue
    med = lambda k, i: statistics.median(r[i] for r in rows[(s, k)])
    so, sn, cn, fo = med("ov", 0), med("noov", 0), med("noov", 2), med("ov", 2)
    hid = (sn - so) / cn if cn > 0 else float("nan")
    by_round = {r[4]: r for r in rows[(s, "ov")]}
    pairs = [(n[0] - by_round[n[4]][0]) / n[2] for n in rows[(s, "noov")]
             if n[4] in by_round and n[2] > 0]
    hp = statistics.median(pairs) if pairs else float("nan")
    print(f"| {names[s][0]} | {names[s][1]} | {rows[(s, 'ov')][0][3]} | {so:.1f} | {sn:.1f} | {cn:.1f} | {fo:.1f} | {hid * 100:.0f}% | {hp * 100:.0f}% |")
PY
for s in $setups; do
    for m in ov noov; do
        files=("$out/timeline-$s-$m".[0-9]*)
        [ -e "${files[0]}" ] || continue
        python3 perf/ddp_timeline.py -o "$out/timeline-$s-$m.png" \
            --title "ddp_mlp, one step, $s, $m (bucket ${bucket} MiB)" "${files[@]}"
    done
done
