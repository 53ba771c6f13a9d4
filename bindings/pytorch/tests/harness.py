"""Starts N ranks of a test function in processes of their own and collects what each returns.

launch(fn, n, ...) runs fn(rank, n, *args) in n spawned processes, each after
init_process_group (backend, init method env://, tcp:// or file://), and returns the list of
their return values. A rank that raises fails the launch with its traceback; a rank that
neither returns nor dies within timeout_s is killed and fails it too.
"""
import datetime
import multiprocessing as mp
import os
import queue
import socket
import tempfile
import time
import traceback

import torch.distributed as dist


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, n, backend, init, timeout_pg, args, results):
    try:
        import weft_torch  # noqa: F401  registers "weft" in this process
        kind, where = init
        kw = dict(rank=rank, world_size=n, timeout=datetime.timedelta(seconds=timeout_pg))
        if kind == "env":
            os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(where)
            dist.init_process_group(backend, init_method="env://", **kw)
        elif kind == "tcp":
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{where}", **kw)
        else:
            dist.init_process_group(backend, init_method=f"file://{where}", **kw)
        value = fn(rank, n, *args)
        results.put((rank, "ok", value))
        dist.destroy_process_group()
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


def launch(fn, n, *args, backend="weft", init="tcp", timeout_s=90, timeout_pg=60,
           may_die=()):
    """fn's return value per rank (None for the ranks in may_die that died)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    tmp = None
    if init == "file":
        tmp = tempfile.NamedTemporaryFile(prefix="weft-torch-init-", delete=False)
        tmp.close()
        os.unlink(tmp.name)  # torch's FileStore creates it
        where = tmp.name
    else:
        where = free_port()
    procs = [ctx.Process(target=_child, args=(fn, r, n, backend, (init, where), timeout_pg, args,
                                              results))
             for r in range(n)]
    for p in procs:
        p.start()
    got, deadline = {}, time.monotonic() + timeout_s
    try:
        while len(got) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, status, value = results.get(timeout=min(left, 0.5))
                got[rank] = (status, value)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in got and p.exitcode is not None]
                if dead and all(r in may_die for r in dead) and len(got) + len(dead) == n:
                    break
                bad = [r for r in dead if r not in may_die]
                if bad:
                    # its result may still be in the queue: give it a moment
                    time.sleep(0.5)
                    while not results.empty():
                        rank, status, value = results.get()
                        got[rank] = (status, value)
                    bad = [r for r in bad if r not in got]
                    if bad:
                        raise AssertionError(f"rank {bad[0]} died (exit {procs[bad[0]].exitcode})"
                                             " without a result")
    finally:
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if tmp is not None and os.path.exists(where):
            os.unlink(where)
    missing = [r for r in range(n) if r not in got and r not in may_die]
    if missing:
        raise AssertionError(f"ranks {missing} gave no result within {timeout_s} s")
    errors = [f"rank {r} failed:\n{got[r][1]}" for r in sorted(got) if got[r][0] == "error"]
    if errors:
        raise AssertionError("\n".join(errors))
    return [got[r][1] if r in got else None for r in range(n)]
