#!/usr/bin/env bash
# Runs a command for at most LIMIT seconds, as `timeout` does (exit 124 when it ran out), but
# before killing a command that ran out it writes where every thread of it was waiting: each
# process's threads (state, wchan, system call), braid_gpu_check's own backtraces (SIGUSR2 makes
# every thread of it print one: gpu_check.c), and gdb's `thread apply all bt` where gdb is
# installed. For the device run (run.sh), whose hangs must be diagnosed from one run's logs.
#   bash tests/gpu/bounded.sh LIMIT CMD...
set -u
limit=$1
shift
setsid "$@" &
pid=$!
end=$((SECONDS + limit))
while kill -0 "$pid" 2>/dev/null; do
  if [ "$SECONDS" -ge "$end" ]; then
    echo "== bounded: still running after $limit s; where its threads wait:"
    pids=$(ps -o pid= -s "$pid" 2>/dev/null)
    for p in $pids; do
      echo "--- pid $p ($(cat "/proc/$p/comm" 2>/dev/null)): $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
      for t in /proc/"$p"/task/*; do
        echo "  tid ${t##*/} $(cat "$t/comm" 2>/dev/null) state=$(awk '{print $3}' "$t/stat" 2>/dev/null)" \
          "wchan=$(cat "$t/wchan" 2>/dev/null) syscall=$(cut -d' ' -f1 "$t/syscall" 2>/dev/null)"
      done
    done
    pkill -USR2 -s "$pid" -x braid_gpu_check 2>/dev/null && sleep 2
    if command -v gdb >/dev/null; then
      for p in $pids; do
        echo "--- gdb, pid $p"
        timeout 20 gdb -batch -nx -p "$p" -ex 'thread apply all bt' 2>&1 | grep -v '^\[New LWP'
      done
    else
      echo "--- gdb is not installed here"
    fi
    kill -9 -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    exit 124
  fi
  sleep 0.2
done
wait "$pid"
