"""Which process of a distributed job this is, and where it records.

Under ``torch.distributed`` every rank passes the same run directory; the recorder writes rank
*r* into its own sub-directory ``rank-{r:05d}`` of it, so ranks never share a file and the
analyzer finds them all below the one directory (docs/run-format.md, "Multi-rank runs").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch.distributed as dist

__all__ = ["RANK_DIR_FORMAT", "distributed_info", "rank_dir"]

RANK_DIR_FORMAT = "rank-{:05d}"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def distributed_info() -> dict[str, Any] | None:
    """Rank, world size, local rank and backend of this process; None for a single process.

    The initialised process group is asked first; before ``init_process_group`` the variables
    that torchrun (and torch.distributed.launch) set for every worker say the same.
    """
    backend = None
    if dist.is_available() and dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
        backend = str(dist.get_backend())
    else:
        rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None or world_size is None or world_size <= 1:
        return None
    return {"rank": rank, "world_size": world_size, "local_rank": _env_int("LOCAL_RANK"),
            "backend": backend}


def rank_dir(run_dir: Path, info: dict[str, Any] | None) -> Path:
    """The directory this process records into: its rank's sub-directory in a distributed job."""
    return run_dir if info is None else run_dir / RANK_DIR_FORMAT.format(info["rank"])
