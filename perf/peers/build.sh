#!/bin/sh
# Builds the Open MPI peer benchmarks (ompi_allreduce_perf, ompi_alltoall_perf,
# ompi_sendrecv_perf) with mpicc.
#   perf/peers/build.sh [OUTDIR]     (default: build/bin of the repository)
# It shares perf/bench.c, data.c, report.c and json.c with the braid tools (same loop, output and CSV);
# braid.h is only included for its enums, nothing links libbraid.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/build/bin}
mpicc=${MPICC:-mpicc}
command -v "$mpicc" >/dev/null 2>&1 || {
    echo "build.sh: $mpicc not found (apt-get install libopenmpi-dev openmpi-bin)" >&2
    exit 1
}
mkdir -p "$out"
for t in allreduce alltoall sendrecv; do
    "$mpicc" -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -I"$repo/include" -I"$repo/perf" \
        "$here/ompi_perf.c" "$repo/perf/bench.c" "$repo/perf/data.c" \
        "$repo/perf/report.c" "$repo/perf/json.c" -lm -o "$out/ompi_${t}_perf"
    echo "built $out/ompi_${t}_perf"
done
