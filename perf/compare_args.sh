# Sourced by perf/compare.sh, perf/compare_tcp.sh and perf/compare_p2p.sh: parses their shared
# flags (see their headers) into dir build ranks minb maxb fac iters warm check dtype op, and
# -L/-X into launch (braid-run's own flags, e.g. "--bind core") and xflags (flags for braid's
# tools only, e.g. "-R 2"), which only braid's runs get; checks
# the binaries and builds the Open MPI peer harness when missing; defines median_csv. The caller
# sets here, repo, name and the defaults (maxb, iters, warm; optionally fac, rounds, and tools:
# the braid perf tools it runs, default all_reduce_perf) first; sets OPTIND past the flags.
dir="" build="$repo/build" ranks="2 4" minb=8 check=1 dtype=float op=sum launch="" xflags=""
fac=${fac:-2} rounds=${rounds:-1} tools=${tools:-all_reduce_perf}
while getopts "o:B:N:R:b:e:f:n:w:c:d:O:L:X:h" opt; do
    case $opt in
    o) dir=$OPTARG ;;
    B) build=$OPTARG ;;
    N) ranks=$OPTARG ;;
    R) rounds=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    f) fac=$OPTARG ;;
    n) iters=$OPTARG ;;
    w) warm=$OPTARG ;;
    c) check=$OPTARG ;;
    d) dtype=$OPTARG ;;
    O) op=$OPTARG ;;
    L) launch=$OPTARG ;;
    X) xflags=$OPTARG ;;
    h) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) exit 2 ;;
    esac
done
case $rounds in
'' | *[!0-9]* | 0) echo "$name: -R wants a positive number of rounds, not '$rounds'" >&2; exit 2 ;;
esac
bin="$build/bin"
[ -n "$dir" ] || dir="$repo/perf/results/$(date +%Y%m%d-%H%M%S)-$(hostname)-$name"
mkdir -p "$dir"
for f in braid-run $tools; do
    [ -x "$bin/$f" ] || { echo "$name: $bin/$f missing (cmake --build $build)" >&2; exit 1; }
    case $f in
    *_perf) [ -x "$bin/ompi_${f%_perf}_perf" ] || "$here/peers/build.sh" "$bin" ;;
    esac
done

# median_csv (perf/median.sh, where the tests reach it too).
. "$here/median.sh"

# xcore_probe: "xcore 256K N GB/s", the rate at which one cpu fetches what another just wrote
# (perf/xcore, as compare_modes.sh's probe), for the summaries' per-round lines: some machines
# change speed between rounds (perf/RESULTS.md, "a machine with two speeds").
xcore_probe() {
    [ -x "$bin/xcore" ] || return 0
    "$bin/xcore" -t 2 -b 256K -e 256K -r 200 2>/dev/null | awk '$1 == "xcore" { printf "xcore 256K %s GB/s", $7 }'
}
