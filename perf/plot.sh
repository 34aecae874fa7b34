#!/bin/sh
# Plots bus bandwidth against message size from the --csv files of the perf tools.
#
#   perf/plot.sh -o out.png [options] a.csv [label=b.csv ...]
#
# One line per CSV, labelled with the file name without .csv, or with LABEL given as
# LABEL=file.csv. x: size in bytes on a log2 axis (8B, 1K, 1M, 64M ...).
#
# Options:
#   -o FILE    output PNG (required)
#   -y COLUMN  CSV column to plot (default busbw_oop; also busbw_ip, algbw_oop, algbw_ip,
#              time_oop_us, time_ip_us: times use a log y axis)
#   -t TYPE    only rows of this type (e.g. float); -r OP  only this redop; -n N  only N ranks;
#   -c COLL    only this collective. Without filters, a CSV holding several types/ops/rank
#              counts gives one line per CSV through all of them, so filter such files.
#   -T TITLE   plot title (default: "<collective> bus bandwidth")
#   -W WxH     size in pixels (default 1000x600)
# Needs gnuplot (Debian: gnuplot-nox); uses the pngcairo terminal, else png.
set -eu

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit "${1:-2}"
}

out="" col=busbw_oop ftype="" fop="" fn="" fcoll="" title="" wh="1000,600"
while getopts "o:y:t:r:n:c:T:W:h" opt; do
    case $opt in
    o) out=$OPTARG ;;
    y) col=$OPTARG ;;
    t) ftype=$OPTARG ;;
    r) fop=$OPTARG ;;
    n) fn=$OPTARG ;;
    c) fcoll=$OPTARG ;;
    T) title=$OPTARG ;;
    W) wh=$(echo "$OPTARG" | tr 'x' ',') ;;
    h) usage 0 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
if [ -z "$out" ] || [ $# -eq 0 ]; then usage; fi
command -v gnuplot >/dev/null 2>&1 || { echo "plot.sh: gnuplot not found" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Extract "size value" pairs from each CSV into $tmp/N.dat; remember labels.
i=0 plots="" minsz="" maxsz="" coll_seen=""
for arg in "$@"; do
    if [ -r "$arg" ] || [ "${arg#*=}" = "$arg" ]; then
        file=$arg label=$(basename "$arg" .csv)
    else # LABEL=file: split at the last '=', so labels may hold '=' ("braid n=2=a.csv")
        label=${arg%=*} file=${arg##*=}
    fi
    [ -r "$file" ] || { echo "plot.sh: cannot read $file" >&2; exit 1; }
    i=$((i + 1))
    awk -F, -v col="$col" -v ft="$ftype" -v fo="$fop" -v fn="$fn" -v fc="$fcoll" '
        NR == 1 || $1 == "collective" {
            for (k = 1; k <= NF; k++) idx[$k] = k
            if (!(col in idx)) { print "plot.sh: no column " col > "/dev/stderr"; exit 3 }
            next
        }
        (ft == "" || $5 == ft) && (fo == "" || $6 == fo) && (fn == "" || $2 == fn) &&
        (fc == "" || $1 == fc) { print $3, $(idx[col]), $1 }' "$file" |
        sort -n -k1,1 >"$tmp/$i.raw" || exit 1
    if [ ! -s "$tmp/$i.raw" ]; then
        echo "plot.sh: no rows in $file match the filters" >&2
        continue
    fi
    cut -d' ' -f1,2 "$tmp/$i.raw" >"$tmp/$i.dat"
    coll_seen=${coll_seen:-$(head -n1 "$tmp/$i.raw" | cut -d' ' -f3)}
    lo=$(head -n1 "$tmp/$i.dat" | cut -d' ' -f1)
    hi=$(tail -n1 "$tmp/$i.dat" | cut -d' ' -f1)
    if [ -z "$minsz" ] || [ "$lo" -lt "$minsz" ]; then minsz=$lo; fi
    if [ -z "$maxsz" ] || [ "$hi" -gt "$maxsz" ]; then maxsz=$hi; fi
    esc=$(printf '%s' "$label" | sed 's/"/\\"/g; s/_/\\\\_/g')
    plots="$plots${plots:+, }\"$tmp/$i.dat\" using 1:2 with linespoints title \"$esc\""
done
[ -n "$plots" ] || { echo "plot.sh: nothing to plot" >&2; exit 1; }

# Tick labels at powers of two (every other one past 16 ticks): 8B, 1K, 64M, 1G.
xtics=$(awk -v lo="$minsz" -v hi="$maxsz" 'BEGIN {
    p = 1; while (p * 2 <= lo) p *= 2
    n = 0; for (q = p; q <= hi * 1.0001; q *= 2) n++
    step = n > 16 ? 4 : 2; s = ""
    for (q = p; q <= hi * 1.0001; q *= step) {
        if (q >= 1073741824) l = q / 1073741824 "G"
        else if (q >= 1048576) l = q / 1048576 "M"
        else if (q >= 1024) l = q / 1024 "K"
        else l = q "B"
        s = s (s == "" ? "" : ", ") "\"" l "\" " sprintf("%.0f", q)
    }
    print s }')

case $col in
time*) ylabel="time (us)" ylog="set logscale y 10" ;;
busbw*) ylabel="bus bandwidth (GB/s)" ylog="" ;;
*) ylabel="algorithm bandwidth (GB/s)" ylog="" ;;
esac
case $col in
*_ip*) ylabel="$ylabel, in place" ;;
*) ylabel="$ylabel, out of place" ;;
esac
[ -n "$title" ] || title="${fcoll:-$coll_seen} ${ylabel%%,*}"
title=$(printf '%s' "$title" | sed 's/"/\\"/g; s/_/\\\\_/g')

term="pngcairo size $wh font \"sans,10\""
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || term="png size $wh"

gnuplot <<EOF
set terminal $term
set output "$out"
set title "$title"
set logscale x 2
$ylog
set xrange [$minsz*0.8:$maxsz*1.25]
set xtics ($xtics)
set xlabel "message size (bytes)"
set ylabel "$ylabel"
set grid xtics ytics
set key top left box opaque
set datafile separator " "
plot $plots
EOF
echo "wrote $out"
