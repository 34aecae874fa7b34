#!/usr/bin/env bash
# The automatic choice against every forced all-reduce algorithm on 2 network-namespace hosts
# x 2 ranks, inter-host links shaped to 1 Gbit/s (tests/net/netns.sh; needs root), 8 B..256
# MiB: ring, hier, recdbl (up to 1 MiB) and auto, the model's constants measured once on this
# setup by `braid-info --tune --measure` (the file is kept in OUT_DIR). ROUNDS rounds, the
# algorithm order reversed on every other one; the tables are medians over the rounds
# (perf/netns_algos_summary.py --median OUT_DIR/raw.txt).
#
# The shaper's bucket is 128 KB by default (BURST): about 1 ms at 1 Gbit/s, enough for 64 KB
# TCP segments at full rate (a 16-64 KB bucket costs 25-45% of the rate here), small enough
# that a run at any size reaches its steady state within the warm-up (a 1 MB bucket lets the
# first ~1 MB of a run pass at veth speed, so 16-64 KiB results depended on the sizes before).
# Ranks are bound to cores (netns.sh --bind: rank r on cpu r mod 2), as launchers bind them;
# with floating ranks, whole runs of 4 ranks on 2 cores landed in a fast or a slow mode (the
# same recursive doubling at 8 B: 16-19 us or 29-34 us per call). Small sizes (8 B..1 MiB)
# run SMALL_ROUNDS times (default 7), large ones ROUNDS times. Up to 64 KiB each size warms up
# with 300 calls before 200 timed ones, so that the shaper's bucket is drained and the timed
# calls see the link's steady state (with 20 warm-up calls, 2 KiB recursive doubling still ran
# on the bucket: 26 us per call where its 4 KiB per host per call needs 34 us at the rate).
# BRAID_ALGO=hier runs its stages with their own models' choices, as auto's hier does.
#
#   perf/netns_auto.sh OUT_DIR [ROUNDS] [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/netns_auto.sh OUT_DIR [ROUNDS] [BUILD_DIR]}
rounds=${2:-3}
bin=$(cd "${3:-build}/bin" && pwd)
burst=${BURST:-128kb}
mkdir -p "$out"
tune="$(cd "$out" && pwd)/netns-1gbit.tune"
shape=(--hosts 2 --ranks-per-host 2 --rate 1gbit --burst "$burst" --bind)
tests/net/netns.sh --timeout 120 "${shape[@]}" -- "$bin/braid-info" --tune --measure "$tune" \
    >"$out/measure.log" 2>&1 || exit 1
tests/net/netns.sh --timeout 120 "${shape[@]}" -x BRAID_TUNING_FILE="$tune" -x BRAID_DEBUG=INFO \
    -x BRAID_DEBUG_SUBSYS=TUNING -- "$bin/all_reduce_perf" -b 8 -e 8 -n 1 -w 0 2>&1 |
    grep -E '^\[0\].*TUNING' >"$out/model.txt"
run() { # label args...
    local label=$1 env=()
    shift
    case $label in
    auto) env=(-x BRAID_TUNING_FILE="$tune") ;;
    *) env=(-x BRAID_ALGO="$label") ;;
    esac
    tests/net/netns.sh --timeout 900 "${shape[@]}" "${env[@]}" -- "$bin/all_reduce_perf" "$@" \
        -c 1 2>&1 | grep -E "^ +[0-9]|wrong|error|FAIL" | awk -v t="$label" '{print "allreduce", t, "run", $0}'
}
small_rounds=${SMALL_ROUNDS:-7}
[ "$small_rounds" -ge "$rounds" ] || small_rounds=$rounds
for r in $(seq 1 "$small_rounds"); do
    algos="ring hier recdbl auto"
    [ $((r % 2)) -eq 0 ] && algos="auto recdbl hier ring"
    echo "# round $r start load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
    for a in $algos; do
        run "$a" -b 8 -e 64K -f 2 -n 200 -w 300
        run "$a" -b 128K -e 1M -f 2 -n 20 -w 5
        [ "$a" = recdbl ] || [ "$r" -gt "$rounds" ] || run "$a" -b 2M -e 256M -f 2 -n 3 -w 2
    done
    echo "# round $r end load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
done | tee -a "$out/raw.txt"
python3 perf/netns_algos_summary.py --median "$out/raw.txt" | tee "$out/summary-median.md"
