#!/usr/bin/env bash
# Local SGD and asynchronous DP runs of the Fashion-MNIST trainer (examples/ddp_mlp, issue 16),
# over shared memory on this machine, one run per configuration:
#
#   perf/dp_async.sh OUT_DIR [BUILD_DIR]
#
# localsgd   2 ranks, plain DDP and --local-sgd 1, 4, 16 (Adam): final test accuracy and
#            comm_bytes_per_step (what one rank sends per step in ring all-reduces)
# straggler  3 workers, rank 2 slowed 3x (--slow-rank 2 --slow-factor 3) or not: sync DDP on 3
#            ranks vs --async with 3 workers + 1 server; samples/s per worker (sync: all ranks
#            advance together, so per rank = the epoch's samples/s / 3)
# converge   sync DDP on 3 ranks vs --async 3 workers + 1 server, same global batch: final
#            test accuracy
# Environment: EPOCHS (3, localsgd and converge), STRAGGLER_LIMIT (training images of the
# straggler runs, 12000), ONLY (parts to run: "localsgd straggler converge").
# Outputs: OUT_DIR/<part>-<name>.log and a Markdown table on stdout.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/dp_async.sh OUT_DIR [BUILD_DIR]}
bin=$(cd "${2:-build}/bin" && pwd) || exit 1
mkdir -p "$out"
epochs=${EPOCHS:-3}
only=${ONLY:-localsgd straggler converge}
run() { # name ranks args...
    local name=$1 n=$2
    shift 2
    "$bin/braid-run" -n "$n" --timeout 3600 "$bin/ddp_mlp" "$@" >"$out/$name.log" 2>&1 ||
        echo "$name: exit $?" >&2
}
acc() { # final accuracy: the async summary line, else the last epoch line
    awk '/^async workers/ {a = $11} /^epoch / {e = $6} END {print (a != "" ? a : e)}' "$1"
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if grep -qw localsgd <<<"$only"; then
    echo
    echo "| local SGD (2 ranks, Adam, batch 128, $epochs epochs) | test acc | comm_bytes_per_step |"
    echo "|---|---|---|"
    run localsgd-ddp 2 --epochs "$epochs"
    # plain DDP: one all-reduce of the 669706 float32 parameters' gradients per step
    echo "| DDP | $(acc "$out/localsgd-ddp.log") | 2678824 (computed: 2(n-1)/n x 2678824 B) |"
    for k in 1 4 16; do
        run "localsgd-k$k" 2 --epochs "$epochs" --local-sgd "$k"
        echo "| local SGD K=$k | $(acc "$out/localsgd-k$k.log") |" \
            "$(awk '/^comm_bytes_per_step/ {print $2}' "$out/localsgd-k$k.log") |"
    done
fi
if grep -qw straggler <<<"$only"; then
    lim=${STRAGGLER_LIMIT:-12000}
    common=(--epochs 1 --batch 96 --train-limit "$lim" --test-limit 1000)
    echo
    echo "| straggler ($lim images, batch 96, 3 workers) | worker 0 | worker 1 | worker 2 (slowed) |"
    echo "|---|---|---|---|"
    for slow in no yes; do
        extra=()
        [ $slow = yes ] && extra=(--slow-rank 2 --slow-factor 3)
        run "straggler-sync-$slow" 3 "${common[@]}" "${extra[@]}"
        r=$(awk '/^epoch / {printf "%.0f", $8 / 3}' "$out/straggler-sync-$slow.log")
        echo "| sync DDP, slow $slow (samples/s per rank) | $r | $r | $r |"
        run "straggler-async-$slow" 4 "${common[@]}" --async "${extra[@]}"
        echo "| async, slow $slow (samples/s) |" \
            "$(awk '/^worker / {s[$2] = $6} END {print s[0] " | " s[1] " | " s[2]}' \
                "$out/straggler-async-$slow.log") |"
    done
fi
if grep -qw converge <<<"$only"; then
    echo
    echo "| convergence (batch 96, $epochs epochs, Adam) | test acc |"
    echo "|---|---|"
    run converge-sync 3 --epochs "$epochs" --batch 96
    echo "| sync DDP, 3 ranks | $(acc "$out/converge-sync.log") |"
    run converge-async 4 --epochs "$epochs" --batch 96 --async
    echo "| async, 3 workers + 1 server, staleness 16 | $(acc "$out/converge-async.log") |"
    grep '^server ' "$out/converge-async.log" | sed 's/^/    /'
fi
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
