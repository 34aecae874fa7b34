#!/usr/bin/env bash
# The main job: installs dependencies, builds braid, runs an all-reduce bandwidth sweep on 4
# local ranks over shared memory (8 B .. 64 MiB, factor 2, float32 sum, results checked) and
# plots busbw against size. Output: the nccl-tests table on stdout, build/allreduce_n4.csv and
# build/allreduce_n4.png. Extra arguments go to all_reduce_perf (e.g. -n 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
rm -f build/allreduce_n4.csv
BRAID_TRANSPORT=shm build/bin/braid-run -n 4 build/bin/all_reduce_perf -b 8 -e 64M -f 2 \
  -d float -o sum -c 1 --csv build/allreduce_n4.csv "$@"
bash perf/plot.sh -o build/allreduce_n4.png -T "braid all-reduce, 4 ranks, shared memory" \
  "braid 4 ranks shm=build/allreduce_n4.csv"
echo "plot: build/allreduce_n4.png"
