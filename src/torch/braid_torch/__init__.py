"""braid as a torch.distributed backend.

Importing this package registers the backend "braid"::

    import torch.distributed as dist
    import braid_torch  # noqa: F401
    dist.init_process_group("braid", init_method="env://")
"""
import torch.distributed as _dist

from . import _C
from ._C import ProcessGroupBraid, braid_version

__all__ = ["ProcessGroupBraid", "braid_version"]


def _create(options, pg_options=None):
    return _C._create(options, pg_options)


if "BRAID" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("braid", _create, extended_api=True)
