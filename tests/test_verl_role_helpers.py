"""Tests for the verl role's Python helpers: scripts/lock_filter.py (what the
dependency locks leave to the pytorch role), plus the committed locks themselves.
How the role reads the env (module_utils/env_probe.py) is tested in tests/test_env_probe.py."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from conftest import REPO_ROOT as ROOT  # noqa: E402
LOCKS = ROOT / "verl_pascal" / "releases"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock_filter = load(ROOT / "scripts" / "lock_filter.py")

COMPILED = """\
accelerate==1.15.0        # via peft, -r requirements.in
cuda-bindings==13.5.0     # via torch
cuda-pathfinder==1.9.1    # via cuda-bindings
filelock==4.1.0           # via datasets, torch
jinja2==3.1.6             # via torch
markupsafe==3.0.4         # via jinja2
mpmath==1.3.0             # via sympy
nvidia-cublas-cu12==12.4.5.8  # via nvidia-cudnn-cu12, torch
nvidia-cudnn-cu12==9.1.0.70   # via torch
Setuptools==80.10.2       # via torch, -r requirements.in
sympy==1.14.0             # via torch
torch==2.6.0              # via accelerate, -r /tmp/x/torch.txt
triton==3.2.0             # via torch
typing-extensions==4.16.0  # via torch, pydantic
"""


def names(lines):
    return [line.split("==")[0] for line in lines if "==" in line]


def test_filter_drops_torch_and_what_only_torch_needs():
    out = lock_filter.filter_lock(COMPILED.splitlines(keepends=True))
    assert names(out) == ["accelerate", "filelock", "Setuptools", "typing-extensions"]


def test_filter_keeps_comments_and_unannotated_lines():
    lines = ["# header\n", "\n", "six==1.17.0\n", "torch==2.6.0\n"]
    assert lock_filter.filter_lock(lines) == ["# header\n", "\n", "six==1.17.0\n"]


def test_filter_follows_chains_to_a_fixpoint():
    lines = ["a==1  # via b\n", "b==1  # via c\n", "c==1  # via torch\n", "torch==2\n", "d==1  # via a, e\n"]
    assert names(lock_filter.filter_lock(lines)) == ["d"]


def test_filter_command_line():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lock_filter.py")],
        input=COMPILED, capture_output=True, text=True, check=True,
    )
    assert "torch==" not in done.stdout and "accelerate==1.15.0" in done.stdout


LOCK_FILES = sorted(LOCKS.glob("verl-*/py*-torch*.txt"))


def test_every_locked_release_has_both_pairs():
    """A release folder with a lock has both: the env's (Python 3.10, torch 2.6) and CI's; the
    default release (the version lock's verl_version) has them."""
    versions = sorted(p.parent.name for p in LOCKS.glob("verl-*/requirements.in"))
    default = yaml.safe_load((ROOT / "inventory" / "group_vars" / "all" / "versions.yml").read_text())["verl_version"]
    assert f"verl-{default}" in versions
    for version in versions:
        got = sorted(p.name for p in (LOCKS / version).glob("py*-torch*.txt"))
        assert got == ["py3.10-torch2.6.txt", "py3.11-torch2.13.txt"], version


@pytest.mark.parametrize("lock", LOCK_FILES, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_locks_pin_exactly_and_leave_torch_alone(lock):
    entries = lock_filter.entries(lock.read_text().splitlines(keepends=True))
    pins = [e[0].split("#")[0].rstrip(" \\\n") for e in entries if e[0].strip() and not e[0].startswith("#")]
    assert pins
    for pin in pins:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+", pin), pin
        name = pin.split("==")[0].lower()
        assert name not in ("torch", "triton") and not name.startswith(("nvidia-", "cuda-")), pin


@pytest.mark.parametrize("lock", LOCK_FILES, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_locked_datasets_imports_with_the_locked_pyarrow(lock):
    """datasets before 2.20 subclasses pyarrow.PyExtensionType, which pyarrow 21 removed: such a pair
    installs, then verl's trainer fails at `import datasets`. A lock must not pin that pair."""
    pins = dict(re.findall(r"(?m)^([A-Za-z0-9._-]+)==([^ \\\n]+)", lock.read_text()))
    datasets, pyarrow = (tuple(int(x) for x in pins[n].split(".")[:2]) for n in ("datasets", "pyarrow"))
    assert pyarrow < (21, 0) or datasets >= (2, 20), (pins["datasets"], pins["pyarrow"])


@pytest.mark.parametrize("lock", LOCK_FILES, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_locked_pyarrow_imports_with_the_locked_numpy(lock):
    """pyarrow 26 raises at import under numpy 1.x ('pyarrow requires NumPy 2.0 or newer'), though its
    metadata accepts it: a lock that keeps verl's numpy<2 must pin pyarrow below 26."""
    pins = dict(re.findall(r"(?m)^([A-Za-z0-9._-]+)==([^ \\\n]+)", lock.read_text()))
    numpy, pyarrow = (int(pins[n].split(".")[0]) for n in ("numpy", "pyarrow"))
    assert numpy >= 2 or pyarrow < 26, (pins["numpy"], pins["pyarrow"])


@pytest.mark.parametrize("lock", [p for p in LOCK_FILES if p.name.endswith("-torch2.6.txt")],
                         ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_locked_transformers_imports_with_torch_26(lock):
    """From 5.10.1 transformers' model code uses torch.float8_e8m0fnu at import (torch 2.7 added it):
    with torch 2.6 verl's trainer fails importing modeling_mistral. A torch 2.6 lock must stay below."""
    pins = dict(re.findall(r"(?m)^([A-Za-z0-9._-]+)==([^ \\\n]+)", lock.read_text()))
    assert tuple(int(x) for x in pins["transformers"].split(".")[:3]) < (5, 10, 1), pins["transformers"]


HASHED = """\
accelerate==1.15.0 \\
    --hash=sha256:aaaa \\
    --hash=sha256:bbbb
    # via peft, -r requirements.in
sympy==1.14.0 \\
    --hash=sha256:cccc
    # via torch
torch==2.6.0 \\
    --hash=sha256:dddd
    # via accelerate, -r /tmp/x/torch.txt
"""


def test_filter_drops_a_hashed_entry_whole_and_keeps_the_others_with_their_hashes():
    out = lock_filter.filter_lock(HASHED.splitlines(keepends=True))
    assert "".join(out) == HASHED.split("sympy==")[0]


def test_every_pin_of_every_lock_carries_sha256_hashes():
    """pip installs the locks with --require-hashes: a pin without a hash would stop the play."""
    locks = LOCK_FILES
    assert locks
    for lock in locks:
        entries = lock_filter.entries(lock.read_text().splitlines(keepends=True))
        pins = [e for e in entries if lock_filter.PIN.match(e[0])]
        assert pins, lock
        for entry in pins:
            hashes = [line for line in entry if line.strip().startswith("--hash=sha256:")]
            assert hashes and all(len(h.strip().rstrip(" \\").split(":")[1]) == 64 for h in hashes), (lock, entry[0])
