"""Shared fixtures.

pytest's ``pythonpath`` (pyproject.toml) puts the repository root (for
``bench``) and tests/ on the path. Tests import the modules' logic by the one
name Python code uses, ``verl_pascal.module_utils.NAME`` (the package's link
to module_utils/, the same files Ansible ships to hosts as
``ansible.module_utils.NAME``), and the helpers in tests/ by name.
"""

import os
import subprocess
import sys
import tarfile
from pathlib import Path
import json
import shutil
from typing import Any, Callable, Dict, Optional, Union

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Ansible's module_utils, imported in-process by the tests of our modules, replace
# sys.intern with a callable object; torch's Dynamo, if first imported after that
# (transformers' generate imports it), refuses to register it. So Dynamo goes first.
try:
    import torch._dynamo  # noqa: F401
except ImportError:  # the tests that need torch skip without it
    pass



# --------------------------------------------------------------------------
# The real verl sdists from PyPI: downloaded once per machine into
# $VERL_PASCAL_SDIST_CACHE (default ~/.cache/verl-pascal/sdists); tests that
# need them skip, saying why, when PyPI cannot be reached.
# --------------------------------------------------------------------------


#: Releases without a folder that tests open all the same (to show they are refused).
UNSUPPORTED_SDIST_SHA256 = {"0.6.0": "806ec5212f42c6a39143754ce86d2df28ab1373762d35846ca7b022bcb7b1402"}


def sdist_sha256(version: str) -> str:
    """The sha256 a test checks before opening verl==version's sdist: its release folder's, or the one above."""
    from verl_pascal import verl_releases

    if version in verl_releases.versions():
        return str(verl_releases.read(version)["sha256"])
    return UNSUPPORTED_SDIST_SHA256[version]


def _cache_dir() -> Path:
    default = Path.home() / ".cache" / "verl-pascal" / "sdists"
    return Path(os.environ.get("VERL_PASCAL_SDIST_CACHE", str(default))).expanduser()


@pytest.fixture(scope="session")
def sdist() -> Callable[[str], Path]:
    """Path of verl==version's sdist, downloaded with pip into the cache the first time."""
    cache = _cache_dir()
    failures: Dict[str, str] = {}

    def get(version: str) -> Path:
        target = cache / ("verl-%s.tar.gz" % version)
        if target.is_file():
            return _verified(target, version)
        if version in failures:
            pytest.skip(failures[version])
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        cmd += ["verl==%s" % version, "-d", str(cache)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            detail = [str(exc)]
        if not target.is_file():
            failures[version] = "cannot download the verl %s sdist from PyPI (%s): %s" % (
                version,
                " ".join(cmd),
                " | ".join(detail),
            )
            pytest.skip(failures[version])
        return _verified(target, version)

    return get


def _verified(path: Path, version: str) -> Path:
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sdist_sha256(version):
        path.unlink()  # the next run downloads it again
        pytest.fail("%s has sha256 %s, not %s: removed" % (path, digest, sdist_sha256(version)))
    return path


@pytest.fixture(scope="session")
def extracted(sdist: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Pristine unpacked sdist root per version (shared: tests copy it, never patch it)."""
    done: Dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in done:
            dest = tmp_path_factory.mktemp("verl-sdist-%s" % version)
            with tarfile.open(str(sdist(version))) as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(str(dest), filter="data")
                else:  # pragma: no cover - Pythons without PEP 706
                    tar.extractall(str(dest))
            done[version] = dest / ("verl-%s" % version)
            assert (done[version] / "verl" / "version" / "version").is_file()
        return done[version]

    return get


# --------------------------------------------------------------------------
# Running one of the project's modules for real, through `ansible`
# --------------------------------------------------------------------------


def ansible_tool(name: str) -> Optional[str]:
    """An Ansible command next to this Python (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(str(beside), os.X_OK):
        return str(beside)
    return shutil.which(name)


ANSIBLE = ansible_tool("ansible")
ANSIBLE_PLAYBOOK = ansible_tool("ansible-playbook")
#: Skips a test module or test that runs Ansible where it is not installed.
needs_ansible = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook is not installed (make venv)")


def ansible_env(tmp_path: Path, **extra: str) -> Dict[str, str]:
    """The environment of every Ansible run of the tests: the project's roles, modules and filters;
    Ansible's own state under ``tmp_path``; no colour, no warning for the implicit localhost. Ansible's
    other settings are its defaults (a test that wants the repository's ansible.cfg passes ANSIBLE_CONFIG)."""
    env = dict(os.environ)
    env.update(
        ANSIBLE_ROLES_PATH=str(REPO_ROOT / "roles"),
        ANSIBLE_LIBRARY=str(REPO_ROOT / "library"),
        ANSIBLE_MODULE_UTILS=str(REPO_ROOT / "module_utils"),
        ANSIBLE_FILTER_PLUGINS=str(REPO_ROOT / "filter_plugins"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "remote-tmp"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="0",
    )
    env.update(extra)
    return env


def run_playbook(tmp_path: Path, play: Union[str, Path], *args: str, env: Optional[Dict[str, str]] = None,
                 inventory: Optional[Path] = None, timeout: int = 600) -> "subprocess.CompletedProcess[str]":
    """Run ``play`` (a playbook file, or its YAML, written to tmp_path/play.yml) from ``tmp_path``: on
    localhost with this Python, or on the hosts of ``inventory`` (which then says how to reach them);
    ``args`` go to ansible-playbook (``-e ...``, ``--check``, ``-l ...``), ``env`` over ansible_env's."""
    assert ANSIBLE_PLAYBOOK is not None
    book = play if isinstance(play, Path) else tmp_path / "play.yml"
    if not isinstance(play, Path):
        book.write_text(play)
    hosts = (["-i", str(inventory)] if inventory is not None else
             ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"])
    cmd = [ANSIBLE_PLAYBOOK, *hosts, *args, str(book)]
    return subprocess.run(cmd, cwd=str(tmp_path), env=ansible_env(tmp_path, **(env or {})), capture_output=True,
                          text=True, timeout=timeout)


def run_ansible_module(tmp_path: Path, module: str, args: str, *flags: str, timeout: int = 300) -> Dict[str, Any]:
    """Run `module` from library/ on localhost; return the host's result dict."""
    assert ANSIBLE is not None
    env = ansible_env(tmp_path, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [ANSIBLE, "localhost", "-i", "localhost,", "-c", "local",
           "-e", f"ansible_python_interpreter={sys.executable}", "-m", module, "-a", args, *flags]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=timeout)
    try:
        output = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from ansible (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result: Dict[str, Any] = output["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result
