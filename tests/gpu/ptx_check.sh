#!/usr/bin/env bash
# Every CUDA reduction kernel and device-engine kernel moves data with 128-bit accesses: compiles
# src/cuda/*.cu to PTX (compute_90, the build's flags) and checks that each kernel entry has
# 128-bit global loads and stores: ld.global[.nc].v4.{b,u,s,f}32 / st.global.v4.* (nvcc emits
# v2.{u,f}64 for the same 16 bytes of 64-bit elements, also accepted). Needs nvcc only (no GPU). Exit 1 on a kernel
# without them, 2 when nvcc is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvcc >/dev/null || { echo "ptx_check: nvcc not found"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
nkernels=0
for cu in src/cuda/*.cu; do
  ptx="$tmp/$(basename "$cu" .cu).ptx"
  nvcc -ptx -arch=compute_90 --fmad=false -Isrc -Iinclude -Xcompiler=-Wall,-Wextra \
    --Werror=all-warnings "$cu" -o "$ptx"
  # One kernel per .entry ... closing brace at column 0; report those lacking v4 accesses.
  out=$(awk '
    /^\.(visible )?\.entry / { name = $NF; sub(/\(.*/, "", name); body = ""; inside = 1; next }
    inside { body = body "\n" $0 }
    inside && /^}/ {
      inside = 0; n++
      ld = (body ~ /ld\.global(\.nc)?(\.[a-z0-9]+)*\.(v4\.[bfsu]32|v2\.[bfsu]64)/)
      st = (body ~ /st\.global(\.[a-z0-9]+)*\.(v4\.[bfsu]32|v2\.[bfsu]64)/)
      if (!ld || !st) { printf "FAIL %s (128-bit load: %d, store: %d)\n", name, ld, st; bad++ }
    }
    END { printf "COUNT %d %d\n", n, bad }' "$ptx")
  echo "$out" | grep '^FAIL' || true
  read -r _ n bad < <(echo "$out" | grep '^COUNT')
  echo "ptx_check: $cu: $n kernels, $bad without 128-bit loads and stores"
  nkernels=$((nkernels + n))
  [ "$bad" -eq 0 ] || status=1
  [ "$n" -gt 0 ] || status=1
done
echo "ptx_check: $nkernels kernels checked"
exit $status
