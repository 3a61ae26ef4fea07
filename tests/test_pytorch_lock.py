"""The pytorch role installs torch only from a hashed lock, and refuses a file the lock does not list.

Run for real by ansible-playbook against this machine: the env is a venv, the
index a PEP 503 folder, and "torch" a STAND-IN wheel built here (a module with
``__version__`` and ``version.cuda = None``, as a CPU build has), because the
real wheel is gigabytes and PyTorch's index is out of reach. The lock is written
by verl-pascal-pip-lock from that index, as a user writes the real one. Then the index
serves another file under the same name and version, as a compromised mirror
would, and the role must stop on the sha256 before pip installs anything.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterator

import pytest

from prefetch_server import Upstream, simple_page

from conftest import REPO_ROOT as REPO
from conftest import needs_ansible, run_playbook

VERSION = "1.0.0+standin"
PYTHON_MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"

pytestmark = [
    needs_ansible,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the role becomes the training user (root here) with su"),
]

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: pytorch
"""


def standin_wheel(path: Path, body: str) -> Path:
    """A STAND-IN torch wheel: torch/__init__.py with `body`, and the dist-info pip needs."""
    dist = f"torch-{VERSION}.dist-info"
    files: Dict[str, bytes] = {
        "torch/__init__.py": body.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: verl-pascal-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join(record + [f"{dist}/RECORD,,"]) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


GOOD = f"__version__ = {VERSION!r}\n\nclass version:\n    cuda = None\n"
HOSTILE = GOOD + "\n# another file under the same name and version\nSERVED_BY = 'a compromised mirror'\n"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp("env")
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True, timeout=300)
    return prefix


@pytest.fixture
def env(venv: Path) -> Iterator[Path]:
    yield venv
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", "torch"],
                   capture_output=True, timeout=120)
    shutil.rmtree(venv / "libexec", ignore_errors=True)


@pytest.fixture
def index(tmp_path: Path) -> Path:
    """A PEP 503 index holding the good stand-in torch wheel (links without #sha256)."""
    root = tmp_path / "simple"
    wheel = standin_wheel(root / "torch" / f"torch-{VERSION}-py3-none-any.whl", GOOD)
    (root / "torch" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    (root / "index.html").write_text('<a href="torch/">torch</a>\n')
    return root


def write_lock(index: Path, locks: Path) -> Path:
    lock = locks / f"torch-{VERSION}" / f"py{PYTHON_MINOR}.txt"
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="")
    proc = subprocess.run([sys.executable, str(REPO / "bin" / "pip-lock"), "--python-version", PYTHON_MINOR,
                           "--index-url", index.as_uri(), "-o", str(lock), f"torch=={VERSION}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return lock


def run_role(tmp_path: Path, env: Path, index: Path, locks: Path, *extra: str) -> subprocess.CompletedProcess:
    pip = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
           "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    variables = {
        "ansible_become_method": "su", "training_user": "root",
        "conda_env_prefix": str(env), "python_version": f"{PYTHON_MINOR}.0", "cuda_version": "11.8.0",
        "torch_version": VERSION, "torchvision_version": "", "torchaudio_version": "",
        "torch_index_url": index.as_uri(), "pytorch_lock_dir": str(locks), "pip_cache_dir": "",
        "artifact_cache_dir": str(tmp_path / "cache"), "artifact_mirror_url": "", "artifact_mirror_dir": "",
    }
    # The site settings first (derived values such as pip_environment), then this test's values.
    args = ["-e", f"@{REPO / 'inventory/group_vars/all/settings.yml'}"]
    for key, value in variables.items():
        args += ["-e", f"{key}={value}"]
    return run_playbook(tmp_path, PLAYBOOK, *args, *extra, env=pip, timeout=600)


def installed_torch(env: Path) -> str:
    proc = subprocess.run([str(env / "bin" / "python"), "-c",
                           "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept Exception: print('')"],
                          capture_output=True, text=True, timeout=60)
    return proc.stdout.strip()


def test_the_role_installs_torch_from_its_hashed_lock(tmp_path: Path, env: Path, index: Path) -> None:
    lock = write_lock(index, tmp_path / "locks")
    text = lock.read_text()
    good = hashlib.sha256((index / "torch" / f"torch-{VERSION}-py3-none-any.whl").read_bytes()).hexdigest()
    assert f"torch=={VERSION} \\\n    --hash=sha256:{good}" in text
    proc = run_role(tmp_path, env, index, tmp_path / "locks")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed_torch(env) == VERSION
    again = run_role(tmp_path, env, index, tmp_path / "locks")
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout


def test_another_file_under_the_same_version_is_refused(tmp_path: Path, env: Path, index: Path) -> None:
    write_lock(index, tmp_path / "locks")
    standin_wheel(index / "torch" / f"torch-{VERSION}-py3-none-any.whl", HOSTILE)  # the mirror now serves this
    proc = run_role(tmp_path, env, index, tmp_path / "locks", "-e", "pip_install_retry_delay=0")
    assert proc.returncode != 0
    assert "does not match the sha256" in proc.stdout, proc.stdout
    assert "RETRYING" not in proc.stdout, "a sha256 mismatch is no network failure: pip must not run again"
    assert installed_torch(env) == "", "pip installed the file the lock does not list"


def test_without_a_lock_the_role_stops_before_installing(tmp_path: Path, env: Path, index: Path) -> None:
    proc = run_role(tmp_path, env, index, tmp_path / "no-locks")
    assert proc.returncode != 0
    assert f"No hashed lock for torch {VERSION} on Python {PYTHON_MINOR}" in proc.stdout, proc.stdout
    assert "verl-pascal-pip-lock" in proc.stdout and "pytorch_allow_unhashed" in proc.stdout
    assert installed_torch(env) == ""


def test_a_lock_for_other_pins_is_refused(tmp_path: Path, env: Path, index: Path) -> None:
    lock = write_lock(index, tmp_path / "locks")
    lock.write_text(lock.read_text().replace(f"torch=={VERSION}", "torch==0.9.0+standin"))
    proc = run_role(tmp_path, env, index, tmp_path / "locks")
    assert proc.returncode != 0
    assert f"does not pin torch=={VERSION}" in proc.stdout, proc.stdout
    assert installed_torch(env) == ""


def test_allow_unhashed_installs_without_a_lock_and_says_so(tmp_path: Path, env: Path, index: Path) -> None:
    proc = run_role(tmp_path, env, index, tmp_path / "no-locks", "-e", "pytorch_allow_unhashed=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checking no file against a sha256" in proc.stdout
    assert installed_torch(env) == VERSION


def served_index(index: Path, modes: Dict[str, Dict[str, int]]) -> Upstream:
    """``index`` over HTTP, as a mirror serves it; ``modes`` as Upstream takes them."""
    wheel = f"torch-{VERSION}-py3-none-any.whl"
    files = {"simple/torch/": simple_page({wheel: None}),
             f"files/{wheel}": (index / "torch" / wheel).read_bytes()}
    return Upstream(files, {"simple/torch/": {"type": "text/html"}, **modes})


@pytest.mark.parametrize("attempts", [2, 1])
def test_an_install_that_failed_on_the_network_runs_again(tmp_path: Path, env: Path, index: Path,
                                                          monkeypatch: pytest.MonkeyPatch, attempts: int) -> None:
    """The mirror answers 503 to the wheel's first request: a second try installs it, unless
    pip_install_attempts=1 (the control: without the retry the same mirror fails the play)."""
    write_lock(index, tmp_path / "locks")
    monkeypatch.setenv("PIP_RETRIES", "0")  # pip's own retries would hide the 503 from the role
    wheel = f"files/torch-{VERSION}-py3-none-any.whl"
    with served_index(index, {wheel: {"status": 503, "times": 1}}) as server:
        proc = run_role(tmp_path, env, index, tmp_path / "locks", "-e", f"torch_index_url={server.url}/simple/",
                        "-e", f"pip_install_attempts={attempts}", "-e", "pip_install_retry_delay=0")
        statuses = [status for _, _, status in server.requests_for(wheel)]
    if attempts == 2:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert statuses == [503, 200], statuses
        assert installed_torch(env) == VERSION
    else:
        assert proc.returncode != 0 and statuses == [503], statuses
        assert "503" in proc.stdout, proc.stdout
        assert installed_torch(env) == ""
