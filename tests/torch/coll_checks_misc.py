"""Barriers, groups (split and store bootstrap), timeouts, asynchrony and issue order, futures,
and the errors the backend must give."""
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from coll_checks_move import NotApplicable
from coll_common import reference, same, values


def check_barrier(ctx):
    for mode in ("sync", "async"):
        if ctx.rank == 0:
            time.sleep(0.5)
        t0 = time.monotonic()
        w = dist.barrier(async_op=mode == "async")
        if w is not None:
            w.wait()
        took = time.monotonic() - t0
        if ctx.rank != 0 and took < 0.3:
            raise AssertionError(f"{mode} barrier returned after {took:.3f} s although rank 0 "
                                 "arrived 0.5 s late")
    return ""


def check_monitored_barrier(ctx):
    # torch 1.13's dist.monitored_barrier() accepts Gloo groups only; the group's method is the
    # c10d call itself
    if ctx.rank == 0:
        time.sleep(0.3)
    t0 = time.monotonic()
    ctx.braid.monitored_barrier(timedelta(seconds=20), wait_all_ranks=True)
    took = time.monotonic() - t0
    if ctx.rank != 0 and took < 0.2:
        raise AssertionError(f"monitored barrier returned after {took:.3f} s")
    return ""


def check_async_returns_at_once(ctx):
    if ctx.world < 2:
        raise NotApplicable("needs a late peer")
    n = 1 << 16
    t = values(torch.float32, ctx.rank, n)
    if ctx.rank == 0:
        time.sleep(2.0)
    t0 = time.monotonic()
    w = dist.all_reduce(t, async_op=True)
    t_call = time.monotonic() - t0
    w.wait()
    t_wait = time.monotonic() - t0
    same(t, reference(torch.float32, ctx.world, n, "SUM"), "late all_reduce")
    if ctx.rank != 0:
        # (bounds loose enough for a machine at load 60: the call is microseconds when idle)
        assert t_call < 1.0, f"all_reduce(async_op=True) took {t_call:.3f} s to return"
        assert t_wait > 1.2, f"wait returned after {t_wait:.3f} s, before rank 0 joined"
        assert w.is_completed()
    return f"call {t_call * 1e3:.1f} ms, wait {t_wait * 1e3:.0f} ms"


def check_issue_order(ctx):
    """Async operations on one tensor, none waited but the last: they must run in issue order."""
    n = 1000
    for _ in range(3):
        t = values(torch.int64, ctx.rank, n)
        works = [dist.broadcast(t, src=ctx.world - 1, async_op=True),
                 dist.all_reduce(t, async_op=True),
                 dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)]
        u = values(torch.int64, ctx.rank, n, salt=3)
        works.append(dist.all_reduce(u, op=dist.ReduceOp.MIN, async_op=True))
        works.append(dist.all_reduce(t, op=dist.ReduceOp.PRODUCT, async_op=True))
        works[-1].wait()
        assert all(w.is_completed() for w in works), "an earlier operation is not complete"
        want = values(torch.int64, ctx.world - 1, n) * ctx.world  # broadcast, then sum
        want = want ** ctx.world  # max of equal values is the value; then the product
        same(t, want, "broadcast -> sum -> max -> product")
        same(u, reference(torch.int64, ctx.world, n, "MIN", salt=3), "interleaved min")
    return ""


def check_future(ctx):
    t = values(torch.float64, ctx.rank, 257)
    w = dist.all_reduce(t, async_op=True)
    doubled = w.get_future().then(lambda f: f.value()[0] * 2).wait()
    same(doubled, reference(torch.float64, ctx.world, 257, "SUM") * 2, "future.then")
    assert w.result()[0] is not None
    return ""


def check_subgroups(ctx):
    w, me = ctx.world, ctx.rank
    full = dist.new_group(timeout=timedelta(seconds=7))
    assert full.made_by_split, "a group of every rank should be a braid_comm_split"
    assert abs(full.comm_timeout - 7.0) < 1e-9, full.comm_timeout
    assert abs(ctx.braid.comm_timeout - 60.0) < 1e-9, ctx.braid.comm_timeout
    assert not ctx.braid.made_by_split
    t = values(torch.float32, me, 101, salt=5)
    dist.all_reduce(t, group=full)
    same(t, reference(torch.float32, w, 101, "SUM", salt=5), "all_reduce on the split group")
    detail = "full group: split"
    # a subset: ranks 1.. (bootstrapped through the group's store)
    ranks = list(range(1, w)) if w > 1 else [0]
    sub = dist.new_group(ranks=ranks)
    if me in ranks:
        assert sub.made_by_split == (ranks == list(range(w)))
        t = values(torch.int32, me, 50)
        dist.broadcast(t, src=ranks[-1], group=sub)  # src is a global rank
        same(t, values(torch.int32, ranks[-1], 50), "broadcast on the subset")
        t = values(torch.int32, me, 50)
        dist.all_reduce(t, group=sub)
        same(t, sum(values(torch.int32, r, 50) for r in ranks).to(torch.int32), "subset sum")
        detail += f"; subset {ranks}: store"
    # consecutive pairs (or singletons), made as dist.new_subgroups does (it insists on CUDA in
    # torch 1.13): every rank creates every subgroup, in the same order
    size = 2 if w % 2 == 0 else 1
    mine = None
    for lo in range(0, w, size):
        g = dist.new_group(ranks=list(range(lo, lo + size)))
        if lo <= me < lo + size:
            mine = g
    members = list(range(me - me % size, me - me % size + size))
    t = values(torch.float64, me, 33)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=mine)
    same(t, torch.stack([values(torch.float64, r, 33) for r in members]).max(0).values,
         "subgroup max")
    assert mine.made_by_split == (size == w)
    # the world group still works after all this
    t = values(torch.int64, me, 9)
    dist.all_reduce(t)
    same(t, reference(torch.int64, w, 9, "SUM"), "world after subgroups")
    return detail


def expect_error(fn, *words):
    try:
        fn()
    except RuntimeError as e:
        for wd in words:
            assert wd in str(e), f"message '{e}' lacks '{wd}'"
        return str(e).splitlines()[0]
    raise AssertionError(f"no error (expected one naming {words})")


def check_errors(ctx):
    msgs = []
    for op in ("BAND", "BOR", "BXOR"):
        t = torch.arange(4, dtype=torch.int32)
        msgs.append(expect_error(lambda: dist.all_reduce(t, op=getattr(dist.ReduceOp, op)),
                                 op, "not supported"))
    msgs.append(expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
                             "Short", "no braid reduction"))
    msgs.append(expect_error(lambda: dist.all_gather(
        [torch.empty(3) for _ in range(ctx.world)], torch.empty(4)), "elements"))
    msgs.append(expect_error(lambda: dist._all_gather_base(torch.empty(5 * ctx.world + 1),
                                                           torch.empty(5)), "times"))
    msgs.append(expect_error(lambda: dist.all_to_all_single(
        torch.empty(ctx.world * 2), torch.empty(ctx.world * 2), [1] * (ctx.world + 1),
        [2] * ctx.world), "split sizes"))
    return " | ".join(msgs)


def check_wait_rethrows(ctx):
    """Mismatched calls on a throw-away group: wait raises braid's message; the group stays
    failed; the world group is unaffected."""
    if ctx.world < 2:
        raise NotApplicable("needs 2 ranks")
    bad = dist.new_group(timeout=timedelta(seconds=10))
    n = 100 if ctx.rank == 0 else 101
    t = torch.ones(n)
    w = dist.all_reduce(t, group=bad, async_op=True)
    try:
        w.wait()
    except RuntimeError as e:
        msg = str(e)
    else:
        raise AssertionError("mismatched all_reduce counts did not fail")
    assert "braid: allreduce failed" in msg, msg
    try:
        dist.all_reduce(torch.ones(3), group=bad)
    except RuntimeError as e2:
        assert "braid" in str(e2), e2
    else:
        raise AssertionError("a failed group accepted a new operation")
    t = values(torch.int64, ctx.rank, 9)
    dist.all_reduce(t)
    same(t, reference(torch.int64, ctx.world, 9, "SUM"), "world after a failed group")
    return msg.splitlines()[0][:200]


MISC_CHECKS = {
    "barrier": check_barrier,
    "monitored_barrier": check_monitored_barrier,
    "async_returns_at_once": check_async_returns_at_once,
    "issue_order": check_issue_order,
    "future": check_future,
    "subgroups": check_subgroups,
    "errors": check_errors,
    "wait_rethrows": check_wait_rethrows,
}
