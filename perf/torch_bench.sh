#!/usr/bin/env bash
# braid vs Gloo under torch.distributed (perf/torch_bench.py), every configuration of
# perf/RESULTS.md's "PyTorch backend" section in one run:
#   dist.all_reduce 8 B..64 MiB at 2 and 4 processes on one host (shm) and on 2 network-
#   namespace hosts over TCP (1 and 2 ranks per host, unshaped veth links), and the DDP step
#   time of the Fashion-MNIST MLP at 2 ranks on one host and on 2 hosts with 1 Gbit/s links
#   (tc tbf). Needs root for the namespaces (tests/net/netns.sh).
#
#   perf/torch_bench.sh OUT_DIR [ROUNDS] [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: perf/torch_bench.sh OUT_DIR [ROUNDS] [BUILD_DIR]}
rounds=${2:-3}
build=$(cd "${3:-build}" && pwd)
mkdir -p "$out"
csv="$(cd "$out" && pwd)/torch_bench.csv"
: >"$csv"
py=(/usr/bin/python3 "$PWD/perf/torch_bench.py")
export PYTHONPATH="$build/python"
status=0
local_run() { # nranks args...
    local n=$1
    shift
    "$build/bin/braid-run" -n "$n" --timeout 1200 "${py[@]}" "$@" --csv "$csv" --rounds "$rounds" ||
        status=1
}
netns_run() { # ranks-per-host rate args...
    local k=$1 rate=$2
    shift 2
    local shape=(--hosts 2 --ranks-per-host "$k")
    [ "$rate" = none ] || shape+=(--rate "$rate" --burst 128kb)
    tests/net/netns.sh --timeout 1200 "${shape[@]}" -x PYTHONPATH="$PYTHONPATH" \
        -x GLOO_SOCKET_IFNAME=eth0 -- "${py[@]}" "$@" --csv "$csv" --rounds "$rounds" || status=1
}
{
    echo "# $(date -u +%FT%TZ) $(nproc) cpus: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    local_run 2 allreduce --label shm-1host
    local_run 4 allreduce --label shm-1host
    netns_run 1 none allreduce --label tcp-2hosts
    netns_run 2 none allreduce --label tcp-2hosts-x2
    local_run 2 ddp --label shm-1host
    netns_run 1 1gbit ddp --label tcp-2hosts-1gbit
} > >(tee "$out/torch_bench.log") 2>&1
exit $status
