#!/bin/sh
# Runs inside the Soft-RoCE VM (tests/rdma/vm.sh), started by run_rdma_tests.sh: the RDMA test
# cases, ranks split across rxe0 (veth0, 198.18.0.1, "host" vmA) and rxe1 (veth1, 198.18.0.2,
# "host" vmB); at the end the NUMA cases (the VM has 2 NUMA nodes: ranks bound to either,
# the NUMA node each publishes and the ring order). ONLY=REGEX runs the matching cases only.
# Prints "[PASS]/[FAIL] name" lines and "rdma: N passed, N failed".
#   inner.sh BUILD_DIR
build=$1
perf="$build/bin/all_reduce_perf"
passed=0
failed=0
port=29400
secret=0123456789abcdef0123456789abcdef

# job NRANKS "VAR=V ..." CMD...: first half of the ranks on vmA, the rest on vmB (all on vmA
# with one_host set); with numa_bind set, rank r runs bound (taskset) to cpu $numa_cpu0 (NUMA
# node 0) if r is even, else to cpu $numa_cpu1 (node 1).
job() {
    n=$1
    extra=$2
    shift 2
    port=$((port + 1))
    r=0
    pids=""
    while [ $r -lt $n ]; do
        if [ $r -lt $((n / 2)) ] || [ $n -eq 1 ]; then
            h=vmA
            ifn==veth0
            hca==rxe0
        else
            h=vmB
            ifn==veth1
            hca==rxe1
        fi
        [ -n "${one_host:-}" ] && h=vmA && ifn==veth0 && hca==rxe0
        hca_env=""
        [ -n "${by_hca:-}" ] && hca_env="BRAID_IB_HCA=$hca:1"
        pin=""
        [ -n "${numa_bind:-}" ] && pin="taskset -c $numa_cpu0" && [ $((r % 2)) = 1 ] &&
            pin="taskset -c $numa_cpu1"
        env $hca_env BRAID_RANK=$r BRAID_NRANKS=$n BRAID_ROOT=198.18.0.1:$port BRAID_SECRET=$secret \
            BRAID_HOSTNAME=$h BRAID_SOCKET_IFNAME=$ifn BRAID_TIMEOUT=120 $extra \
            $pin "$@" >/tmp/rank.$r.out 2>&1 &
        [ "$r" = "${victim:-}" ] || pids="$pids $!" # the victim kills itself
        r=$((r + 1))
    done
    rc=0
    for p in $pids; do
        wait $p || rc=1
    done
    wait
    return $rc
}

# RNR NAKs sent plus received by the rxe devices (rxe's hw_counters); empty if unreadable.
rnr_count() {
    cat /sys/class/infiniband/rxe*/ports/1/hw_counters/send_rnr_err \
        /sys/class/infiniband/rxe*/ports/1/hw_counters/rcvd_rnr_err 2>/dev/null |
        awk '{ s += $1; n++ } END { if (n) print s }'
}

# run NAME NRANKS "VAR=V ..." CMD...; with want_log set, some rank's output must match it; with
# no_rnr set, no receive queue may have run dry (no RNR NAK) during the case.
# ONLY=REGEX (from BRAID_RDMA_ONLY) runs just the cases whose name matches (for development).
run() {
    name=$1
    shift
    if [ -n "${ONLY:-}" ] && ! echo "$name" | grep -q -- "$ONLY"; then return 0; fi
    t0=$(date +%s)
    rnr0=$(rnr_count)
    if job "$@" && { [ -z "${want_log:-}" ] || cat /tmp/rank.*.out | grep -q "$want_log"; } &&
        { [ -z "${no_rnr:-}" ] || [ "$(rnr_count)" = "$rnr0" ] || {
            echo "  $(($(rnr_count) - rnr0)) RNR NAKs (rxe hw_counters send_rnr_err + rcvd_rnr_err)" >/tmp/rank.rnr.out
            false
        }; }; then
        passed=$((passed + 1))
        echo "[PASS] $name ($(($(date +%s) - t0)) s)"
        [ -n "${VERBOSE:-}" ] && cat /tmp/rank.0.out
    else
        failed=$((failed + 1))
        echo "[FAIL] $name ($(($(date +%s) - t0)) s)"
        for f in /tmp/rank.*.out; do
            echo "  --- $f"
            tail -n 15 "$f" | sed 's/^/    /'
        done
    fi
    rm -f /tmp/rank.*.out
}

if ibv_devices | grep -q rxe0 && ibv_devices | grep -q rxe1; then
    passed=$((passed + 1))
    echo "[PASS] rxe0 and rxe1 are up"
else
    failed=$((failed + 1))
    echo "[FAIL] rxe devices missing"
    ibv_devices
fi

info=$("$build/bin/braid-info" 2>&1)
if echo "$info" | grep -q "rdma device rxe0 port 1: active" &&
    echo "$info" | grep -q "rdma device rxe1 port 1: active, link layer Ethernet (RoCE)" &&
    echo "$info" | grep -q "rxe0 port 1: .*active MTU 1024 (max [0-9]*; QPs use min(active, route))"; then
    passed=$((passed + 1))
    echo "[PASS] braid-info lists rxe0 and rxe1 with their chosen GIDs"
else
    failed=$((failed + 1))
    echo "[FAIL] braid-info does not list the rxe devices"
    echo "$info" | grep rdma
fi

# The transport conformance cases (tests/common/conformance.c) on the rdma vtable directly,
# rank 0 on rxe0, rank 1 on rxe1; in "kill" rank 1 SIGKILLs itself.
conf="$build/bin/braid_conformance"
if [ -x "$conf" ]; then
    for c in $("$conf" list); do
        [ "$c" = kill ] && victim=1
        run "conformance rdma/$c (2 ranks, rxe0 + rxe1)" 2 "BRAID_TIMEOUT=60" "$conf" rdma "$c"
        victim=""
    done
else
    failed=$((failed + 1))
    echo "[FAIL] $conf is missing (build the tests)"
fi

# Several QPs per connection (messages striped over them, read in order), and the path MTU.
want_log="rdma: 4 QPs to rank"
run "conformance rdma/data, BRAID_IB_QPS_PER_CONN=4" 2 \
    "BRAID_IB_QPS_PER_CONN=4 BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=NET" "$conf" rdma data
want_log=""
for c in fail close; do
    run "conformance rdma/$c, BRAID_IB_QPS_PER_CONN=2" 2 "BRAID_IB_QPS_PER_CONN=2" "$conf" rdma "$c"
done
run "conformance rdma/register (zero-copy), 4 QPs per connection, 2 channels" 2 \
    "BRAID_IB_QPS_PER_CONN=4 BRAID_NCHANNELS=2" "$conf" rdma register
# Zero-copy along a longer ring: middle ranks forward chunks from their output.
run "zero-copy ring: 4 ranks, rdma, ring, all-gather + broadcast from every root" 4 \
    "BRAID_TRANSPORT=rdma BRAID_ALGO=ring" "$conf" rdma zcring
run "zero-copy ring: 3 ranks, rdma, ring, 2 QPs x 2 channels" 3 \
    "BRAID_TRANSPORT=rdma BRAID_ALGO=ring BRAID_IB_QPS_PER_CONN=2 BRAID_NCHANNELS=2" \
    "$conf" rdma zcring
run "zero-copy ring: 4 ranks, automatic (shm + rdma), registered buffers, exact results" 4 "" \
    "$conf" auto zcring
# Exposures on connections that carry no data (channel 0's slice of a 1-element all-gather is
# empty; a broadcast root receives nothing) must not stall the ring (receive queues full, RNR).
[ -z "$(rnr_count)" ] && echo "note: no rxe hw_counters: the RNR checks are left out"
no_rnr=1
run "zero-copy: 100 all-gathers of 1 element, 2 channels, registered output, no RNR, each < 2.5 s" 2 \
    "BRAID_TRANSPORT=rdma BRAID_ALGO=ring BRAID_NCHANNELS=2 BRAID_TIMEOUT=5" "$conf" rdma zcsmall
run "zero-copy: 200 broadcasts from rank 0, 16 slots, registered output, no RNR, none over 2 s" 2 \
    "BRAID_TRANSPORT=rdma BRAID_ALGO=ring BRAID_NSLOTS=16 BRAID_TIMEOUT=5" "$conf" rdma zcbcast
no_rnr=""
[ -n "${ONLY:-}" ] && echo "note: RNR NAKs counted by the rxe devices so far: $(rnr_count)"
# A failed all-gather withdraws its exposure for good: a late peer cannot write the output.
run "zero-copy: a late peer's writes cannot reach the output of a failed all-gather" 2 \
    "BRAID_TRANSPORT=rdma BRAID_ALGO=ring" "$conf" rdma zclate
want_log="path MTU 1024 bytes (port active MTU 1024, route MTU"
run "rdma QPs use min(port active MTU, route MTU) = 1024 on veth (MTU 1500), logged" 2 \
    "BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=NET" "$conf" rdma data
want_log=""
if ! job 2 "BRAID_TRANSPORT=rdma BRAID_IB_QPS_PER_CONN=3" "$conf" rdma data &&
    cat /tmp/rank.*.out | grep -q "BRAID_IB_QPS_PER_CONN='3' is not a power of two in \[1, 8\]"; then
    passed=$((passed + 1))
    echo "[PASS] BRAID_IB_QPS_PER_CONN=3 is refused, naming the variable"
else
    failed=$((failed + 1))
    echo "[FAIL] BRAID_IB_QPS_PER_CONN=3 was not refused with a message"
    cat /tmp/rank.*.out | tail -n 10
fi
rm -f /tmp/rank.*.out

args="-b 8 -e 256K -f 32 -n 2 -w 1 -c 1 -d all -o all"
run "2 ranks (1 per host), BRAID_TRANSPORT=rdma, all_reduce_perf -d all -o all" 2 \
    "BRAID_TRANSPORT=rdma" $perf $args
run "2 ranks, rdma, 8 MiB messages" 2 "BRAID_TRANSPORT=rdma" $perf -b 1M -e 8M -f 8 -n 2 -w 1 -c 1
run "2 ranks, rdma, 8 MiB messages, 4 QPs per connection" 2 \
    "BRAID_TRANSPORT=rdma BRAID_IB_QPS_PER_CONN=4" $perf -b 1M -e 8M -f 8 -n 2 -w 1 -c 1
args4="-b 64 -e 64K -f 1024 -n 1 -w 1 -c 1 -d all -o all"
run "4 ranks (2 per host), BRAID_TRANSPORT=rdma, all_reduce_perf -d all -o all" 4 \
    "BRAID_TRANSPORT=rdma" $perf $args4
want_log="via rdma"
# The automatic run (shm + rdma) at 64 KiB only, so the VM (TCG) stays well within its time on a
# loaded machine; every dtype x op at 64 B is in the rdma-only run above.
run "4 ranks (2 per host), automatic (shm + rdma), all_reduce_perf -d all -o all" 4 \
    "BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=INIT" $perf -b 64K -e 64K -n 1 -w 1 -c 1 -d all -o all
want_log=""
run "4 ranks, ring, rdma, 2 channels" 4 "BRAID_TRANSPORT=rdma BRAID_ALGO=ring BRAID_NCHANNELS=2" \
    $perf -b 8 -e 4M -f 8 -n 2 -w 1 -c 1
by_hca=1
want_log="using rxe1:1 GID 1 (RoCE)"
run "2 ranks, rdma, devices by BRAID_IB_HCA==rxeN:1, GID 1" 2 \
    "BRAID_TRANSPORT=rdma BRAID_IB_GID_INDEX=1 BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=NET" \
    $perf -b 8 -e 1M -f 32 -n 1 -w 1 -c 1
want_log=""
by_hca=""
check="$build/rdma-test/net_check"
if [ -x "$check" ]; then
    run "2 ranks, rdma: collectives (net_check coll)" 2 "BRAID_TRANSPORT=rdma" "$check" coll 1
    run "2 ranks, rdma, 4 QPs per connection: collectives (net_check coll)" 2 \
        "BRAID_TRANSPORT=rdma BRAID_IB_QPS_PER_CONN=4" "$check" coll 1
    victim=2
    run "3 ranks, ring, rdma: killed rank 2 is named" 3 "BRAID_TRANSPORT=rdma BRAID_ALGO=ring" \
        "$check" victim 2 5
    victim=3
    run "4 ranks, automatic: killed rank 3" 4 "" "$check" victim 3 5 any
    victim=1
    run "2 ranks, rdma: killed rank 1 is named" 2 "BRAID_TRANSPORT=rdma" "$check" victim 1 5
    victim=""
    # Point-to-point, groups and alltoall(v)/gather/scatter/allgatherv/reduce_scatterv on the
    # send/recv connections (one more rdma connection per pair and direction).
    run "2 ranks, rdma: p2p and alltoall (net_check p2p)" 2 "BRAID_TRANSPORT=rdma" "$check" p2p
    run "3 ranks, rdma, 2 QPs per connection: p2p and alltoall" 3 \
        "BRAID_TRANSPORT=rdma BRAID_IB_QPS_PER_CONN=2" "$check" p2p
    run "4 ranks, automatic (shm + rdma): p2p and alltoall" 4 "" "$check" p2p
    victim=2
    run "3 ranks, rdma: killed rank 2 during recv is named" 3 "BRAID_TRANSPORT=rdma" \
        "$check" recvvictim 2
    victim=""
fi

# ---- NUMA: vm.sh boots 2 NUMA nodes (a cpu each). Ranks publish the node of their cpu binding
# (hwloc, or sysfs without it; src/topo/place.c), with no BRAID_NUMA_ID, and a host's ring
# visits each node's ranks together (src/topo/topo.c).
pass() { passed=$((passed + 1)); echo "[PASS] $*"; }
fail() { failed=$((failed + 1)); echo "[FAIL] $*"; }
node_cpu() { cut -d, -f1 </sys/devices/system/node/node$1/cpulist 2>/dev/null | cut -d- -f1; }
numa_cpu0=$(node_cpu 0)
numa_cpu1=$(node_cpu 1)
unset BRAID_NUMA_ID
if [ -n "${ONLY:-}" ] && ! echo "NUMA" | grep -q -- "$ONLY"; then
    :
elif [ -z "$numa_cpu1" ]; then
    fail "NUMA: the VM has no NUMA node 1 (/sys/devices/system/node/node1)"
else
    info=$("$build/bin/braid-info" 2>&1)
    info1=$(taskset -c "$numa_cpu1" "$build/bin/braid-info" 2>&1)
    if echo "$info" | grep -q "^topology (.*): .*, 2 NUMA node(s)," &&
        echo "$info" | grep -q "^  NUMA node 1: cpus $numa_cpu1" &&
        echo "$info1" | grep -q "this process runs on NUMA node 1$"; then
        pass "NUMA: braid-info sees 2 NUMA nodes (source: $(echo "$info" | sed -n "s/^topology (\([a-z]*\).*/\1/p")), a process on cpu $numa_cpu1 on node 1"
    else
        fail "NUMA: braid-info does not see 2 NUMA nodes"
        echo "$info" | grep -A3 "^topology ("
        echo "$info1" | grep "^topology ("
    fi
    # 4 ranks of one host on nodes 0 1 0 1: the ring must be 0 2 1 3 (or a rotation): 2 NUMA
    # crossings (the fewest), where rank order would cross 4 times.
    one_host=1
    numa_bind=1
    t0=$(date +%s)
    if job 4 "BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=INIT" "$build/bin/braid-info" --peers; then
        ring=$(awk '/^ *[0-9]+ +[0-9]+ +vmA / { numa[$1] = $5; rows++ }
            /^ring \(every channel\):/ { for (i = 4; i <= NF; i++) order[n++] = $i }
            END {
                bad = rows != 4 || n != 4
                for (r = 0; r < 4; r++) if (numa[r] != r % 2) bad = 1
                for (i = 0; i < n; i++) x += numa[order[i]] != numa[order[(i + 1) % n]]
                v = (bad || x != 2) ? "bad" : "ok"
                printf "%s: published nodes %s %s %s %s, ring", v, numa[0], numa[1], numa[2], numa[3]
                for (i = 0; i < n; i++) printf " %s", order[i]
                printf ", %d NUMA crossings", x
            }' /tmp/rank.0.out)
        logged=0
        for r in 0 1 2 3; do
            c=$numa_cpu0
            [ $((r % 2)) = 1 ] && c=$numa_cpu1
            grep -q "rank $r runs on cpus $c, NUMA node $((r % 2)); " /tmp/rank.$r.out &&
                logged=$((logged + 1))
        done
    else
        ring="bad: braid-info --peers failed"
    fi
    if [ "${ring%%:*}" = ok ] && [ $logged = 4 ]; then
        pass "NUMA: 4 ranks bound to nodes 0 1 0 1 (taskset) publish them: ${ring#ok: } ($(($(date +%s) - t0)) s)"
    else
        fail "NUMA: 4 ranks bound to nodes 0 1 0 1: ${ring#*: }; $logged of 4 logged their node"
        for f in /tmp/rank.*.out; do
            echo "  --- $f"
            tail -n 12 "$f" | sed 's/^/    /'
        done
    fi
    rm -f /tmp/rank.*.out
    want_log="ring crosses hosts 0 times, NUMA nodes within hosts 2 times"
    run "NUMA: 4 ranks on nodes 0 1 0 1, ring over shm, all_reduce_perf -c 1, 2 NUMA crossings" 4 \
        "BRAID_ALGO=ring BRAID_DEBUG=DEBUG BRAID_DEBUG_SUBSYS=INIT" $perf -b 8 -e 4M -f 8 -n 1 -w 1 -c 1
    want_log=""
    run "NUMA: 4 ranks on nodes 0 1 0 1, automatic, all_reduce_perf -c 1 -d all -o all" 4 "" \
        $perf -b 8 -e 1M -f 128 -n 1 -w 1 -c 1 -d all -o all
    one_host=""
    numa_bind=""
fi

# ==== rdmanic: the RDMA device of the rank's NUMA node (BRAID_IB_HCA unset), two links ====
# A second link like vm.sh's first: veth2 (198.18.1.1, "host" vmA) <-> veth3 (198.18.1.2, vmB)
# with rxe2 and rxe3 on it, routed out the veth ends; the first of these cases sets it up,
# after every other case (they see rxe0 and rxe1 only). Each "host" has a device on each link;
# BRAID_NIC_NUMA puts its link-1 interface on NUMA node 0 and its link-2 one on node 1, and
# BRAID_NUMA_ID fakes each rank's node.
links_setup() {
    ip link add veth2 type veth peer name veth3 &&
        ip addr add 198.18.1.1/24 dev veth2 && ip addr add 198.18.1.2/24 dev veth3 &&
        ip link set veth2 up && ip link set veth3 up || return 1
    for f in veth2 veth3; do
        echo 1 >/proc/sys/net/ipv4/conf/$f/accept_local
        echo 0 >/proc/sys/net/ipv4/conf/$f/rp_filter
    done
    ip route add 198.18.1.2 dev veth2 src 198.18.1.1 table 12 &&
        ip route add 198.18.1.1 dev veth3 src 198.18.1.2 table 13 &&
        ip rule add pref 12 iif lo to 198.18.1.2 lookup 12 &&
        ip rule add pref 13 iif lo to 198.18.1.1 lookup 13 &&
        rdma link add rxe2 type rxe netdev veth2 && rdma link add rxe3 type rxe netdev veth3
}

# links_case NAME MODE CMD...: 4 ranks (local ranks 0, 1 on vmA, then on vmB), all-rdma,
# BRAID_SOCKET_IFNAME unset. MODE numa: local rank i on node i must listen on link i+1's
# device; swap: on node 1-i, link 2-i; none: on node 7 (no NIC), spread by local rank (link
# i+1, the interfaces in name order); one: only link 1 listed, so every rank keeps the route
# to the root (single-device behaviour). Every rdma listener of a rank for a communicator
# spanning both hosts (sub-communicators' too) is checked; CMD must succeed (it checks results).
links_case() {
    name=$1 mode=$2
    shift 2
    if [ -n "${ONLY:-}" ] && ! echo "$name" | grep -q -- "$ONLY"; then return 0; fi
    if [ -z "${links_ready:-}" ]; then
        if ! links_setup; then
            failed=$((failed + 1))
            echo "[FAIL] $name: could not set up veth2/veth3 with rxe2/rxe3"
            return 0
        fi
        links_ready=1
        if "$build/bin/braid-info" 2>&1 | grep -q "rdma device rxe3 port 1: active.*, interface veth3, NUMA node"; then
            passed=$((passed + 1))
            echo "[PASS] 2 links: braid-info lists rxe3 on interface veth3"
        else
            failed=$((failed + 1))
            echo "[FAIL] 2 links: braid-info does not list rxe3 on veth3"
            "$build/bin/braid-info" 2>&1 | grep "rdma device"
        fi
    fi
    t0=$(date +%s)
    port=$((port + 1))
    pids=""
    for r in 0 1 2 3; do
        hi=$((r / 2)) lr=$((r % 2))
        numa=$lr
        [ "$mode" = swap ] && numa=$((1 - lr))
        [ "$mode" = none ] && numa=7
        hook="veth$hi:0,veth$((hi + 2)):1"
        [ "$mode" = one ] && hook="veth$hi:0"
        env BRAID_RANK=$r BRAID_NRANKS=4 BRAID_ROOT=198.18.0.1:$port BRAID_SECRET=$secret \
            BRAID_HOSTNAME=vm$hi BRAID_LOCAL_RANK=$lr BRAID_NUMA_ID=$numa BRAID_NIC_NUMA=$hook \
            BRAID_TRANSPORT=rdma BRAID_TIMEOUT=120 BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=NET \
            "$@" >/tmp/rank.$r.out 2>&1 &
        pids="$pids $!"
    done
    bad=""
    for p in $pids; do wait $p || bad="a rank failed;"; done
    for r in 0 1 2 3; do
        hi=$((r / 2)) lr=$((r % 2))
        link=$lr
        [ "$mode" = swap ] && link=$((1 - lr))
        want="198.18.$link.$((hi + 1)) rxe$((2 * link + hi))"
        reason="is on NUMA node $link like this rank"
        [ "$mode" = none ] && reason="none of the 2 usable NICs is on this rank's NUMA node 7"
        [ "$mode" = one ] && reason="the route to the bootstrap root (one usable NIC"
        # Listeners of one-host sub-communicators stay on the route (no other host to reach).
        grep "rdma: listening on" /tmp/rank.$r.out | grep -v "(no other host)" >/tmp/links.$r
        got=$(sed -n 's/.*listening on \([0-9.]*\) port [0-9]*, device \([a-z0-9]*\) .*/\1 \2/p' \
            /tmp/links.$r | sort -u | tr '\n' ';')
        if [ "$mode" = one ]; then
            # The route to the root is 198.18.0.1 or .2 here (both "hosts" share one kernel).
            echo "$got" | grep -Eq '^(198\.18\.0\.[12] rxe[01];)+$' ||
                bad="$bad rank $r listens on '$got' (want link 1: 198.18.0.x, rxe0/rxe1);"
        else
            [ "$got" = "$want;" ] || bad="$bad rank $r listens on '$got' (want $want);"
        fi
        if [ ! -s /tmp/links.$r ] || grep -vq "$reason" /tmp/links.$r; then
            bad="$bad rank $r: a listener without '$reason';"
        fi
        rm -f /tmp/links.$r
    done
    if [ -z "$bad" ]; then
        passed=$((passed + 1))
        echo "[PASS] $name ($(($(date +%s) - t0)) s)"
    else
        failed=$((failed + 1))
        echo "[FAIL] $name:$bad"
        grep -h "rdma: listening on" /tmp/rank.*.out | sed 's/^/    /'
        for f in /tmp/rank.*.out; do
            echo "  --- $f"
            tail -n 8 "$f" | sed 's/^/    /'
        done
    fi
    rm -f /tmp/rank.*.out
}

links_case "2 links, fake NUMA: local rank i uses link i+1's device" numa \
    $perf -b 8 -e 64K -f 1024 -n 1 -w 1 -c 1
links_case "2 links, NUMA swapped: local rank i uses link 2-i's device" swap \
    $perf -b 8 -e 64K -f 1024 -n 1 -w 1 -c 1
links_case "2 links, no NIC on the ranks' NUMA node: spread by local rank" none \
    $perf -b 8 -e 64K -f 1024 -n 1 -w 1 -c 1
links_case "2 links, only link 1 listed: every rank keeps the route to the root" one \
    $perf -b 8 -e 64K -f 1024 -n 1 -w 1 -c 1
# ==== end rdmanic ====
echo "rdma: $passed passed, $failed failed"
[ $failed -eq 0 ]
