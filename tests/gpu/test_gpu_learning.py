"""The learning benchmark's short form on a real GPU: skipped without one (CI has none).

On a CUDA host (a P40 included) with verl's sdist and its locked
dependencies importable:

    VERL_PASCAL_VERL_SDIST=verl-0.5.0.tar.gz python3 -m pytest tests/gpu/test_gpu_learning.py

The tiny Qwen2 is warm-started on the task, then PPO from it and the control
(the actor's learning rate 0) run side by side through the launch script
under the P40-rules guard (bench/learning.py --short): the held-out score
must rise and the control's stay flat, with no violation.
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
    return bool(torch.cuda.is_available())


pytestmark = pytest.mark.skipif(
    not (SDIST and _cuda()),
    reason="needs an NVIDIA GPU and VERL_PASCAL_VERL_SDIST (verl's sdist); CI has no GPU",
)


def test_ppo_from_the_warm_start_raises_the_held_out_score_and_the_control_stays_flat(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench.learning", "--verl-sdist", SDIST, "--short", "--parallel", "2",
           "--work", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=REPO)
    lines: List[Dict[str, Any]] = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    runs = [line for line in lines if "run" in line]
    verdict = lines[-1]["verdict"]
    assert [(r["run"], r["error"], r["violations"]) for r in runs] == [
        (r["run"], None, 0) for r in runs], proc.stderr[-2000:]
    assert verdict["checks"]["rises"]["passed"] and verdict["checks"]["flat_control"]["passed"], verdict
    assert proc.returncode == 0 and verdict["passed"], verdict
