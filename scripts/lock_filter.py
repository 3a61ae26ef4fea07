#!/usr/bin/env python3
"""Drop torch and what only torch needs from a lock written by `uv pip compile` (with or without hashes).

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
from typing import Dict, List, Optional, Sequence, Set, Tuple

ROOTS = ("torch", "triton")
CUDA_WHEEL = re.compile(r"^(nvidia|cuda)-")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==\S+")
VIA = re.compile(r"#\s*via\s+(?P<via>.*)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_via(via: str) -> List[str]:
    return [normalize(v.strip()) for v in via.split(",") if v.strip()]


def entries(lines: List[str]) -> List[List[str]]:
    """Group lines into entries: a pin and its indented continuation lines
    (`--hash=...`, `# via ...`, as `--generate-hashes` writes them); any other
    line is an entry of its own."""
    out: List[List[str]] = []
    for line in lines:
        if out and line[:1] in (" ", "\t") and PIN.match(out[-1][0]):
            out[-1].append(line)
        else:
            out.append([line])
    return out


def pin_of(entry: List[str]) -> Optional[Tuple[str, Set[str]]]:
    match = PIN.match(entry[0])
    if not match:
        return None
    via: Set[str] = set()
    for line in entry:
        found = VIA.search(line)
        if found:
            via |= set(parse_via(found["via"]))
    return normalize(match["name"]), via


def filter_lock(lines: List[str], roots: Sequence = ROOTS) -> List[str]:
    """Return the lines without the roots' exclusive dependency closure."""
    groups = entries(lines)
    pins: Dict[str, Set[str]] = {}
    for entry in groups:
        pin = pin_of(entry)
        if pin:
            pins[pin[0]] = pin[1]
    dropped = {n for n in pins if n in {normalize(r) for r in roots} or CUDA_WHEEL.match(n)}
    changed = True
    while changed:
        changed = False
        for name, via in pins.items():
            if name not in dropped and via and via <= dropped:
                dropped.add(name)
                changed = True
    out: List[str] = []
    for entry in groups:
        pin = pin_of(entry)
        if pin and pin[0] in dropped:
            continue
        out.extend(entry)
    return out


def main() -> int:
    sys.stdout.writelines(filter_lock(sys.stdin.readlines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
