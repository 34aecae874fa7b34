"""Data movement checks: broadcast, the all-gathers, gather, scatter, all-to-all, send/recv.
Every dtype moves (braid moves bytes), including bool, int16 and complex."""
import torch
import torch.distributed as dist

from coll_common import (COUNTS, MOVE_DTYPES, Pending, gloo_try, pending_or_raise, run, same,
                         values)


class NotApplicable(Exception):
    """The check needs more ranks than this run has."""


def check_broadcast(ctx):
    for dtype in MOVE_DTYPES:
        for root in range(ctx.world):
            for n in COUNTS:
                for mode in ("sync", "async") if n == 1031 else ("sync",):
                    t = values(dtype, ctx.rank, n, salt=root)
                    run(lambda a: dist.broadcast(t, src=root, async_op=a), mode)
                    same(t, values(dtype, root, n, salt=root), f"broadcast {dtype} root={root} n={n}")
        g = values(dtype, ctx.rank, 13)
        if gloo_try(ctx, f"broadcast {dtype}", lambda: dist.broadcast(g, src=0, group=ctx.gloo), dtype=dtype):
            same(g, values(dtype, 0, 13), f"gloo broadcast {dtype}")
    # a non-contiguous tensor receives in place
    base = values(torch.float64, ctx.rank, 30).view(5, 6)
    dist.broadcast(base.t(), src=0)
    same(base, values(torch.float64, 0, 30).view(5, 6), "broadcast into a transposed view")
    return f"gloo compared {ctx.gloo_compared}"


def check_allgather(ctx):
    for dtype in MOVE_DTYPES:
        for n in COUNTS:
            for mode in ("sync", "async"):
                outs = [torch.empty(n, dtype=dtype) for _ in range(ctx.world)]
                t = values(dtype, ctx.rank, n)
                run(lambda a: dist.all_gather(outs, t, async_op=a), mode)
                for r in range(ctx.world):
                    same(outs[r], values(dtype, r, n), f"all_gather {dtype} n={n} from {r}")
        gouts = [torch.empty(13, dtype=dtype) for _ in range(ctx.world)]
        t = values(dtype, ctx.rank, 13)
        if gloo_try(ctx, f"all_gather {dtype}", lambda: dist.all_gather(gouts, t, group=ctx.gloo), dtype=dtype):
            for r in range(ctx.world):
                same(gouts[r], values(dtype, r, 13), "gloo all_gather")
    # non-contiguous outputs (columns of one matrix)
    m = torch.zeros(9, ctx.world, dtype=torch.int32)
    outs = [m[:, r] for r in range(ctx.world)]
    dist.all_gather(outs, values(torch.int32, ctx.rank, 9))
    for r in range(ctx.world):
        same(m[:, r], values(torch.int32, r, 9), "all_gather into columns")
    return f"gloo compared {ctx.gloo_compared}"


def check_allgather_base(ctx):
    for dtype in MOVE_DTYPES:
        n = 11
        want = torch.cat([values(dtype, r, n) for r in range(ctx.world)])
        out = torch.empty(ctx.world * n, dtype=dtype)
        dist._all_gather_base(out, values(dtype, ctx.rank, n))
        same(out, want, f"_all_gather_base {dtype}")
        # in place: the input is this rank's block of the output
        out = torch.zeros(ctx.world * n, dtype=dtype)
        out.narrow(0, ctx.rank * n, n).copy_(values(dtype, ctx.rank, n))
        w = dist._all_gather_base(out, out.narrow(0, ctx.rank * n, n), async_op=True)
        w.wait()
        same(out, want, f"in-place _all_gather_base {dtype}")
        gout = torch.empty(ctx.world * n, dtype=dtype)
        if gloo_try(ctx, f"_all_gather_base {dtype}", lambda: dist._all_gather_base(
                gout, values(dtype, ctx.rank, n), group=ctx.gloo), dtype=dtype):
            same(gout, want, "gloo _all_gather_base")
    return f"gloo lacks {sorted(ctx.gloo_missing)}"


def check_allgather_coalesced(ctx):
    sizes = [3, 0, 17]
    for dtype in MOVE_DTYPES:
        if dtype.is_complex:
            continue  # torch 1.13's all_gather_coalesced views complex as real pairs itself
        for mode in ("sync", "async"):
            ins = [values(dtype, ctx.rank, n, salt=k) for k, n in enumerate(sizes)]
            outs = [[torch.empty(n, dtype=dtype) for n in sizes] for _ in range(ctx.world)]
            run(lambda a: dist.all_gather_coalesced(outs, ins, async_op=a), mode)
            for r in range(ctx.world):
                for k, n in enumerate(sizes):
                    same(outs[r][k], values(dtype, r, n, salt=k), f"all_gather_coalesced {dtype}")
        gouts = [[torch.empty(n, dtype=dtype) for n in sizes] for _ in range(ctx.world)]
        if gloo_try(ctx, f"all_gather_coalesced {dtype}",
                    lambda: dist.all_gather_coalesced(gouts, ins, group=ctx.gloo), dtype=dtype):
            for r in range(ctx.world):
                for k in range(len(sizes)):
                    same(gouts[r][k], outs[r][k], "braid vs gloo all_gather_coalesced")
    return f"gloo compared {ctx.gloo_compared}"


def check_gather(ctx):
    for dtype in MOVE_DTYPES:
        for root in {0, ctx.world - 1}:
            for mode in ("sync", "async"):
                n = 13
                outs = [torch.empty(n, dtype=dtype) for _ in range(ctx.world)]
                t = values(dtype, ctx.rank, n)
                try:
                    run(lambda a: dist.gather(t, outs if ctx.rank == root else None, dst=root,
                                              async_op=a), mode)
                except RuntimeError as e:
                    pending_or_raise(e)
                if ctx.rank == root:
                    for r in range(ctx.world):
                        same(outs[r], values(dtype, r, n), f"gather {dtype} from {r}")
        gouts = [torch.empty(13, dtype=dtype) for _ in range(ctx.world)]
        if gloo_try(ctx, f"gather {dtype}", lambda: dist.gather(
                values(dtype, ctx.rank, 13), gouts if ctx.rank == 0 else None, dst=0,
                group=ctx.gloo), dtype=dtype) and ctx.rank == 0:
            for r in range(ctx.world):
                same(gouts[r], values(dtype, r, 13), "gloo gather")
    return f"gloo compared {ctx.gloo_compared}"


def check_scatter(ctx):
    for dtype in MOVE_DTYPES:
        for root in {0, ctx.world - 1}:
            for mode in ("sync", "async"):
                n = 13
                ins = [values(dtype, root, n, salt=j) for j in range(ctx.world)]
                out = torch.empty(n, dtype=dtype)
                try:
                    run(lambda a: dist.scatter(out, ins if ctx.rank == root else None, src=root,
                                               async_op=a), mode)
                except RuntimeError as e:
                    pending_or_raise(e)
                same(out, values(dtype, root, n, salt=ctx.rank), f"scatter {dtype} root={root}")
    return ""


def split_rows(i, j):
    """Rows rank i sends to rank j in the uneven all-to-all (0 for some pairs)."""
    return (i + 2 * j) % 3 + (1 if j == 0 else 0)


def check_alltoall_base(ctx):
    w, me = ctx.world, ctx.rank
    for dtype in MOVE_DTYPES:
        # even: n elements to each rank
        n = 5
        inp = torch.cat([values(dtype, me, n, salt=j) for j in range(w)])
        out = torch.empty(w * n, dtype=dtype)
        try:
            dist.all_to_all_single(out, inp)
        except RuntimeError as e:
            pending_or_raise(e)
        same(out, torch.cat([values(dtype, i, n, salt=me) for i in range(w)]), f"even {dtype}")
        # uneven splits of rows of 3 columns
        cols = 3
        rows_in = [split_rows(me, j) for j in range(w)]
        rows_out = [split_rows(i, me) for i in range(w)]
        inp = torch.cat([values(dtype, me, r * cols, salt=j).view(r, cols)
                         for j, r in enumerate(rows_in)])
        out = torch.empty(sum(rows_out), cols, dtype=dtype)
        work = dist.all_to_all_single(out, inp, rows_out, rows_in, async_op=True)
        work.wait()
        want = torch.cat([values(dtype, i, r * cols, salt=me).view(r, cols)
                          for i, r in enumerate(rows_out)])
        same(out, want, f"uneven all_to_all_single {dtype}")
        gout = torch.empty_like(out)
        if gloo_try(ctx, f"all_to_all_single {dtype}", lambda: dist.all_to_all_single(
                gout, inp, rows_out, rows_in, group=ctx.gloo), dtype=dtype):
            same(gout, want, "gloo uneven all_to_all_single")
    return f"gloo compared {ctx.gloo_compared}"


def check_alltoall(ctx):
    w, me = ctx.world, ctx.rank
    for dtype in MOVE_DTYPES:
        ins = [values(dtype, me, split_rows(me, j) * 2, salt=j) for j in range(w)]
        outs = [torch.empty(split_rows(i, me) * 2, dtype=dtype) for i in range(w)]
        try:
            dist.all_to_all(outs, ins)
        except RuntimeError as e:
            pending_or_raise(e)
        for i in range(w):
            same(outs[i], values(dtype, i, split_rows(i, me) * 2, salt=me), f"all_to_all {dtype}")
    return ""


def check_send_recv(ctx):
    w, me = ctx.world, ctx.rank
    if w < 2:
        raise NotApplicable("send/recv needs 2 ranks")
    nxt, prv = (me + 1) % w, (me - 1) % w
    for dtype in MOVE_DTYPES:
        for n in COUNTS:
            got = torch.empty(n, dtype=dtype)
            try:
                # even ranks send first, odd ranks receive first (one ring step)
                if me % 2 == 0:
                    dist.send(values(dtype, me, n), nxt)
                    dist.recv(got, prv)
                else:
                    dist.recv(got, prv)
                    dist.send(values(dtype, me, n), nxt)
            except RuntimeError as e:
                pending_or_raise(e)
            same(got, values(dtype, prv, n), f"send/recv {dtype} n={n}")
    # every rank sends 4 MiB to the next and receives from the previous one, both posted
    # before either is waited on, the sends first everywhere (a cycle of blocking sends would
    # deadlock; isend/irecv must progress together)
    for _ in range(2):
        n = 1 << 20
        got = torch.empty(n, dtype=torch.float32)
        reqs = [dist.isend(values(torch.float32, me, n, salt=3), nxt), dist.irecv(got, prv)]
        for r in reqs[::-1]:
            r.wait()
        same(got, values(torch.float32, prv, n, salt=3), "isend/irecv ring, sends first")
    # a non-contiguous receive buffer
    m = torch.zeros(6, 4, dtype=torch.int64)
    reqs = [dist.isend(values(torch.int64, me, 24).view(4, 6), nxt), dist.irecv(m.t(), prv)]
    for r in reqs:
        r.wait()
    same(m.t(), values(torch.int64, prv, 24).view(4, 6), "recv into a transposed view")
    return ""


def check_recv_anysource_refused(ctx):
    t = torch.empty(3)
    try:
        dist.recv(t)  # no src: recvAnysource
    except RuntimeError as e:
        assert "recvAnysource" in str(e) and "not supported" in str(e), e
        return str(e)
    raise AssertionError("recv without src was not refused")


MOVE_CHECKS = {
    "broadcast": check_broadcast,
    "allgather": check_allgather,
    "allgather_base": check_allgather_base,
    "allgather_coalesced": check_allgather_coalesced,
    "gather": check_gather,
    "scatter": check_scatter,
    "alltoall_base": check_alltoall_base,
    "alltoall": check_alltoall,
    "send_recv": check_send_recv,
    "recv_anysource_refused": check_recv_anysource_refused,
}
__all__ = ["MOVE_CHECKS", "NotApplicable", "Pending"]
