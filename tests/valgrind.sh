#!/usr/bin/env bash
# Valgrind gate: a small all-reduce (2 ranks, all_reduce_perf with its check) over shm and over
# tcp, every rank under valgrind's memcheck. Fails on any memcheck error and on any leak that is
# definite, indirect or possible (the bootstrap root's thread included: it is joined at exit).
# Usage: tests/valgrind.sh [BINDIR]   (default build/bin; needs valgrind)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin}
if ! command -v valgrind >/dev/null; then
  echo "valgrind gate: valgrind is not installed (apt-get install valgrind)"
  exit 1
fi
status=0
for tr in shm tcp; do
  dir=$(mktemp -d /tmp/braid-vg-XXXXXX)
  start=$(date +%s)
  BRAID_TRANSPORT=$tr BRAID_TIMEOUT=60 "$bin/braid-run" -n 2 --timeout 120 \
    valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
    --errors-for-leak-kinds=definite,indirect,possible --track-fds=no --log-file="$dir/vg.%p" \
    "$bin/all_reduce_perf" -b 8 -e 4K -f 32 -n 1 -w 1 -c 1 >"$dir/out" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  # Memcheck's own reports (valgrind's notes about syscalls it does not know, such as
  # pidfd_open, are not errors: braid falls back to kill(pid, 0) there).
  reports=$(grep -hE "lost in|Invalid (read|write|free)|uninitialised|Mismatched free|overlap|ERROR SUMMARY: [1-9]" \
    "$dir"/vg.* 2>/dev/null)
  if [ $rc -ne 0 ] || [ -n "$reports" ] || ! grep -q "Out of bounds values : 0 OK" "$dir/out"; then
    echo "valgrind gate ($tr): FAILED (exit $rc, ${secs} s)"
    cat "$dir/out"
    for f in "$dir"/vg.*; do
      [ -s "$f" ] && { echo "--- $f"; grep -v -e "unhandled amd64-linux syscall" -e "your own handler" \
        -e "README_MISSING_SYSCALL" -e "we consider this a bug" -e "valgrind.org/support" "$f"; }
    done
    status=1
  else
    echo "valgrind gate ($tr): clean (2 ranks, ${secs} s)"
  fi
  rm -rf "$dir"
done
exit $status
