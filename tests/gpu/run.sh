#!/usr/bin/env bash
# The device run: one prepared script for a machine with a CUDA GPU (the lent H200), under
# 8 minutes in all (a global deadline: a step that no longer fits is reported NOT RUN, and the
# run fails). Writes logs to $OUT/logs/ and a result table to $OUT/results.md (also printed).
#   bash tests/gpu/run.sh [--dry-run] [--build DIR] [--budget SECONDS]
#     --dry-run    for a machine without a GPU: runs the host steps (build, ptx, unit suites),
#                  and for every GPU step checks that its program exists and logs the command
#                  instead of running it (DRY in the table); proves the script's own logic
#     --build DIR  use an existing CUDA build (its bin/) instead of building build-gpu
#     --budget S   the global deadline (default 460 s)
#   GPU_SKIP=REGEX skips the steps whose names match (a second run of a session)
# Fails loudly: no GPU (outside --dry-run), a missing program, a build without CUDA, a step
# that fails or times out, the device engine not used where it must be (BRAID_DEV_ENGINE=device
# makes every fallback to host staging an error) all make the run FAIL (exit 1).
# Steps (each bounded by `timeout` and the deadline; a failure never stops the later ones; the
# quick ones that need no communicator first, then the rest in order of what they tell):
#   build        CUDA build with -Werror (BRAID_WITH_CUDA=ON, sm_90), the targets used here
#   probe        a CUDA device is visible (name, memory)
#   ptx          every kernel's PTX has 128-bit loads/stores (tests/gpu/ptx_check.sh)
#   unit         the cuda suite (and, in a dry run, the twin suite) of braid_tests
#   reduce       CUDA reduction kernels vs the CPU kernels, bit for bit, every dtype x op
#   coll N       device buffers, N = 1..8 ranks as processes on the one GPU (time-sliced),
#                every collective x dtype x op x count (0, 1, 97 unaligned, 65536), blocking
#                and stream-ordered, in place and not, on the device engine (n = 5..7: fewer
#                dtypes, GPU_CHECK_QUICK=1)
#   threads N    N communicators in one process (concurrent kernels), N = 1..8, the same sweep
#   kill 3       a rank SIGKILLed mid-collective: the others get an error, not a hang
#   ringbw N     all-reduce busbw of N communicators of one process vs the ring's memory model
#   bw           reduction kernel bandwidth vs device-to-device copy, 64 and 256 MiB
#   ringbw N/cfg the same with other BRAID_DEV_NCHANNELS, _BLOCKS, _CHUNK_SIZE
#   perf         all_reduce_perf on device buffers (--device 1 blocking, 2 stream), n = 1,2,4,8;
#                reduce_scatter_perf and scatter_perf --device 1 (in place: n blocks) on 2 ranks
#   nccl-tests   with NCCL_TESTS=<folder of NVIDIA's nccl-tests built against $BUILD/nccl>: its
#                all_reduce, reduce_scatter, all_gather, broadcast, sendrecv and alltoall perf
#                tools on one GPU (-g 1, checked), and that they load braid's libnccl.so.2
#   p2p N        sendrecv (a ring in a group) and alltoall on device buffers, N = 1, 2, 4
#   nodev        BRAID_CUDA=0: the stream forms are refused
#   robust/*     failure handling: a stale CUDA error, graph capture, the legacy stream held at
#                setup, the caller's device restored, a launch that times out, iallreduce staging
#   sanitizer    compute-sanitizer memcheck on the kernels (when installed)
set -uo pipefail
cd "$(dirname "$0")/../.."
DRY=0
BUILD=""
BUDGET=460
while [ $# -gt 0 ]; do
  case $1 in
  --dry-run) DRY=1 ;;
  --build)
    BUILD=$2
    shift
    ;;
  --budget)
    BUDGET=$2
    shift
    ;;
  *)
    echo "usage: $0 [--dry-run] [--build DIR] [--budget SECONDS]" >&2
    exit 2
    ;;
  esac
  shift
done
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/logs"
T0=$(date +%s)
DEADLINE=$((T0 + BUDGET))
table="$OUT/results.md"
{
  echo "# braid GPU run, $(date -u '+%Y-%m-%d %H:%M UTC')$([ $DRY = 1 ] && echo ' (DRY RUN: no GPU step ran)')"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    sed 's/^/GPU: /' || true
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -n1)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
  echo
  echo "| step | result | detail | seconds |"
  echo "|---|---|---|---|"
} >"$table"
status=0
nfail=0

row() { echo "| $1 | $2 | $3 | ${4:-} |" >>"$table"; }

# run NAME LIMIT KIND CMD...: runs CMD under timeout (LIMIT, cut to the deadline), logs to
# logs/NAME.log, adds a table row (and one row per "RESULT <name> <verdict> <detail>" line the
# command printed). KIND gpu: a dry run only checks that CMD's program exists.
run() {
  local name=$1 limit=$2 kind=$3
  shift 3
  local log="$OUT/logs/${name//\//_}.log" t left
  if [ -n "${GPU_SKIP:-}" ] && [[ $name =~ $GPU_SKIP ]]; then
    row "$name" "SKIP" "GPU_SKIP"
    return
  fi
  t=$(date +%s)
  left=$((DEADLINE - t))
  if [ "$left" -lt 5 ]; then
    row "**$name**" "NOT RUN" "the ${BUDGET} s budget was spent"
    echo "== $name: NOT RUN (budget)"
    status=1
    nfail=$((nfail + 1))
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local prog=$1
  [ "$prog" = env ] && prog=$(for a in "${@:2}"; do case $a in *=*) ;; *) echo "$a"; break ;; esac; done)
  if ! command -v "$prog" >/dev/null 2>&1; then
    echo "missing program: $prog" >"$log"
    row "**$name**" "FAIL" "missing program \`$prog\`" 0
    echo "== $name: FAIL (missing $prog)"
    status=1
    nfail=$((nfail + 1))
    return
  fi
  if [ "$DRY" = 1 ] && [ "$kind" = gpu ]; then
    printf 'DRY RUN, not run: timeout %s' "$limit" >"$log"
    printf ' %q' "$@" >>"$log"
    echo >>"$log"
    row "$name" "DRY" "would run \`$*\` (limit ${limit} s)" 0
    echo "== $name: DRY"
    return
  fi
  if [ "$kind" = gpu ]; then # on a timeout, the log ends with where the threads waited
    bash tests/gpu/bounded.sh "$limit" "$@" >"$log" 2>&1
  else
    timeout -k 10 "$limit" "$@" >"$log" 2>&1
  fi
  local rc=$? dt=$(($(date +%s) - t)) res=PASS
  [ $rc -eq 0 ] || res=FAIL
  [ $rc -eq 124 ] && res="FAIL (timeout ${limit}s)"
  if [ $rc -ne 0 ]; then
    status=1
    nfail=$((nfail + 1))
  fi
  grep '^RESULT ' "$log" | while read -r _ what r detail; do
    row "$what" "$r" "$detail"
  done
  row "**$name**" "$res" "exit $rc, log logs/$(basename "$log")" "$dt"
  echo "== $name: $res ($dt s)"
}

JOBS=$(nproc)
if [ -z "$BUILD" ]; then
  BUILD=build-gpu
  run build 240 host bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBRAID_WERROR=ON -DBRAID_WITH_CUDA=ON >/dev/null && cmake --build $BUILD -j$JOBS \
    --target braid_gpu_check all_reduce_perf reduce_scatter_perf scatter_perf braid-run \
    braid_tests"
fi
B=$BUILD/bin
# A build without CUDA has no braid_gpu_check: every GPU step below then fails as missing.
if ! grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  row "**build**" "FAIL" "$BUILD/CMakeCache.txt names no CUDA compiler: not a CUDA build"
  status=1
  nfail=$((nfail + 1))
fi
run probe 30 gpu "$B/braid_gpu_check" probe
if [ "$DRY" = 0 ] && ! grep -q '^RESULT probe PASS' "$OUT/logs/probe.log" 2>/dev/null; then
  echo "== no CUDA device: the GPU steps below fail" | tee -a "$OUT/logs/probe.log"
fi
# GPU_SKIP_PTX=1: the PTX was checked where the build was made (tests/gpu/pack.sh does)
if [ "${GPU_SKIP_PTX:-0}" = 1 ]; then
  row "ptx" "SKIP" "GPU_SKIP_PTX=1: checked where the build was made"
else
  run ptx 90 host bash tests/gpu/ptx_check.sh
fi
# The suites of braid_tests need Criterion: a build carried to the device may leave them out.
if [ -x "$B/braid_tests" ]; then
  run unit/cuda 60 host "$B/braid_tests" --filter 'cuda/*' --jobs "$JOBS"
  [ "$DRY" = 1 ] && run unit/twin 300 host "$B/braid_tests" --filter 'twin/*' --jobs "$JOBS"
else
  row "unit/cuda" "SKIP" "$B/braid_tests is not in this build (no Criterion)"
fi
# Quick and independent of the communicators first, so a later hang still leaves them measured;
# then what a first device run showed to matter (perf/RESULTS.md, GPU): ranks as threads of one
# process (concurrent kernels) before ranks as processes, which one GPU time-slices (an 8-process
# call takes about 28 ms whatever its size), so those come last.
run reduce 40 gpu "$B/braid_gpu_check" reduce
run bw/256MiB 30 gpu "$B/braid_gpu_check" bw 256
export BRAID_DEV_ENGINE=device BRAID_TIMEOUT=${BRAID_TIMEOUT:-15}
run threads/n=2 40 gpu "$B/braid_gpu_check" threads 2
# The stream form in fresh processes hung on the second run (perf/RESULTS.md, GPU): when it
# still does, the same again with every CUDA module loaded at startup tells whether lazy module
# loading (a context synchronisation while a stream is held) is the cause.
run coll/n=1 30 gpu "$B/braid_gpu_check" coll 1
grep -q '^RESULT coll/n=1/stream PASS' "$OUT/logs/coll_n=1.log" 2>/dev/null ||
  run coll/n=1/eager 30 gpu env CUDA_MODULE_LOADING=EAGER "$B/braid_gpu_check" coll 1
# sends, receives and alltoall on device buffers (staged through host memory)
for n in 1 2 4; do
  run "p2p/n=$n" 30 gpu "$B/braid_gpu_check" p2p "$n"
done
# NVIDIA's nccl-tests built by hand against $BUILD/nccl (none of it is in this repository):
# NCCL_TESTS=<its build folder>. One GPU, so one rank (-g 1); device buffers, checked (-c 1).
if [ -n "${NCCL_TESTS:-}" ]; then
  for t in all_reduce sendrecv alltoall all_gather reduce_scatter broadcast; do
    run "nccl-tests/$t" 25 gpu env LD_LIBRARY_PATH="$BUILD/nccl/lib:${LD_LIBRARY_PATH:-}" \
      "$NCCL_TESTS/${t}_perf" -b 8 -e 256M -f 4 -g 1 -c 1 -n 10 -w 3
  done
  LD_LIBRARY_PATH="$BUILD/nccl/lib:${LD_LIBRARY_PATH:-}" ldd "$NCCL_TESTS/all_reduce_perf" \
    >"$OUT/logs/nccl-tests-ldd.log" 2>&1
  lib=$(grep 'libnccl.so.2 =>' "$OUT/logs/nccl-tests-ldd.log" | awk '{print $3}')
  case $lib in
  "$BUILD"/nccl/lib/*) row "nccl-tests/libnccl" "PASS" "loads braid's \`$lib\`" ;;
  *)
    row "nccl-tests/libnccl" "FAIL" "libnccl.so.2 resolves to \`$lib\`, not braid's"
    status=1
    ;;
  esac
fi
run coll/n=2 60 gpu "$B/braid_gpu_check" coll 2
run kill/n=3 40 gpu "$B/braid_gpu_check" kill 3
perf_step() {
  local mode=$1 n=$2
  # n processes time-slice one GPU (a call costs about 12 ms per rank at any size): n = 8 stops
  # at 32 MiB to fit
  run "perf/device=$mode/n=$n" 40 gpu "$B/braid-run" -n "$n" -- "$B/all_reduce_perf" -b 8 \
    -e "$([ "$n" -ge 8 ] && echo 32M || echo 256M)" -f 4 -c 1 -n 10 -w 3 --device "$mode" \
    --csv "$OUT/all_reduce_perf.csv"
  local log="$OUT/logs/perf_device=${mode}_n=${n}.log" last
  last=$(grep -E '^ +[0-9]+ ' "$log" 2>/dev/null | tail -n1)
  [ -n "$last" ] && row "perf/device=$mode/n=$n largest" "row" "\`$last\`"
  if [ "$DRY" = 0 ] && ! grep -q 'Out of bounds values : 0 OK' "$log" 2>/dev/null; then
    row "perf/device=$mode/n=$n check" "FAIL" "no '# Out of bounds values : 0 OK' line"
    status=1
  fi
}
perf_step 2 1
perf_step 1 1
perf_step 1 2
perf_step 2 2
# In place, reduce_scatter's input and the scatter root's are n blocks of the receive buffer:
# the check once copied only one block to and from the device (wrong data at any correct run;
# perf_selftest covers it on a fake device). Exit 1 here is wrong data.
for t in reduce_scatter scatter; do
  run "perf/$t/device=1/n=2" 40 gpu "$B/braid-run" -n 2 -- "$B/${t}_perf" -b 8 -e 1M -f 8 \
    -c 1 -n 2 -w 1 -r -1 --device 1
done
for n in 2 4 8; do
  run "ringbw/n=$n" 30 gpu "$B/braid_gpu_check" ringbw "$n" 256
done
run threads/n=4 30 gpu "$B/braid_gpu_check" threads 4
run threads/n=8 45 gpu "$B/braid_gpu_check" threads 8
# The stream form of 7-8 communicators in one process hung (the first run of session 26): each
# holds a stream in the GPU's front end; with more streams than hardware work queues
# (CUDA_DEVICE_MAX_CONNECTIONS, default 8) an engine kernel can queue behind another rank's
# held stream. The same with 32 queues tells whether that is the cause.
run threads/n=8/conn32 45 gpu env CUDA_DEVICE_MAX_CONNECTIONS=32 "$B/braid_gpu_check" threads 8
run coll/n=4 60 gpu "$B/braid_gpu_check" coll 4
for n in 3 5 6 7 1; do
  run "threads/n=$n" 30 gpu "$B/braid_gpu_check" threads "$n"
done
for n in 3 5 6 7 8; do
  run "coll/n=$n" 60 gpu env GPU_CHECK_QUICK=1 "$B/braid_gpu_check" coll "$n"
done
perf_step 1 4
perf_step 2 4
perf_step 1 8
perf_step 2 8
unset BRAID_DEV_ENGINE
run bw/64MiB 30 gpu "$B/braid_gpu_check" bw 64
run stage/n=2 45 gpu env BRAID_DEV_ENGINE=stage GPU_CHECK_QUICK=1 "$B/braid_gpu_check" coll 2
run nodev 30 gpu "$B/braid_gpu_check" nodev
# The device path's failure handling (tests/gpu/gpu_robust.c): each was a hang, a wrong result or
# a spurious error before the fixes of session 34; compiled there without a GPU, first run here.
for w in lasterr capture legacy device; do
  run "robust/$w" 40 gpu "$B/braid_gpu_check" robust "$w"
done
run robust/hang 60 gpu env BRAID_TIMEOUT=1 BRAID_DEV_SPINS=1073741824 "$B/braid_gpu_check" robust hang
run robust/nbstage 45 gpu env BRAID_DEV_ENGINE=stage "$B/braid_gpu_check" robust nbstage
if command -v compute-sanitizer >/dev/null; then
  # memcheck errors only (exit 99): under the tool the kernels are far below their bandwidth
  # targets (the second run of session 26: 0 errors, 0.08 of the copy)
  san="compute-sanitizer --tool memcheck --error-exitcode 99"
  run sanitizer 120 gpu bash -c "$san $B/braid_gpu_check bw 16 >/dev/null; [ \$? -ne 99 ] &&
    BRAID_TIMEOUT=60 $san $B/braid_gpu_check threads 2; [ \$? -ne 99 ]"
else
  row "sanitizer" "SKIP" "compute-sanitizer is not installed here"
fi
echo >>"$table"
echo "total: $(($(date +%s) - T0)) s of ${BUDGET}, status $status ($nfail step(s) failed)$([ $DRY = 1 ] && echo ', DRY RUN')" >>"$table"
cat "$table"
exit $status
