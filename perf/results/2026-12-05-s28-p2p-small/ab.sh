#!/bin/sh
# Session 28: small-message point-to-point, the build before the session's p2p changes (A,
# a092586, built in a worktree) against main (B), alternated, 7 rounds; us per call (-n 20000).
#   A=/path/to/build-a B=/path/to/build-b sh ab.sh > ab.txt
for case in "1 sendrecv_perf 8" "2 sendrecv_perf 8" "4 sendrecv_perf 8" "2 alltoall_perf 64" \
    "4 alltoall_perf 256" "2 sendrecv_perf 512 -m 4" "2 sendrecv_perf 4K -m 4"; do
    set -- $case
    n=$1 tool=$2 size=$3
    shift 3
    for r in 1 2 3 4 5 6 7; do
        for b in "$A" "$B"; do
            t=$("$b/bin/braid-run" -n "$n" "$b/bin/$tool" -b "$size" -e "$size" -n 20000 -w 200 \
                -c 0 "$@" | awk '/^ +[0-9]/ { print $6 }')
            [ "$b" = "$A" ] && echo "A $t" || echo "B $t"
        done
    done | awk -v c="$case" '{ v[$1] = v[$1] " " $2 } END { print c ": A" v["A"] "; B" v["B"] }'
done
