#!/usr/bin/env python3
"""The P40-rules guard's own cost per ATen op, on the CPU (no GPU needed).

A guarded run is slower because every op passes through the guard's
TorchDispatchMode; this prints microseconds per op for small ops without and
with the guard (judging "cuda", so nothing on the CPU is refused), which is
the overhead a guarded run pays per op on top of its kernels.

    python3 -m bench.guard_overhead [--ops 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from verl_pascal.p40_rules import guard  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class PassThrough(TorchDispatchMode):
    """The floor: any Python dispatch mode costs this much per op."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def per_op_us(work: Callable[[], object], ops_per_call: int, calls: int,
              mode: Optional[TorchDispatchMode]) -> float:
    if mode is not None:
        mode.__enter__()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            work()
        elapsed = time.perf_counter() - start
    finally:
        if mode is not None:
            mode.__exit__(None, None, None)
    return elapsed / (calls * ops_per_call) * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, default=20000)
    args = p.parse_args()
    x = torch.rand(64, 64)
    cases = {"add (one tensor out)": (lambda: x + 1, 1), "sort (a tuple out)": (lambda: torch.sort(x), 1)}
    print("| op | plain us/op | any dispatch mode us/op | guarded us/op | the guard's own cost us/op |")
    print("|---|---|---|---|---|")
    for name, (work, n) in cases.items():
        timings = []
        for make in (lambda: None, PassThrough, lambda: guard.P40RulesMode(devices=("cuda",))):
            per_op_us(work, n, args.ops // 10, make())  # warm-up: a mode's first ops are slow
            timings.append(min(per_op_us(work, n, args.ops, make()) for _ in range(3)))
        plain, floor, guarded = timings
        print(f"| {name} | {plain:.1f} | {floor:.1f} | {guarded:.1f} | {guarded - floor:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
