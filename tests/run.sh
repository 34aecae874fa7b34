#!/usr/bin/env bash
# Installs dependencies, builds braid twice (release with -Werror, and ASan+UBSan), runs the
# whole suite under the sanitizers, then the fuzzers and the multi-host (netns) tests when
# available, and finally the whole Criterion suite on the release build (then a summary
# naming the steps that failed, the last lines printed). Exit status is non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh || exit 1
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_WERROR=ON >/dev/null || exit 1
cmake --build build -j"$jobs" || exit 1
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DBRAID_SANITIZE=ON -DBRAID_WERROR=ON \
  -DBRAID_WITH_CUDA=OFF -DBRAID_WITH_TORCH=OFF >/dev/null || exit 1
cmake --build build-asan -j"$jobs" --target braid_tests || exit 1
# The RDMA VM run of the sanitizer build (below) needs these too.
cmake --build build-asan -j"$jobs" --target braid_conformance all_reduce_perf braid braid-info || exit 1

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DBRAID_TSAN=ON -DBRAID_WERROR=ON \
  -DBRAID_WITH_CUDA=OFF -DBRAID_WITH_TORCH=OFF >/dev/null || exit 1
cmake --build build-tsan -j"$jobs" --target braid_thread_stress || exit 1

status=0
failed=""
# step NAME: prints the step's header with the seconds since the start (builds included), so the
# log shows where the time goes
step() {
  echo "== [${SECONDS} s] $1"
}
# fail NAME: records a failed step; the summary after the last suite names every one of them
# (CI shows only the tail of the log).
fail() {
  status=1
  failed="$failed
  - $1"
}
if command -v nvcc >/dev/null; then
  step "CUDA kernels use 128-bit loads and stores (PTX)"
  bash tests/gpu/ptx_check.sh || fail "PTX check"
fi
step "clang-format (the tree is formatted)"
bash tests/format_check.sh || fail "clang-format"
step "ThreadSanitizer: worker thread, polling, abort; pipelined hier all-reduce, a rank killed in it"
TSAN_OPTIONS=halt_on_error=1 build-tsan/bin/braid_thread_stress || fail "TSan thread stress"
step "ASan+UBSan suite"
BRAID_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build-asan/bin/braid_tests --jobs "$jobs" >build-asan/tests.log 2>&1
rc=$?
asan_lines=$(grep -E "^\[(FAIL|----)\]|Synthesis|ERROR: |SUMMARY: |runtime error|check failed" build-asan/tests.log | tail -n 60)
echo "$asan_lines"
# the summary repeats what failed here (CI shows only the tail of the log)
[ $rc -eq 0 ] || fail "ASan+UBSan suite (exit $rc; build-asan/tests.log):
$(echo "$asan_lines" | tail -n 25)
$(tail -n 15 build-asan/tests.log)"
# A test process that leaks (or fails a sanitizer check) after its test has passed only gets
# Criterion's warning "crashed during its setup or teardown", and the run still exits 0.
after=$(grep -c -E "ERROR: LeakSanitizer|crashed during its setup or teardown" build-asan/tests.log)
[ "$after" -eq 0 ] || fail "ASan+UBSan suite: $after leak report(s) or crash(es) after a test (build-asan/tests.log):
$(grep -E -A12 "ERROR: LeakSanitizer|crashed during its setup or teardown" build-asan/tests.log | head -n 40)"
step "valgrind gate: a small all-reduce on shm and tcp, every rank under memcheck, no leak"
bash tests/valgrind.sh build/bin || fail "valgrind gate"
step "install smoke (pkg-config, find_package)"
bash tests/install_smoke.sh || fail "install smoke"
for extra in tests/fuzz/run.sh tests/net/run_net_tests.sh tests/rdma/run_rdma_tests.sh; do
  if [ -x "$extra" ] || [ -f "$extra" ]; then
    step "$extra"
    bash "$extra" || fail "$extra"
  fi
done
step "RDMA under ASan+UBSan+LSan in the Soft-RoCE VM (conformance, collectives, zero-copy subset)"
BRAID_RDMA_ONLY='conformance rdma/[a-z]* (\|net_check coll\|zero-copy ring' bash tests/rdma/run_rdma_tests.sh build-asan ||
  fail "RDMA VM under ASan"
step "PyTorch backend (pytest tests/torch: collectives at 1..4 ranks vs Gloo, DDP, faults)"
# pytest exits 0 when every test passed (skips are listed by -rs), 1 on failures, 2-4 on
# interruption or usage/internal errors, 5 when it collected nothing: all but 0 fail the run.
if [ -f build/python/braid_torch/__init__.py ]; then
  PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider tests/torch
  rc=$?
  [ $rc -eq 0 ] || { echo "pytest exited $rc"; fail "pytest tests/torch (exit $rc)"; }
else
  echo "braid_torch was not built (the configure summary says why)"
  fail "braid_torch not built"
fi
step "braid test suite"
build/bin/braid_tests --jobs "$jobs" 2>&1 | tee build/tests.log
rc=${PIPESTATUS[0]}
# the summary names the failed tests and their assertions (CI shows only the tail of the log)
[ $rc -eq 0 ] || fail "braid test suite (exit $rc; build/tests.log):
$(grep -E "^\[(FAIL|----)\]|Synthesis|Timed out|[Cc]rash" build/tests.log | tail -n 30)"
if [ $status -eq 0 ]; then
  echo "== [${SECONDS} s] tests/run.sh: every step passed"
else
  echo "== [${SECONDS} s] tests/run.sh: these steps failed:$failed"
fi
exit $status
