#!/bin/sh
# braid vs Open MPI for point-to-point and all-to-all: sendrecv_perf against ompi_sendrecv_perf
# (MPI_Sendrecv to rank+1 from rank-1) and alltoall_perf against ompi_alltoall_perf
# (MPI_Alltoall), on shared memory (braid's shm transport, Open MPI's --mca btl self,vader) and
# TCP loopback (BRAID_TRANSPORT=tcp, --mca btl self,tcp), all in one session with the same flags.
#
#   perf/compare_p2p.sh [-o DIR] [-B BUILD] [-N "2 4"] [-R 3] [-b 8] [-e 64M] [-f 4] [-n 20]
#                       [-w 3] [-c 1] [-d float]   (flags parsed by perf/compare_args.sh)
#
# Every (collective, transport, N) runs both tools R times, the tool order alternating from one
# round to the next. Raw output: DIR/<coll>_<transport>_n<N>_<tool>.r<K>.{csv,log}. DIR/summary.txt
# holds the load before and after, the cross-core rate (xcore) after each round, and per size
# the median over the rounds of each tool's out-of-place busbw (GB/s), their ratio braid/ompi,
# the paired ratio (the median over the rounds of braid/ompi within one round, the two runs back
# to back: robust to a machine that changes speed between rounds), the rounds where braid was
# at or above Open MPI, and a '<' mark where the ratio is below 1 at 64 KiB or more.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
name=compare_p2p maxb=64M fac=4 iters=20 warm=3 rounds=3 tools="sendrecv_perf alltoall_perf"
. "$here/compare_args.sh"
flags="-b $minb -e $maxb -f $fac -n $iters -w $warm -c $check -d $dtype"
sum="$dir/summary.txt"
{
    echo "# compare_p2p.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cpus,"
    echo "#   $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
    echo "# uptime at start: $(uptime)"
    echo "# flags: $flags; rounds $rounds; $(mpirun --version 2>/dev/null | head -n1)"
    echo "# shm: braid-run (shm transport) vs mpirun --mca btl self,vader;"
    echo "# tcp: BRAID_TRANSPORT=tcp braid-run vs mpirun --mca btl self,tcp (loopback)"
} >"$sum"

status=0
run() { # coll transport n tool round
    c=$1 tr=$2 n=$3 t=$4 r=$5
    base="$dir/${c}_${tr}_n${n}_$t.r$r"
    rm -f "$base.csv"
    # shellcheck disable=SC2086 # flags are words
    if [ "$t" = braid ]; then
        if [ "$tr" = tcp ]; then
            BRAID_TRANSPORT=tcp "$bin/braid-run" $launch -n "$n" "$bin/${c}_perf" $flags $xflags --csv "$base.csv"
        else
            "$bin/braid-run" $launch -n "$n" "$bin/${c}_perf" $flags $xflags --csv "$base.csv"
        fi
    else
        btl=self,vader
        [ "$tr" = tcp ] && btl=self,tcp
        mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl "$btl" ${MPIRUN_ARGS:-} \
            "$bin/ompi_${c}_perf" $flags --csv "$base.csv"
    fi >"$base.log" 2>&1 || { echo "$c $tr n=$n $t round $r failed, see $base.log" >>"$sum"; status=1; }
    grep -q "Out of bounds values : 0 OK" "$base.log" ||
        { echo "$c $tr n=$n $t round $r: check not OK, see $base.log" >>"$sum"; status=1; }
}
r=1
while [ "$r" -le "$rounds" ]; do
    for c in sendrecv alltoall; do
        for tr in shm tcp; do
            for n in $ranks; do
                if [ $((r % 2)) -eq 1 ]; then
                    run "$c" "$tr" "$n" braid "$r"
                    run "$c" "$tr" "$n" ompi "$r"
                else
                    run "$c" "$tr" "$n" ompi "$r"
                    run "$c" "$tr" "$n" braid "$r"
                fi
            done
        done
    done
    echo "# round $r done $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg), $(xcore_probe)" >>"$sum"
    r=$((r + 1))
done
echo "# uptime at end: $(uptime)" >>"$sum"
# Medians of the out-of-place busbw (CSV column 10) per size, over the rounds.
for c in sendrecv alltoall; do
    for tr in shm tcp; do
        for n in $ranks; do
            echo "" >>"$sum"
            echo "$c, $tr, $n ranks: median busbw GB/s over $rounds rounds (out of place)" >>"$sum"
            awk -F, -v OFS=' ' '
                FNR == 1 {
                    tool = FILENAME ~ /_braid\./ ? "braid" : "ompi"
                    rnd = FILENAME; sub(/.*\.r/, "", rnd); sub(/\.csv$/, "", rnd); next
                }
                { k = $3 + 0; v[tool, k, ++m[tool, k]] = $10 + 0; sizes[k] = 1; per[tool, k, rnd] = $10 + 0; rnds[rnd] = 1 }
                function med(tool, k,   a, i, j, t, c) {
                    c = m[tool, k]; if (!c) return -1
                    for (i = 1; i <= c; i++) a[i] = v[tool, k, i]
                    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                    return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2 # even: mean of the middle two
                }
                END {
                    printf "%12s %10s %10s %8s %8s %6s\n", "size", "braid", "ompi", "ratio", "paired", "ahead"
                    ns = 0; for (k in sizes) s[++ns] = k + 0
                    for (i = 1; i <= ns; i++) for (j = i + 1; j <= ns; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
                    for (i = 1; i <= ns; i++) {
                        k = s[i]; b = med("braid", k); o = med("ompi", k)
                        ratio = o > 0 ? b / o : 0
                        # paired: the median over the rounds of braid / ompi within one round
                        # (the two runs back to back), robust to a machine that changes speed
                        # between rounds; ahead: the rounds where braid was at or above ompi
                        np = 0; ah = 0
                        for (r in rnds) if (((("braid", k, r) in per) && (("ompi", k, r) in per)) && per["ompi", k, r] > 0) {
                            q = per["braid", k, r] / per["ompi", k, r]; v["pair", k, ++np] = q; ah += q >= 1
                        }
                        m["pair", k] = np; p = np ? med("pair", k) : 0
                        printf "%12d %10.3f %10.3f %8.2f %8.2f %6s%s\n", k, b, o, ratio, p, ah "/" np, (k >= 65536 && b < o) ? " <" : ""
                    }
                }' "$dir/${c}_${tr}_n${n}"_*.r*.csv >>"$sum"
        done
    done
done
cat "$sum"
exit "$status"
