#!/usr/bin/env bash
# BRAID_NT_MIN A/B on the direct shared-memory all-reduce: 4 MiB..256 MiB at 2 and 4 ranks, the
# output written with ordinary stores (BRAID_NT_MIN=0) or streaming stores (=1: every output),
# ROUNDS interleaved rounds (default 3); OUT_DIR/summary.txt has the median out-of-place times.
#
#   perf/nt_ab.sh OUT_DIR [ROUNDS] [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/nt_ab.sh OUT_DIR [ROUNDS] [BUILD_DIR]}
rounds=${2:-3}
bin=$(cd "${3:-build}/bin" && pwd) || exit 1
mkdir -p "$out"
for r in $(seq "$rounds"); do
    for n in 2 4; do
        for nt in 0 1; do
            BRAID_ALGO=direct BRAID_NT_MIN=$nt "$bin/braid-run" -n $n "$bin/all_reduce_perf" \
                -b 4M -e 256M -f 4 -n 10 -w 3 -c 0 >"$out/n$n.nt$nt.r$r.log" 2>&1
        done
    done
done
median() { # n nt size: the median out-of-place time (us) over the rounds
    for r in $(seq "$rounds"); do
        awk -v s="$3" '$1 == s { print $6 }' "$out/n$1.nt$2.r$r.log"
    done | sort -g | awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
{
    echo "size ranks nt=0_us nt=1_us (median of $rounds rounds, out of place)"
    for n in 2 4; do
        for sz in 4194304 16777216 67108864 268435456; do
            echo "$sz $n $(median $n 0 $sz) $(median $n 1 $sz)"
        done
    done
} | tee "$out/summary.txt"
