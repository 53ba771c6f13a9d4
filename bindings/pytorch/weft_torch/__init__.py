"""weft as a torch.distributed backend.

    import weft_torch                      # registers the backend "weft"
    torch.distributed.init_process_group("weft", init_method="env://", ...)
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND", "version"]

BACKEND = "weft"


def _create(store, rank, size, timeout):
    return _C.create_process_group(store, rank, size, timeout)


def version():
    """weft's WEFT_VERSION_CODE (major * 10000 + minor * 100 + patch)."""
    return _C.version()


# Once per process: importing the module twice (or reloading it) must not register again.
if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, _create)
