#!/bin/sh
# braid (TCP transport) vs Open MPI (btl tcp,self) vs Gloo (TCP ring all-reduce) on loopback:
# runs all_reduce_perf, ompi_allreduce_perf and gloo_allreduce_perf in one session with the same
# flags, and writes CSVs, logs, a PNG and a table.
#
#   perf/compare_tcp.sh [-o DIR] [-B BUILD] [-N "2 4"] [-b 8] [-e 64M] [-f 2] [-n 10] [-w 3]
#                       [-c 1] [-d float] [-O sum] [-R 1] [-- extra flags for all three tools]
#
#   -o DIR    results directory (default perf/results/<date>-<host>-tcp)
#   -B BUILD  build directory holding bin/braid-run and bin/all_reduce_perf (default build)
#   -N LIST   rank counts (default "2 4")
#   -b/-e/-f/-n/-w/-c/-d/-O  as the perf tools' -b -e -f -n -w -c -d -o
#   -R K      rounds (default 1): the whole set of runs K times (the order keeps rotating);
#             round r writes DIR/{braid,ompi,gloo}_nN.rR.csv/.log, and DIR/<tool>_nN.csv then
#             holds, per size, the measured row with the median out-of-place time of the K rounds
#             (an even K: the mean of the two middle rows, see median_csv in compare_args.sh;
#             the table and plots use these medians)
#
# Per rank count N: DIR/{braid,ompi,gloo}_nN.csv and .log. The three tools run one after the
# other for each N, and the order rotates from one N to the next (N=2: braid ompi gloo, N=4:
# ompi gloo braid, ...) so no tool always runs first or last in a drifting load.
#   braid     BRAID_TRANSPORT=tcp BUILD/bin/braid-run -n N BUILD/bin/all_reduce_perf ...
#   Open MPI  mpirun --allow-run-as-root --oversubscribe -np N --mca btl tcp,self \
#                 $MPIRUN_ARGS BUILD/bin/ompi_allreduce_perf ...   (perf/peers/build.sh if missing)
#   Gloo      BUILD/bin/braid-run -n N BUILD/bin/gloo_allreduce_perf ...   (perf/peers/gloo_build.sh)
# DIR/summary.txt: uptime/load before and after, versions, the loopback TCP ceiling before and
# after (perf/tcpbw, DIR/tcpbw_nN.{before,after}.txt), and out-of-place time (us) and busbw
# (GB/s) of the three at 8 B, 1 MiB, 16 MiB, 64 MiB and the largest size, with braid/gloo and
# braid/ompi busbw ratios and braid's busbw over the ceiling; a wanted size the sweep does not hit is replaced by the nearest one it
# has. (Default -f 2: with -b 8 -f 4 the sweep hits only odd powers of two, 8 B .. 32 MiB, and
# misses 1, 16 and 64 MiB; -f 2 holds every -f 4 size too.)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

name=tcp maxb=64M iters=10 warm=3
. "$here/compare_args.sh"
shift $((OPTIND - 1))
[ -x "$bin/gloo_allreduce_perf" ] || "$here/peers/gloo_build.sh" "$bin"

flags="-b $minb -e $maxb -f $fac -n $iters -w $warm -c $check -d $dtype -o $op"
{
    echo "# compare_tcp.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cpus"
    echo "# uptime at start: $(uptime)"
    echo "# flags: $flags $*"
    echo "# braid: BRAID_TRANSPORT=tcp braid-run; $(mpirun --version 2>/dev/null | head -n1), --mca btl tcp,self;"
    echo "#   Gloo $(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null || echo '?') (libgloo-dev), gloo::allreduce RING over tcp 127.0.0.1"
    env | grep '^BRAID_' | sed 's/^BRAID_SECRET=.*/BRAID_SECRET=(set)/; s/^/# /' || true
} >"$dir/summary.txt"

# The loopback TCP ceiling (perf/tcpbw: N processes in a ring, each sending from and receiving
# into buffers of 128 MiB at once, best of chunks 256K and 1M and socket buffers autotuned and
# 128K; per rank, each way), before the runs and after them: a ring all-reduce's busbw is the
# same bytes per second, with the reductions on top.
ceiling() { # when
    for n in $ranks; do
        if [ -x "$bin/tcpbw" ] && "$bin/tcpbw" -n "$n" -s 128M -b "0 128K" >"$dir/tcpbw_n$n.$1.txt" 2>&1; then
            echo "# tcpbw $1, $n ranks: $(awk '/best/ { print $NF }' "$dir/tcpbw_n$n.$1.txt") GB/s" >>"$dir/summary.txt"
        else
            echo "# tcpbw $1, $n ranks: failed, see $dir/tcpbw_n$n.$1.txt" >>"$dir/summary.txt"
        fi
    done
}
ceiling before

status=0
run_tool() { # tool n round
    t=$1 n=$2 sfx=""
    [ "$rounds" -gt 1 ] && sfx=".r$3"
    log="$dir/$1_n$2$sfx.log" csv="$dir/$1_n$2$sfx.csv"
    shift 3
    rm -f "$csv"
    echo "== $t, $n ranks${sfx:+, round ${sfx#.r}} ($(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$dir/summary.txt"
    start=$(date +%s)
    # shellcheck disable=SC2086 # flags are words
    case $t in
    braid) BRAID_TRANSPORT=tcp "$bin/braid-run" $launch -n "$n" "$bin/all_reduce_perf" $flags $xflags --csv "$csv" "$@" ;;
    ompi) mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl tcp,self ${MPIRUN_ARGS:-} \
        "$bin/ompi_allreduce_perf" $flags --csv "$csv" "$@" ;;
    gloo) "$bin/braid-run" -n "$n" "$bin/gloo_allreduce_perf" $flags --csv "$csv" "$@" ;;
    esac >"$log" 2>&1 || { echo "$t n=$n failed (exit $?), see $log" | tee -a "$dir/summary.txt"; status=1; }
    echo "   $(($(date +%s) - start)) s; $(grep -E '^# (Out of|Avg)' "$log" | tr '\n' ' ')" | tee -a "$dir/summary.txt"
}
order="braid ompi gloo"
r=1
while [ "$r" -le "$rounds" ]; do
    for n in $ranks; do
        for t in $order; do run_tool "$t" "$n" "$r" "$@"; done
        order="${order#* } ${order%% *}" # rotate: first tool goes last
    done
    r=$((r + 1))
done
if [ "$rounds" -gt 1 ]; then
    for n in $ranks; do
        for t in braid ompi gloo; do
            set -- "$dir/${t}_n$n".r*.csv
            [ -s "$1" ] && median_csv "$dir/${t}_n$n.csv" "$@"
        done
    done
    echo "# tables and plots: per size, the median of $rounds rounds" >>"$dir/summary.txt"
fi
ceiling after
echo "# uptime at end: $(uptime)" >>"$dir/summary.txt"

# Plot every CSV that has rows.
set --
for n in $ranks; do
    for lib in braid ompi gloo; do
        f="$dir/${lib}_n$n.csv"
        [ -s "$f" ] && set -- "$@" "$lib n=$n=$f"
    done
done
if [ $# -gt 0 ] && command -v gnuplot >/dev/null 2>&1; then
    "$here/plot.sh" -o "$dir/busbw.png" -T "all_reduce $dtype $op over TCP loopback: busbw" "$@" || true
    "$here/plot.sh" -o "$dir/time.png" -y time_oop_us -T "all_reduce $dtype $op over TCP loopback: time" "$@" || true
fi

# Table: out-of-place time (us) and busbw (GB/s) of the three at a few sizes.
{
    printf '\n%-5s %10s %11s %11s %11s %9s %9s %9s %11s %10s %8s %9s\n' ranks size braid_us ompi_us \
        gloo_us braid_BW ompi_BW gloo_BW braid/gloo braid/ompi tcp_BW braid/tcp
    for n in $ranks; do
        # the higher of the two ceilings
        tcp=$(cat "$dir/tcpbw_n$n".*.txt 2>/dev/null | awk '/best/ && $NF > m { m = $NF } END { print m + 0 }')
        b="$dir/braid_n$n.csv" o="$dir/ompi_n$n.csv" g="$dir/gloo_n$n.csv"
        [ -s "$b" ] || b=/dev/null
        [ -s "$o" ] || o=/dev/null
        [ -s "$g" ] || g=/dev/null
        [ "$b$o$g" = /dev/null/dev/null/dev/null ] && continue
        awk -F, -v n="$n" -v B="$b" -v O="$o" -v tcp="$tcp" '
            FNR == 1 { file = FILENAME == B ? 1 : FILENAME == O ? 2 : 3; next }
            { t[file, $3] = $8; bw[file, $3] = $10; have[$3] = 1; if ($3 + 0 > max) max = $3 + 0 }
            function us(f, s) { return ((f, s) in t) ? sprintf("%11.1f", t[f, s]) : sprintf("%11s", "-") }
            function gb(f, s) { return ((f, s) in bw) ? sprintf("%9.3f", bw[f, s]) : sprintf("%9s", "-") }
            function frac(s) { return tcp > 0 && ((1, s) in bw) ? sprintf("%.2f", bw[1, s] / tcp) : "-" }
            function ratio(s, f) {
                return ((1, s) in bw) && ((f, s) in bw) && bw[f, s] > 0 ? sprintf("%.2f", bw[1, s] / bw[f, s]) : "-"
            }
            END {
                nh = 0; for (x in have) hs[++nh] = x + 0
                split("8 1048576 16777216 67108864", want, " "); want[5] = max
                k = 0
                for (i = 1; i <= 5; i++) {
                    best = -1
                    for (j = 1; j <= nh; j++) {
                        d = log(hs[j] / want[i]); if (d < 0) d = -d
                        if (best < 0 || d < bd || (d == bd && hs[j] < best)) { best = hs[j]; bd = d }
                    }
                    if (best < 0 || (best in seen)) continue
                    seen[best] = 1; sz[++k] = best
                }
                for (i = 1; i <= k; i++) {
                    s = sz[i]
                    printf "%-5s %10d %s %s %s %s %s %s %11s %10s %8.3f %9s\n", n, s, us(1, s), us(2, s),
                        us(3, s), gb(1, s), gb(2, s), gb(3, s), ratio(s, 3), ratio(s, 2), tcp, frac(s)
                }
            }' "$b" "$o" "$g"
    done
    echo "(out of place; BW = busbw GB/s; ratios = braid busbw / gloo, / Open MPI busbw; tcp_BW: the"
    echo " loopback TCP ceiling of perf/tcpbw, the higher of before and after; braid/tcp: braid's busbw over it)"
} | tee -a "$dir/summary.txt"
echo "results in $dir"
exit $status
