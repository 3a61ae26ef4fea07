"""The P40 rules' Triton hook on a GPU, with its controls (skipped without CUDA and Triton).

Triton refuses GPUs below compute capability 7.0, so a run held to P40 rules
must fail on any Triton kernel: one written with @triton.jit, and the ones
torch.compile's Inductor generates. Each case runs tests/gpu/triton_control.py
twice: without the guard it must succeed (so the control really runs a Triton
kernel on this GPU), under the guard it must fail naming the rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="Triton is not installed (CUDA builds of torch bring it)")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

from conftest import REPO_ROOT as REPO  # noqa: E402
CONTROL = REPO / "tests" / "gpu" / "triton_control.py"
SITE = REPO / "verl_pascal" / "p40_rules" / "site"


def control(what: str, tmp_path: Path, guarded: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("P40_RULES", "TORCHINDUCTOR_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), str(REPO)] if guarded else [str(REPO)])
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    if guarded:
        env.update(P40_RULES="1", P40_RULES_MEMORY_GIB="none", P40_RULES_REPORT_DIR=str(tmp_path / "report"),
                   P40_RULES_SUMMARY_EVERY_S="0")
    return subprocess.run([sys.executable, str(CONTROL), what], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("what", ["kernel", "compile"])
def test_a_triton_kernel_fails_the_guarded_run(what: str, tmp_path: Path) -> None:
    free = control(what, tmp_path / "free", guarded=False)
    assert free.returncode == 0 and f"{what} ok" in free.stdout, free.stderr[-3000:]

    guarded = control(what, tmp_path / "guarded", guarded=True)
    assert guarded.returncode != 0, guarded.stdout
    assert "P40 rule broken by triton" in guarded.stderr and "Triton kernel" in guarded.stderr, guarded.stderr[-3000:]
    report = tmp_path / "guarded" / "report"
    violations = [json.loads(line) for f in report.glob("violations-*.jsonl") for line in f.read_text().splitlines()]
    assert violations and all(v["rule"] == "Triton kernel" for v in violations)
    summary = json.loads(next(report.glob("summary-*.json")).read_text())
    assert "triton.compiler.compile" in summary["triton_hooks"]


def test_eager_fp32_passes_the_guard_with_triton_hooked(tmp_path: Path) -> None:
    """The positive control: the hooks alone break nothing that a P40 runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), str(REPO)]), "P40_RULES": "1",
           "P40_RULES_MEMORY_GIB": "none", "P40_RULES_REPORT_DIR": str(tmp_path)}
    code = "import torch; x = torch.randn(256, 256, device='cuda'); print(float((x @ x).sum()))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.glob("violations-*.jsonl"))
