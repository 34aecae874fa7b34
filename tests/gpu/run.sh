#!/usr/bin/env bash
# The device run: one prepared script for a machine with a CUDA GPU (the lent H200), under
# 8 minutes. Writes logs to $OUT/logs/ and a result table to $OUT/results.md (also printed).
#   bash tests/gpu/run.sh            (OUT defaults to ./gpu-out)
# Steps (each bounded by `timeout`, a failure never stops the later ones):
#   build        CUDA build with -Werror (BRAID_WITH_CUDA=ON, sm_90), all targets
#   ptx          every kernel's PTX has 128-bit loads/stores (tests/gpu/ptx_check.sh)
#   unit         the cuda and twin suites on this machine (the no-device cases skip here)
#   reduce       CUDA reduction kernels vs the CPU kernels, bit for bit, every dtype x op
#   bw           reduction kernel bandwidth vs device-to-device copy, 64 and 256 MiB
#   coll N       device buffers, N = 1..8 ranks as processes on the one GPU, every collective x
#                dtype x op, blocking and stream-ordered, in place and not
#   threads N    N communicators in one process on the GPU (stream-ordered)
#   kill 3       a rank SIGKILLed mid-collective: the others get an error
#   nodev        BRAID_CUDA=0
#   perf         all_reduce_perf on device buffers (--device 1 and 2), n = 1, 2, 4, 8
#   sanitizer    compute-sanitizer memcheck on the kernels (when installed)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/logs"
T0=$(date +%s)
table="$OUT/results.md"
{
  echo "# braid GPU run, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    sed 's/^/GPU: /'
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -n1)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
  echo
  echo "| step | result | detail | seconds |"
  echo "|---|---|---|---|"
} >"$table"
status=0

# step NAME LIMIT CMD...: runs CMD under timeout, logs to logs/NAME.log, adds a table row (and
# the RESULT lines the command printed, one row each).
step() {
  local name=$1 limit=$2
  shift 2
  local t=$(date +%s) log="$OUT/logs/${name//\//_}.log"
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  local rc=$? dt=$(($(date +%s) - t))
  local res=PASS
  [ $rc -eq 0 ] || res=FAIL
  [ $rc -eq 124 ] && res="FAIL (timeout ${limit}s)"
  [ $rc -eq 0 ] || status=1
  grep '^RESULT ' "$log" | while read -r _ what r detail; do
    echo "| $what | $r | $detail | |" >>"$table"
  done
  echo "| **$name** | $res | exit $rc, log logs/$(basename "$log") | $dt |" >>"$table"
  echo "== $name: $res ($dt s)"
}

JOBS=$(nproc)
step build 240 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_WERROR=ON \
  -DBRAID_WITH_CUDA=ON && cmake --build build-gpu -j$JOBS"
B=build-gpu/bin
step ptx 60 bash tests/gpu/ptx_check.sh
step unit/cuda 60 "$B/braid_tests" --filter 'cuda/*' --jobs "$JOBS"
step unit/twin 120 "$B/braid_tests" --filter 'twin/*' --jobs "$JOBS"
step reduce 60 "$B/braid_gpu_check" reduce
step bw/64MiB 60 "$B/braid_gpu_check" bw 64
step bw/256MiB 60 "$B/braid_gpu_check" bw 256
for n in 1 2 3 4 8; do
  step "coll/n=$n" 150 "$B/braid_gpu_check" coll "$n"
done
step threads/n=4 120 "$B/braid_gpu_check" threads 4
step kill/n=3 150 "$B/braid_gpu_check" kill 3
step nodev 30 "$B/braid_gpu_check" nodev
for mode in 1 2; do
  for n in 1 2 4 8; do
    step "perf/device=$mode/n=$n" 90 "$B/braid-run" -n "$n" -- "$B/all_reduce_perf" -b 8 -e 64M -f 8 \
      -c 1 -n 20 -w 5 --device "$mode" --csv "$OUT/all_reduce_perf.csv"
    # busbw at the largest size into the table
    last=$(grep -E '^ +[0-9]+ ' "$OUT/logs/perf_device=${mode}_n=${n}.log" | tail -n1)
    [ -n "$last" ] && echo "| perf/device=$mode/n=$n 64MiB | row | \`$last\` | |" >>"$table"
  done
done
if command -v compute-sanitizer >/dev/null; then
  step sanitizer 90 compute-sanitizer --tool memcheck --error-exitcode 1 "$B/braid_gpu_check" bw 16
fi
echo >>"$table"
echo "total: $(($(date +%s) - T0)) s, status $status" >>"$table"
cat "$table"
exit $status
