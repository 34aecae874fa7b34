#!/bin/bash
# braid (malloc), braid -R 2 (braid_mem_alloc), Open MPI vader: all_reduce, interleaved, rotated
cd /work/main
R=$1 N=$2; shift 2; F="$*"
for r in $(seq 1 $R); do
  for k in 0 1 2; do
    w=$(( (k + r) % 3 ))
    case $w in
    0) echo "== malloc"; build/bin/braid-run -n $N build/bin/all_reduce_perf $F -c 0 ;;
    1) echo "== R2"; build/bin/braid-run -n $N build/bin/all_reduce_perf $F -c 0 -R 2 ;;
    2) echo "== ompi"; mpirun --allow-run-as-root --oversubscribe -n $N --mca btl self,vader build/bin/ompi_allreduce_perf $F -c 0 ;;
    esac 2>&1 | awk '/^==/ {print; next} $1 ~ /^[0-9]+$/ && NF > 8 {print $1, $6}'
  done
done | awk '/^==/ {b=$2; next} {t[$1" "b]=t[$1" "b]" "$2} END {for (k in t) print k, t[k]}' | sort -n | gawk '{n=split($0,a," "); m=NF-2; for(i=3;i<=NF;i++) v[i-2]=$i; asort(v); med=(m%2)?v[(m+1)/2]:(v[m/2]+v[m/2+1])/2; printf "%s %s median %.1f  [%s]\n", $1, $2, med, substr($0, index($0,$3)); delete v}'
