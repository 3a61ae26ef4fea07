"""A Triton kernel and a torch.compile'd function on the GPU: the negative
controls of the P40 rules' Triton hook (tests/test_gpu_triton_rule.py).

    python triton_control.py kernel|compile

Prints "<what> ok" when the GPU ran it and the result is right. Under the
guard (P40_RULES=1 with the guard's site folder on PYTHONPATH) both must fail
the run, as Triton itself fails on a P40.
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def kernel() -> None:
    x = torch.arange(1024, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    add_kernel[(1,)](x, x, out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x)


def compiled() -> None:
    x = torch.randn(4096, device="cuda")
    fused = torch.compile(lambda a: torch.sin(a) * 2 + 1)
    assert torch.allclose(fused(x), torch.sin(x) * 2 + 1, atol=1e-5)


if __name__ == "__main__":
    {"kernel": kernel, "compile": compiled}[sys.argv[1]]()
    print(f"{sys.argv[1]} ok")
