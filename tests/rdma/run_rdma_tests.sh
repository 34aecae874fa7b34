#!/usr/bin/env bash
# RDMA transport tests on Soft-RoCE: boots the qemu VM of tests/rdma/vm.sh with the build
# folder shared in, and runs tests/rdma/inner.sh there (collective correctness with
# all_reduce_perf, ranks split across rxe0 and rxe1 as two hosts, BRAID_TRANSPORT=rdma and the
# automatic shm + rdma choice), and the NUMA cases on the VM's 2 NUMA nodes (ranks bound with
# taskset publish their real node; the ring crosses nodes the fewest times).
#
#   tests/rdma/run_rdma_tests.sh [BUILD_DIR]     (default: build)
#
# The last line is "rdma: N passed, N failed"; the exit status is non-zero if any case failed or
# the VM could not boot (BRAID_SKIP_RDMA_VM=1 turns the latter into a skip). BRAID_RDMA_ONLY=REGEX
# runs only the cases whose names match (development; CI runs them all).
#
# A sanitizer build (cmake -DBRAID_SANITIZE=ON: ASan+UBSan) works too: its programs run in the
# VM with ASAN_OPTIONS/LSAN_OPTIONS/UBSAN_OPTIONS set (leaks checked, tests/lsan.supp), so a
# sanitizer report makes the rank exit non-zero and the case fail.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=$(cd "${1:-${BRAID_BUILD:-build}}" && pwd) || { echo "rdma: no build folder"; echo "rdma: 0 passed, 1 failed"; exit 1; }
if ! grep -aq "rdma: rdma_connect" "$build/lib/libbraid.so" 2>/dev/null; then
    echo "rdma: $build has no RDMA transport (libibverbs-dev/librdmacm-dev missing at configure)"
    echo "rdma: 0 passed, 0 failed"
    exit 0
fi
perf="$build/bin/all_reduce_perf"
[ -x "$perf" ] || { echo "rdma: $perf missing"; echo "rdma: 0 passed, 1 failed"; exit 1; }
mkdir -p "$build/rdma-test"
cp tests/rdma/inner.sh "$build/rdma-test/inner.sh"
san_flags=""
san_env=""
# grep reads all of ldd's output: with pipefail, grep -q can exit first and ldd's SIGPIPE fail the test
if ldd "$perf" | grep libasan >/dev/null; then
    san_flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
    cp tests/lsan.supp "$build/rdma-test/lsan.supp"
    san_env="ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 \
LSAN_OPTIONS=suppressions=$build/rdma-test/lsan.supp \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
    echo "rdma: sanitizer build: ASan+UBSan+LSan checks inside the VM"
fi
# The multi-host checker of tests/net (exact collective results, a killed rank is named).
rm -f "$build/rdma-test/net_check"
${CC:-cc} -O2 -Wall -Wextra $san_flags -I include tests/net/net_check.c -L "$build/lib" -lbraid \
    -Wl,-rpath,"$build/lib" -o "$build/rdma-test/net_check" ||
    echo "rdma: building net_check failed; its cases are left out" >&2
t0=$(date +%s)
tests/rdma/vm.sh --share "$build" --lib-of "$perf" --lib-of "$build/bin/braid_conformance" --lib-of "$build/rdma-test/net_check" --timeout "${BRAID_RDMA_VM_TIMEOUT:-1500}" -- \
    env $san_env VERBOSE="${VERBOSE:-}" ONLY="${BRAID_RDMA_ONLY:-}" dash "$build/rdma-test/inner.sh" "$build" | tee "$build/rdma-test/log"
rc=${PIPESTATUS[0]}
echo "rdma: total $(($(date +%s) - t0)) s (VM status $rc)"
if ! grep -q "^rdma: [0-9]* passed" "$build/rdma-test/log"; then
    if [ "${BRAID_SKIP_RDMA_VM:-0}" = 1 ] && [ "$rc" -eq 0 ]; then
        echo "rdma: 0 passed, 0 failed"
        exit 0
    fi
    echo "rdma: 0 passed, 1 failed"
    exit 1
fi
grep "^rdma: [0-9]* passed" "$build/rdma-test/log" | tail -1
exit "$rc"
