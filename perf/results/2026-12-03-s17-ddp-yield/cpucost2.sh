#!/bin/bash
# per-call cpu ms by category: user sys softirq, from /proc/stat deltas between n=N1 and n=N2
st() { awk '/^cpu /{print $2+$3, $4, $7+$8}' /proc/stat; }
run() { local n=$1; shift; local s0=($(st)); "$@" -n $n >/dev/null 2>&1; local s1=($(st)); echo $(( s1[0]-s0[0] )) $(( s1[1]-s0[1] )) $(( s1[2]-s0[2] )); }
N1=50; N2=250
cfg="--rate 1gbit --burst 128kb"
for x in "$@"; do
  a=($(run $N1 tests/net/netns.sh --hosts 2 --ranks-per-host 2 $cfg --bind $x -- build/bin/all_reduce_perf -b 2700K -e 2700K -w 5 -c 0))
  b=($(run $N2 tests/net/netns.sh --hosts 2 --ranks-per-host 2 $cfg --bind $x -- build/bin/all_reduce_perf -b 2700K -e 2700K -w 5 -c 0))
  d=$((N2-N1)); echo "[$x] ms/call user $(( (b[0]-a[0])*10/d )) sys $(( (b[1]-a[1])*10/d )) irq+softirq $(( (b[2]-a[2])*10/d ))"
done
