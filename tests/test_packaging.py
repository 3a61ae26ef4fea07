"""The verl_pascal package as users install it: its commands, and the old bin/ scripts that forward to them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT as REPO  # noqa: E402

# bin/ script -> (console command that replaces it, its module)
RENAMED = {
    "prefetch": ("verl-pascal-prefetch", "verl_pascal.prefetch.cli"),
    "pip-lock": ("verl-pascal-pip-lock", "verl_pascal.prefetch.hashlock"),
    "verl-patch": ("verl-patch", "verl_pascal.patch_cli"),
    "gsm8k-to-verl": ("gsm8k-to-verl", "verl_pascal.data.cli"),
}


def scripts_of_pyproject() -> dict:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_old_script_has_its_console_command() -> None:
    scripts = scripts_of_pyproject()
    for command, module in RENAMED.values():
        assert scripts[command].split(":")[0] == module


@pytest.mark.parametrize("command", sorted(v[0] for v in RENAMED.values()))
def test_the_installed_command_runs(command: str) -> None:
    path = shutil.which(command, path=str(Path(sys.executable).parent))
    assert path, f"{command} is not installed beside {sys.executable}: pip install -e ."
    proc = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {command} ")


@pytest.mark.parametrize("script", sorted(RENAMED))
def test_an_old_bin_script_says_it_is_deprecated_and_still_works(script: str, tmp_path: Path) -> None:
    command, _module = RENAMED[script]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(REPO / "bin" / script), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"bin/{script} is deprecated" in proc.stderr and f"run `{command}`" in proc.stderr
    assert proc.stdout.startswith(f"usage: {command} ")


def test_no_code_outside_the_module_boundary_edits_sys_path() -> None:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    mine = str(Path(__file__).resolve().relative_to(REPO))
    offenders = [rel for rel in tracked.stdout.split()
                 if rel != mine and any(call in (REPO / rel).read_text() for call in ("sys.path.insert", "sys.path.append"))]
    assert offenders == []
