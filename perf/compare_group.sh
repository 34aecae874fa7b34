#!/bin/sh
# Many small all-reduces (or all-gathers, reduce-scatters, broadcasts, reduces: -C) at once: M
# calls per iteration (-m), as nccl-tests' -m issues them in one ncclGroupStart/End, run four
# ways in one session, over shared memory and TCP loopback:
#   fused    braid, the M calls in one braid group (--group 1): group end fuses them
#            (BRAID_GROUP_FUSE_BYTES, default 64K: src/core/group_fuse.c)
#   unfused  the same with BRAID_GROUP_FUSE_BYTES=0 (each call on its own, in call order)
#   iform    braid's braid_i* forms, waited for together (no group)
#   ompi     Open MPI's MPI_Iallreduce and MPI_Waitall (btl self,vader or self,tcp); all-reduce only
#
#   perf/compare_group.sh [-o DIR] [-B BUILD] [-N "2 4"] [-b 8] [-e 32K] [-f 4] [-n 200] [-w 20]
#                         [-c 1] [-d float] [-O sum] [-R 3] [-M 8] [-T "shm tcp"] [-C all_reduce]
#
#   -M M     calls per iteration (default 8); -T the transports (default "shm tcp");
#   -C       the collective: all_reduce (default), all_gather, reduce_scatter, broadcast or reduce
#            (its perf tool; the rooted ones from root 0, the tools' -r);
#   the rest as perf/compare.sh (-R rounds: the four run in a rotating order each round, and the
#   table holds each one's median of the rounds).
# DIR/summary.txt: per transport, rank count and size, the time per call (us, out of place) of
# the four and the ratios unfused/fused and ompi/fused (above 1: fused is faster).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

name=group maxb=32K iters=200 warm=20 fac=4 rounds=3
M=8 transports="shm tcp" coll=all_reduce
args=""
while [ $# -gt 0 ]; do # -M and -T are this script's own; the rest go to compare_args.sh
    case $1 in
    -M) M=$2; shift 2 ;;
    -T) transports=$2; shift 2 ;;
    -C) coll=$2; shift 2 ;;
    *) args="$args '$(printf %s "$1" | sed "s/'/'\\\\''/g")'"; shift ;;
    esac
done
eval "set -- $args"
case $coll in
all_reduce | all_gather | reduce_scatter | broadcast | reduce) ;;
*) echo "compare_group.sh: -C $coll: all_reduce, all_gather, reduce_scatter, broadcast or reduce" >&2; exit 2 ;;
esac
tool=${coll}_perf
. "$here/compare_args.sh"
flags="-b $minb -e $maxb -f $fac -n $iters -w $warm -c $check -d $dtype -o $op -m $M"
{
    echo "# compare_group.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cpus"
    echo "# $tool, flags: $flags; rounds $rounds; $(mpirun --version 2>/dev/null | head -n1)"
} >"$dir/summary.txt"

status=0
run() { # variant transport n round
    v=$1 tr=$2 n=$3 csv="$dir/$1_$2_n$3.r$4.csv"
    log="${csv%.csv}.log"
    btl=vader
    [ "$tr" = tcp ] && btl=tcp
    rm -f "$csv"
    # shellcheck disable=SC2086 # flags are words
    case $v in
    fused) BRAID_TRANSPORT=$tr "$bin/braid-run" $launch -n "$n" "$bin/$tool" $flags $xflags --group 1 --csv "$csv" ;;
    unfused) BRAID_GROUP_FUSE_BYTES=0 BRAID_TRANSPORT=$tr "$bin/braid-run" $launch -n "$n" \
        "$bin/$tool" $flags $xflags --group 1 --csv "$csv" ;;
    iform) BRAID_TRANSPORT=$tr "$bin/braid-run" $launch -n "$n" "$bin/$tool" $flags $xflags --csv "$csv" ;;
    ompi) [ "$coll" = all_reduce ] || return 0
        mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl "self,$btl" ${MPIRUN_ARGS:-} \
        "$bin/ompi_allreduce_perf" $flags --csv "$csv" ;;
    esac >"$log" 2>&1 || { echo "$v $tr n=$n failed, see $log" | tee -a "$dir/summary.txt"; status=1; }
}
order="fused unfused iform ompi"
r=1
while [ "$r" -le "$rounds" ]; do
    for tr in $transports; do
        for n in $ranks; do
            for v in $order; do run "$v" "$tr" "$n" "$r"; done
            order="${order#* } ${order%% *}"
        done
    done
    r=$((r + 1))
done
for tr in $transports; do
    for n in $ranks; do
        for v in fused unfused iform ompi; do
            set -- "$dir/${v}_${tr}_n$n".r*.csv
            [ -s "$1" ] && median_csv "$dir/${v}_${tr}_n$n.csv" "$@"
        done
    done
done
{
    printf '\n%-4s %-3s %8s %9s %9s %9s %9s %15s %11s\n' tr n size fused_us unfused_us iform_us ompi_us \
        unfused/fused ompi/fused
    for tr in $transports; do
        for n in $ranks; do
            set --
            for v in fused unfused iform ompi; do
                c="$dir/${v}_${tr}_n$n.csv"
                [ -s "$c" ] || c=/dev/null
                set -- "$@" "$c"
            done
            awk -F, -v tr="$tr" -v n="$n" -v A="$1" -v B="$2" -v C="$3" '
                FNR == 1 { f = FILENAME == A ? 1 : FILENAME == B ? 2 : FILENAME == C ? 3 : 4; next }
                { t[f, $3] = $8; if (!($3 in seen)) { seen[$3] = 1; sz[++ns] = $3 } }
                function us(i, s) { return ((i, s) in t) ? sprintf("%9.2f", t[i, s]) : sprintf("%9s", "-") }
                function q(i, s) { return ((i, s) in t) && ((1, s) in t) && t[1, s] > 0 ? sprintf("%.2f", t[i, s] / t[1, s]) : "-" }
                END { for (k = 1; k <= ns; k++) { s = sz[k]
                    printf "%-4s %-3s %8d %s %s %s %s %15s %11s\n", tr, n, s, us(1, s), us(2, s), us(3, s), us(4, s), q(2, s), q(4, s) } }' \
                "$@"
        done
    done
    echo "(time per call, us, out of place, median of $rounds rounds; -m $M calls per iteration)"
} | tee -a "$dir/summary.txt"
echo "results in $dir"
exit $status
