"""Writes that survive a kill: each file replaced through a temporary file beside it, the
stray temporary files found and removed, and the test hook that kills the process at a
chosen write."""

from __future__ import annotations

import hashlib
import os
import signal
import tempfile
from typing import List, Optional

from .tree import root_rel

TEMP_PREFIX = ".verl_patch."  # temporary files beside their target; stray ones are removed

# Test hook, never set in production: with VERL_PATCH_FAULT_AT_WRITE=N the process
# SIGKILLs itself at its Nth write point (right before each file-system write, and
# once after the last one), so tests can kill a real run at every write in turn.
FAULT_ENV = "VERL_PATCH_FAULT_AT_WRITE"

_write_points_seen = 0


def write_point() -> None:
    """Called right before every file-system write and once after the last one: the test hook."""
    global _write_points_seen
    target = os.environ.get(FAULT_ENV, "")
    if not target.isdigit():
        return
    _write_points_seen += 1
    if _write_points_seen == int(target):
        os.kill(os.getpid(), signal.SIGKILL)


def sha256_of(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_bytes(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def fsync_dir(directory: str) -> None:
    """Make renames and unlinks in ``directory`` durable (where the platform can)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically: it holds the old or the new bytes, never a mix."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        write_point()
        os.makedirs(directory, exist_ok=True)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
    write_point()
    handle, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        write_point()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _leftover_paths(package_dir: str) -> List[str]:
    found: List[str] = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.startswith(TEMP_PREFIX) and not os.path.islink(path):
                found.append(path)
    return found


def find_leftovers(package_dir: str) -> List[str]:
    """Stray temporary files (``.verl_patch.*``) anywhere in the package."""
    return [root_rel(package_dir, path) for path in _leftover_paths(package_dir)]


def remove_leftovers(package_dir: str) -> List[str]:
    removed: List[str] = []
    for path in _leftover_paths(package_dir):
        write_point()
        os.unlink(path)
        removed.append(root_rel(package_dir, path))
    return removed
