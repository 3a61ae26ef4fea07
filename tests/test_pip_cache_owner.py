"""The training user's pip cache, after root has written to it first.

pip creates its cache directories as whoever runs it, mode 0755. When root
fills pip_cache_dir first (a `sudo pip`, or the machine's own pip sharing the
path, which is how a fresh CI machine broke), the training user cannot create
anything under them and the apex build fails with "Permission denied:
.../wheels/e3". The conda role's pip_cache tasks take the cache back for the
training user. Run for real by ansible-playbook against this machine; the
user is `nobody`, and the writes after the role are made as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from conftest import needs_ansible, run_playbook

USER = "nobody"

pytestmark = [
    needs_ansible,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: root writes the cache first, then the role chowns it"),
]

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: conda
        tasks_from: pip_cache
"""

# What root's pip leaves in a cache it fills first (directories 0755, files 0644).
ROOT_WRITES = ["wheels/e3/ab/cd/setuptools-80.0.0-py3-none-any.whl", "http-v2/a/b/c/d/e/entry"]


@pytest.fixture
def cache() -> Iterator[Path]:
    # Outside pytest's tmp_path: that is 0700 under root, so nobody could not reach it.
    top = Path(tempfile.mkdtemp(prefix="verl-pascal-pip-cache-"))
    top.chmod(0o755)
    old = os.umask(0o022)
    try:
        for rel in ROOT_WRITES:
            path = top / "pip" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"written by root\n")
    finally:
        os.umask(old)
    yield top / "pip"
    shutil.rmtree(top)


def run_role(cache: object, tmp_path: Path, *flags: str, user: str = USER) -> subprocess.CompletedProcess:
    return run_playbook(tmp_path, PLAYBOOK, "-e", f"training_user={user}", "-e", f"pip_cache_dir={cache}", *flags,
                        timeout=300)


def write_as_user(directory: Path) -> subprocess.CompletedProcess:
    """What pip does next as the training user: a new directory and a file in it."""
    script = 'mkdir "$1/ff" && : >"$1/ff/x.whl"'
    return subprocess.run(["/bin/sh", "-c", script, "sh", str(directory)], user=pwd.getpwnam(USER).pw_uid,
                          cwd="/", capture_output=True, text=True, timeout=60)


def test_root_first_breaks_the_training_user_without_the_role(cache: Path) -> None:
    # The failure this guards against, as it happens: no role in between.
    proc = write_as_user(cache / "wheels" / "e3")
    assert proc.returncode != 0 and "Permission denied" in proc.stderr


def test_the_role_hands_a_root_filled_cache_to_the_training_user(cache: Path, tmp_path: Path) -> None:
    proc = run_role(cache, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for directory in [cache, cache / "wheels", cache / "wheels" / "e3" / "ab" / "cd", cache / "http-v2" / "a"]:
        result = write_as_user(directory)
        assert result.returncode == 0, f"{USER} cannot write {directory}: {result.stderr}"
    owners = {p.stat().st_uid for p in cache.rglob("*")} | {cache.stat().st_uid}
    assert owners == {pwd.getpwnam(USER).pw_uid}


def test_the_role_changes_nothing_the_second_time_and_check_mode_tells_the_truth(cache: Path, tmp_path: Path) -> None:
    check = run_role(cache, tmp_path, "--check")
    assert check.returncode == 0 and "changed=1" in check.stdout, check.stdout
    assert (cache / "wheels").stat().st_uid == 0, "check mode changed the owner"
    assert run_role(cache, tmp_path).returncode == 0
    again = run_role(cache, tmp_path)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout


def test_check_mode_on_a_fresh_box_reports_the_change_for_a_user_not_created_yet(cache: Path, tmp_path: Path) -> None:
    # On a fresh box the conda role's user task only reports in check mode; the
    # cache task must not look up an owner that does not exist yet.
    check = run_role(cache, tmp_path, "--check", user="verl-pascal-not-created")
    assert check.returncode == 0 and "changed=1" in check.stdout, check.stdout + check.stderr
    assert "a real run creates it" in check.stdout
    assert {p.stat().st_uid for p in cache.rglob("*")} == {0}, "check mode changed an owner"


def test_an_empty_setting_leaves_pip_its_default_cache(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    proc = run_role("", tmp_path)
    assert proc.returncode == 0 and "changed=0" in proc.stdout and "skipping" in proc.stdout, proc.stdout
