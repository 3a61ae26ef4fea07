#!/usr/bin/env python3
"""Verify the torch build in a conda env (verl-pascal pytorch role).

Run with the env's Python:

  python verl_pascal_torch_check.py --torch 2.6.0+cu118 --cuda 11.8 \
      --gpu-count 1 --gpu-cap 6.1 [--bf16-native] [--matmul-size 1024]

Prints one JSON object: ok, errors, checks (what passed), skipped (what was
not checked, and why), facts. Exit status 0 when ok, 1 otherwise.

Checks: torch.__version__ equals the pin exactly (local label included);
torch.version.cuda matches the toolkit's major.minor for CUDA builds; on a
host with GPUs and a CUDA build that sees them, torch.cuda.get_arch_list()
covers every GPU's compute capability and an fp32 matmul on each GPU matches
the CPU's. bf16 is reported from the compute capability (native only on 8.0+),
never from torch.cuda.is_bf16_supported(), which reports emulation as support.
The logic is plain functions, unit-tested in tests/test_torch_check.py.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any


def parse_cap(cap: str) -> tuple[int, int]:
    """'6.1' -> (6, 1)."""
    major, minor = cap.strip().split(".")
    return int(major), int(minor)


def parse_arch(entry: str) -> tuple[str, int, int, bool] | None:
    """'sm_61' -> ('sm', 6, 1, False); 'sm_90a' -> ('sm', 9, 0, True);
    'compute_70' -> ('compute', 7, 0, False). None for anything else."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", entry.strip())
    if not m:
        return None
    return m.group(1), int(m.group(2)), int(m.group(3)), bool(m.group(4))


def arch_covering(arch_list: list[str], cap: str) -> str | None:
    """The best entry of torch's arch list whose code runs on a GPU of
    compute capability `cap` (SASS before PTX, then the newest), or None.

    SASS (sm_XY) runs on the same major version with an equal or higher minor
    (sm_60 runs on 6.1); arch-specific SASS (sm_90a) only on exactly X.Y. PTX
    (compute_XY) is JIT-compiled for any capability >= X.Y.
    """
    major, minor = parse_cap(cap)
    best: tuple[tuple[bool, int, int], str] | None = None
    for entry in arch_list:
        parsed = parse_arch(entry)
        if parsed is None:
            continue
        kind, a_major, a_minor, specific = parsed
        if kind == "sm":
            runs = (a_major, a_minor) == (major, minor) if specific else a_major == major and a_minor <= minor
        else:
            runs = (a_major, a_minor) <= (major, minor)
        rank = (kind == "sm", a_major, a_minor)
        if runs and (best is None or rank > best[0]):
            best = (rank, entry)
    return best[1] if best else None


def major_minor(version: str) -> str:
    """'11.8.89' -> '11.8'."""
    return ".".join(version.split(".")[:2])


def bf16_native(caps: list[str]) -> bool:
    """Native bf16 needs compute capability 8.0 or newer on every GPU."""
    return bool(caps) and all(parse_cap(c) >= (8, 0) for c in caps)


def gpu_plan(gpu_count: int, cuda_build: bool, cuda_available: bool) -> tuple[bool, str]:
    """Whether to run the GPU checks, and the reason when not."""
    if gpu_count <= 0:
        return False, "no GPU reported by the preflight facts"
    if not cuda_build:
        return False, "torch is a CPU build (torch.version.cuda is None)"
    if not cuda_available:
        return False, "torch.cuda.is_available() is False"
    return True, ""


def verify(torch: Any, wanted: str, toolkit_cuda: str, gpu_count: int, caps: list[str],
           matmul_size: int = 1024) -> dict[str, Any]:
    """Run every check against the imported `torch` module; return the report."""
    report: dict[str, Any] = {"ok": True, "errors": [], "checks": [], "skipped": [], "facts": {}}
    errors, checks, skipped = report["errors"], report["checks"], report["skipped"]

    found = str(torch.__version__)
    report["facts"]["torch_version"] = found
    if found == wanted:
        checks.append(f"torch.__version__ is {found}, the pin")
    else:
        errors.append(f"torch.__version__ is {found}, the pin is {wanted} (wanted {wanted}, found {found})")

    torch_cuda = torch.version.cuda
    report["facts"]["torch_cuda"] = torch_cuda
    cuda_build = torch_cuda is not None
    if not cuda_build:
        skipped.append(f"CUDA version check: {found} is a CPU build (torch.version.cuda is None)")
    elif major_minor(torch_cuda) == major_minor(toolkit_cuda):
        checks.append(f"torch.version.cuda {torch_cuda} matches the toolkit's CUDA {major_minor(toolkit_cuda)}")
    else:
        errors.append(f"torch.version.cuda is {torch_cuda}, the toolkit is CUDA {major_minor(toolkit_cuda)}: "
                      "extensions built against the toolkit would not load")

    available = bool(cuda_build and torch.cuda.is_available())
    report["facts"]["cuda_available"] = available
    run, why = gpu_plan(gpu_count, cuda_build, available)
    if not run:
        skipped.append(f"GPU checks (arch list, fp32 matmul): {why}")
        if gpu_count > 0 and cuda_build:
            errors.append(f"the preflight facts report {gpu_count} GPU(s) but this CUDA build of torch "
                          "cannot use them (torch.cuda.is_available() is False): check the driver")
    else:
        arch_list = list(torch.cuda.get_arch_list())
        report["facts"]["arch_list"] = arch_list
        for cap in sorted(set(caps)):
            entry = arch_covering(arch_list, cap)
            if entry:
                checks.append(f"arch list covers compute capability {cap} ({entry})")
            else:
                errors.append(f"torch's arch list {arch_list} has no code for compute capability {cap}")
        for index in range(torch.cuda.device_count()):
            if index == 0:  # fp32 on the CPU as the reference; TF32 off on the GPU
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                gen = torch.Generator().manual_seed(0)
                a = torch.randn(matmul_size, matmul_size, generator=gen, dtype=torch.float32)
                b = torch.randn(matmul_size, matmul_size, generator=gen, dtype=torch.float32)
                expected = a @ b
            device = f"cuda:{index}"
            try:
                got = (a.to(device) @ b.to(device)).cpu()
                torch.cuda.synchronize(device)
            except Exception as exc:  # a kernel that cannot run on this GPU
                errors.append(f"fp32 matmul on {device} failed: {exc}")
                continue
            if torch.allclose(got, expected, rtol=1e-3, atol=1e-3):
                checks.append(f"fp32 matmul {matmul_size}x{matmul_size} on {device} matches the CPU")
            else:
                errors.append(f"fp32 matmul on {device} differs from the CPU result")

    native = bf16_native(caps)
    report["facts"]["bf16_native"] = native
    if caps:
        checks.append(f"bf16: {'native' if native else 'not native'} (lowest compute capability "
                      f"{min(caps, key=parse_cap)}; decided by capability, not torch.cuda.is_bf16_supported())")
    report["ok"] = not errors
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", required=True, help="the pin, e.g. 2.6.0+cu118")
    parser.add_argument("--cuda", required=True, help="the toolkit's CUDA version, e.g. 11.8")
    parser.add_argument("--gpu-count", type=int, default=0)
    parser.add_argument("--gpu-cap", action="append", default=[], help="compute capability of a GPU, e.g. 6.1")
    parser.add_argument("--matmul-size", type=int, default=1024)
    args = parser.parse_args(argv)
    try:
        import torch
    except Exception as exc:  # not installed, or a broken install
        report = {"ok": False, "errors": [f"import torch failed: {exc}"], "checks": [], "skipped": [], "facts": {}}
    else:
        report = verify(torch, args.torch, args.cuda, args.gpu_count, args.gpu_cap, args.matmul_size)
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
