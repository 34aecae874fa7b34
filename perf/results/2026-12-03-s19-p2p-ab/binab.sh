#!/bin/bash
# usage: binab.sh ROUNDS TOOL "flags" BUILD_A BUILD_B  (tcp, n=4) prints time per size for A and B
R=$1 T=$2 F=$3 A=$4 B=$5 N=${N:-4}
for r in $(seq 1 $R); do
  for bd in $A $B; do
    echo "== $bd"; BRAID_TRANSPORT=${TRANSPORT:-tcp} $bd/bin/braid-run -n $N $bd/bin/$T $F -c 0 2>&1 | awk '$1 ~ /^[0-9]+$/ {print $1, $6}'
  done
done | awk '/^==/ {b=$2; next} {t[b" "$1]=t[b" "$1]" "$2} END {for (k in t) print k, t[k]}' | sort
