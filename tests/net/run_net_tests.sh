#!/usr/bin/env bash
# Multi-host tests: collectives over network namespaces acting as hosts (tests/net/netns.sh),
# ranks 2 per host, so every job mixes shm (within a host) and TCP (between hosts). Cases:
# plain links, 1% packet drop, a 1 gbit rate limit, both with 2 channels and 2 sockets per
# peer, 4 hosts, ranks numbered round-robin over the hosts (with fake NUMA nodes: the ring's
# host and NUMA crossings are checked), the ring forced (BRAID_ALGO=ring) besides the default choice, and a SIGKILLed
# rank whose peers must report it promptly, and a link set down mid-run (timeout), and the NIC
# each rank's tcp listener binds on hosts with two links (fake NUMA locality), and a tuning file
# measured on a shaped link, point-to-point and alltoall. Results are checked by
# perf/all_reduce_perf (exits non-zero on #wrong) and by tests/net/net_check.c.
#
#   tests/net/run_net_tests.sh [BUILD_DIR]     (default: build; needs root)
#
# The last line is "net: N passed, N failed"; the exit status is non-zero if any case failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=${1:-${BRAID_BUILD:-build}}
net=tests/net/netns.sh

if [ "$(id -u)" -ne 0 ]; then
    echo "net: needs root (network namespaces); skipped"
    echo "net: 0 passed, 0 failed"
    exit 0
fi
lib="$build/lib"
if [ ! -e "$lib/libbraid.so" ]; then
    echo "net: $lib/libbraid.so missing (cmake --build $build)" >&2
    echo "net: 0 passed, 1 failed"
    exit 1
fi
work=$(mktemp -d /tmp/braid-net.XXXXXX)
trap 'rm -rf "$work"' EXIT
check="$work/net_check"
if ! ${CC:-cc} -O2 -Wall -Wextra -I include tests/net/net_check.c -L "$lib" -lbraid \
    -Wl,-rpath,"$(cd "$lib" && pwd)" -o "$check"; then
    echo "net: building net_check failed" >&2
    echo "net: 0 passed, 1 failed"
    exit 1
fi
perf="$build/bin/all_reduce_perf"
[ -x "$perf" ] || perf=""

passed=0 failed=0
report() { # name, status, start time: counts and prints the case ($work/out's tail on failure)
    if [ "$2" -eq 0 ]; then
        passed=$((passed + 1))
        printf "[PASS] %-44s %5.1f s\n" "$1" "$(awk -v a="$3" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
    else
        failed=$((failed + 1))
        printf "[FAIL] %-44s (status %d)\n" "$1" "$2"
        tail -n 25 "$work/out" | sed 's/^/    /'
    fi
}
run() { # name, then netns.sh arguments
    local name=$1 t0 rc
    shift
    t0=$(date +%s.%N)
    "$net" --timeout 60 "$@" >"$work/out" 2>&1
    rc=$?
    report "$name" $rc "$t0"
}
perf_args=(-b 8 -e 8M -f 8 -n 3 -w 1 -c 1 -d all)

run "2 hosts: collectives" --hosts 2 -- "$check" coll
[ -n "$perf" ] && run "2 hosts: all_reduce_perf, every dtype" --hosts 2 -- "$perf" "${perf_args[@]}"
run "4 hosts: collectives" --hosts 4 -- "$check" coll
run "3 hosts, ring: collectives" --hosts 3 -x BRAID_ALGO=ring -- "$check" coll
# Launcher numbering dealt round-robin over the hosts (and fake NUMA nodes interleaved): the
# ring that rank 0 prints (braid-info --peers) must cross each host boundary once and each
# host's NUMA boundaries once, whatever the numbering; collectives stay right.
ring_check() { # hosts, NUMA nodes per host: checks $work/out of braid-info --peers
    awk -v hosts="$1" -v numas="$2" '
        $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 { host[$1] = $3; numa[$1] = $5; n++ }
        /^ring \(every channel\):/ { for (i = 4; i <= NF; i++) order[m++] = $i }
        END {
            if (m != n || n == 0) { print "ring check: " m " ring entries for " n " ranks"; exit 1 }
            for (i = 0; i < m; i++) {
                a = order[i]; b = order[(i + 1) % m]
                if (host[a] != host[b]) hx++; else if (numa[a] != numa[b]) nx++
            }
            if (hx != hosts || nx != hosts * (numas - 1)) {
                print "ring check: " hx " host and " nx " NUMA crossings, expected " hosts \
                    " and " hosts * (numas - 1); exit 1
            }
        }' "$work/out"
}
run_ring() { # name, hosts, NUMA nodes per host (ranks per host 4, cyclic numbering)
    local before=$failed
    run "$1" --hosts "$2" --ranks-per-host 4 --placement cyclic --numa "$3" -- \
        "$build/bin/braid-info" --peers
    if [ "$failed" -eq "$before" ] && ! ring_check "$2" "$3"; then
        passed=$((passed - 1)) failed=$((failed + 1))
        echo "[FAIL] $1: ring crossings"
        sed 's/^/    /' "$work/out"
    fi
}
run_ring "3 hosts x 4, cyclic numbering, 2 NUMA: ring" 3 2
run_ring "2 hosts x 4, cyclic numbering, 4 NUMA: ring" 2 4
run "3 hosts x 4, cyclic numbering, 2 NUMA: collectives" --hosts 3 --ranks-per-host 4 \
    --placement cyclic --numa 2 -x BRAID_ALGO=ring -- "$check" coll
run "2 hosts x 3, cyclic numbering: collectives (default algorithm)" --hosts 2 \
    --ranks-per-host 3 --placement cyclic -- "$check" coll
# NIC choice (2 hosts x 2 ranks, fake locality: BRAID_NIC_NUMA puts eth0 on NUMA node 0 and
# eth1 on node 1, --numa 2 local rank i on node i). With --two-links (eth1 on 198.19.0.x) every
# tcp listener of local rank 0 must bind 198.18.0.<h+1> (eth0) and of local rank 1
# 198.19.0.<h+1> (eth1), sub-communicators' too; with one link every listener stays on the
# route to the root (198.18.0.<h+1>): a single-NIC host is unchanged. Collectives checked.
run_nic() { # name, rails|route, netns.sh options
    local name=$1 mode=$2 before=$failed logs="$work/nic-logs"
    shift 2
    rm -rf "$logs"
    run "$name" --hosts 2 --numa 2 --keep-logs "$logs" -x BRAID_NIC_NUMA=eth0:0,eth1:1 \
        -x BRAID_DEBUG=INFO -x BRAID_DEBUG_SUBSYS=NET "$@" -- "$check" coll
    [ "$failed" -eq "$before" ] || return
    local r want got bad=""
    for r in 0 1 2 3; do
        want="198.18.0.$((r / 2 + 1))"
        [ "$mode" = rails ] && want="198.$((18 + r % 2)).0.$((r / 2 + 1))"
        got=$(sed -n 's/.*tcp: rank [0-9]* listens on \([0-9.]*\):.*/\1/p' "$logs/rank.$r.err" |
            sort -u | tr '\n' ' ')
        [ "$got" = "$want " ] || bad="$bad rank $r listens on '$got' (want $want);"
        if [ "$mode" = route ] && ! grep -q "listens on .*(the route to the bootstrap root" \
            "$logs/rank.$r.err"; then
            bad="$bad rank $r: no 'route to the bootstrap root' reason;"
        fi
    done
    if [ -n "$bad" ]; then
        passed=$((passed - 1)) failed=$((failed + 1))
        echo "[FAIL] $name:$bad"
        grep -h "listens on" "$logs"/rank.*.err | sed 's/^/    /'
    fi
}
run_nic "2 hosts x 2 links, fake NUMA: NIC per rank" rails --two-links
run_nic "2 hosts x 1 link, fake NUMA: route to the root" route
# The cost model's constants measured on a shaped link (braid-info --tune --measure: every
# rank at once, as BRAID_TUNE_MEASURE=1 does at init): the file has every key, the network's
# bandwidth is near the 1 Gbit/s shaper's 0.125 GB/s, and the automatic choice with it is right.
run_tune() {
    local t0 t1 bw ok=1
    t0=$(date +%s.%N)
    if ! "$net" --timeout 60 --hosts 2 --rate 1gbit -- "$build/bin/braid-info" --tune --measure \
        "$work/tune" >"$work/out" 2>&1; then
        ok=0
    else
        for k in shm_alpha_us shm_gbps net_alpha_us net_gbps copy_gbps launch_us oversub_us net_overlap; do
            grep -q "^$k [0-9]" "$work/tune" || { echo "tuning file lacks $k" >>"$work/out"; ok=0; }
        done
        bw=$(awk '$1 == "net_gbps" { print $2 }' "$work/tune")
        awk -v b="$bw" 'BEGIN { exit !(b > 0.08 && b < 0.2) }' ||
            { echo "net_gbps $bw is not near 0.125" >>"$work/out"; ok=0; }
        [ $ok -eq 1 ] && ! "$net" --timeout 60 --hosts 2 --rate 1gbit \
            -x BRAID_TUNING_FILE="$work/tune" -- "$check" coll >>"$work/out" 2>&1 && ok=0
    fi
    t1=$(date +%s.%N)
    if [ $ok -eq 1 ]; then
        passed=$((passed + 1))
        printf "[PASS] %-44s %5.1f s\n" "2 hosts, 1gbit: measured tuning file" \
            "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
    else
        failed=$((failed + 1))
        printf "[FAIL] %-44s\n" "2 hosts, 1gbit: measured tuning file"
        { cat "$work/tune"; tail -n 25 "$work/out"; } 2>/dev/null | sed 's/^/    /'
    fi
}
run_tune
# Hierarchical all-reduce, broadcast and reduce (every root) and reduce-scatter forced, over 2
# and 3 ranks per host; the perf tools check their results too (-c 1).
run "2 hosts, hier: collectives" --hosts 2 -x BRAID_ALGO=hier -- "$check" coll
run "3 hosts x 3, hier, 1gbit: collectives" --hosts 3 --ranks-per-host 3 --rate 1gbit \
    -x BRAID_ALGO=hier -- "$check" coll
for tool in broadcast_perf reduce_perf reduce_scatter_perf; do
    [ -x "$build/bin/$tool" ] && run "2 hosts, hier: $tool" --hosts 2 -x BRAID_ALGO=hier -- \
        "$build/bin/$tool" -b 8 -e 8M -f 8 -n 3 -w 1 -c 1
done
run "2 hosts, 1% drop: collectives" --hosts 2 --drop 1% -- "$check" coll
[ -n "$perf" ] && run "2 hosts, 1% drop: all_reduce_perf" --hosts 2 --drop 1% -- "$perf" \
    -b 1M -e 16M -f 4 -n 3 -w 1 -c 1
run "3 hosts, 1gbit: collectives" --hosts 3 --rate 1gbit -- "$check" coll
[ -n "$perf" ] && run "3 hosts, 1gbit: all_reduce_perf" --hosts 3 --rate 1gbit -- "$perf" \
    -b 8 -e 16M -f 16 -n 3 -w 1 -c 1
run "2 hosts, 1gbit + 1% drop, 2 ch x 2 sockets" --hosts 2 --rate 1gbit --drop 1% \
    -x BRAID_NCHANNELS=2 -x BRAID_NSOCKS_PERPEER=2 -- "$check" coll
# The dead rank is named by its job rank, also by the hierarchical algorithms (which run on
# sub-communicators and rename their ranks).
run "3 hosts, ring: killed rank 3 is named" --hosts 3 --victim 3 -x BRAID_ALGO=ring -- \
    "$check" victim 3
run "2 hosts, ring, 1% drop: killed rank 2 is named" --hosts 2 --drop 1% --victim 2 \
    -x BRAID_ALGO=ring -- "$check" victim 2 20
run "3 hosts, default algorithm: killed rank 2 is named" --hosts 3 --victim 2 -- \
    "$check" victim 2 10
run "2 hosts x 3, hier: killed rank 4 is named" --hosts 2 --ranks-per-host 3 --victim 4 \
    -x BRAID_ALGO=hier -- "$check" victim 4 10
# Point-to-point (sends and receives in groups and i-forms) and the collectives on it
# (alltoall(v), gather, scatter, allgatherv, reduce_scatterv) between hosts, shaped and lossy
# links included; a rank killed while the others wait in a receive from it is named.
run "2 hosts: p2p and alltoall" --hosts 2 -- "$check" p2p
run "3 hosts x 3, 1gbit: p2p and alltoall" --hosts 3 --ranks-per-host 3 --rate 1gbit -- \
    "$check" p2p
run "2 hosts, 1% drop, 2 sockets: p2p and alltoall" --hosts 2 --drop 1% \
    -x BRAID_NSOCKS_PERPEER=2 -- "$check" p2p
run "3 hosts: killed rank 3 during recv is named" --hosts 3 --victim 3 -- "$check" recvvictim 3
for tool in alltoall_perf sendrecv_perf gather_perf scatter_perf hypercube_perf; do
    [ -x "$build/bin/$tool" ] && run "2 hosts: $tool" --hosts 2 -- "$build/bin/$tool" \
        -b 8 -e 8M -f 8 -n 3 -w 1 -c 1 -d all
done
# A link cut (no RST, no FIN): every rank must fail within BRAID_TIMEOUT naming a rank.
run "2 hosts, ring: link down -> timeout naming a rank" --hosts 2 --link-down 1:2 \
    -x BRAID_TIMEOUT=3 -x BRAID_ALGO=ring -- "$check" linkdown 3
# Ranks in two PID namespaces of one host (two containers of a pod share the hostname and the
# network namespace, not the pids): braid's shared memory names peers by pid, so they are two
# hosts to it and connect over tcp (with the pid namespace left out of the host identity, the
# init failed: "shm: cannot open rank 0's segment"). 3 ranks, rank 1 alone in a new PID
# namespace: braid-info --peers shows two hosts, and every collective's check passes.
pidns_case() {
    local name="1 host, 2 PID namespaces: not one host" t0 rc=0 wrap
    if ! unshare -p -f true 2>/dev/null; then
        echo "[SKIP] $name (unshare -p unavailable)"
        return
    fi
    t0=$(date +%s.%N)
    wrap='if [ "$BRAID_RANK" = 1 ]; then exec unshare -p -f "$@"; else exec "$@"; fi'
    timeout 120 "$build/bin/braid-run" -n 3 sh -c "$wrap" sh "$(cd "$build/bin" && pwd)/braid-info" \
        --peers >"$work/out" 2>&1 || rc=1
    grep -q "^3 ranks, 2 on this host" "$work/out" || rc=1
    timeout 120 "$build/bin/braid-run" -n 3 sh -c "$wrap" sh "$check" coll >>"$work/out" 2>&1 ||
        rc=1
    report "$name" $rc "$t0"
}
pidns_case
leftover=$(ip netns list | grep -c '^braidtest-' || true)
if [ "$leftover" -ne 0 ]; then
    echo "[FAIL] namespaces left behind: $leftover"
    failed=$((failed + 1))
fi
echo "net: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
