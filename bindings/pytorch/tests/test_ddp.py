"""DDP on weft against DDP on gloo: the example's MLP (examples/ddp_mlp.py), 100 steps, in the
same processes (examples/compare_gloo.py), every rank comparing its own per-step losses and
final parameters.

2 ranks (file:// init): bit-identical, since a two-term sum is the same in any order.
3 and 4 ranks (env://, tcp://): gloo adds in an order of its own, so within a tolerance: every
per-step loss within 1e-5 of gloo's (relative), every final parameter within 1e-5 of the
largest parameter (measured: 0 at 3 ranks, 4.4e-7 and 1.6e-7 at 4).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from compare_gloo import compare, differences  # noqa: E402
from harness import launch  # noqa: E402

STEPS = 100
TOLERANCE = 1e-5


def one_rank(rank, n):
    torch.set_num_threads(1)
    return differences(compare(rank, n, STEPS))


def main():
    for n, init in ((2, "file"), (3, "env"), (4, "tcp")):
        for rank, (same_loss, same_params, loss_rel, param_rel) in enumerate(
                launch(one_rank, n, backend="gloo", init=init, timeout_s=150)):
            where = f"{n} ranks, rank {rank}"
            if n == 2:
                assert same_loss, f"{where}: losses differ from gloo's (by {loss_rel:.3g})"
                assert same_params, f"{where}: parameters differ from gloo's (by {param_rel:.3g})"
            else:
                assert loss_rel <= TOLERANCE, f"{where}: loss differs from gloo's by {loss_rel:.3g}"
                assert param_rel <= TOLERANCE, f"{where}: a parameter differs by {param_rel:.3g}"
        print(f"test_ddp: {n} ranks ({init}://), {STEPS} steps: "
              f"{'bit-identical to gloo' if n == 2 else f'within {TOLERANCE} of gloo'}: ok "
              f"(largest loss difference {loss_rel:.3g}, parameter {param_rel:.3g} on the last rank)",
              flush=True)


if __name__ == "__main__":
    main()
