#!/bin/bash
# s20: A/B of two builds of all_reduce_perf (push vs before)
# usage: binab.sh ROUNDS N "flags" BUILD_A BUILD_B : all_reduce_perf time per size, A and B alternated; median and B/A
R=$1 N=$2 F=$3 A=$4 B=$5
for r in $(seq 1 $R); do
  for bd in $A $B; do
    echo "== $bd"; $bd/bin/braid-run -n $N $bd/bin/$TOOL $F -c 0 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF > 8 {print $1, $6}'
  done
done | awk '/^==/ {b=$2; next} {t[$1" "b]=t[$1" "b]" "$2} END {for (k in t) print k, t[k]}' | sort -n | gawk '{m=NF-2; delete v; for(i=3;i<=NF;i++) v[i-2]=$i; asort(v); med=(m%2)?v[(m+1)/2]:(v[m/2]+v[m/2+1])/2; key=$1; if (key==prev) printf "%s %.1f  B/A %.3f  [%s]\n", $2, med, med/pm, substr($0, index($0,$3)); else printf "%s %s %.1f  [%s]\n", $1, $2, med, substr($0, index($0,$3)); prev=key; pm=med}'
