# Sourced by perf/compare.sh and perf/compare_tcp.sh: parses their shared flags (see their
# headers) into dir build ranks minb maxb fac iters warm check dtype op, checks the binaries and
# builds the Open MPI peer harness when missing. The caller sets here, repo, name and the
# defaults (maxb, iters, warm) first; sets OPTIND past the flags.
dir="" build="$repo/build" ranks="2 4" minb=8 fac=2 check=1 dtype=float op=sum
while getopts "o:B:N:b:e:f:n:w:c:d:O:h" opt; do
    case $opt in
    o) dir=$OPTARG ;;
    B) build=$OPTARG ;;
    N) ranks=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    f) fac=$OPTARG ;;
    n) iters=$OPTARG ;;
    w) warm=$OPTARG ;;
    c) check=$OPTARG ;;
    d) dtype=$OPTARG ;;
    O) op=$OPTARG ;;
    h) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) exit 2 ;;
    esac
done
bin="$build/bin"
[ -n "$dir" ] || dir="$repo/perf/results/$(date +%Y%m%d-%H%M%S)-$(hostname)-$name"
mkdir -p "$dir"
for f in braid-run all_reduce_perf; do
    [ -x "$bin/$f" ] || { echo "$name: $bin/$f missing (cmake --build $build)" >&2; exit 1; }
done
[ -x "$bin/ompi_allreduce_perf" ] || "$here/peers/build.sh" "$bin"
