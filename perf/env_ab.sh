#!/usr/bin/env bash
# A/B (A/B/C...) of one BRAID_* variable on a braid perf tool: every value runs once per round,
# the values interleaved and their order rotated from round to round, for each rank count;
# OUT_DIR/summary.txt has per size the median out-of-place time (us) of each value over the
# rounds, and each value's time relative to the first value's.
#
#   perf/env_ab.sh -o OUT_DIR -v VAR -V "VALUES" [-R ROUNDS] [-N "2 4"] [-B BUILD] -- TOOL FLAGS
#   e.g. perf/env_ab.sh -o /tmp/ab -v BRAID_YIELD_US -V "2000 50" -R 5 -- all_reduce_perf \
#            -b 256K -e 16M -f 4 -n 20 -w 3 -c 0
# An empty value in VALUES is written as "-" and leaves the variable unset. A VAR that starts
# with -- is a braid-run option instead (-v --bind -V "none core": braid-run --bind none, ...).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="" var="" values="" rounds=3 ranks="2 4" build=build
while getopts o:v:V:R:N:B: f; do
    case $f in
    o) out=$OPTARG ;;
    v) var=$OPTARG ;;
    V) values=$OPTARG ;;
    R) rounds=$OPTARG ;;
    N) ranks=$OPTARG ;;
    B) build=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = -- ] && shift
if [ -z "$out" ] || [ -z "$var" ] || [ -z "$values" ] || [ $# -lt 1 ]; then
    echo "usage: perf/env_ab.sh -o OUT_DIR -v VAR -V \"VALUES\" [-R N] [-N \"2 4\"] [-B BUILD] -- TOOL FLAGS" >&2
    exit 2
fi
case $var in BRAID_* | NCCL_* | GLIBC_TUNABLES | --*) ;; *)
    echo "env_ab.sh: -v $var is not a BRAID_ or NCCL_ variable, GLIBC_TUNABLES nor a braid-run option" >&2
    exit 2
    ;;
esac
bin=$(cd "$build/bin" && pwd) || exit 1
tool=$1
shift
[ -x "$bin/$tool" ] || { echo "env_ab.sh: $bin/$tool is not a braid perf tool" >&2; exit 2; }
mkdir -p "$out"
read -r -a vals <<<"$values"
nv=${#vals[@]}
{
    echo "# env_ab.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# $var in: ${vals[*]}; $rounds rounds; ranks $ranks; $tool $*"
} >"$out/summary.txt"
status=0
for r in $(seq "$rounds"); do
    for n in $ranks; do
        for k in $(seq 0 $((nv - 1))); do
            v=${vals[$(((k + r) % nv))]}
            log="$out/n$n.$v.r$r.log"
            if [ "${var#--}" != "$var" ]; then
                "$bin/braid-run" "$var" "$v" -n "$n" "$bin/$tool" "$@" >"$log" 2>&1
            elif [ "$v" = - ]; then
                env -u "$var" "$bin/braid-run" -n "$n" "$bin/$tool" "$@" >"$log" 2>&1
            else
                env "$var=$v" "$bin/braid-run" -n "$n" "$bin/$tool" "$@" >"$log" 2>&1
            fi || { echo "# n=$n $var=$v round $r failed: $log" >>"$out/summary.txt"; status=1; }
        done
    done
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/summary.txt"
median() { # n value size: the median out-of-place time over the rounds
    for r in $(seq "$rounds"); do
        awk -v s="$3" '$1 == s && $6 + 0 > 0 { print $6 }' "$out/n$1.$2.r$r.log"
    done | sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
{
    printf '%-6s %12s' ranks size
    for v in "${vals[@]}"; do printf ' %14s' "$v"_us; done
    for v in "${vals[@]:1}"; do printf ' %12s' "$v/${vals[0]}"; done
    echo
    for n in $ranks; do
        sizes=$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 { print $1 }' "$out/n$n.${vals[0]}.r1.log" | sort -un)
        for sz in $sizes; do
            printf '%-6s %12s' "$n" "$sz"
            t=()
            for v in "${vals[@]}"; do
                m=$(median "$n" "$v" "$sz")
                t+=("$m")
                printf ' %14s' "$m"
            done
            for i in $(seq 1 $((nv - 1))); do
                awk -v a="${t[0]}" -v b="${t[$i]}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf " %12.2f", b / a; else printf " %12s", "-" }'
            done
            echo
        done
    done
} | tee -a "$out/summary.txt"
exit $status
