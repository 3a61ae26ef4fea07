#!/usr/bin/env python3
"""Drop torch and what only torch needs from a lock written by `uv pip compile --annotation-style line`.

The verl role installs a lock into an env where the pytorch role already
installed torch and its own dependencies (CUDA wheels, sympy, networkx, ...):
the lock must pin what verl needs and leave torch's closure alone. A package
is dropped when it is one of the roots (torch, triton) or a CUDA wheel
(nvidia-*, cuda-*), or when every package it is there "via" is dropped;
repeated until nothing changes. Packages also wanted by something else stay.

    scripts/lock_filter.py < compiled.txt > lock.txt
"""

from __future__ import annotations

import re
import sys
from typing import Dict, List, Sequence, Set

ROOTS = ("torch", "triton")
CUDA_WHEEL = re.compile(r"^(nvidia|cuda)-")
LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==\S+\s*(?:#\s*via\s+(?P<via>.*))?$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_via(via: str) -> List[str]:
    return [normalize(v.strip()) for v in via.split(",") if v.strip()]


def filter_lock(lines: List[str], roots: Sequence = ROOTS) -> List[str]:
    """Return the lines without the roots' exclusive dependency closure."""
    pins: Dict[str, Set[str]] = {}
    for line in lines:
        match = LINE.match(line.strip())
        if match:
            pins[normalize(match["name"])] = set(parse_via(match["via"] or ""))
    dropped = {n for n in pins if n in {normalize(r) for r in roots} or CUDA_WHEEL.match(n)}
    changed = True
    while changed:
        changed = False
        for name, via in pins.items():
            if name not in dropped and via and via <= dropped:
                dropped.add(name)
                changed = True
    out = []
    for line in lines:
        match = LINE.match(line.strip())
        if match and normalize(match["name"]) in dropped:
            continue
        out.append(line)
    return out


def main() -> int:
    sys.stdout.writelines(filter_lock(sys.stdin.readlines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
