"""The verl role's sdist fetch (roles/verl/tasks/fetch.yml, verl_source: pip),
run for real by ansible-playbook against this machine, against a package index
on loopback serving a substituted verl-0.5.0.tar.gz: the real lock's sha256
stops it, nothing lands in the cache, and its setup.py never runs. The same
index serving a file with the lock's sha256 (the lock overridden to that
file's) is fetched into the cache.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT as REPO
from conftest import needs_ansible, run_playbook
from hostile_sdist import hostile_sdist  # noqa: E402
from prefetch_server import Upstream, simple_page  # noqa: E402

pytestmark = needs_ansible

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: verl
        tasks_from: fetch
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_fetch(tmp_path: Path, index: str, *extra: str) -> subprocess.CompletedProcess:
    return run_playbook(tmp_path, PLAYBOOK,
                        "-e", f"@{REPO / 'inventory/group_vars/all/versions.yml'}",
                        "-e", f"@{REPO / 'inventory/group_vars/all/settings.yml'}",
                        "-e", f"artifact_cache_dir={tmp_path / 'cache'}", "-e", "preflight_gpu_profile=pascal",
                        "-e", f"verl_index_url={index}", "-e", f"conda_env_prefix={tmp_path / 'env'}",
                        # The release the index serves a substitute of (any release fetches alike).
                        "-e", "verl_version=0.5.0", *extra,
                        timeout=300)


@pytest.fixture
def index(tmp_path: Path):
    marker = tmp_path / "setup-py-ran"
    (tmp_path / "dist").mkdir()
    bad = hostile_sdist(tmp_path / "dist", marker, "verl", "0.5.0")
    files = {f"files/{bad.name}": bad.read_bytes(), "simple/verl/": simple_page({bad.name: None})}
    with Upstream(files, {"simple/verl/": {"type": "text/html"}}) as server:
        yield server, bad, marker


def test_a_substituted_sdist_is_refused_and_its_setup_py_never_runs(tmp_path: Path, index) -> None:
    server, bad, marker = index
    proc = run_fetch(tmp_path, f"{server.url}/simple/")
    assert proc.returncode != 0
    assert "could not be fetched and verified" in proc.stdout
    assert "verl_releases['0.5.0'].sha256" in proc.stdout
    assert not marker.exists()
    assert not (tmp_path / "cache" / bad.name).exists()
    assert server.arrivals.count(f"files/{bad.name}") >= 1  # it was downloaded, then refused


def test_the_file_with_the_locked_sha256_is_fetched_into_the_cache(tmp_path: Path, index) -> None:
    server, bad, marker = index
    lock = {"verl_releases": {"0.5.0": {"sdist": bad.name, "sha256": sha(bad.read_bytes())}}}
    proc = run_fetch(tmp_path, f"{server.url}/simple/", "-e", json.dumps(lock))
    assert proc.returncode == 0, proc.stdout
    assert (tmp_path / "cache" / bad.name).read_bytes() == bad.read_bytes()
    assert not marker.exists()  # fetching never opens it
