"""Inputs, references and comparisons shared by the collective checks (no torch.distributed
state here: the checks get a Ctx)."""
import torch
import torch.distributed as dist

# Every CPU dtype braid reduces (bool as 0/1 bytes for MIN/MAX/PRODUCT; complex as pairs of reals
# for SUM/AVG) and the dtypes that only move (bytes).
REDUCE_DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                 torch.float32, torch.float64]
MOVE_DTYPES = REDUCE_DTYPES + [torch.bool, torch.int16, torch.complex64, torch.complex128]
OPS = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "PRODUCT": dist.ReduceOp.PRODUCT,
       "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX}
# The dtypes Gloo 1.13 implements (GENERATE_ALL_TYPES): the comparisons with Gloo use only these.
GLOO_DTYPES = {torch.float16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32,
               torch.int64}
# 0, 1, primes, a count that does not divide by 2, 3 or 4
COUNTS = [0, 1, 13, 1031]


class Pending(Exception):
    """The call needs a braid API that has not landed yet (the backend says so)."""


class Ctx:
    def __init__(self, rank, world, braid, gloo):
        self.rank, self.world, self.braid, self.gloo = rank, world, braid, gloo
        self.gloo_compared = 0
        self.gloo_missing = set()


def values(dtype, rank, n, salt=0, op="SUM"):
    """Rank- and index-dependent inputs whose reductions are exact in every dtype: integers in
    [-11, 11] (sums of up to 8 ranks fit fp16/bf16 exactly), [0, 22] for uint8, factors from
    {1, -1, 2, -2, 3} for PRODUCT (|product| <= 81 for 4 ranks)."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((rank * 5 + i * 3 + salt) % 3) == 0
    if op == "PRODUCT":
        f = torch.tensor([1, -1, 2, -2, 3], dtype=torch.int64)
        if dtype == torch.uint8:
            f = torch.tensor([1, 2, 1, 3, 1], dtype=torch.int64)
        x = f[(rank + i * 2 + salt) % 5]
    else:
        x = (rank * 31 + i * 7 + salt * 13) % 23 - 11
        if dtype == torch.uint8:
            x = x + 11
    if dtype.is_complex:
        return torch.complex(x.double(), ((x * 3 + rank) % 7).double()).to(dtype)
    return x.to(dtype)


def reference(dtype, world, n, op, salt=0):
    """The reduction of every rank's values(), computed in float64/int64 from the inputs."""
    xs = [values(dtype, r, n, salt, op) for r in range(world)]
    if dtype == torch.bool:
        s = torch.stack(xs)
        return s.all(0) if op in ("MIN", "PRODUCT") else s.any(0)
    wide = torch.complex128 if dtype.is_complex else (
        torch.float64 if dtype.is_floating_point else torch.int64)
    s = torch.stack([x.to(wide) for x in xs])
    if op == "SUM":
        r = s.sum(0)
    elif op == "PRODUCT":
        r = s.prod(0)
    elif op == "MIN":
        r = s.min(0).values
    elif op == "MAX":
        r = s.max(0).values
    elif op == "AVG":
        # float32/64 avg = sum / n (IEEE division); float16/bfloat16 pre-scale (see same());
        # integer avg truncates toward zero
        r = s.sum(0) / world if wide != torch.int64 else torch.div(s.sum(0), world,
                                                                   rounding_mode="trunc")
    return r.to(dtype)


def same(got, want, what, op=None):
    """Exact equality, except AVG in reduced precision: float32/complex64 within 1 ulp (the
    reference rounds from float64, braid from float32); float16/bfloat16 within 4 ulp of the
    result's scale, as braid (like NCCL) scales each input by 1/n, rounds it to the dtype, then
    sums in the dtype (the exact rule is checked by the C suite's avg tests)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{what}: got {got.dtype}{tuple(got.shape)}, "
                             f"want {want.dtype}{tuple(want.shape)}")
    if op == "AVG" and got.dtype in (torch.float16, torch.bfloat16, torch.float32,
                                     torch.complex64):
        tol = {torch.float16: 2 ** -8, torch.bfloat16: 2 ** -5}.get(got.dtype, 2 ** -22)
        wide = torch.complex128 if got.is_complex() else torch.float64
        w = want.to(wide)
        atol = tol * float(w.abs().max()) if got.dtype in (torch.float16, torch.bfloat16) and \
            w.numel() else 0
        ok = torch.allclose(got.to(wide), w, rtol=tol, atol=atol)
    else:
        ok = torch.equal(got, want)
    if not ok:
        bad = (got != want).nonzero()[:5].flatten().tolist()
        raise AssertionError(f"{what}: mismatch at {bad}: got {got.flatten()[:8].tolist()}, "
                             f"want {want.flatten()[:8].tolist()}")


def run(fn, mode):
    """Calls fn(async_op) synchronously or asynchronously (wait on the work); returns the work."""
    if mode == "sync":
        return fn(False)
    w = fn(True)
    if w is None:
        raise AssertionError("async_op=True returned no work")
    w.wait()
    return w


def pending_or_raise(e):
    if "not available yet" in str(e):
        raise Pending(str(e).splitlines()[0]) from e
    raise e


def gloo_try(ctx, key, fn, dtype=None):
    """Runs fn() on Gloo: True if it ran, False where Gloo 1.13 lacks the dtype (not called) or
    the call (it refuses before communicating, on every rank alike)."""
    if dtype is not None and dtype not in GLOO_DTYPES:
        ctx.gloo_missing.add(f"{dtype}")
        return False
    try:
        fn()
        ctx.gloo_compared += 1
        return True
    except RuntimeError as e:
        ctx.gloo_missing.add(f"{key}: {str(e).splitlines()[0][:80]}")
        return False
