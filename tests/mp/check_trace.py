#!/usr/bin/env python3
"""Checks a BRAID_TRACE file written by tests/mp/test_timeline.c (profiles: calls, fallback, hier).

Usage: check_trace.py PROFILE PATH NRANKS.  Exits 0 when every check holds, else prints what
failed and exits 1.  The expectations are the calls test_timeline.c makes on every rank."""
import json
import os
import sys


def fail(msg):
    print("check_trace: " + msg)
    sys.exit(1)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        fail("%s: not a readable Chrome trace: %s" % (path, e))


def common(ev, pids):
    names = {e["pid"] for e in ev if e.get("name") == "process_name"}
    if names != set(pids):
        fail("process_name rows for pids %s, expected %s" % (sorted(names), sorted(pids)))
    for e in ev:
        if e.get("ph") != "X":
            continue
        if e["dur"] < 0 or e["ts"] < 0:
            fail("event with negative time: %s" % e)
        if e["pid"] not in pids:
            fail("event of unknown pid: %s" % e)
    for p in pids:
        calls = sorted((e for e in ev if e.get("cat") == "call" and e["pid"] == p and e["tid"] == 0),
                       key=lambda e: e["ts"])
        for a, b in zip(calls, calls[1:]):
            if b["ts"] < a["ts"] + a["dur"] - 1e-3:
                fail("rank %d: calls overlap on one row: %s / %s" % (p, a, b))
            if b["args"]["seq"] <= a["args"]["seq"]:
                fail("rank %d: call numbers out of order: %s / %s" % (p, a, b))


def one(ev, p, pred, what):
    hits = [e for e in ev if e.get("ph") == "X" and e["pid"] == p and pred(e)]
    if len(hits) != 1:
        fail("rank %d: %d events %s, expected 1" % (p, len(hits), what))
    return hits[0]


def calls(ev, n):
    for p in range(n):
        ar = one(ev, p, lambda e: e["name"] == "allreduce" and e["args"].get("count") == 1000,
                 "allreduce of 1000")
        a = ar["args"]
        algo = "ring" if n > 1 else None  # one rank: no algorithm runs
        if (a.get("dtype"), a.get("op"), a.get("algo"), a.get("bytes")) != ("float32", "sum", algo, 4000):
            fail("rank %d: allreduce args %s" % (p, a))
        steps = [e for e in ev if e.get("cat") == "step" and e["pid"] == p and e["args"]["seq"] == a["seq"]]
        sent = sum(e["args"]["bytes"] for e in steps if "send_to" in e["args"])
        if n > 1:
            # the ring sends every block but its own twice (reduce-scatter, then all-gather) less
            # the last one: between 2 (n-1)/n and 2 of the input, whatever the split
            if not steps or not (4000 * (n - 1) // n <= sent <= 2 * 4000):
                fail("rank %d: allreduce steps sent %d bytes (%d steps)" % (p, sent, len(steps)))
            for e in steps:
                for k in ("send_to", "recv_from"):
                    if k in e["args"] and not (0 <= e["args"][k] < n and e["args"][k] != p):
                        fail("rank %d: step with bad peer: %s" % (p, e))
                if not (ar["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= ar["ts"] + ar["dur"] + 1e-3):
                    fail("rank %d: step outside its call: %s / %s" % (p, e, ar))
        bc = one(ev, p, lambda e: e["name"] == "broadcast", "broadcast")
        if bc["args"].get("root") != n - 1 or bc["args"].get("count") != 777:
            fail("rank %d: broadcast args %s" % (p, bc["args"]))
        if n > 1:
            nxt, prv = (p + 1) % n, (p + n - 1) % n
            one(ev, p, lambda e: e["cat"] == "p2p" and e["name"] == "send" and e["args"].get("send_to") == nxt
                and e["args"]["bytes"] == 40000 and e["tid"] == 1, "send of 40000 B to rank %d" % nxt)
            one(ev, p, lambda e: e["cat"] == "p2p" and e["name"] == "recv" and e["args"].get("recv_from") == prv
                and e["args"]["bytes"] == 40000 and e["tid"] == 1, "recv of 40000 B from rank %d" % prv)
        at = one(ev, p, lambda e: e["name"] == "alltoall", "alltoall")
        if at["args"].get("bytes") != 300 * n or at["args"].get("dtype") != "uint8":
            fail("rank %d: alltoall args %s" % (p, at["args"]))


def main():
    profile, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if profile == "fallback":
        if os.path.exists(path):
            fail("%s exists, but the communicator failed before the gather" % path)
        for r in range(n):
            ev = load("%s.rank%d" % (path, r))
            common(ev, [r])
            one(ev, r, lambda e: e["name"] == "allreduce", "allreduce")
    else:
        ev = load(path)
        common(ev, list(range(n)))
        info = [e for e in ev if e.get("name") == "braid trace"]
        if len(info) != 1 or info[0]["args"]["ranks"] != n or info[0]["args"]["dropped_events"] != 0:
            fail("trace info record %s" % info)
        if profile == "calls":
            calls(ev, n)
        elif profile == "direct":
            for p in range(n):
                ar = one(ev, p, lambda e: e["name"] == "allreduce" and e["args"].get("algo") == "direct"
                         and e["args"].get("count") == 300007, "direct allreduce of 300007")
                blocks = [e for e in ev if e.get("cat") == "step" and e["pid"] == p
                          and e["args"]["seq"] == ar["args"]["seq"]]
                if len(blocks) < 2 or any(e["name"] != "directBlock" for e in blocks):
                    fail("rank %d: direct allreduce blocks %s" % (p, blocks))
                if sum(e["args"]["bytes"] for e in blocks) != 300007 * 4:
                    fail("rank %d: direct blocks carry %d bytes, expected %d"
                         % (p, sum(e["args"]["bytes"] for e in blocks), 300007 * 4))
        elif profile == "hier":
            for p in range(n):
                sub = [e for e in ev if e.get("ph") == "X" and e["pid"] == p and e["tid"] >= 32]
                if not any(e.get("cat") == "step" for e in sub):
                    fail("rank %d: no steps of a sub-communicator (rows >= 32)" % p)
                one(ev, p, lambda e: e["name"] == "allreduce" and e["args"].get("algo") == "hier"
                    and e["args"].get("count") == 100003, "hier allreduce of 100003")
        else:
            fail("unknown profile " + profile)


main()
