"""The STAND-INs for Miniforge's conda and for apex (scripts/standins/), run
here the way the conda and apex roles run them in the test containers."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

STANDINS = REPO_ROOT / "scripts" / "standins"


@pytest.fixture
def conda(tmp_path: Path) -> Path:
    prefix = tmp_path / "miniforge3"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy(STANDINS / "miniforge" / "conda", prefix / "bin" / "conda")
    return prefix


def run_conda(prefix: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(prefix / "bin" / "conda"), *args], capture_output=True, text=True)


def test_conda_refuses_a_python_it_cannot_provide(conda: Path):
    res = run_conda(conda, "create", "-p", str(conda / "envs" / "x"), "python=3.10.12",
                    "--override-channels", "-c", "conda-forge", "-y")
    assert res.returncode == 1
    assert "nothing provides requested python 3.10.12" in res.stderr
    assert not (conda / "envs" / "x").exists()


def test_conda_refuses_other_channels(conda: Path):
    res = run_conda(conda, "create", "-p", str(conda / "envs" / "x"), "python", "-c", "defaults", "-y")
    assert res.returncode == 1
    assert "only conda-forge" in res.stderr


def test_conda_creates_lists_and_removes_an_env(conda: Path):
    env = conda / "envs" / "verl-p40"
    version = platform.python_version()
    res = run_conda(conda, "create", "-p", str(env), f"python={version}", "pip",
                    "--override-channels", "-c", "conda-forge", "--copy", "-y")
    assert res.returncode == 0, res.stderr
    assert (env / "conda-meta").is_dir()
    listed = run_conda(conda, "env", "list", "--json")
    assert str(env) in listed.stdout
    assert run_conda(conda, "env", "remove", "-p", str(env), "-y").returncode == 0
    assert not env.exists()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("style", ["env", "config_settings"])
def test_apex_standin_honours_both_flag_styles(tmp_path: Path, style: str):
    pytest.importorskip("torch")
    src = tmp_path / "apex"
    shutil.copytree(STANDINS / "apex", src)
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    shutil.copy(STANDINS / "nvcc", cuda / "bin" / "nvcc")
    log = tmp_path / "builds.log"
    env = dict(os.environ, CUDA_HOME=str(cuda), TORCH_CUDA_ARCH_LIST="6.1", MAX_JOBS="3",
               APEX_STANDIN_BUILD_LOG=str(log))
    args = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "--no-index",
            "-w", str(tmp_path / "wheels")]
    if style == "env":
        env.update(APEX_CPP_EXT="1", APEX_CUDA_EXT="1")
    else:
        args += ["--config-settings", "--build-option=--cpp_ext", "--config-settings", "--build-option=--cuda_ext"]
    res = subprocess.run([*args, str(src)], env=env, capture_output=True, text=True, cwd=src)
    assert res.returncode == 0, res.stdout + res.stderr
    wheels = list((tmp_path / "wheels").glob("apex-*.whl"))
    assert len(wheels) == 1
    import zipfile

    names = zipfile.ZipFile(wheels[0]).namelist()
    assert any(n.startswith("apex_C.") for n in names) and any(n.startswith("amp_C.") for n in names)
    assert log.read_text().split()[1:] == ["arch=6.1", "jobs=3", f"style={style}"]
