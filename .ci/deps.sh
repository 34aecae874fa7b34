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
# The PyTorch backend (src/torch) and its tests: torch 1.13 with its C++ headers, pybind11,
# pytest and the Fashion-MNIST data. --no-install-recommends: python3-torch would pull Qt,
# mesa and GTK (~800 MB) otherwise.
torch_pkgs=(python3-torch libtorch-dev pybind11-dev python3-setuptools ninja-build python3-pytest
            dataset-fashion-mnist)
missing=()
for p in "${torch_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
