#!/usr/bin/env bash
# Installs the Debian 12 packages braid builds, tests and benchmarks with (root or sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang clang-format libcriterion-dev libhwloc-dev libibverbs-dev
      librdmacm-dev gnuplot-nox openmpi-bin libopenmpi-dev iproute2 nftables
      libopenblas-dev zlib1g-dev dataset-fashion-mnist)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
