#!/usr/bin/python3
"""dist.all_reduce latency and bus bandwidth, weft against gloo, and the DDP step time of the
example on both, in the same processes (interleaved: for each size, rounds alternate between
the backends; medians over rounds).

    flock /tmp/weft-bench.lock env PYTHONPATH=build/pytorch /usr/bin/python3 \\
        bindings/pytorch/bench/allreduce_bench.py --nprocs 2 4

Prints a Markdown table per process count: bytes, time per call (us) on each backend, busbw
(GB/s, nccl-tests' definition: bytes / time x 2(n-1)/n) on each, and weft's speedup.
"""
import argparse
import datetime
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import weft_torch  # noqa: E402,F401
from compare_gloo import compare  # noqa: E402

SIZES = [8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def iters_for(nbytes):
    """Calls per timed round: about the same total bytes per round, at least 3."""
    return max(5, min(300, (32 << 20) // max(nbytes, 1)))


def time_round(t, group, iters):
    dist.barrier()  # gloo, default group: both backends start together
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - t0) / iters


def run(rank, n, port, rounds, ddp_steps, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=300))
    weft = dist.new_group(backend="weft")
    rows = []
    for nbytes in SIZES:
        t = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        iters = iters_for(nbytes)
        for g in (None, weft):  # warm-up: connections, buffers
            time_round(t, g, min(iters, 5))
        times = {"gloo": [], "weft": []}
        for r in range(rounds):
            order = (("gloo", None), ("weft", weft)) if r % 2 == 0 else (("weft", weft), ("gloo", None))
            for name, g in order:
                times[name].append(time_round(t, g, iters))
        rows.append((nbytes, statistics.median(times["gloo"]), statistics.median(times["weft"])))
    got = compare(rank, n, ddp_steps, rounds=3)
    if rank == 0:
        factor = 2 * (n - 1) / n
        lines = [f"{n} processes, {rounds} interleaved rounds per size, medians:", "",
                 "| bytes | gloo us | weft us | gloo busbw GB/s | weft busbw GB/s | weft speedup |",
                 "|---:|---:|---:|---:|---:|---:|"]
        for nbytes, tg, tw in rows:
            bg, bw = nbytes / tg * factor / 1e9, nbytes / tw * factor / 1e9
            lines.append(f"| {nbytes} | {tg * 1e6:.1f} | {tw * 1e6:.1f} | {bg:.3f} | {bw:.3f} | "
                         f"{tg / tw:.1f}x |")
        sg = statistics.median(got["gloo"][2]) * 1e3
        sw = statistics.median(got["weft"][2]) * 1e3
        lines += ["", f"DDP step (examples/ddp_mlp.py, {ddp_steps} steps x 3 rounds each, "
                  f"alternating): gloo {sg:.2f} ms, weft {sw:.2f} ms ({sg / sw:.2f}x)", ""]
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ddp-steps", type=int, default=50)
    args = ap.parse_args()
    for n in args.nprocs:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = f"/tmp/weft-torch-bench-{os.getpid()}-{n}.md"
        mp.spawn(run, args=(n, port, args.rounds, args.ddp_steps, out), nprocs=n)
        with open(out) as f:
            print(f.read(), flush=True)
        os.unlink(out)


if __name__ == "__main__":
    main()
