#!/usr/bin/env python3
"""Benchmark verl-pascal-prefetch's mirror: bytes from outside for a fleet, resume versus restart.

Prints numbers, asserts nothing. Everything is local: an "upstream" HTTP
server (tests/prefetch_server.py) stands in for NVIDIA, GitHub and PyPI and
counts the bytes it serves.

1. Fleet of N hosts (default 3), artifacts of SIZE, SIZE/4 and SIZE/8 bytes:
   - without a mirror every host downloads every artifact from upstream;
   - with a mirror, verl-pascal-prefetch fills it once from upstream, then every host
     downloads from a second server that serves the mirror directory.
2. Filling the mirror with one SIZE file served at RATE bytes/s, interrupted
   at 50%: resumed (Range) versus restarted from zero (a server that ignores
   Range, which is what a tool without resume costs too).

Run: .venv/bin/python -m bench.prefetch_bench [--size-mb 200] [--rate-mb 20] [--hosts 3]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path
from typing import Dict, List

import requests

REPO_ROOT = Path(__file__).resolve().parent.parent

from tests.prefetch_server import Upstream
from verl_pascal.prefetch import cli

MB = 1000 * 1000


def write_lock(path: Path, base_url: str, files: Dict[str, bytes]) -> Path:
    lines = ["---"]
    for name, data in files.items():
        key = name.split(".")[0]
        lines += [f"{key}_url: {base_url}/{name}", f"{key}_sha256: {hashlib.sha256(data).hexdigest()}",
                  f"{key}_size: {len(data)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def prefetch(lock: Path, mirror: Path, *extra: str) -> float:
    """Run verl-pascal-prefetch's main quietly; seconds it took."""
    start = time.monotonic()
    with redirect_stdout(io.StringIO()):
        code = cli.main(["--lock", str(lock), "--mirror", str(mirror), "--no-progress", "--backoff", "0.05", *extra])
    if code != 0:
        raise SystemExit(f"prefetch failed with exit {code}")
    return time.monotonic() - start


def host_download(base_url: str, names: List[str]) -> int:
    """One host fetching every artifact (like get_url): bytes received."""
    got = 0
    for name in names:
        with requests.get(f"{base_url}/{name}", stream=True, timeout=60) as response:
            response.raise_for_status()
            for chunk in response.iter_content(1 << 20):
                got += len(chunk)
    return got


def fleet(files: Dict[str, bytes], hosts: int, work: Path) -> None:
    names = sorted(files)
    total = sum(len(d) for d in files.values())
    with Upstream(files) as upstream:
        with ThreadPoolExecutor(hosts) as pool:
            list(pool.map(lambda _: host_download(upstream.url, names), range(hosts)))
        without = upstream.bytes_served
    with Upstream(files) as upstream:
        mirror = work / "fleet-mirror"
        fill = prefetch(write_lock(work / "fleet.yml", upstream.url, files), mirror)
        with_mirror = upstream.bytes_served
    served = {n: (mirror / n).read_bytes() for n in names}
    with Upstream(served) as local:
        with ThreadPoolExecutor(hosts) as pool:
            list(pool.map(lambda _: host_download(local.url, names), range(hosts)))
        from_mirror = local.bytes_served
    print(f"fleet of {hosts} hosts, {len(names)} artifacts, {total / MB:.1f} MB per host")
    print(f"  without mirror: upstream served {without / MB:9.1f} MB ({without / total:.2f} x the artifacts)")
    print(f"  with mirror:    upstream served {with_mirror / MB:9.1f} MB ({with_mirror / total:.2f} x); "
          f"mirror served the hosts {from_mirror / MB:.1f} MB on the LAN; prefetch took {fill:.1f} s")
    print(f"  saved from outside: {(without - with_mirror) / MB:.1f} MB ({1 - with_mirror / without:.0%})")


def interrupted_fill(data: bytes, rate: float, resume: bool, work: Path) -> None:
    name = "big.bin"
    modes = {name: {"drop": True, "drop_at": len(data) // 2, "rate": rate, "norange": not resume}}
    with Upstream({name: data}, modes) as upstream:
        mirror = work / ("resume" if resume else "restart")
        seconds = prefetch(write_lock(work / f"{mirror.name}.yml", upstream.url, {name: data}), mirror)
        served = upstream.bytes_served
    ok = (mirror / name).stat().st_size == len(data)
    label = "resumed (Range)        " if resume else "restarted from zero    "
    print(f"  {label}: {seconds:6.1f} s, upstream served {served / MB:7.1f} MB "
          f"({served / len(data):.2f} x the file){'' if ok else '  FILE INCOMPLETE'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=200, help="largest artifact, MB (default 200)")
    parser.add_argument("--rate-mb", type=float, default=20, help="bandwidth cap for part 2, MB/s (default 20)")
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    size = int(args.size_mb * MB)
    data = os.urandom(size)
    files = {"runfile.run": data, "archive.tar.xz": data[: size // 4], "installer.sh": data[size // 2: size // 2 + size // 8]}
    with tempfile.TemporaryDirectory(prefix="prefetch-bench-") as tmp:
        work = Path(tmp)
        fleet(files, args.hosts, work)
        print(f"filling a mirror with one {size / MB:.0f} MB file at {args.rate_mb:g} MB/s, interrupted at 50%:")
        interrupted_fill(data, args.rate_mb * MB, True, work)
        interrupted_fill(data, args.rate_mb * MB, False, work)


if __name__ == "__main__":
    main()
