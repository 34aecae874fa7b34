#!/usr/bin/env bash
# Runs a braid job on several "hosts" made of network namespaces on this machine (needs root).
#
#   tests/net/netns.sh [options] -- prog [args...]
#
#   --hosts N          hosts (network namespaces), 2..4 (default 2)
#   --ranks-per-host K ranks per host (default 2): rank = host * K + local index
#   --placement P      block (default: as above) or cyclic (rank = local index * N + host,
#                      as a launcher dealing ranks round-robin over the hosts)
#   --numa M           fake M NUMA nodes per host: a rank's BRAID_NUMA_ID is its local index
#                      modulo M (so with cyclic placement NUMA nodes interleave too)
#   --two-links        give every host a second link: eth1 on a second bridge (br1), address
#                      198.19.0.<i+1>/24 (the bootstrap root stays on eth0); with
#                      -x BRAID_NIC_NUMA=eth0:0,eth1:1 and --numa 2 the two veths stand for NICs
#                      on two NUMA nodes
#   --bind             bind rank r to cpu r mod (cpus of this machine), as a launcher binding
#                      ranks to cores does (runs repeat better than with floating ranks)
#   --bind-hosts       give every host its own cpus instead, as real hosts have: host h's
#                      ranks share cpus [h*C/N, (h+1)*C/N) of this machine's C for N hosts
#                      (cpu h mod C when there are fewer cpus than hosts); with --bind the
#                      hosts share every cpu, so one host's compute slows the others
#   --rate R           rate-limit every host's link (tc tbf on both veth ends), e.g. 1gbit
#   --burst B          tbf's bucket with --rate (default 1mb: short runs of small messages
#                      pass at veth speed; a smaller one, e.g. 32kb, is closer to a real link)
#   --drop P           drop P percent of the packets each host receives from the others
#                      (nft numgen random), e.g. 1% or 0.5
#   --victim R         rank R is expected to die by a signal (not a failure of the job)
#   --link-down H:S    S seconds after the start, set host H's link down (its eth0)
#   --timeout S        kill the job after S seconds (default 120; rank 0's output so far is
#                      printed); exit 124
#   --keep-logs DIR    write rank.R.out / rank.R.err there (default: a temporary directory,
#                      removed at exit; rank 0's output and a failed rank's stderr are printed)
#   -x VAR=VALUE       set VAR in every rank's environment (repeatable)
#
# Layout: namespaces braidtest-<pid>-h0..h<N-1> (the hosts) and braidtest-<pid>-br, which
# holds a bridge; each host has eth0 (a veth whose peer is a bridge port) with address
# 198.18.0.<i+1>/24 and its own loopback. Only 198.18.0.0/15 (RFC 2544 benchmarking) is used.
# Every rank gets BRAID_RANK, BRAID_NRANKS, BRAID_LOCAL_RANK, BRAID_ROOT=198.18.0.1:<port> (on
# host 0) and a random BRAID_SECRET, and runs under `ip netns exec`. braid's host identity
# includes the network namespace, so ranks on one host use shm and ranks on different hosts
# use TCP. Everything is removed at exit (also on failure, timeout, SIGINT/SIGTERM).
#
# Exit status: 0 if every rank exited 0 (the victim excepted), else the first failing rank's
# status (128+signal when killed), 124 on timeout, 2 on bad usage, 3 on setup failure.
set -uo pipefail

hosts=2 rph=2 rate="" burst=1mb drop="" victim=-1 timeout=120 logs="" extra_env=() link_down=
placement=block numa=0 two_links=0 bind=0 bind_hosts=0
usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) rph=$2; shift 2 ;;
    --placement) placement=$2; shift 2 ;;
    --numa) numa=$2; shift 2 ;;
    --two-links) two_links=1; shift ;;
    --bind) bind=1; shift ;;
    --bind-hosts) bind_hosts=1; shift ;;
    --rate) rate=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --drop) drop=${2%\%}; shift 2 ;;
    --victim) victim=$2; shift 2 ;;
    --link-down) link_down=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --keep-logs) logs=$2; shift 2 ;;
    -x) extra_env+=("$2"); shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "netns.sh: unknown option $1" >&2; usage ;;
    esac
done
[ $# -gt 0 ] || usage
[[ $hosts =~ ^[2-4]$ ]] || { echo "netns.sh: --hosts must be 2..4" >&2; exit 2; }
[[ $rph =~ ^[1-8]$ ]] || { echo "netns.sh: --ranks-per-host must be 1..8" >&2; exit 2; }
[[ $placement =~ ^(block|cyclic)$ ]] || { echo "netns.sh: --placement is block or cyclic" >&2; exit 2; }
[[ $numa =~ ^[0-8]$ ]] || { echo "netns.sh: --numa must be 0..8" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "netns.sh: needs root (network namespaces)" >&2; exit 2; }

prefix="braidtest-$$"
br="$prefix-br"
nranks=$((hosts * rph))
pids=()
tmp_logs=""
if [ -z "$logs" ]; then
    logs=$(mktemp -d /tmp/braid-netns.XXXXXX)
    tmp_logs=$logs
fi
mkdir -p "$logs"

# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do { wait "$p"; } 2>/dev/null; done
    for ((h = 0; h < hosts; h++)); do ip netns del "$prefix-h$h" 2>/dev/null; done
    ip netns del "$br" 2>/dev/null
    [ -n "$tmp_logs" ] && rm -rf "$tmp_logs"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

setup() {
    set -e
    ip netns add "$br"
    ip -n "$br" link add br0 type bridge
    ip -n "$br" link set br0 up
    ip -n "$br" link set lo up
    if [ "$two_links" = 1 ]; then
        ip -n "$br" link add br1 type bridge
        ip -n "$br" link set br1 up
    fi
    for ((h = 0; h < hosts; h++)); do
        local ns="$prefix-h$h"
        ip netns add "$ns"
        ip -n "$br" link add "h$h" type veth peer name eth0 netns "$ns"
        ip -n "$br" link set "h$h" master br0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "198.18.0.$((h + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        if [ "$two_links" = 1 ]; then
            ip -n "$br" link add "g$h" type veth peer name eth1 netns "$ns"
            ip -n "$br" link set "g$h" master br1 up
            ip -n "$ns" addr add "198.19.0.$((h + 1))/24" dev eth1
            ip -n "$ns" link set eth1 up
        fi
        if [ -n "$rate" ]; then
            # Both directions of the host's link: its egress and the bridge port's egress.
            tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
            tc -n "$br" qdisc add dev "h$h" root tbf rate "$rate" burst "$burst" latency 100ms
        fi
        if [ -n "$drop" ]; then
            # Drop probability in units of 1/10000 (accepts 1, 1%, 0.5).
            local per10k
            per10k=$(awk -v p="$drop" 'BEGIN { printf "%d", p * 100 + 0.5 }')
            ip netns exec "$ns" nft -f - <<EOF
table inet braidtest {
    chain input {
        type filter hook input priority 0; policy accept;
        iifname "eth0" ip saddr 198.18.0.0/15 numgen random mod 10000 < $per10k drop
    }
}
EOF
        fi
    done
    # (No STP on the bridge: ports forward at once; the bootstrap retries its connect.)
    set +e
}
if ! (setup); then
    echo "netns.sh: setting up the namespaces failed" >&2
    exit 3
fi

port=$((20000 + $$ % 20000))
secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
# The wait loop below polls without forking (bash's SECONDS, a read with a timeout on a pipe
# that never delivers): a date and a sleep process every 50 ms took about a tenth of the 2 cpus
# from the ranks (perf record of a DDP benchmark, session 14).
SECONDS=0
exec {tick}<> <(:)
host_of() { # rank -> host
    if [ "$placement" = cyclic ]; then echo $(($1 % hosts)); else echo $(($1 / rph)); fi
}
for ((r = 0; r < nranks; r++)); do
    h=$(host_of $r)
    local_index=$((r % rph))
    [ "$placement" = cyclic ] && local_index=$((r / hosts))
    env_args=("BRAID_RANK=$r" "BRAID_NRANKS=$nranks" "BRAID_LOCAL_RANK=$local_index"
        "BRAID_ROOT=198.18.0.1:$port" "BRAID_SECRET=$secret")
    [ "$numa" -gt 0 ] && env_args+=("BRAID_NUMA_ID=$((local_index % numa))")
    env_args+=("${extra_env[@]}")
    pin=()
    [ "$bind" -eq 1 ] && pin=(taskset -c "$(awk -v r=$r -v n="$(nproc)" 'BEGIN { print r % n }')")
    [ "$bind_hosts" -eq 1 ] && pin=(taskset -c "$(awk -v h="$h" -v H="$hosts" -v c="$(nproc)" '
        BEGIN { if (c < H) { print h % c; exit }
                lo = int(h * c / H); hi = int((h + 1) * c / H) - 1
                print (lo == hi ? lo : lo "-" hi) }')")
    ip netns exec "$prefix-h$h" "${pin[@]}" env "${env_args[@]}" "$@" >"$logs/rank.$r.out" \
        2>"$logs/rank.$r.err" &
    pids+=($!)
done

# Wait for every rank, with the timeout.
status=0
declare -A done_rank
left=$nranks
while [ "$left" -gt 0 ]; do
    for ((r = 0; r < nranks; r++)); do
        [ -n "${done_rank[$r]:-}" ] && continue
        if ! kill -0 "${pids[$r]}" 2>/dev/null; then
            { wait "${pids[$r]}"; } 2>/dev/null
            st=$?
            done_rank[$r]=$st
            left=$((left - 1))
            if [ "$st" -ne 0 ] && [ "$r" -ne "$victim" ] && [ "$status" -eq 0 ]; then
                status=$st
                echo "netns.sh: rank $r (host $(host_of $r)) exited with status $st" >&2
                tail -n 20 "$logs/rank.$r.err" | sed "s/^/[$r] /" >&2
            fi
            if [ "$r" -eq "$victim" ] && [ "$st" -lt 128 ]; then
                echo "netns.sh: victim rank $r was not killed (status $st)" >&2
                [ "$status" -eq 0 ] && status=1
            fi
        fi
    done
    if [ -n "$link_down" ] && [ "$SECONDS" -ge "${link_down#*:}" ]; then
        echo "netns.sh: setting host ${link_down%%:*}'s link down" >&2
        ip netns exec "$prefix-h${link_down%%:*}" ip link set eth0 down
        link_down=""
    fi
    if [ "$left" -gt 0 ]; then
        if [ "$SECONDS" -ge "$timeout" ]; then
            echo "netns.sh: timeout after $timeout s; killing the job" >&2
            for ((r = 0; r < nranks; r++)); do
                [ -z "${done_rank[$r]:-}" ] && tail -n 5 "$logs/rank.$r.err" | sed "s/^/[$r] /" >&2
            done
            cat "$logs/rank.0.out" # what rank 0 printed before the kill
            exit 124
        fi
        read -r -t 0.05 -u "$tick" || true
    fi
done
cat "$logs/rank.0.out"
[ -s "$logs/rank.0.err" ] && sed 's/^/[0] /' "$logs/rank.0.err" >&2
exit $status
