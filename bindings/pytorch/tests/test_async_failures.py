"""Async semantics and failures of the weft backend.

- async_op=True returns at once while the peer has not joined; wait() and get_future()
  complete when the data is there; queued collectives run in the order they were called.
- A rank killed (SIGKILL) makes the next collective raise RuntimeError on every survivor
  within seconds, naming the dead rank; later calls raise too instead of hanging.
- A rank that never joins makes the collective raise at the process group's timeout.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from harness import launch

DEATH_LIMIT_S = 5.0  # survivors must raise within this long after the kill


def async_ops(rank, n):
    if rank == 1:
        time.sleep(1.0)  # rank 0's call must not wait for this
    t = torch.full((1000,), float(rank + 1))
    t0 = time.monotonic()
    w = dist.all_reduce(t, async_op=True)
    returned = time.monotonic() - t0
    if rank == 0:
        assert returned < 0.5, f"async all_reduce took {returned:.3f} s to return"
        assert not w.is_completed(), "completed before the peer joined"
    fut = w.get_future().then(lambda f: f.value()[0] * 2)
    w.wait()
    assert w.is_completed()
    want = float(sum(range(1, n + 1)))
    assert torch.equal(t, torch.full((1000,), want)), "async all_reduce result"
    assert torch.equal(fut.wait(), torch.full((1000,), 2 * want)), "get_future().then()"
    # queued in order: allreduce, then broadcast of the same tensor from rank 1, then another
    # allreduce; waited in reverse order
    x = torch.full((17,), float(rank))
    works = [dist.all_reduce(x, async_op=True), dist.broadcast(x, 1, async_op=True),
             dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True)]
    for w in reversed(works):
        w.wait()
    assert torch.equal(x, torch.full((17,), float(sum(range(n))))), "order of queued ops"
    return returned


def killed_rank(rank, n):
    t = torch.ones(64)
    dist.all_reduce(t)
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)  # the kill has happened
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        took, msg = time.monotonic() - t0, str(e)
    else:
        raise AssertionError("all_reduce with a dead peer did not raise")
    assert took < DEATH_LIMIT_S, f"raised after {took:.2f} s"
    assert f"rank {n - 1}" in msg, f"the error does not name the dead rank: {msg}"
    t1 = time.monotonic()
    try:
        dist.broadcast(t, 0)
    except RuntimeError as e:
        assert "failed earlier" in str(e), f"second error: {e}"
    else:
        raise AssertionError("a collective after the failure did not raise")
    assert time.monotonic() - t1 < 1.0
    return took, msg


def stuck_rank(rank, n):
    if rank == 1:
        time.sleep(4.0)  # never joins; the group's timeout is 2 s
        return None
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(8))
    except RuntimeError as e:
        took, msg = time.monotonic() - t0, str(e)
    else:
        raise AssertionError("all_reduce without the peer did not raise")
    assert 1.5 <= took <= 4.5, f"raised after {took:.2f} s, the timeout is 2 s"
    assert "timed out" in msg or "timeout" in msg.lower(), f"not a timeout: {msg}"
    return took, msg


def main():
    r = launch(async_ops, 2, init="tcp", timeout_s=60)
    print(f"test_async: async all_reduce returned in {r[0] * 1e3:.2f} ms on rank 0: ok")
    r = launch(killed_rank, 3, init="tcp", timeout_s=60, may_die=(2,))
    for rank in (0, 1):
        print(f"test_failures: rank {rank} raised {r[rank][0]:.3f} s into its call (made 0.5 s "
              f"after the kill): {r[rank][1]}")
    r = launch(stuck_rank, 2, init="tcp", timeout_s=60, timeout_pg=2)
    print(f"test_failures: timeout 2 s: raised after {r[0][0]:.2f} s: {r[0][1]}")


if __name__ == "__main__":
    sys.exit(main())
