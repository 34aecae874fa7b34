#!/usr/bin/env bash
# Installs build/ into a temporary prefix and builds examples/allreduce.c against it twice:
# with pkg-config (braid.pc) and with CMake's find_package(braid); runs it on 2 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install build --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -Wall -Wextra -o "$prefix/ex_pc" examples/allreduce.c $(pkg-config --cflags --libs braid) \
  -Wl,-rpath,"$prefix/lib"
mkdir -p "$prefix/proj"
cat >"$prefix/proj/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.25)
project(ex C)
find_package(braid REQUIRED)
add_executable(ex_cmake $PWD/examples/allreduce.c)
target_link_libraries(ex_cmake PRIVATE braid::braid)
CM
cmake -S "$prefix/proj" -B "$prefix/proj/b" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/proj/b" >/dev/null
"$prefix/bin/braid-run" -n 2 "$prefix/ex_pc"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/bin/braid-run" -n 2 "$prefix/proj/b/ex_cmake"
# The installed perf tools, the point-to-point ones included.
# (The output is read whole first: grep -q would stop reading early, and the tool's next
# write would end it with SIGPIPE.)
for t in all_reduce_perf alltoall_perf sendrecv_perf; do
  out=$("$prefix/bin/braid-run" -n 2 "$prefix/bin/$t" -b 8 -e 4K -f 8 -n 2 -c 1)
  grep -q "Out of bounds values : 0 OK" <<<"$out"
done
# braid's NCCL drop-in: a ready NCCL_HOME under the prefix, picked on purpose (-I/-L/rpath).
nh="$prefix/lib/braid/nccl"
test -f "$nh/include/nccl.h" && test -L "$nh/lib/libnccl.so"
cc -Wall -Wextra -o "$prefix/ex_nccl" examples/nccl_allreduce.c -I"$nh/include" -L"$nh/lib" \
  -Wl,-rpath,"$nh/lib" -lnccl
ldd "$prefix/ex_nccl" | grep "libnccl.so.2 => $nh/lib/libnccl.so.2" >/dev/null
"$prefix/bin/braid-run" -n 2 "$prefix/ex_nccl"
# The PyTorch backend, when built: importable from the prefix's Python directory (on
# sys.path for /usr/local and /usr; here a temporary prefix, so PYTHONPATH names it), finding
# the prefix's libbraid through its RPATH.
if [ -f build/python/braid_torch/__init__.py ]; then
  pydir=$(ls -d "$prefix"/lib/python3*/dist-packages)
  (cd / && PYTHONPATH="$pydir" /usr/bin/python3 -c "import braid_torch, torch.distributed as d; \
assert braid_torch.__file__.startswith('$prefix'), braid_torch.__file__; \
assert d.Backend.BRAID == 'BRAID'; print('install smoke: braid_torch imports from', braid_torch.__file__)")
fi
echo "install smoke: pkg-config and find_package builds ran, and an NCCL program on braid's libnccl"
