"""Mirror a directory tree into another by links: ``cp -lP`` semantics.

Regular files become hard links (one copy on disk), symbolic links are
re-created with the same target, directories are created. Used to put cuDNN's
unpacked files into the CUDA directory so that removing them again is exact:
only entries that still point at the source are removed. Standard library only.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

PRESENT = "present"
ABSENT = "absent"


class LinkTreeError(Exception):
    """The trees cannot be linked as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Action:
    """One change: kind is mkdir, hardlink, symlink or remove."""

    kind: str
    path: str
    source: str = ""
    replaces: bool = False

    def describe(self) -> str:
        verb = {"mkdir": "create directory", "hardlink": "hard-link", "symlink": "symlink", "remove": "remove"}[self.kind]
        extra = f" -> {self.source}" if self.source else ""
        return f"{verb} {self.path}{extra}{' (replacing)' if self.replaces else ''}"


def walk(src_root: str, dest_root: str, mapping: Mapping[str, str]) -> Iterator[Tuple[str, str, os.stat_result]]:
    """Yield (source, destination, lstat of source) for every entry below the
    mapped directories, parents first. ``mapping`` maps a directory of the
    source to one of the destination (cuDNN's ``lib`` goes to CUDA's ``lib64``)."""
    for sub, dest_sub in mapping.items():
        top = os.path.join(src_root, sub)
        if not os.path.isdir(top) or os.path.islink(top):
            raise LinkTreeError(f"{top} is missing or not a directory: is the archive unpacked completely?")
        dest_top = os.path.join(dest_root, dest_sub)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                full = os.path.join(dirpath, name)
                yield full, os.path.join(dest_top, os.path.relpath(full, top)), os.lstat(full)


def _lstat(path: str) -> "os.stat_result | None":
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _device_of_nearest(path: str) -> int:
    """Filesystem (st_dev) a new entry at path lands on: that of the nearest
    existing parent, symlinks followed (CUDA's lib64 may point elsewhere)."""
    current = path
    while not os.path.exists(current):
        current = os.path.dirname(current)
    return os.stat(current).st_dev


class _SameFilesystem:
    """Refuses a hard link into a directory on another filesystem than its
    source; remembers the verdict per directory."""

    def __init__(self) -> None:
        self._devices: Dict[str, int] = {}

    def check(self, src: str, src_dev: int, dest: str) -> None:
        directory = os.path.dirname(dest)
        if directory not in self._devices:
            self._devices[directory] = _device_of_nearest(directory)
        if self._devices[directory] != src_dev:
            raise LinkTreeError(
                f"{directory} (which is {os.path.realpath(directory)}) and {os.path.dirname(src)} are on "
                "different filesystems, so hard links are impossible and nothing was linked: unpack onto "
                "the filesystem of the CUDA directory (cudnn_install_root), or make the destination a "
                "directory on the source's filesystem."
            )


def _top_dirs(dest_root: str, mapping: Mapping[str, str]) -> List[Action]:
    """Destination directories to create; an existing one may be a symlink to a
    directory (CUDA's include and lib64 are)."""
    actions: List[Action] = []
    for dest_sub in mapping.values():
        path = os.path.join(dest_root, dest_sub)
        if os.path.isdir(path):
            continue
        if os.path.lexists(path):
            raise LinkTreeError(f"{path} exists and is not a directory; move it away and run again.")
        actions.append(Action("mkdir", path))
    return actions


def plan_present(src_root: str, dest_root: str, mapping: Mapping[str, str]) -> List[Action]:
    """What must change so dest_root holds links to everything below the mapped directories.

    Every hard link's destination directory is checked to be on its source's
    filesystem (after symlinks) while planning, so a refused plan changes nothing."""
    same_fs = _SameFilesystem()
    actions = _top_dirs(dest_root, mapping)
    for src, dest, st in walk(src_root, dest_root, mapping):
        have = _lstat(dest)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(src)
            if have is not None and stat.S_ISLNK(have.st_mode) and os.readlink(dest) == target:
                continue
            _refuse_directory(dest, have)
            actions.append(Action("symlink", dest, target, replaces=have is not None))
        elif stat.S_ISDIR(st.st_mode):
            if have is None:
                actions.append(Action("mkdir", dest))
            elif not stat.S_ISDIR(have.st_mode):
                raise LinkTreeError(f"{dest} exists and is not a directory; move it away and run again.")
        elif stat.S_ISREG(st.st_mode):
            if have is not None and stat.S_ISREG(have.st_mode) and (have.st_dev, have.st_ino) == (st.st_dev, st.st_ino):
                continue
            _refuse_directory(dest, have)
            same_fs.check(src, st.st_dev, dest)
            actions.append(Action("hardlink", dest, src, replaces=have is not None))
    return actions


def plan_absent(src_root: str, dest_root: str, mapping: Mapping[str, str]) -> List[Action]:
    """Remove from dest_root exactly the links that still point at src_root's entries."""
    actions: List[Action] = []
    for src, dest, st in walk(src_root, dest_root, mapping):
        have = _lstat(dest)
        if have is None:
            continue
        if stat.S_ISLNK(st.st_mode):
            if stat.S_ISLNK(have.st_mode) and os.readlink(dest) == os.readlink(src):
                actions.append(Action("remove", dest))
        elif stat.S_ISREG(st.st_mode):
            if stat.S_ISREG(have.st_mode) and (have.st_dev, have.st_ino) == (st.st_dev, st.st_ino):
                actions.append(Action("remove", dest))
    return actions


def _refuse_directory(dest: str, have: "os.stat_result | None") -> None:
    if have is not None and stat.S_ISDIR(have.st_mode):
        raise LinkTreeError(f"{dest} is a directory where a file belongs; move it away and run again.")


def apply(actions: Sequence[Action], done: Optional[List[Action]] = None) -> None:
    """Carry out a plan; each replacement is atomic (link beside, then rename).
    Each finished action is appended to ``done``, so a caller that meets an
    error midway can say what was already changed."""
    for action in actions:
        if action.kind == "mkdir":
            os.mkdir(action.path, 0o755)
        elif action.kind == "remove":
            os.unlink(action.path)
        else:
            tmp = f"{action.path}.linktree-tmp"
            if os.path.lexists(tmp):
                os.unlink(tmp)
            if action.kind == "hardlink":
                os.link(action.source, tmp)
            else:
                os.symlink(action.source, tmp)
            os.replace(tmp, action.path)
        if done is not None:
            done.append(action)


def plan(state: str, src_root: str, dest_root: str, mapping: Mapping[str, str]) -> List[Action]:
    if state == PRESENT:
        return plan_present(src_root, dest_root, mapping)
    if state == ABSENT:
        return plan_absent(src_root, dest_root, mapping)
    raise LinkTreeError(f"unknown state {state!r}: use present or absent")
