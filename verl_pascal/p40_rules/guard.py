"""P40 rules for a run on a bigger GPU.

A Tesla P40 (compute capability 6.1, 24 GB) has no bf16, runs fp16 at 1/64 of
fp32 speed, and has neither FlashAttention nor cuDNN's fused attention. A run on
an H200 proves nothing about a P40 unless it is held to the same limits:

* memory: PyTorch's caching allocator is capped (``set_per_process_memory_fraction``);
  the CUDA context, cuBLAS and NCCL sit outside that cap, so a faithful cap is
  about 22 GiB for a 24 GB card (docs/benchmarks.md);
* TF32 stays off (Pascal has no tensor cores: fp32 means fp32);
* a guard fails the run on any bf16 or fp16 floating-point result on the GPU,
  and on any flash or cuDNN attention kernel (the memory-efficient SDPA kernel,
  which runs on sm_50+ in fp32, is allowed);
* and on any Triton kernel compiled or launched (Triton refuses compute
  capability < 7.0), torch.compile's Inductor kernels included (triton_rules).

The guard is a ``TorchDispatchMode``: it sees every ATen op with its real
arguments and result, including the SDPA backend PyTorch picked. It only judges
tensors on the guarded device types ("cuda" by default), so loading a bf16
checkpoint on the CPU and casting it to fp32 is fine.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

HALF_DTYPES = (torch.bfloat16, torch.float16)
# SDPA backends and attention kernels a P40 does not have.
FORBIDDEN_OP_MARKERS = ("flash_attention", "cudnn_attention", "_flash_attn", "cudnn_sdpa")


class P40RuleViolation(RuntimeError):
    """An op the P40 cannot run (or would run 64x slower) was executed."""


@dataclass(frozen=True)
class Violation:
    op: str
    rule: str
    detail: str

    def message(self) -> str:
        return f"P40 rule broken by {self.op}: {self.rule} ({self.detail})"


def _tensors(tree: Any) -> List[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def judge(op_name: str, args: Any, result: Any, devices: Sequence[str]) -> Optional[Violation]:
    """The first P40 rule an op breaks, or None. Pure: no side effects."""
    on_device = [t for t in _tensors((args, result)) if t.device.type in devices]
    if not on_device:
        return None
    if _forbidden_kernel(op_name):
        return Violation(op_name, "flash/cuDNN attention kernel", "use sdpa's memory-efficient kernel in fp32, or eager")
    for t in _tensors(result):
        if t.device.type in devices and t.dtype in HALF_DTYPES:
            return Violation(op_name, "half-precision compute", f"result dtype {t.dtype} on {t.device}")
    return None


class P40RulesMode(TorchDispatchMode):
    """Fails (or records) every op that breaks a P40 rule.

    The per-op cost is what makes a guarded run slow, so the op name is judged
    once per op (cached) and a result is inspected without flattening it when
    it is a plain tensor or a tuple of tensors. The verdict is `judge`'s.
    """

    def __init__(self, devices: Sequence[str] = ("cuda",), raise_on_violation: bool = True,
                 on_violation: Optional[Callable[[Violation], None]] = None) -> None:
        super().__init__()
        self.devices = tuple(devices)
        self.raise_on_violation = raise_on_violation
        self.on_violation = on_violation
        self.violations: List[Violation] = []
        self.ops_seen = 0
        # What activate() hooked in Triton (triton_rules.install); empty without Triton.
        self.triton_hooks: List[str] = []
        self._forbidden_name: Dict[Any, bool] = {}

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let torch.compile compile under the guard.

        Dynamo does not compile under a dispatch mode that says otherwise: it
        runs the function eagerly, so a run that a P40 fails (Triton refuses
        it) would pass here. With this, Inductor compiles as it would on the
        P40, and triton_rules refuses each Triton kernel it makes (torch 2.8
        and later ask modes this; older ones compile nothing under the guard).
        """
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.ops_seen += 1
        forbidden = self._forbidden_name.get(func)
        if forbidden is None:
            forbidden = _forbidden_kernel(str(func))
            self._forbidden_name[func] = forbidden
        if forbidden:
            early = judge(str(func), (args, kwargs), None, self.devices)
            if early is not None:
                self._report(early)
        result = func(*args, **kwargs)
        if _has_half_result(result, self.devices):
            late = judge(str(func), (args, kwargs), result, self.devices)
            if late is not None:
                self._report(late)
        return result

    def _report(self, violation: Violation) -> None:
        self.violations.append(violation)
        if self.on_violation is not None:
            self.on_violation(violation)
        if self.raise_on_violation:
            raise P40RuleViolation(violation.message())


def _forbidden_kernel(op_name: str) -> bool:
    lowered = op_name.lower()
    return any(marker in lowered for marker in FORBIDDEN_OP_MARKERS) and not lowered.endswith("_for_cpu.default")


def _has_half_result(result: Any, devices: Sequence[str]) -> bool:
    """A quick pre-check of `judge`'s half-precision rule on an op's result."""
    if isinstance(result, torch.Tensor):
        return result.dtype in HALF_DTYPES and result.device.type in devices
    if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) or r is None for r in result):
        return any(r is not None and r.dtype in HALF_DTYPES and r.device.type in devices for r in result)
    return any(t.dtype in HALF_DTYPES and t.device.type in devices for t in _tensors(result))


@dataclass
class Settings:
    """What `activate` does; read from the environment by `from_env`."""

    memory_gib: Optional[float] = 22.0
    devices: Sequence[str] = ("cuda",)
    report_dir: Optional[str] = None
    raise_on_violation: bool = True
    guard: bool = True
    summary_every_s: float = 5.0

    @classmethod
    def from_env(cls, env: Dict[str, str]) -> "Settings":
        mem = env.get("P40_RULES_MEMORY_GIB", "22")
        return cls(
            memory_gib=None if mem in ("", "0", "none") else float(mem),
            devices=tuple(d for d in env.get("P40_RULES_DEVICES", "cuda").split(",") if d),
            report_dir=env.get("P40_RULES_REPORT_DIR") or None,
            raise_on_violation=env.get("P40_RULES_MODE", "fail") != "record",
            guard=env.get("P40_RULES_GUARD", "1") != "0",
            summary_every_s=float(env.get("P40_RULES_SUMMARY_EVERY_S", "5")),
        )


def memory_fraction(cap_bytes: int, total_bytes: int) -> float:
    """The allocator fraction that caps a device of total_bytes at cap_bytes."""
    if cap_bytes <= 0 or total_bytes <= 0:
        raise ValueError("memory sizes must be positive")
    return min(1.0, cap_bytes / total_bytes)


def _write(report_dir: Optional[str], kind: str, payload: Dict[str, Any]) -> None:
    if not report_dir:
        return
    os.makedirs(report_dir, exist_ok=True)
    path = os.path.join(report_dir, f"{kind}-{os.getpid()}.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"pid": os.getpid(), "time": time.time(), **payload}) + "\n")


def _write_summary(report_dir: Optional[str], mode: "P40RulesMode") -> None:
    """Overwrite this process's summary: ops seen, violations, peak memory."""
    if not report_dir:
        return
    os.makedirs(report_dir, exist_ok=True)
    path = os.path.join(report_dir, f"summary-{os.getpid()}.json")
    payload = {"pid": os.getpid(), "time": time.time(), "ops_seen": mode.ops_seen,
               "violations": len(mode.violations), "triton_hooks": mode.triton_hooks, **_peak_memory()}
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(payload, f)
    os.replace(path + ".tmp", path)


def summaries_in(report_dir: str) -> List[Dict[str, Any]]:
    """The latest summary of every process that reported under report_dir."""
    if not os.path.isdir(report_dir):
        return []
    found = []
    for name in sorted(os.listdir(report_dir)):
        if name.startswith("summary-") and name.endswith(".json"):
            with open(os.path.join(report_dir, name), encoding="utf-8") as f:
                found.append(json.load(f))
    return found


def apply_cuda_rules(settings: Settings) -> None:
    """Runs when CUDA initialises in this process: TF32 off, allocator capped."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if settings.memory_gib is None:
        return
    for index in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(index).total_memory
        frac = memory_fraction(int(settings.memory_gib * 1024**3), total)
        torch.cuda.set_per_process_memory_fraction(frac, index)


def _peak_memory() -> Dict[str, Any]:
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    peaks: Dict[str, Any] = {
        "max_allocated_gib": torch.cuda.max_memory_allocated() / 1024**3,
        "max_reserved_gib": torch.cuda.max_memory_reserved() / 1024**3,
        "device": torch.cuda.get_device_name(),
    }
    # Pinned host memory (offloaded parameters and optimizer states): PyTorch's caching host
    # allocator rounds each block up to a power of two and keeps freed blocks (torch >= 2.7).
    # The names vary by release: the bytes held (rounded) and those handed out, at peak.
    host_stats = getattr(torch.cuda, "host_memory_stats", None)
    stats = host_stats() if host_stats is not None else {}
    for name in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        if f"{name}.peak" in stats:
            peaks[f"pinned_{name.split('_')[0]}_gib"] = stats[f"{name}.peak"] / 1024**3
    return peaks


_ACTIVE: Optional[P40RulesMode] = None


def activate(settings: Settings) -> P40RulesMode:
    """Turn the rules on for this whole process (every thread), once."""
    global _ACTIVE
    if _ACTIVE is not None:
        return _ACTIVE
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if torch.cuda.is_initialized():
        apply_cuda_rules(settings)
    else:
        torch.cuda._lazy_call(lambda: apply_cuda_rules(settings))  # noqa: SLF001
    mode = P40RulesMode(settings.devices, settings.raise_on_violation,
                        on_violation=lambda v: _write(settings.report_dir, "violations", asdict(v)))

    def summary() -> None:
        _write_summary(settings.report_dir, mode)

    if settings.guard:  # off only to measure the guard's own cost
        # Triton kernels are no ATen ops: hook Triton itself (triton_rules).
        from . import triton_rules

        triton_rules.inductor_in_process()
        mode.triton_hooks = triton_rules.install(mode._report)  # noqa: SLF001
        mode.__enter__()
        _enter_in_new_threads(mode)
    atexit.register(summary)
    # Ray kills its workers at shutdown (no atexit): rewrite the summary, with
    # the peak memory so far, every few seconds too.
    _start_summary_timer(summary, settings.summary_every_s)
    _ACTIVE = mode
    return mode


def _start_summary_timer(summary: Callable[[], None], every_s: float) -> None:
    if every_s <= 0:
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            summary()

    thread = threading.Thread(target=loop, name="p40-rules-summary", daemon=True)
    thread.start()
    atexit.register(stop.set)


def _enter_in_new_threads(mode: P40RulesMode) -> None:
    """Dispatch modes are per thread: enter the mode in every thread started later."""
    original_run = threading.Thread.run

    def run(self: threading.Thread) -> None:
        with mode:
            original_run(self)

    threading.Thread.run = run  # type: ignore[method-assign]


def violations_in(report_dir: str) -> Iterable[Dict[str, Any]]:
    """Every violation recorded under report_dir, by any process."""
    if not os.path.isdir(report_dir):
        return []
    found: List[Dict[str, Any]] = []
    for name in sorted(os.listdir(report_dir)):
        if name.startswith("violations-") and name.endswith(".jsonl"):
            with open(os.path.join(report_dir, name), encoding="utf-8") as f:
                found.extend(json.loads(line) for line in f if line.strip())
    return found
