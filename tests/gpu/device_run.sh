#!/usr/bin/env bash
# Run on the lent device machine, in the repository root, with .gpu/gpu-pack.tar.xz carried
# (tests/gpu/pack.sh): unpacks it, runs tests/gpu/run.sh on it within BUDGET_S (default 375)
# and leaves in $OUT what comes back (at most 8 files): results.md, the perf CSV, the console
# output and every log in one tarball. The PTX check is left to pack.sh (it needs no GPU).
#   bash tests/gpu/device_run.sh [BUDGET_S]
set -uo pipefail
cd "$(dirname "$0")/../.."
R=$PWD
tar xJf .gpu/gpu-pack.tar.xz -C .gpu || exit 9
export LD_LIBRARY_PATH=$R/.gpu/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
G=$(mktemp -d)
nt=()
[ -d .gpu/nccl-tests ] && nt=(NCCL_TESTS="$R/.gpu/nccl-tests")
budget=${1:-375}
env OUT="$G" GPU_SKIP_PTX=1 "${nt[@]}" timeout $((budget + 20)) bash tests/gpu/run.sh --build "$R/.gpu/build" \
  --budget "$budget" >"$G/console.txt" 2>&1
rc=$?
if [ -n "${OUT:-}" ]; then
  cp "$G/results.md" "$G/console.txt" "$OUT/" 2>/dev/null
  cp "$G/all_reduce_perf.csv" "$OUT/" 2>/dev/null
  tar czf "$OUT/logs.tgz" -C "$G" logs
fi
cat "$G/results.md"
exit $rc
