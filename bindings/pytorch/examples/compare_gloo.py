#!/usr/bin/python3
"""The DDP loop of ddp_mlp.py on gloo and on weft, in the same processes, compared.

    PYTHONPATH=build/pytorch /usr/bin/python3 bindings/pytorch/examples/compare_gloo.py \\
        --nprocs 2 --steps 100

Each process joins a gloo group (the default one) and a weft group of the same ranks, trains
the same model on the same data once on each (alternating, --rounds times), and rank 0 prints
whether the per-step losses and the final parameters are bit-identical, the largest
differences when they are not, and the median DDP step time on each backend.
"""
import argparse
import datetime
import socket
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import weft_torch  # noqa: F401
from ddp_mlp import train


def compare(rank, n, steps, rounds=1, seed=1):
    """Both backends' runs on this rank: {'gloo': (losses, params, times), 'weft': ...} (times
    of all rounds together) after init_process_group("gloo") made the default group."""
    weft = dist.new_group(backend="weft")
    got = {}
    for _ in range(rounds):
        for name, group in (("gloo", None), ("weft", weft)):
            losses, params, times = train(steps, seed, group=group, rank=rank)
            if name in got:
                times = got[name][2] + times
            got[name] = (losses, params, times)
    return got


def differences(got):
    """(losses bit-identical, params bit-identical, largest loss difference relative to the
    loss, largest parameter difference relative to the largest parameter)."""
    lg, pg, _ = got["gloo"]
    lw, pw, _ = got["weft"]
    loss_rel = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(lg, lw))
    param_rel = ((pg - pw).abs().max() / pg.abs().max()).item()
    return lg == lw, torch.equal(pg, pw), loss_rel, param_rel


def run(rank, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.nprocs, timeout=datetime.timedelta(seconds=60))
    got = compare(rank, args.nprocs, args.steps, args.rounds)
    same_loss, same_params, loss_rel, param_rel = differences(got)
    if rank == 0:
        print(f"{args.nprocs} processes, {args.steps} steps x {args.rounds} rounds:")
        print(f"  losses bit-identical: {same_loss} (largest relative difference {loss_rel:.3g})")
        print(f"  final parameters bit-identical: {same_params} (largest difference "
              f"{param_rel:.3g} of the largest parameter)")
        for name in ("gloo", "weft"):
            print(f"  {name}: final loss {got[name][0][-1]:.4f}, median DDP step "
                  f"{statistics.median(got[name][2]) * 1e3:.3f} ms")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(args, port), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
