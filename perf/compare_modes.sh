#!/bin/sh
# braid's all_reduce_perf against Open MPI's (perf/peers/ompi_allreduce_perf, btl self,vader)
# one size at a time, the two interleaved in short runs, each run between two probes of how
# fast one cpu fetches what another just wrote (perf/xcore, 256 KiB): for machines whose speed
# changes while they run.
#
# Why: on the 2-vCPU VMs this project measures on, the cross-core fetch rate flips within
# seconds between about 27 GB/s and about 9 GB/s (the host moves the vCPUs between cores that
# share a cache and cores that do not), and every shared-memory collective's time with it
# (256 KiB all-reduce, 2 ranks: 22-30 us vs 100-115 us). A sweep of one library then another
# compares whatever modes each happened to run in. Here every (ranks, size) gets R rounds of
# [probe, braid, probe, Open MPI, probe] (the order of the two alternating by round); a run
# counts in a mode when the probes on both sides of it agree (both at or above the threshold:
# fast, both below: slow), and the table gives per mode the median times and their ratio.
#
#   perf/compare_modes.sh [-o DIR] [-B BUILD] [-N "2 4"] [-S "8 64K 1M 16M 256M"] [-R 5]  (sizes:
#                         powers of two)
#                         [-T GB/s] [-d float] [-O sum] [-X "braid's all_reduce_perf flags"]
#   -T  the probe's threshold between slow and fast (default: halfway between the lowest and
#       the highest probe of the whole run, once it has run; one mode when they differ by
#       less than 1.5x)
#   -X  more flags for braid's tool only (e.g. "-R 2": buffers from braid_mem_alloc)
# Iterations per run: 200 up to 64 KiB, 50 up to 4 MiB, 10 up to 64 MiB, 4 beyond (warm-up a
# quarter of that, at least 1). Out: DIR/runs.txt (one line per run: ranks size lib time_us
# probe_before probe_after), DIR/summary.txt (the table).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dir="" build="$repo/build" ranks="2 4" sizes="8 64K 256K 1M 4M 16M 64M 256M" rounds=5 thr=""
dtype=float op=sum xflags=""
while getopts "o:B:N:S:R:T:d:O:X:h" f; do
    case $f in
    o) dir=$OPTARG ;;
    B) build=$OPTARG ;;
    N) ranks=$OPTARG ;;
    S) sizes=$OPTARG ;;
    R) rounds=$OPTARG ;;
    T) thr=$OPTARG ;;
    d) dtype=$OPTARG ;;
    O) op=$OPTARG ;;
    X) xflags=$OPTARG ;;
    h) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) exit 2 ;;
    esac
done
bin="$build/bin"
for f in braid-run all_reduce_perf xcore; do
    [ -x "$bin/$f" ] || { echo "compare_modes.sh: $bin/$f missing (cmake --build $build)" >&2; exit 1; }
done
[ -x "$bin/ompi_allreduce_perf" ] || "$here/peers/build.sh" "$bin"
[ -n "$dir" ] || dir="$repo/perf/results/$(date +%Y%m%d-%H%M%S)-modes"
mkdir -p "$dir"
runs="$dir/runs.txt"
: >"$runs"

bytes() { # 64K -> 65536
    case $1 in
    *K) echo $((${1%K} * 1024)) ;;
    *M) echo $((${1%M} * 1048576)) ;;
    *G) echo $((${1%G} * 1073741824)) ;;
    *) echo "$1" ;;
    esac
}
probe() { "$bin/xcore" -t 2 -b 256K -e 256K -r 200 2>/dev/null | awk '$1 == "xcore" { print $7 }'; }
# run LIB N SIZE ITERS WARM: the out-of-place time (us) of that one size, or "fail"
run() {
    csv="$dir/last.csv"
    rm -f "$csv"
    if [ "$1" = braid ]; then
        "$bin/braid-run" -n "$2" "$bin/all_reduce_perf" -b "$3" -e "$3" -n "$4" -w "$5" -c 0 \
            -d "$dtype" -o "$op" --csv "$csv" $xflags >"$dir/last.log" 2>&1 || true
    else
        mpirun --allow-run-as-root --oversubscribe -np "$2" --mca btl self,vader \
            "$bin/ompi_allreduce_perf" -b "$3" -e "$3" -n "$4" -w "$5" -c 0 -d "$dtype" -o "$op" \
            --csv "$csv" >"$dir/last.log" 2>&1 || true
    fi
    awk -F, 'NR == 2 { print $8; ok = 1 } END { if (!ok) print "fail" }' "$csv" 2>/dev/null || echo fail
}

{
    echo "# compare_modes.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cpus,"
    echo "#   $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); $(mpirun --version 2>/dev/null | head -n1)"
    echo "# uptime at start: $(uptime)"
    echo "# ranks: $ranks; sizes: $sizes; rounds: $rounds; $dtype $op, out of place${xflags:+; braid-only flags: $xflags}"
} >"$dir/summary.txt"
for n in $ranks; do
    for s in $sizes; do
        b=$(bytes "$s")
        it=200
        [ "$b" -gt 65536 ] && it=50
        [ "$b" -gt 4194304 ] && it=10
        [ "$b" -gt 67108864 ] && it=4
        w=$((it / 4))
        [ "$w" -ge 1 ] || w=1
        r=1
        while [ "$r" -le "$rounds" ]; do
            order="braid ompi"
            [ $((r % 2)) -eq 0 ] && order="ompi braid"
            p0=$(probe)
            for lib in $order; do
                t=$(run "$lib" "$n" "$b" "$it" "$w")
                p1=$(probe)
                echo "$n $b $lib $t $p0 $p1" >>"$runs"
                p0=$p1
            done
            r=$((r + 1))
        done
        echo "n=$n $s done $(date +%T)"
    done
done
echo "# uptime at end: $(uptime)" >>"$dir/summary.txt"

awk -v thr="$thr" '
    function med(key, k, i, j, t, c) {
        c = cnt[key]
        for (i = 1; i <= c; i++) v[i] = val[key, i]
        for (i = 2; i <= c; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
        return !c ? -1 : c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2 # even: mean of the middle two
    }
    $4 != "fail" { line[++nl] = $0; if (lo == "" || $5 < lo) lo = $5; if ($5 > hi) hi = $5
                   if ($6 < lo) lo = $6; if ($6 > hi) hi = $6 }
    END {
        if (thr == "") thr = (hi > 1.5 * lo) ? (lo + hi) / 2 : 0
        printf "# probe (xcore, 256 KiB, GB/s): lowest %.2f, highest %.2f; threshold %.2f\n", lo, hi, thr
        for (i = 1; i <= nl; i++) {
            split(line[i], f, " ")
            m = (f[5] >= thr && f[6] >= thr) ? "fast" : (f[5] < thr && f[6] < thr) ? "slow" : "mixed"
            if (thr == 0) m = "one"
            key = f[1] SUBSEP f[2] SUBSEP f[3] SUBSEP m
            val[key, ++cnt[key]] = f[4]
            keys[f[1] SUBSEP f[2]] = 1; modes[m] = 1
            key = f[1] SUBSEP f[2] SUBSEP f[3] SUBSEP "all"
            val[key, ++cnt[key]] = f[4]
        }
        printf "%-6s %12s %6s %14s %14s %8s %10s\n", "ranks", "size", "mode", "braid_us", "ompi_us", "runs", "ompi/braid"
        for (n = 1; n <= 64; n++) for (sz = 1; sz <= 2^31; sz *= 2) { # sizes: powers of two
            if (!((n SUBSEP sz) in keys)) continue
            split("fast slow one all", ml, " ")
            for (k = 1; k <= 4; k++) {
                m = ml[k]
                kb = n SUBSEP sz SUBSEP "braid" SUBSEP m; ko = n SUBSEP sz SUBSEP "ompi" SUBSEP m
                if (!cnt[kb] || !cnt[ko]) continue
                tb = med(kb); to = med(ko)
                printf "%-6d %12d %6s %14.2f %14.2f %8s %10.2f\n", n, sz, m, tb, to, cnt[kb] "+" cnt[ko], to / tb
            }
        }
        print "(times: medians over the runs of that mode; ompi/braid > 1: braid faster = busbw ratio"
        print " braid/Open MPI; fast/slow: both probes around the run on that side of the threshold;"
        print " all: every run whatever its mode; when the two met the modes in different"
        print " proportions it misleads, read the per-mode rows)"
    }' "$runs" | tee -a "$dir/summary.txt"
rm -f "$dir/last.csv" "$dir/last.log"
echo "results in $dir"
