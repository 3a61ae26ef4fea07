"""The P40-rules guard, exercised on the CPU (the GPU runs use devices=cuda)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the guard needs torch (make venv installs a CPU build)")

from conftest import REPO_ROOT as REPO  # noqa: E402

from verl_pascal.p40_rules import guard  # noqa: E402

# The guard's site folder first (its sitecustomize), then the package itself.
GUARD_PYTHONPATH = os.pathsep.join([str(REPO / "verl_pascal" / "p40_rules" / "site"), str(REPO)])


def cpu_mode(**kw) -> guard.P40RulesMode:
    return guard.P40RulesMode(devices=("cpu",), **kw)


def test_fp32_compute_passes() -> None:
    a = torch.randn(8, 8)
    with cpu_mode() as mode:
        (a @ a).sum().item()
    assert mode.violations == [] and mode.ops_seen > 0


def test_bf16_autocast_fails_the_run() -> None:
    a = torch.randn(8, 8)
    with pytest.raises(guard.P40RuleViolation, match="half-precision"):
        with cpu_mode():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                a @ a


def test_fp16_tensor_math_fails() -> None:
    with pytest.raises(guard.P40RuleViolation, match="float16"):
        with cpu_mode():
            torch.ones(4, dtype=torch.float16) * 2


def test_a_disabled_autocast_passes() -> None:
    """What the patcher writes: autocast(dtype=float32, enabled=False)."""
    a = torch.randn(8, 8)
    with cpu_mode() as mode:
        with torch.autocast("cpu", dtype=torch.float32, enabled=False):
            a @ a
    assert mode.violations == []


def test_upcasting_a_bf16_checkpoint_passes_only_off_the_guarded_device() -> None:
    weights = torch.randn(4, 4).to(torch.bfloat16)  # made outside the guard: a loaded checkpoint
    with guard.P40RulesMode(devices=("cuda",)) as mode:  # CPU tensors are not judged
        weights.float() @ weights.float()
    assert mode.violations == []


def test_attention_kernel_names() -> None:
    q = torch.randn(1, 2, 4, 8)
    assert guard.judge("aten._scaled_dot_product_flash_attention.default", (q,), q, ("cpu",)) is not None
    assert guard.judge("aten._scaled_dot_product_cudnn_attention.default", (q,), q, ("cpu",)) is not None
    assert guard.judge("aten._scaled_dot_product_efficient_attention.default", (q,), q, ("cpu",)) is None
    assert guard.judge("aten._scaled_dot_product_flash_attention_for_cpu.default", (q,), q, ("cpu",)) is None
    # not on a guarded device: not judged
    assert guard.judge("aten._scaled_dot_product_flash_attention.default", (q,), q, ("cuda",)) is None


def test_record_mode_collects_instead_of_failing() -> None:
    seen = []
    with cpu_mode(raise_on_violation=False, on_violation=seen.append) as mode:
        torch.ones(2, dtype=torch.bfloat16) + 1
    assert len(mode.violations) >= 1 and seen == mode.violations


def test_memory_fraction_caps_a_big_card_at_the_p40_budget() -> None:
    h200 = 143771 * 1024**2
    frac = guard.memory_fraction(22 * 1024**3, h200)
    assert abs(frac * h200 - 22 * 1024**3) < 1
    assert guard.memory_fraction(30 * 1024**3, 24 * 1024**3) == 1.0
    with pytest.raises(ValueError):
        guard.memory_fraction(0, h200)


def test_settings_from_env() -> None:
    s = guard.Settings.from_env({"P40_RULES_MEMORY_GIB": "none", "P40_RULES_DEVICES": "cuda,cpu", "P40_RULES_MODE": "record"})
    assert s.memory_gib is None and s.devices == ("cuda", "cpu") and not s.raise_on_violation
    assert guard.Settings.from_env({}).memory_gib == 22.0


def test_sitecustomize_guards_every_thread_of_a_new_process(tmp_path: Path) -> None:
    """The way Ray workers get it: PYTHONPATH + P40_RULES=1, nothing else."""
    script = (
        "import threading, torch\n"
        "errors = []\n"
        "def work():\n"
        "    try:\n"
        "        torch.ones(2, dtype=torch.bfloat16) * 2\n"
        "    except Exception as e:\n"
        "        errors.append(type(e).__name__)\n"
        "t = threading.Thread(target=work); t.start(); t.join()\n"
        "print('thread:', errors)\n"
        "torch.ones(2) * 2\n"
        "print('fp32 ok')\n"
        "torch.ones(2, dtype=torch.float16) * 2\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": GUARD_PYTHONPATH,
        "P40_RULES": "1",
        "P40_RULES_DEVICES": "cpu",
        "P40_RULES_REPORT_DIR": str(tmp_path),
    }
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "thread: ['P40RuleViolation']" in proc.stdout
    assert "fp32 ok" in proc.stdout
    assert proc.returncode != 0 and "P40RuleViolation" in proc.stderr
    recorded = list(guard.violations_in(str(tmp_path)))
    assert len(recorded) >= 2 and all(v["rule"] == "half-precision compute" for v in recorded)
    (summary,) = guard.summaries_in(str(tmp_path))
    assert summary["violations"] >= 2 and summary["ops_seen"] > 0


def test_without_the_switch_nothing_is_guarded(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": GUARD_PYTHONPATH, "P40_RULES_DEVICES": "cpu"}
    env.pop("P40_RULES", None)
    proc = subprocess.run([sys.executable, "-c", "import torch; torch.ones(2, dtype=torch.bfloat16) * 2"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("op", [
    lambda x: torch.sort(x),          # a tuple (values, indices): the values are half
    lambda x: torch.split(x, 2),      # a tuple of views
    lambda x: list(torch.unbind(x)),  # a list
])
def test_half_results_inside_tuples_and_lists_are_caught(op) -> None:
    x = torch.rand(4, dtype=torch.float16)
    with pytest.raises(guard.P40RuleViolation):
        with cpu_mode():
            op(x)


def test_the_op_name_cache_does_not_hide_a_second_violation() -> None:
    mode = cpu_mode(raise_on_violation=False)
    with mode:
        for _ in range(3):
            torch.ones(2, dtype=torch.bfloat16) * 2
    assert len([v for v in mode.violations if "mul" in v.op]) == 3


def test_a_worker_killed_without_atexit_still_leaves_its_summary(tmp_path: Path) -> None:
    """Ray kills workers with no atexit: the summary timer has written it already, guard on or off."""
    script = "import os, time, torch\ntorch.ones(2) * 2\ntime.sleep(1.5)\nos._exit(0)\n"
    env = {
        **os.environ,
        "PYTHONPATH": GUARD_PYTHONPATH,
        "P40_RULES": "1",
        "P40_RULES_DEVICES": "cpu",
        "P40_RULES_GUARD": "0",
        "P40_RULES_SUMMARY_EVERY_S": "0.2",
        "P40_RULES_REPORT_DIR": str(tmp_path),
    }
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (summary,) = guard.summaries_in(str(tmp_path))
    assert summary["violations"] == 0


def test_the_inductor_hook_waits_for_its_module_and_fires_on_a_gpu_kernel(tmp_path: Path, monkeypatch) -> None:
    """The hook is placed when the module is imported, never earlier; CPU kernels pass, GPU ones are refused.

    The module is a STAND-IN with the signature of Inductor's AsyncCompile.triton (the real one is
    exercised on a GPU by tests/test_gpu_triton_rule.py)."""
    from verl_pascal.p40_rules import triton_rules

    package = tmp_path / "fakeinductor_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "async_compile.py").write_text(
        "class AsyncCompile:\n    def triton(self, kernel_name, source_code, device_str='cuda'):\n"
        "        return (kernel_name, device_str)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list = []
    try:
        finder = triton_rules.AfterImport("fakeinductor_pkg.async_compile",
                                          lambda module: triton_rules._hook_inductor(module, seen.append))
        finder.install()
        assert finder in sys.meta_path
        import fakeinductor_pkg.async_compile as compiled  # noqa: E402  (the import the hook waits for)

        assert finder not in sys.meta_path
        assert compiled.AsyncCompile().triton("k_cpu", "", "cpu") == ("k_cpu", "cpu") and seen == []
        assert compiled.AsyncCompile().triton("k_gpu", "") == ("k_gpu", "cuda")
        assert [(v.op, v.rule) for v in seen] == [("triton (torch.compile/Inductor)", "Triton kernel")]
    finally:
        for name in ("fakeinductor_pkg.async_compile", "fakeinductor_pkg"):
            sys.modules.pop(name, None)
