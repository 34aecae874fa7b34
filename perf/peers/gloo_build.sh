#!/bin/sh
# Builds the Gloo peer benchmark (gloo_allreduce_perf) against Debian's libgloo-dev.
#   perf/peers/gloo_build.sh [OUTDIR]     (default: build/bin of the repository)
# It shares perf/bench.c, data.c, report.c and json.c with the braid tools (same loop, output and CSV),
# compiled as C11 with $CC; the Gloo backend is C++17 with $CXX. libgloo-dev ships no .pc file:
# -lgloo is enough (libgloo.so itself pulls in hiredis and ibverbs). braid.h is only included for
# its enums, nothing links libbraid.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/build/bin}
cc=${CC:-cc} cxx=${CXX:-g++}
[ -f /usr/include/gloo/allreduce.h ] || {
    echo "gloo_build.sh: /usr/include/gloo missing (apt-get install libgloo-dev)" >&2
    exit 1
}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in bench data report json; do
    "$cc" -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -I"$repo/include" -I"$repo/perf" \
        -c "$repo/perf/$f.c" -o "$tmp/$f.o"
done
"$cxx" -std=c++17 -O2 -g -Wall -Wextra -D_GNU_SOURCE -I"$repo/include" -I"$repo/perf" \
    -c "$here/gloo_allreduce_perf.cc" -o "$tmp/gloo_allreduce_perf.o"
"$cxx" "$tmp/gloo_allreduce_perf.o" "$tmp/bench.o" "$tmp/data.o" "$tmp/report.o" "$tmp/json.o" \
    -lgloo -lpthread -lm -o "$out/gloo_allreduce_perf"
echo "built $out/gloo_allreduce_perf"
