#!/bin/sh
# Runs braid's all_reduce_perf and Open MPI's MPI_Allreduce (perf/peers/ompi_allreduce_perf)
# in one session with the same flags, and writes CSVs, logs, a comparison PNG and a table.
#
#   perf/compare.sh [-o DIR] [-B BUILD] [-N "2 4"] [-b 8] [-e 256M] [-f 2] [-n 20] [-w 5]
#                   [-c 1] [-d float] [-O sum] [-R 1] [-L "braid-run flags"] [-X "braid's
#                   all_reduce_perf flags"] [-- extra all_reduce_perf flags, both tools]
#
#   -o DIR    results directory (default perf/results/<date>-<host>)
#   -B BUILD  build directory holding bin/braid-run and bin/all_reduce_perf (default build)
#   -N LIST   rank counts (default "2 4")
#   -b/-e/-f/-n/-w/-c/-d/-O  as the perf tools' -b -e -f -n -w -c -d -o
#   -R K      rounds (default 1): every run K times; round r writes DIR/<tool>_nN.rR.csv/.log and
#             DIR/<tool>_nN.csv holds, per size, the measured row with the median out-of-place
#             time of the K rounds (the table and plots use it; for an even K, the mean of the
#             two middle rows, see median_csv in compare_args.sh)
#
# Per rank count N: DIR/braid_nN.csv, DIR/ompi_nN.csv and their stdout logs; then DIR/busbw.png
# (all runs) and DIR/summary.txt (busbw of both at 8B, 1M, 16M, 256M and the largest size).
# braid runs as  BUILD/bin/braid-run -n N BUILD/bin/all_reduce_perf ...
# Open MPI as    mpirun --allow-run-as-root --oversubscribe -np N --mca btl self,vader \
#                    $MPIRUN_ARGS BUILD/bin/ompi_allreduce_perf ...
# (built by perf/peers/build.sh when missing). BRAID_* variables pass through to braid.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

name=shm maxb=256M iters=20 warm=5
. "$here/compare_args.sh"
shift $((OPTIND - 1))

flags="-b $minb -e $maxb -f $fac -n $iters -w $warm -c $check -d $dtype -o $op"
{
    echo "# compare.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cpus"
    echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work skews the numbers)"
    echo "# flags: $flags $*; braid-run ${launch:-(no flags)}, braid's tool also ${xflags:-(nothing)}"
    echo "# $(mpirun --version 2>/dev/null | head -n1)"
    env | grep '^BRAID_' | sed 's/^BRAID_SECRET=.*/BRAID_SECRET=(set)/; s/^/# /' || true
} >"$dir/summary.txt"

status=0
run_pair() { # n round: braid then Open MPI (round > 1 of -R: file suffix .rR)
    n=$1 sfx=""
    [ "$rounds" -gt 1 ] && sfx=".r$2"
    shift 2
    echo "== braid, $n ranks${sfx:+, round ${sfx#.r}}"
    rm -f "$dir/braid_n$n$sfx.csv" "$dir/ompi_n$n$sfx.csv"
    # shellcheck disable=SC2086 # flags are words
    "$bin/braid-run" $launch -n "$n" "$bin/all_reduce_perf" $flags $xflags --csv "$dir/braid_n$n$sfx.csv" "$@" \
        >"$dir/braid_n$n$sfx.log" 2>&1 || { echo "braid n=$n failed (exit $?), see $dir/braid_n$n$sfx.log"; status=1; }
    grep -E '^# (Out of|Avg)' "$dir/braid_n$n$sfx.log" || tail -n 5 "$dir/braid_n$n$sfx.log"
    echo "== Open MPI, $n ranks${sfx:+, round ${sfx#.r}}"
    # shellcheck disable=SC2086
    mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl self,vader ${MPIRUN_ARGS:-} \
        "$bin/ompi_allreduce_perf" $flags --csv "$dir/ompi_n$n$sfx.csv" "$@" \
        >"$dir/ompi_n$n$sfx.log" 2>&1 || { echo "ompi n=$n failed (exit $?), see $dir/ompi_n$n$sfx.log"; status=1; }
    grep -E '^# (Out of|Avg)' "$dir/ompi_n$n$sfx.log" || tail -n 5 "$dir/ompi_n$n$sfx.log"
}
r=1
while [ "$r" -le "$rounds" ]; do
    for n in $ranks; do run_pair "$n" "$r" "$@"; done
    r=$((r + 1))
done
if [ "$rounds" -gt 1 ]; then
    for n in $ranks; do
        for t in braid ompi; do
            set -- "$dir/${t}_n$n".r*.csv
            [ -s "$1" ] && median_csv "$dir/${t}_n$n.csv" "$@"
        done
    done
    echo "# tables and plots: per size, the median of $rounds rounds" >>"$dir/summary.txt"
fi

# Plot every CSV that has rows.
set --
for n in $ranks; do
    for lib in braid ompi; do
        f="$dir/${lib}_n$n.csv"
        [ -s "$f" ] && set -- "$@" "$lib n=$n=$f"
    done
done
# Plots need gnuplot; without it (or if plot.sh fails) the table below is still written.
if [ $# -gt 0 ] && command -v gnuplot >/dev/null 2>&1; then
    "$here/plot.sh" -o "$dir/busbw.png" -T "all_reduce $dtype $op: braid vs Open MPI (busbw)" "$@" || true
    "$here/plot.sh" -o "$dir/time.png" -y time_oop_us -T "all_reduce $dtype $op: time" "$@" || true
elif [ $# -gt 0 ]; then
    echo "compare.sh: gnuplot not found: no plots" >&2
fi

# Table: out-of-place busbw (GB/s) and time (us) of both at a few sizes.
{
    printf '\n%-6s %12s %14s %14s %14s %14s %8s\n' ranks size braid_us ompi_us braid_GB/s \
        ompi_GB/s ratio
    for n in $ranks; do
        b="$dir/braid_n$n.csv" o="$dir/ompi_n$n.csv"
        if [ ! -s "$b" ] || [ ! -s "$o" ]; then continue; fi
        awk -F, -v n="$n" '
            FNR == 1 { file++; next }
            { t[file, $3] = $8; bw[file, $3] = $10; if ($3 > max) max = $3 }
            END {
                split("8 1048576 16777216 268435456", want, " ")
                k = 0; for (i = 1; i <= 4; i++) if (want[i] <= max) sz[++k] = want[i]
                if (sz[k] != max) sz[++k] = max
                for (i = 1; i <= k; i++) {
                    s = sz[i]
                    if (!((1, s) in t) || !((2, s) in t)) continue
                    r = bw[2, s] > 0 ? bw[1, s] / bw[2, s] : 0
                    printf "%-6s %12d %14.2f %14.2f %14.4f %14.4f %8.2f\n", n, s, t[1, s],
                        t[2, s], bw[1, s], bw[2, s], r
                }
            }' "$b" "$o"
    done
    echo "(ratio = braid busbw / Open MPI busbw, out of place)"
} | tee -a "$dir/summary.txt"
# Roofline (shared memory). Whatever the algorithm, every rank must read its input S once and
# write its output S once in memory; braid's slots (direct: 2 blocks of BRAID_DIRECT_BLOCK per
# rank, ring: the FIFO slots) are cache-sized, so at sizes well beyond the last-level cache that
# is the memory traffic of the direct path and of the ring (2 bytes per byte and rank; the
# copies through the slots stay in cache), and a lower bound for every other design
# (recursive doubling adds a read and a write of the output per step). The bound is measured,
# not computed: perf/membw -p -t N -s S copies S bytes in each of N threads at once, as the N
# ranks do (threads may outnumber the cpus as ranks do), and reports C = bytes read + written
# per second, all threads together. Each rank then moves S in at least 2 S N / C seconds, so
#     roofline busbw = algbw * 2 (n-1)/n <= C / (2 n) * 2 (n-1) / n = C (n-1) / n^2.
# (An earlier model counted the slot copies as memory traffic, 5 bytes per byte: braid's
# measured busbw was above it.) That holds while the slots stay in the caches. Where the direct
# path writes its slots with streaming stores (BRAID_DIRECT_NT_SLOTS: auto = AMD CPUs with no
# more ranks than cpus, measured ~1.8x faster there even at 256 MiB), the slot copies go
# through memory too: per byte and rank it reads its input (1), the peers' copies of its slice
# ((n-1)/n) and the peers' reduced slices ((n-1)/n), and writes the copy-in ((n-1)/n), its
# reduced slice twice (out and slot, 2/n) and the gathered slices ((n-1)/n): 3 + 2(n-1)/n
# bytes (4 at n = 2). With braid's buffers from braid_mem_alloc (-X "-R 2") the direct path reads
# the inputs in place and writes the reduced slices into the outputs: 2 bytes per byte, slots
# unused. The table also gives that design's own bound, C (n-1)/n^2 * 2 / B for
# B bytes per byte, and busbw as a fraction of it; the target counts the first. The algorithm the cost model runs at the largest size is read
# from one traced call (BRAID_TRACE) unless BRAID_ALGO forces one.
if [ -x "$bin/membw" ]; then
    {
        echo
        # the machine's copy and add, 1 thread and all cpus, 256 MiB per thread
        "$bin/membw" -p -s 256M -r 3 2>&1 | sed 's/^/# /' || true
        printf '%-6s %12s %10s %14s %12s %16s %10s %8s %12s\n' ranks size algo braid_GB/s membw_C \
            roofline_GB/s fraction design_B design_frac
        for n in $ranks; do
            b="$dir/braid_n$n.csv"
            [ -s "$b" ] || continue
            last=$(awk -F, 'NR > 1 && $3 > m { m = $3; v = $10 } END { print m, v }' "$b")
            size=${last% *} busbw=${last#* }
            mem=$("$bin/membw" -p -t "$n" -s "$size" -r 3 2>&1) || mem=""
            printf '%s\n' "$mem" | sed "s/^/# n=$n -s $size -p: /" >>"$dir/membw.txt"
            bw=$(printf '%s\n' "$mem" | awk -v t="$n" '$2 == "copy" && $4 == t { print $6 }')
            algo=${BRAID_ALGO:-}
            if [ -z "$algo" ]; then
                # shellcheck disable=SC2086 # flags are words
                BRAID_TRACE="$dir/algo_n$n.json" "$bin/braid-run" $launch -n "$n" "$bin/all_reduce_perf" \
                    -b "$size" -e "$size" -n 1 -w 0 -c 0 -d "$dtype" -o "$op" $xflags >/dev/null 2>&1 || true
                # the call of that size (the tool's own small all-reduces run other algorithms)
                algo=$(python3 -c "import json,sys; ev=json.load(open(sys.argv[1]))['traceEvents']; \
print([e['args'].get('algo','?') for e in ev if e.get('name')=='allreduce' and \
e['args'].get('bytes')==int(sys.argv[2])][-1])" "$dir/algo_n$n.json" "$size" 2>/dev/null || echo "?")
            fi
            # streaming stores into the direct path's slots (BRAID_DIRECT_NT_SLOTS, core/comm.c)
            nt=0
            case "${BRAID_DIRECT_NT_SLOTS:-auto}" in
            1) nt=1 ;;
            0) nt=0 ;;
            *) grep -q -m1 AuthenticAMD /proc/cpuinfo && [ "$n" -le "$(nproc)" ] && nt=1 ;;
            esac
            case " $xflags " in *" -R 2 "*) nt=0 ;; esac # mapped buffers: no slot copies
            awk -v n="$n" -v s="$size" -v a="$algo" -v bw="${bw:-0}" -v b="$busbw" -v nt="$nt" 'BEGIN {
                roof = bw * (n - 1) / (n * n)
                B = (a == "direct" && nt) ? 3 + 2 * (n - 1) / n : 2
                if (roof > 0) printf "%-6s %12d %10s %14.3f %12.2f %16.3f %10.2f %8.2f %12.2f\n", n, s, a, b, bw, roof, b / roof, B, b / (roof * 2 / B)
                else printf "%-6s %12d %10s %14.3f %12s %16s %10s\n", n, s, a, b, "-", "(membw failed)", "-"
            }'
        done
        echo "(roofline: every rank reads its input and writes its output once, at the copy rate"
        echo " membw_C (GB/s read + written, all ranks together) measured now with one thread per"
        echo " rank on buffers of the call's size; the model is in the header of perf/compare.sh;"
        echo " design_B: bytes through memory per byte and rank of the algorithm as run (direct"
        echo " with streaming stores into its slots: 3 + 2(n-1)/n; with -R 2: 2), design_frac: busbw over that"
        echo " design's own bound;"
        echo " raw membw lines in membw.txt)"
    } | tee -a "$dir/summary.txt"
fi
# Every size from 32 KiB, with the bound that holds while the data fits in the caches: an
# all-reduce of S bytes over n ranks must bring at least 2 (n-1)/n S bytes into every rank
# from its peers (the peers' parts of its reduce-scatter slice, then the other reduced
# slices), bytes that sit modified in another core's cache; so busbw = algbw * 2 (n-1)/n is
# at most the rate at which one core fetches what another core has just written, with every
# rank fetching at once. perf/xcore measures that rate (n threads, one per cpu; with more ranks
# than cpus its barrier yields, and the figure includes context switches), for sizes up to
# 32 MiB (beyond the last-level cache the roofline above is the bound). Raw: xcore_nN.txt.
if [ -x "$bin/xcore" ]; then
    {
        echo
        printf '%-6s %12s %12s %12s %8s %12s %12s %12s\n' ranks size braid_GB/s ompi_GB/s ratio \
            xcore_GB/s braid/xcore ompi/xcore
        for n in $ranks; do
            b="$dir/braid_n$n.csv" o="$dir/ompi_n$n.csv"
            if [ ! -s "$b" ] || [ ! -s "$o" ]; then continue; fi
            lo=$(awk -F, 'NR > 1 && $3 >= 32768 { print $3; exit }' "$b")
            hi=$(awk -F, 'NR > 1 && $3 <= 33554432 { m = $3 } END { print m + 0 }' "$b")
            xf="$dir/xcore_n$n.txt"
            : >"$xf"
            if [ -n "$lo" ] && [ "$hi" -ge "$lo" ]; then
                "$bin/xcore" -t "$n" -b "$lo" -e "$hi" -f "$fac" >"$xf" 2>&1 || true
            fi
            awk -v n="$n" -v xf="$xf" -F, '
                FILENAME == xf { split($0, w, " "); if (w[1] == "xcore") x[w[5]] = w[7]; next }
                FNR == 1 { file++; next }
                $3 >= 32768 { bw[file, $3] = $10; if (file == 1) sz[++k] = $3 }
                END {
                    for (i = 1; i <= k; i++) {
                        s = sz[i]
                        if (!((2, s) in bw)) continue
                        r = bw[2, s] > 0 ? bw[1, s] / bw[2, s] : 0
                        if (s in x && x[s] > 0)
                            printf "%-6s %12d %12.3f %12.3f %8.2f %12.2f %12.2f %12.2f\n", n, s,
                                bw[1, s], bw[2, s], r, x[s], bw[1, s] / x[s], bw[2, s] / x[s]
                        else
                            printf "%-6s %12d %12.3f %12.3f %8.2f %12s %12s %12s\n", n, s,
                                bw[1, s], bw[2, s], r, "-", "-", "-"
                    }
                }' "$xf" "$b" "$o"
        done
        echo "(xcore: GB/s at which each of n threads, one per cpu, fetches data another core just"
        echo " wrote, all at once: the bound on busbw while the data is in the caches; model in"
        echo " perf/compare.sh; '-' beyond 32 MiB, where the roofline above is the bound; raw"
        echo " lines in xcore_nN.txt)"
    } | tee -a "$dir/summary.txt"
fi
echo "results in $dir"
exit $status
