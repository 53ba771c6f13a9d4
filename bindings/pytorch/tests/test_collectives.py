"""Every collective of the weft backend against a reference computed here, for every dtype,
at 2 ranks (env:// init) and 3 ranks (tcp:// init), contiguous and not.

Inputs are chosen so that every result is exact in its dtype (floats are multiples of 1/8 of
at most 2 in magnitude, products of powers of two), so results are compared bit for bit
(torch.equal) except AVG, which divides by the rank count: there the tolerance is 1 ulp of the
dtype at the result's magnitude (rtol 2^-10 fp16, 2^-7 bf16, 1e-6 fp32, 1e-15 fp64).
"""
import os
import sys

import torch
import torch.distributed as dist

from harness import launch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32,
          torch.int64, torch.uint8, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
AVG_RTOL = {torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7, torch.float32: 1e-6,
            torch.float64: 1e-15}
SIZES = [0, 1, 7, 1031]
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM"]


def values(rank, dtype, shape, seed, kind="sum"):
    """Rank rank's input: the same on every process that asks (the reference needs all)."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype in FLOATS:
        if kind == "prod":
            pick = torch.tensor([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], dtype=torch.float64)
            v = pick[torch.randint(0, 6, shape, generator=g)]
        else:
            v = torch.randint(-16, 17, shape, generator=g).double() / 8
        return v.to(dtype)
    lo, hi = (0, 41) if dtype == torch.uint8 else (-20, 21)
    if kind == "prod":
        lo, hi = (0, 4) if dtype == torch.uint8 else (-2, 3)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def premul_factor(dtype):
    return 0.5 if dtype in FLOATS else 3.0


def reference(op, inputs, dtype, n):
    """op over the ranks' inputs, computed exactly (float64 / int64), in dtype."""
    if dtype == torch.bool:
        s = torch.stack(inputs)
        return {"SUM": s.any(0), "MAX": s.any(0), "PRODUCT": s.all(0), "MIN": s.all(0)}[op]
    wide = torch.float64 if dtype in FLOATS else torch.int64
    s = torch.stack([t.to(wide) for t in inputs])
    if op == "SUM":
        r = s.sum(0)
    elif op == "PRODUCT":
        r = s.prod(0)
    elif op == "MIN":
        r = s.min(0).values
    elif op == "MAX":
        r = s.max(0).values
    elif op == "AVG":
        r = s.sum(0) / n
    else:
        r = (s * premul_factor(dtype)).sum(0)
    return r.to(dtype)


def torch_op(op, dtype):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(premul_factor(dtype))
    return getattr(dist.ReduceOp, op)


def ops_for(dtype):
    if dtype == torch.bool:
        return ["SUM", "PRODUCT", "MIN", "MAX"]
    if dtype in FLOATS:
        return OPS
    return [o for o in OPS if o != "AVG"]  # weft refuses AVG for integers, as NCCL does


def same(got, want, what, op="SUM"):
    if op == "AVG":
        ok = got.shape == want.shape and torch.allclose(got.double(), want.double(), atol=0,
                                                        rtol=AVG_RTOL[want.dtype])
    else:
        ok = got.dtype == want.dtype and torch.equal(got, want)
    if not ok:
        raise AssertionError(f"{what}: got {got.flatten()[:8].tolist()}... want "
                             f"{want.flatten()[:8].tolist()}...")


def noncontig(t):
    """A non-contiguous tensor equal to t (1-D): every other element of a wider buffer."""
    wide = torch.zeros(t.numel() * 2, dtype=t.dtype)
    v = wide[::2]
    v.copy_(t)
    assert not v.is_contiguous() or t.numel() <= 1
    return v


def check_allreduce(rank, n, seed):
    for dtype in DTYPES:
        for op in ops_for(dtype):
            kind = "prod" if op == "PRODUCT" else "sum"
            for size in SIZES:
                ins = [values(r, dtype, (size,), seed, kind) for r in range(n)]
                want = reference(op, ins, dtype, n)
                t = ins[rank].clone()
                dist.all_reduce(t, op=torch_op(op, dtype))
                same(t, want, f"all_reduce {op} {dtype} x{size}", op)
            seed += 1
        # non-contiguous, 2-D transposed
        ins = [values(r, dtype, (5, 3), seed) for r in range(n)]
        t = ins[rank].clone().t()
        dist.all_reduce(t)
        same(t, reference("SUM", [i.t() for i in ins], dtype, n), f"all_reduce {dtype} .t()")
        t = noncontig(ins[rank].flatten())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        same(t, reference("MAX", [i.flatten() for i in ins], dtype, n), f"all_reduce {dtype} [::2]")
    ins = [values(r, torch.float32, (1 << 20,), seed) for r in range(n)]
    t = ins[rank].clone()
    dist.all_reduce(t)
    same(t, reference("SUM", ins, torch.float32, n), "all_reduce float32 x1M")


def check_allreduce_coalesced(rank, n, seed):
    for dtype in DTYPES:
        shapes = [(3,), (2, 5), (0,), (7,)]
        ins = [[values(r, dtype, s, seed + i) for i, s in enumerate(shapes)] for r in range(n)]
        mine = [t.clone() for t in ins[rank]]
        mine[1] = mine[1].t()  # one non-contiguous
        dist.all_reduce_coalesced(mine)
        for i in range(len(shapes)):
            want = reference("SUM", [ins[r][i] for r in range(n)], dtype, n)
            same(mine[i], want.t() if i == 1 else want, f"all_reduce_coalesced {dtype} #{i}")


def check_broadcast_reduce(rank, n, seed):
    for dtype in DTYPES:
        for root in range(n):
            for size in SIZES:
                ins = [values(r, dtype, (size,), seed) for r in range(n)]
                t = ins[rank].clone()
                dist.broadcast(t, src=root)
                same(t, ins[root], f"broadcast {dtype} x{size} root {root}")
                t = noncontig(ins[rank])
                dist.broadcast(t, src=root)
                same(t, ins[root], f"broadcast {dtype} x{size} [::2] root {root}")
                for op in ("SUM", "MAX"):
                    t = ins[rank].clone()
                    dist.reduce(t, dst=root, op=getattr(dist.ReduceOp, op))
                    if rank == root:
                        same(t, reference(op, ins, dtype, n), f"reduce {op} {dtype} x{size}")
                seed += 1


def check_allgather(rank, n, seed):
    for dtype in DTYPES:
        for size in SIZES:
            ins = [values(r, dtype, (size,), seed) for r in range(n)]
            outs = [torch.empty(size, dtype=dtype) for _ in range(n)]
            dist.all_gather(outs, ins[rank])
            for r in range(n):
                same(outs[r], ins[r], f"all_gather {dtype} x{size} part {r}")
            outs = [noncontig(torch.zeros(size, dtype=dtype)) for _ in range(n)]
            dist.all_gather(outs, noncontig(ins[rank]))
            for r in range(n):
                same(outs[r], ins[r], f"all_gather {dtype} x{size} [::2] part {r}")
            flat = torch.empty(n * size, dtype=dtype)
            dist._all_gather_base(flat, ins[rank])
            same(flat, torch.cat(ins), f"_all_gather_base {dtype} x{size}")
            seed += 1
        shapes = [(2,), (3, 2), (0,)]
        ins = [[values(r, dtype, s, seed + i) for i, s in enumerate(shapes)] for r in range(n)]
        outs = [[torch.empty(s, dtype=dtype) for s in shapes] for _ in range(n)]
        dist.all_gather_coalesced(outs, ins[rank])
        for r in range(n):
            for i in range(len(shapes)):
                same(outs[r][i], ins[r][i], f"all_gather_coalesced {dtype} rank {r} #{i}")


def check_reduce_scatter(rank, n, seed):
    for dtype in DTYPES:
        for op in ops_for(dtype):
            kind = "prod" if op == "PRODUCT" else "sum"
            for size in SIZES:
                ins = [[values(r, dtype, (size,), seed + j, kind) for j in range(n)]
                       for r in range(n)]
                want = reference(op, [ins[r][rank] for r in range(n)], dtype, n)
                out = torch.empty(size, dtype=dtype)
                dist.reduce_scatter(out, ins[rank], op=torch_op(op, dtype))
                same(out, want, f"reduce_scatter {op} {dtype} x{size}", op)
                out = noncontig(torch.zeros(size, dtype=dtype))
                dist._reduce_scatter_base(out, torch.cat(ins[rank]), op=torch_op(op, dtype))
                same(out, want, f"_reduce_scatter_base {op} {dtype} x{size} [::2]", op)
                seed += n


def check_alltoall(rank, n, seed):
    for dtype in DTYPES:
        for size in SIZES:
            # blocks[r][j]: what rank r sends to rank j
            blocks = [[values(r, dtype, (size,), seed + j) for j in range(n)] for r in range(n)]
            out = torch.empty(n * size, dtype=dtype)
            dist.all_to_all_single(out, torch.cat(blocks[rank]))
            same(out, torch.cat([blocks[r][rank] for r in range(n)]),
                 f"all_to_all_single {dtype} x{size}")
            outs = [torch.empty(size, dtype=dtype) for _ in range(n)]
            dist.all_to_all(outs, blocks[rank])
            for r in range(n):
                same(outs[r], blocks[r][rank], f"all_to_all {dtype} x{size} from {r}")
            seed += n
        # uneven: rank r sends (2r + j) % 3 rows of 2 to rank j (some none; what a rank sends
        # to a peer and receives from it differ)
        rows = lambda r, j: (2 * r + j) % 3  # noqa: E731
        blocks = [[values(r, dtype, (rows(r, j), 2), seed + j) for j in range(n)]
                  for r in range(n)]
        out = torch.empty(sum(rows(r, rank) for r in range(n)), 2, dtype=dtype)
        dist.all_to_all_single(out, torch.cat(blocks[rank]),
                               output_split_sizes=[rows(r, rank) for r in range(n)],
                               input_split_sizes=[rows(rank, j) for j in range(n)])
        same(out, torch.cat([blocks[r][rank] for r in range(n)]), f"all_to_all_single uneven {dtype}")
        outs = [torch.empty(rows(r, rank), 2, dtype=dtype) for r in range(n)]
        dist.all_to_all(outs, blocks[rank])
        for r in range(n):
            same(outs[r], blocks[r][rank], f"all_to_all uneven {dtype} from {r}")
        seed += n


def check_gather_scatter(rank, n, seed):
    for dtype in DTYPES:
        for root in range(n):
            for size in (0, 1, 7):
                ins = [values(r, dtype, (size,), seed) for r in range(n)]
                outs = [torch.empty(size, dtype=dtype) for _ in range(n)] if rank == root else None
                dist.gather(ins[rank], gather_list=outs, dst=root)
                if rank == root:
                    for r in range(n):
                        same(outs[r], ins[r], f"gather {dtype} x{size} root {root} part {r}")
                parts = [values(root, dtype, (size,), seed + 1 + j) for j in range(n)]
                out = noncontig(torch.zeros(size, dtype=dtype))
                dist.scatter(out, scatter_list=parts if rank == root else None, src=root)
                same(out, parts[rank], f"scatter {dtype} x{size} root {root}")
                seed += n + 1


def check_send_recv(rank, n, seed):
    # a ring: rank r sends to r+1 and receives from r-1; even ranks send first
    for dtype in DTYPES:
        for size in SIZES:
            dst, src = (rank + 1) % n, (rank - 1) % n
            mine = values(rank, dtype, (size,), seed)
            got = torch.empty(size, dtype=dtype)
            if rank % 2 == 0:
                dist.send(mine, dst)
                dist.recv(got, src)
            else:
                dist.recv(got, src)
                dist.send(mine, dst)
            same(got, values(src, dtype, (size,), seed), f"send/recv {dtype} x{size}")
            seed += 1
    # isend/irecv to every peer at once, waited afterwards
    reqs, got = [], {}
    for p in range(n):
        if p != rank:
            reqs.append(dist.isend(values(rank, torch.int64, (9,), seed + p), p))
            got[p] = torch.empty(9, dtype=torch.int64)
            reqs.append(dist.irecv(got[p], p))
    for q in reqs:
        q.wait()
    for p, t in got.items():
        same(t, values(p, torch.int64, (9,), seed + rank), f"isend/irecv from {p}")


def check_barrier(rank, n, seed):
    # rank 0 enters late and says when in the store; nobody may leave before that
    import time
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        time.sleep(0.3)
        store.set(f"entered{seed}", repr(time.time()))
    dist.barrier()
    left = time.time()
    entered = float(store.get(f"entered{seed}"))
    assert left >= entered, f"barrier: left at {left}, before rank 0 entered at {entered}"


def check_errors(rank, n, seed):
    # a refused call raises RuntimeError with the reason, and the group stays usable
    for bad, what in ((lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)), "dtype"),
                      (lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int32),
                                               op=dist.ReduceOp.BAND), "BAND")):
        try:
            bad()
        except RuntimeError as e:
            assert what in str(e), f"the error does not name {what}: {e}"
        else:
            raise AssertionError(f"a call with a bad {what} did not raise")
    t = torch.ones(4)
    dist.all_reduce(t)
    same(t, torch.full((4,), float(n)), "all_reduce after refused calls")


def check_subgroup(rank, n, seed):
    # a second weft group of the first and last ranks (its own communicator, its own id in
    # its own prefix of the store), used between calls on the default group
    members = [0, n - 1]
    sub = dist.new_group(members, backend="weft")
    ins = [values(r, torch.int64, (33,), seed) for r in range(n)]
    t = ins[rank].clone()
    if rank in members:
        dist.all_reduce(t, group=sub)
        same(t, reference("SUM", [ins[r] for r in members], torch.int64, 2), "subgroup all_reduce")
    t = ins[rank].clone()
    dist.all_reduce(t)
    same(t, reference("SUM", ins, torch.int64, n), "default group after the subgroup")
    if rank in members:
        b = ins[rank].clone()
        dist.broadcast(b, src=n - 1, group=sub)  # src is a global rank
        same(b, ins[n - 1], "subgroup broadcast")
    dist.destroy_process_group(sub)


CHECKS = [check_allreduce, check_allreduce_coalesced, check_broadcast_reduce, check_allgather,
          check_reduce_scatter, check_alltoall, check_gather_scatter, check_send_recv,
          check_barrier, check_errors, check_subgroup]


def run_all(rank, n):
    done = []
    for i, check in enumerate(CHECKS):
        if os.environ.get("WEFT_TORCH_TEST_VERBOSE"):
            print(f"rank {rank}: {check.__name__}", file=sys.stderr, flush=True)
        check(rank, n, 1000 * (i + 1))
        done.append(check.__name__)
    return done


def main():
    for n, init in [(int(a), i) for a, i in zip(sys.argv[1::2], sys.argv[2::2])] or ((2, "env"), (3, "tcp")):
        done = launch(run_all, n, init=init, timeout_s=120)
        print(f"test_collectives: {n} ranks ({init}://): {', '.join(done[0])}: ok", flush=True)


if __name__ == "__main__":
    sys.exit(main())
