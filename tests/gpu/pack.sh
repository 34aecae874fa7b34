#!/usr/bin/env bash
# Packs a CUDA build for a lent device machine (the `device` tool's run), which gets only the
# working tree (64 MiB with the tracked files, about 30 of them) and the paths named in carry:
# builds BUILD (default build-gpu: CUDA, -Werror, no hwloc/verbs so the binaries need nothing
# but libc and libstdc++ there), and writes .gpu/gpu-pack.tar.xz (git-ignored through
# .git/info/exclude) with the binaries tests/gpu/run.sh uses, libbraid, the NCCL drop-in and
# the CMake cache, stripped. NCCL_TESTS=DIR adds the *_perf tools of a nccl-tests build made by
# hand against BUILD/nccl (nothing of nccl-tests is in this repository).
#   bash tests/gpu/pack.sh [BUILD]
# then, with carry [".gpu/gpu-pack.tar.xz"]: bash tests/gpu/device_run.sh [BUDGET_S]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-gpu}
if [ ! -f "$B/CMakeCache.txt" ]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_WERROR=ON -DBRAID_WITH_CUDA=ON \
    -DBRAID_WITH_HWLOC=OFF -DBRAID_WITH_VERBS=OFF >/dev/null
fi
cmake --build "$B" -j"$(nproc)" --target braid_gpu_check all_reduce_perf braid-run nccl braid
bash tests/gpu/ptx_check.sh # here, not on the device (device_run.sh skips it)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/bin" "$tmp/build/lib" "$tmp/build/nccl/lib"
cp "$B"/bin/{braid_gpu_check,all_reduce_perf,braid-run} "$tmp/build/bin/"
cp -L "$B/lib/libbraid.so.0" "$tmp/build/lib/"
cp -L "$B/nccl/lib/libnccl.so.2" "$tmp/build/nccl/lib/"
cp -r "$B/nccl/include" "$tmp/build/nccl/"
cp "$B/CMakeCache.txt" "$tmp/build/"
if [ -n "${NCCL_TESTS:-}" ]; then
  mkdir -p "$tmp/nccl-tests"
  cp "$NCCL_TESTS"/*_perf "$tmp/nccl-tests/"
fi
find "$tmp" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-debug {} + 2>/dev/null || true
mkdir -p .gpu .git/info
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
tar cJf .gpu/gpu-pack.tar.xz -C "$tmp" .
ls -l .gpu/gpu-pack.tar.xz
