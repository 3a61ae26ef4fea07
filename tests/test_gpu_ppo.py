"""PPO under P40 rules on a real GPU: skipped without one (CI has none).

On a CUDA host (a P40 included) with verl's sdist and its locked
dependencies importable:

    VERL_PASCAL_VERL_SDIST=verl-0.5.0.tar.gz python3 -m pytest tests/test_gpu_ppo.py

The tiny random Qwen2 trains three steps with the guard on and no violation,
and the negative control (verl's bf16 autocasts put back) must be stopped by
the guard: without that, a passing run would prove nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import REPO_ROOT as REPO  # noqa: E402
SDIST = os.environ.get("VERL_PASCAL_VERL_SDIST", "")


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = pytest.mark.skipif(
    not (SDIST and _cuda()),
    reason="needs an NVIDIA GPU and VERL_PASCAL_VERL_SDIST (verl's sdist); CI has no GPU",
)


def ppo(tmp_path: Path, *extra: str) -> tuple[int, Dict[str, Any]]:
    cmd: List[str] = [sys.executable, "-m", "bench.ppo_p40_rules", "--verl-sdist", SDIST,
                      "--work", str(tmp_path), "--shape", "tiny", "--steps", "3", "--timeout", "900", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=REPO)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_patched_verl_trains_three_steps_under_the_guard(tmp_path: Path) -> None:
    rc, result = ppo(tmp_path)
    assert (rc, result["error"], result["violations"]) == (0, None, 0), result
    assert result["steps_done"] == 3 and all(s > 0 for s in result["s_per_step"])
    assert result["gpu_processes"] and all(p["max_reserved_gib"] <= 22.0 for p in result["gpu_processes"])


def test_the_negative_control_is_stopped_by_the_guard(tmp_path: Path) -> None:
    rc, result = ppo(tmp_path, "--control")
    assert rc == 0, result  # the bench exits 0 when the control fails as it must
    assert result["violations"] >= 1 and result["first_violation"]["rule"] == "half-precision compute"
    assert result["steps_done"] == 0
