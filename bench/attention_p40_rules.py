#!/usr/bin/env python3
"""Attention under P40 rules, on whatever CUDA GPU is present.

1. Checks the P40-rules guard on real CUDA kernels: a bf16 matmul and fp16
   SDPA (which picks the flash kernel) must be caught; fp32 SDPA (the
   memory-efficient kernel) and fp32 eager attention must pass; an allocation
   past the memory cap must fail.
2. Measures fp32 attention for Qwen2.5-0.5B's shape (14 query heads, 2 KV
   heads, head dim 64), forward + backward, SDPA vs eager: milliseconds and
   peak memory. Prints one table. Times are this GPU's, not a P40's; the
   memory figures carry over.

Usage: python3 -m bench.attention_p40_rules [--seq 256 512 1024] [--batch 8 32]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Callable, List, Tuple

import torch
import torch.nn.functional as F

from verl_pascal.p40_rules.guard import P40RuleViolation, P40RulesMode, Settings, apply_cuda_rules  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 14, 2, 64


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What transformers' eager path computes: softmax(QK^T/sqrt(d) + causal mask) V."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def qkv(batch: int, seq: int, dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    make = lambda h: torch.randn(batch, h, seq, HEAD_DIM, device="cuda", dtype=dtype, requires_grad=True)  # noqa: E731
    return make(HEADS), make(KV_HEADS), make(KV_HEADS)


def caught(fn: Callable[[], object]) -> str:
    try:
        with P40RulesMode():
            fn()
    except P40RuleViolation as exc:
        return f"caught: {exc}"
    return "passed"


def autocast_matmul(a: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return a @ a


def guard_checks() -> List[Tuple[str, str, str]]:
    a = torch.randn(256, 256, device="cuda")
    q32 = qkv(2, 128, torch.float32)
    q16 = qkv(2, 128, torch.float16)
    return [
        ("fp32 matmul", "passed", caught(lambda: a @ a)),
        ("bf16 matmul", "caught", caught(lambda: a.bfloat16() @ a.bfloat16())),
        ("bf16 autocast", "caught", caught(lambda: autocast_matmul(a))),
        ("fp32 SDPA fwd+bwd", "passed", caught(lambda: sdpa_attention(*q32).sum().backward())),
        ("fp32 eager fwd+bwd", "passed", caught(lambda: eager_attention(*q32).sum().backward())),
        ("fp16 SDPA", "caught", caught(lambda: sdpa_attention(*q16))),
    ]


def bench(fn: Callable[..., torch.Tensor], batch: int, seq: int, reps: int = 10) -> Tuple[float, float]:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    q, k, v = qkv(batch, seq, torch.float32)
    for _ in range(3):
        fn(q, k, v).sum().backward()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn(q, k, v).sum().backward()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / reps * 1000
    peak = (torch.cuda.max_memory_allocated() - base) / 1024**2
    return ms, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--memory-gib", type=float, default=22.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return 0
    # The cap and TF32 off for the whole script; the guard only around its checks
    # (its per-op Python hook would distort the timings).
    apply_cuda_rules(Settings(memory_gib=args.memory_gib))
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"allocator capped at {args.memory_gib} GiB, TF32 {torch.backends.cuda.matmul.allow_tf32}")
    print("\n| guard check | expected | result |\n|---|---|---|")
    ok = True
    for name, want, got in guard_checks():
        ok &= got.startswith(want)
        print(f"| {name} | {want} | {got[:110]} |")
    try:
        torch.empty(int((args.memory_gib + 1) * 1024**3), dtype=torch.uint8, device="cuda")
        cap = "NOT enforced"
        ok = False
    except torch.OutOfMemoryError:
        cap = "enforced (OOM past the cap)"
    print(f"| allocation of cap + 1 GiB | OOM | {cap} |")
    print("\n| batch | seq | sdpa ms | eager ms | sdpa peak MiB | eager peak MiB |\n|---|---|---|---|---|---|")
    for batch in args.batch:
        for seq in args.seq:
            row = []
            for fn in (sdpa_attention, eager_attention):
                try:
                    row.append(bench(fn, batch, seq))
                except torch.OutOfMemoryError:
                    row.append((float("nan"), float("nan")))
            (s_ms, s_mem), (e_ms, e_mem) = row
            print(f"| {batch} | {seq} | {s_ms:.2f} | {e_ms:.2f} | {s_mem:.0f} | {e_mem:.0f} |")
    print("\nguard checks:", "all as expected" if ok else "UNEXPECTED RESULT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
