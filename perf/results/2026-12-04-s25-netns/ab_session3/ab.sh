#!/usr/bin/env bash
# A/B of session 3's main (1b0a429, built in /tmp/old3/build) against today's build on the
# netns_auto shape (2 hosts x 2, 1 Gbit/s, 128 KB bucket, bound ranks): forced ring, hier,
# recdbl at 8 B - 4 KiB, and hier at 1 MiB, builds alternated ROUNDS times.
#   ab.sh OLD_BUILD NEW_BUILD [ROUNDS]
old=$1 new=$2 rounds=${3:-3}
cd "$(dirname "$0")/../../../.." || exit 1
for r in $(seq 1 "$rounds"); do
    for b in "$old" "$new"; do
        tag=$([ "$b" = "$old" ] && echo old || echo new)
        for a in ring hier recdbl; do
            tests/net/netns.sh --timeout 300 --hosts 2 --ranks-per-host 2 --rate 1gbit --burst 128kb \
                --bind -x BRAID_ALGO=$a -- "$b/bin/all_reduce_perf" -b 8 -e 4K -f 8 -n 200 -w 300 -c 1 2>&1 |
                grep -E "^ +[0-9]" | awk -v t="$tag $a r$r" '{print t, $1, $6, $10}'
        done
        tests/net/netns.sh --timeout 300 --hosts 2 --ranks-per-host 2 --rate 1gbit --burst 128kb \
            --bind -x BRAID_ALGO=hier -- "$b/bin/all_reduce_perf" -b 1M -e 1M -n 20 -w 5 -c 1 2>&1 |
            grep -E "^ +[0-9]" | awk -v t="$tag hier r$r" '{print t, $1, $6, $10}'
    done
done
