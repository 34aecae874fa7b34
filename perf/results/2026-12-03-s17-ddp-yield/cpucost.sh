#!/bin/bash
# cpu seconds (user+nice+sys+irq+softirq) per call: (busy(n=N2) - busy(n=N1)) / (N2-N1)
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
run() { local n=$1; shift; local b0=$(busy); local t0=$(date +%s.%N); "$@" -n $n >/dev/null 2>&1; local t1=$(date +%s.%N); local b1=$(busy); echo "$(( b1 - b0 )) $(echo "$t1 - $t0" | bc)"; }
N1=50; N2=450
for rep in 1 2; do
for cfg in "$@"; do
  read a ta < <(run $N1 tests/net/netns.sh --hosts 2 --ranks-per-host 2 $cfg --bind -- build/bin/all_reduce_perf -b 2700K -e 2700K -w 5 -c 0)
  read b tb < <(run $N2 tests/net/netns.sh --hosts 2 --ranks-per-host 2 $cfg --bind -- build/bin/all_reduce_perf -b 2700K -e 2700K -w 5 -c 0)
  echo "cfg [$cfg]: cpu ms/call $(echo "($b - $a) * 10 / ($N2 - $N1)" | bc -l | cut -c1-6)  wall ms/call $(echo "($tb - $ta) * 1000 / ($N2 - $N1)" | bc -l | cut -c1-6)"
done; done
