#!/usr/bin/env bash
# Ring vs hierarchical vs automatic on 2 network-namespace hosts x 2 ranks with the inter-host
# links shaped to 1 Gbit/s (tests/net/netns.sh; needs root): all-reduce 8 B..256 MiB (forced
# ring, hier, recdbl up to 1 MiB; automatic with the constants `braid-info --tune --measure`
# measured on this setup, and automatic with the built-in constants), broadcast (ring, hier,
# tree, auto) and reduce-scatter (ring, hier, auto). REPS repetitions, the algorithm order
# reversed on every other one (the machine's load drifts); perf/netns_algos_summary.py makes
# the tables (best time of the repetitions, out of place) from OUT/raw.txt.
#
#   perf/netns_algos.sh OUT_DIR [REPS] [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/netns_algos.sh OUT_DIR [REPS] [BUILD_DIR]}
reps=${2:-2}
bin=$(cd "${3:-build}/bin" && pwd)
mkdir -p "$out"
tune="$(cd "$out" && pwd)/netns-1gbit.tune"
net() { # label tool args...
    local label=$1 tool=$2
    shift 2
    # shellcheck disable=SC2086
    tests/net/netns.sh --timeout 900 --hosts 2 --ranks-per-host 2 --rate 1gbit $envx -- \
        "$bin/$tool" "$@" -c 1 2>&1 | grep -E "^ +[0-9]|wrong|error|FAIL" |
        awk -v t="$label" '{print t, $0}'
}
setcfg() {
    case $1 in
    auto) envx="-x BRAID_TUNING_FILE=$tune" ;;
    autodef) envx="" ;;
    *) envx="-x BRAID_ALGO=$1" ;;
    esac
}
order() { # reversed on even repetitions
    if [ $(($1 % 2)) -eq 0 ]; then shift; printf '%s\n' "$@" | tac; else shift; printf '%s\n' "$@"; fi
}
tests/net/netns.sh --timeout 120 --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
    "$bin/braid-info" --tune --measure "$tune" >"$out/measure.log" 2>&1 || exit 1
for rep in $(seq 1 "$reps"); do
    echo "# rep $rep start load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
    for a in $(order "$rep" ring hier recdbl auto autodef); do
        setcfg "$a"
        net "allreduce $a small" all_reduce_perf -b 8 -e 1M -f 2 -n 40 -w 5
        [ "$a" = recdbl ] || net "allreduce $a large" all_reduce_perf -b 2M -e 256M -f 2 -n 3 -w 1
    done
    for a in $(order "$rep" ring hier tree auto); do
        setcfg "$a"
        net "broadcast $a small" broadcast_perf -b 8 -e 1M -f 4 -n 40 -w 5
        [ "$a" = tree ] || net "broadcast $a large" broadcast_perf -b 4M -e 256M -f 4 -n 3 -w 1
    done
    for a in $(order "$rep" ring hier auto); do
        setcfg "$a"
        net "reduce_scatter $a small" reduce_scatter_perf -b 8 -e 1M -f 4 -n 40 -w 5
        net "reduce_scatter $a large" reduce_scatter_perf -b 4M -e 256M -f 4 -n 3 -w 1
    done
    echo "# rep $rep end load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
done | tee -a "$out/raw.txt"
