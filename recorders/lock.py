"""An exclusive claim on a run directory while one Recorder writes it.

Two recorders on one folder (two ranks of a job started together, a notebook cell run twice)
would interleave their segments and lose a run. The first to enter creates
``RUN_DIR/.recorder.lock`` with ``O_CREAT | O_EXCL`` (atomic on local and NFSv3+ file systems),
holding its pid and host; the second is refused with a :class:`RunDirectoryError` naming them.
The lock is removed when the block exits (or on SIGTERM).

A lock left behind by a process that died without exiting the block (SIGKILL, a power loss) is
*stale* and taken over when it names this host and a pid that is no longer alive (or when it is
unreadable and older than a minute: a writer dies between creating and filling it). A lock naming
another host, or a live pid, is never taken over: the recorder cannot tell whether that run is
still going. Remove the file by hand once you know it is over (a reused pid can look alive).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path

from .errors import RunDirectoryError

__all__ = ["LOCK_NAME", "RunLock"]

LOCK_NAME = ".recorder.lock"
_UNREADABLE_STALE_SECONDS = 60.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or not a pid we can ask about: assume it runs
    return True


def _holder(path: Path) -> dict | None:
    """The lock's content, or None when it cannot be read as one."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(holder, dict) and isinstance(holder.get("pid"), int) \
        and isinstance(holder.get("host"), str)
    return holder if ok else None


def _stale(path: Path, holder: dict | None, host: str) -> bool:
    if holder is None:
        try:
            return time.time() - path.stat().st_mtime > _UNREADABLE_STALE_SECONDS
        except OSError:
            return True  # gone meanwhile: try again
    return holder["host"] == host and not _alive(holder["pid"])


class RunLock:
    """The lock file of one run directory, held by this process until :meth:`release`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def acquire(cls, run_dir: Path) -> "RunLock":
        path = run_dir / LOCK_NAME
        host = socket.gethostname()
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = _holder(path)
                if _stale(path, holder, host):
                    cls._take_over(path, holder)
                    continue
                who = (f"process {holder['pid']} on {holder['host']}" if holder
                       else "a process that has not finished writing the lock")
                raise RunDirectoryError(
                    f"run directory {run_dir} is in use by {who}: another Recorder is writing "
                    f"it (lock file {path}; remove it if that run is over)") from None
            except OSError as exc:
                raise RunDirectoryError(f"cannot lock run directory {run_dir}: {exc}") from exc
            with os.fdopen(fd, "w") as f:
                json.dump({"pid": os.getpid(), "host": host, "since": time.time()}, f)
            return cls(path)
        raise RunDirectoryError(f"cannot lock run directory {run_dir}: its lock file {path} "
                                "keeps changing")

    @staticmethod
    def _take_over(path: Path, holder: dict | None) -> None:
        """Move a stale lock aside; put it back if another process replaced it meanwhile."""
        aside = path.with_name(f"{LOCK_NAME}.{uuid.uuid4().hex}.stale")
        try:
            os.rename(path, aside)
        except OSError:
            return  # another process moved it first
        if _holder(aside) != holder:  # a live lock created after we read the stale one
            try:
                os.link(aside, path)  # never replaces a file that is there now
            except OSError:
                pass
        aside.unlink(missing_ok=True)

    def release(self) -> None:
        try:
            if (_holder(self.path) or {}).get("pid") == os.getpid():
                self.path.unlink()
        except OSError:
            pass  # removed by hand, or the folder went away: nothing is held any more
