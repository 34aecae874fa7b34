"""The reduction checks and the registry of every check (data movement: coll_checks_move.py,
groups/ordering/errors: coll_checks_misc.py). Each check returns a detail string or raises."""
import torch
import torch.distributed as dist

from coll_common import (COUNTS, OPS, REDUCE_DTYPES, gloo_try, reference, run, same, values)

EXTRA_REDUCE = [torch.bool, torch.complex64, torch.complex128]


def op_allowed(dtype, op):
    if dtype == torch.bool:
        return op in ("MIN", "MAX", "PRODUCT")
    if dtype.is_complex:
        return op in ("SUM", "AVG")  # torch itself refuses complex MIN/MAX/PRODUCT
    return True


def check_allreduce(ctx):
    n_calls = 0
    for dtype in REDUCE_DTYPES + EXTRA_REDUCE:
        for opname, op in OPS.items():
            for n in COUNTS:
                if not op_allowed(dtype, opname):
                    if dtype == torch.bool:
                        t = values(dtype, ctx.rank, n, op=opname)
                        try:
                            dist.all_reduce(t, op=op)
                        except RuntimeError as e:
                            assert "bool tensors reduce with MIN, MAX or PRODUCT" in str(e), e
                        else:
                            raise AssertionError(f"bool {opname} was not refused")
                    continue
                want = reference(dtype, ctx.world, n, opname)
                for mode in ("sync", "async") if n in (1, 1031) else ("sync",):
                    t = values(dtype, ctx.rank, n, op=opname)
                    w = run(lambda a: dist.all_reduce(t, op=op, async_op=a), mode)
                    same(t, want, f"all_reduce {dtype} {opname} n={n} {mode}", opname)
                    if mode == "async":
                        fut = w.get_future().wait()
                        assert len(fut) == 1, fut
                        got = torch.view_as_complex(fut[0]) if dtype.is_complex else fut[0]
                        same(got, want, "future value", opname)
                    n_calls += 1
                if opname != "AVG" and n == 13:  # Gloo 1.13 has no AVG
                    g = values(dtype, ctx.rank, n, op=opname)
                    if gloo_try(ctx, f"all_reduce {dtype}",
                                lambda: dist.all_reduce(g, op=op, group=ctx.gloo), dtype=dtype):
                        same(t, g, f"braid vs gloo all_reduce {dtype} {opname}")
    return f"{n_calls} calls; gloo compared {ctx.gloo_compared}, gloo lacks {sorted(ctx.gloo_missing)}"


def check_allreduce_noncontiguous(ctx):
    base = values(torch.float32, ctx.rank, 6 * 7).view(6, 7)
    want = reference(torch.float32, ctx.world, 6 * 7, "SUM").view(6, 7)
    t = base.t()  # 7x6, not contiguous
    assert not t.is_contiguous()
    dist.all_reduce(t)
    same(base, want, "transposed view")
    base = values(torch.int64, ctx.rank, 8 * 9).view(8, 9)
    want = reference(torch.int64, ctx.world, 8 * 9, "MAX").view(8, 9)
    t = base[:, ::2]
    w = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    w.wait()
    same(base[:, ::2], want[:, ::2], "strided slice")
    same(base[:, 1::2], values(torch.int64, ctx.rank, 8 * 9).view(8, 9)[:, 1::2],
         "elements outside the slice untouched")


def check_allreduce_coalesced(ctx):
    sizes = [1, 13, 0, 300]
    for dtype in REDUCE_DTYPES:
        for opname in ("SUM", "MAX", "PRODUCT"):
            for mode in ("sync", "async"):
                ts = [values(dtype, ctx.rank, n, salt=k, op=opname) for k, n in enumerate(sizes)]
                run(lambda a: dist.all_reduce_coalesced(ts, op=OPS[opname], async_op=a), mode)
                for k, n in enumerate(sizes):
                    same(ts[k], reference(dtype, ctx.world, n, opname, salt=k),
                         f"all_reduce_coalesced {dtype} {opname} tensor {k}")
            gs = [values(dtype, ctx.rank, n, salt=k, op=opname) for k, n in enumerate(sizes)]
            if gloo_try(ctx, f"all_reduce_coalesced {dtype}", lambda: dist.all_reduce_coalesced(
                    gs, op=OPS[opname], group=ctx.gloo), dtype=dtype):
                for k in range(len(sizes)):
                    same(ts[k], gs[k], f"braid vs gloo all_reduce_coalesced {dtype}")
    return f"gloo compared {ctx.gloo_compared}"


def check_reduce(ctx):
    root = ctx.world - 1
    for dtype in REDUCE_DTYPES:
        for opname, op in OPS.items():
            for n in (1, 1031):
                for mode in ("sync", "async"):
                    t = values(dtype, ctx.rank, n, op=opname)
                    run(lambda a: dist.reduce(t, dst=root, op=op, async_op=a), mode)
                    if ctx.rank == root:
                        same(t, reference(dtype, ctx.world, n, opname),
                             f"reduce {dtype} {opname} n={n} {mode}", opname)
            if opname != "AVG":
                g = values(dtype, ctx.rank, 13, op=opname)
                t = values(dtype, ctx.rank, 13, op=opname)
                dist.reduce(t, dst=root, op=op)
                if gloo_try(ctx, f"reduce {dtype}", lambda: dist.reduce(
                        g, dst=root, op=op, group=ctx.gloo), dtype=dtype) and ctx.rank == root:
                    same(t, g, f"braid vs gloo reduce {dtype} {opname}")
    return f"gloo compared {ctx.gloo_compared}"


def check_reduce_scatter(ctx):
    for dtype in REDUCE_DTYPES:
        for opname, op in OPS.items():
            for n in (1, 13):
                for mode in ("sync", "async"):
                    ins = [values(dtype, ctx.rank, n, salt=j, op=opname) for j in range(ctx.world)]
                    out = torch.empty(n, dtype=dtype)
                    run(lambda a: dist.reduce_scatter(out, ins, op=op, async_op=a), mode)
                    same(out, reference(dtype, ctx.world, n, opname, salt=ctx.rank),
                         f"reduce_scatter {dtype} {opname} n={n} {mode}", opname)
            if opname == "SUM":
                gout = torch.empty(13, dtype=dtype)
                gins = [values(dtype, ctx.rank, 13, salt=j) for j in range(ctx.world)]
                if gloo_try(ctx, f"reduce_scatter {dtype}", lambda: dist.reduce_scatter(
                        gout, gins, group=ctx.gloo), dtype=dtype):
                    same(gout, reference(dtype, ctx.world, 13, "SUM", salt=ctx.rank), "gloo")
    return f"gloo compared {ctx.gloo_compared}, gloo lacks {sorted(ctx.gloo_missing)}"


def check_reduce_scatter_base(ctx):
    for dtype in REDUCE_DTYPES:
        for opname, op in OPS.items():
            n = 7
            full = torch.cat([values(dtype, ctx.rank, n, salt=j, op=opname)
                              for j in range(ctx.world)])
            want = reference(dtype, ctx.world, n, opname, salt=ctx.rank)
            out = torch.empty(n, dtype=dtype)
            dist._reduce_scatter_base(out, full.clone(), op=op)
            same(out, want, f"_reduce_scatter_base {dtype} {opname}", opname)
            # in place: the output is this rank's block of the input
            inp = full.clone()
            w = dist._reduce_scatter_base(inp.narrow(0, ctx.rank * n, n), inp, op=op,
                                          async_op=True)
            w.wait()
            same(inp.narrow(0, ctx.rank * n, n), want, f"in-place {dtype} {opname}", opname)
        gout = torch.empty(7, dtype=dtype)
        full = torch.cat([values(dtype, ctx.rank, 7, salt=j) for j in range(ctx.world)])
        if gloo_try(ctx, f"_reduce_scatter_base {dtype}", lambda: dist._reduce_scatter_base(
                gout, full, group=ctx.gloo), dtype=dtype):
            same(gout, reference(dtype, ctx.world, 7, "SUM", salt=ctx.rank), "gloo")
    return f"gloo lacks {sorted(ctx.gloo_missing)}"


def _all():
    from coll_checks_misc import MISC_CHECKS
    from coll_checks_move import MOVE_CHECKS
    checks = {
        "allreduce": check_allreduce,
        "allreduce_noncontiguous": check_allreduce_noncontiguous,
        "allreduce_coalesced": check_allreduce_coalesced,
        "reduce": check_reduce,
        "reduce_scatter": check_reduce_scatter,
        "reduce_scatter_base": check_reduce_scatter_base,
    }
    checks.update(MOVE_CHECKS)
    checks.update(MISC_CHECKS)
    return checks


CHECKS = _all()
