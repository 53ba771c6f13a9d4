#!/usr/bin/python3
"""DDP training of an MLP on seeded synthetic data, on weft (or any torch.distributed backend).

    PYTHONPATH=build/pytorch /usr/bin/python3 bindings/pytorch/examples/ddp_mlp.py \\
        --nprocs 4 --steps 100 [--backend weft|gloo]

Starts --nprocs processes (torch.multiprocessing.spawn) that each train a copy of the model on
their own shard of the data (seeded by rank, so every run is the same) and print the loss every
--log-every steps and the median step time. Under mpirun, pass --mpi instead: the processes
are mpirun's and their rank and size come from OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE
(MASTER_ADDR / MASTER_PORT give the rendezvous, default 127.0.0.1:29500):

    mpirun -np 4 env PYTHONPATH=build/pytorch /usr/bin/python3 \\
        bindings/pytorch/examples/ddp_mlp.py --mpi
"""
import argparse
import datetime
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import weft_torch  # noqa: F401  registers the backend "weft"

IN, HIDDEN, OUT, BATCH = 64, 256, 10, 32


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT))


def batches(rank, steps, seed):
    """This rank's data: a fixed random linear teacher labels random inputs."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(IN, OUT, generator=g)
    g.manual_seed(seed * 7919 + rank + 1)
    for _ in range(steps):
        x = torch.randn(BATCH, IN, generator=g)
        yield x, (x @ teacher).argmax(1)


def train(steps, seed=1, group=None, rank=None):
    """Trains with DDP over group (the default one when None). Returns this rank's per-step
    losses, its final parameters (one flat tensor) and the per-step wall times (s)."""
    rank = dist.get_rank() if rank is None else rank
    model = DDP(make_model(seed), process_group=group)  # broadcasts rank 0's parameters
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses, times = [], []
    for x, y in batches(rank, steps, seed):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here, in buckets
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return losses, params, times


def run(rank, args):
    torch.set_num_threads(1)  # one core per process: the ranks share the machine
    dist.init_process_group(args.backend, init_method=args.init, rank=rank,
                            world_size=args.nprocs, timeout=datetime.timedelta(seconds=60))
    losses, params, times = train(args.steps, args.seed)
    for s in range(0, args.steps, args.log_every):
        if rank == 0:
            print(f"step {s:4d}  loss {losses[s]:.4f}")
    # every rank holds the same parameters after each step
    ref = params.clone()
    dist.broadcast(ref, 0)
    assert torch.equal(ref, params), f"rank {rank}: parameters differ from rank 0's"
    if rank == 0:
        print(f"{args.backend}, {args.nprocs} processes: final loss {losses[-1]:.4f}, "
              f"median step {statistics.median(times) * 1e3:.3f} ms")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="weft")
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--mpi", action="store_true", help="processes started by mpirun")
    args = ap.parse_args()
    if args.mpi:
        args.nprocs = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        args.init = "env://"
        run(int(os.environ["OMPI_COMM_WORLD_RANK"]), args)
    else:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        mp.spawn(run, args=(args,), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
