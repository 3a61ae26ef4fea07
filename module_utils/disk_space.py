"""Free-space arithmetic for the preflight check (standard library only).

Requirements name a path that may not exist yet; the nearest existing parent
decides the filesystem. Requirements on one filesystem add up, because they
all land there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class Requirement:
    what: str
    path: str
    bytes: int
    skip_if_exists: Optional[str] = None


@dataclass
class Filesystem:
    device: int
    probe: str
    free_bytes: int
    needed_bytes: int = 0
    items: List[Requirement] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.free_bytes >= self.needed_bytes

    def describe(self) -> str:
        parts = "; ".join(f"{r.what} ({human_size(r.bytes)}) at {r.path}" for r in self.items)
        return (
            f"the filesystem holding {self.probe} has {human_size(self.free_bytes)} free"
            f" but needs {human_size(self.needed_bytes)}: {parts}"
        )


def human_size(n: int) -> str:
    """Bytes for people: GiB from 1 GiB up, MiB below ("300.0 MiB", not "0.3 GiB"), bytes below 1 MiB."""
    if round(n / MIB, 1) >= 1024:  # 1023.96 MiB and up read as 1.0 GiB
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n} bytes"


def existing_parent(path: str, exists: Callable[[str], bool] = os.path.exists) -> str:
    """The path itself or its nearest existing parent ("/" at worst)."""
    current = os.path.abspath(path)
    while not exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def plan(
    requirements: Iterable[Requirement],
    exists: Callable[[str], bool] = os.path.exists,
    device_of: Callable[[str], int] = lambda p: os.stat(p).st_dev,
    free_of: Callable[[str], int] = lambda p: _statvfs_free(p),
) -> List[Filesystem]:
    """Group requirements by filesystem and add them up."""
    by_device: dict[int, Filesystem] = {}
    for req in requirements:
        if req.bytes < 0:
            raise ValueError(f"negative size for {req.what}: {req.bytes}")
        if req.skip_if_exists and exists(req.skip_if_exists):
            continue
        probe = existing_parent(req.path, exists)
        dev = device_of(probe)
        fs = by_device.get(dev)
        if fs is None:
            fs = by_device[dev] = Filesystem(device=dev, probe=probe, free_bytes=free_of(probe))
        fs.needed_bytes += req.bytes
        fs.items.append(req)
    return list(by_device.values())


def shortfall_message(filesystems: Iterable[Filesystem]) -> Optional[str]:
    """A message naming every filesystem that is too small, or None."""
    short = [fs.describe() for fs in filesystems if not fs.ok]
    if not short:
        return None
    return (
        "Not enough free disk space: "
        + " | ".join(short)
        + ". Free some space, or point artifact_cache_dir / cuda_toolkit_path at a larger disk."
    )


def _statvfs_free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
