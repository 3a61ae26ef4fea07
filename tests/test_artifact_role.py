"""The artifact role with artifact_mirror_dir, run for real by ansible-playbook
against this machine (connection local, everything under tmp_path): the copy
from the mirror directory is sha256-checked, idempotent, changes nothing in
check mode, and a wrong file never stays in the cache; the pip entry point
copies the mirror's wheels and points pip at them only.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, needs_ansible, run_playbook

pytestmark = needs_ansible
#: The repository's ansible.cfg, as a user's run from the checkout reads it.
CONFIG = {"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")}

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: artifact
        tasks_from: fetch
      vars:
        artifact_name: demo.run
        artifact_url: http://upstream.example.org/demo.run
        artifact_lock_key: demo_sha256
    - ansible.builtin.include_role:
        name: artifact
        tasks_from: pip
    - ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: "{{ {'pip_args': artifact_pip_args} | to_json }}"
      check_mode: false
      changed_when: false
"""


@pytest.fixture
def box(tmp_path: Path):
    mirror = tmp_path / "mirror"
    (mirror / "simple" / "demo").mkdir(parents=True)
    (mirror / "demo.run").write_bytes(b"the real installer\n")
    (mirror / "simple" / "demo" / "demo-1.0-py3-none-any.whl").write_bytes(b"a wheel")
    (mirror / "simple" / "demo" / "demo-0.9.tar.gz").write_bytes(b"an sdist")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    return tmp_path, mirror


def run(tmp_path: Path, mirror: Path, sha256: str, *extra: str, url: str = "") -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    variables = {"artifact_mirror_dir": str(mirror) if str(mirror) != "." else "", "artifact_mirror_url": url, "artifact_cache_dir": str(tmp_path / "cache"),
                 "artifact_sha256": sha256, "out": str(out)}
    proc = run_playbook(tmp_path, tmp_path / "play.yml", "-e", json.dumps(variables), *extra, env=CONFIG, timeout=300)
    return proc, json.loads(out.read_text()) if out.exists() else {}


def recap(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.split("PLAY RECAP")[-1]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_copy_is_checked_idempotent_and_check_mode_changes_nothing(box) -> None:
    tmp_path, mirror = box
    good = sha(mirror / "demo.run")
    cache = tmp_path / "cache"
    proc, _ = run(tmp_path, mirror, good, "--check", "--diff")
    assert proc.returncode == 0, proc.stdout
    assert "changed=0" not in recap(proc) and not cache.exists()

    proc, facts = run(tmp_path, mirror, good)
    assert proc.returncode == 0, proc.stdout
    assert (cache / "demo.run").read_bytes() == (mirror / "demo.run").read_bytes()
    wheels = cache / "mirror-wheels"
    assert sorted(p.name for p in wheels.iterdir()) == ["demo-0.9.tar.gz", "demo-1.0-py3-none-any.whl"]
    assert facts["pip_args"] == ["--no-index", "--find-links", str(wheels)]

    for extra in ((), ("--check", "--diff")):
        proc, _ = run(tmp_path, mirror, good, *extra)
        assert proc.returncode == 0 and "changed=0" in recap(proc), proc.stdout


def test_a_rerun_sends_only_the_wheels_the_box_lacks_or_holds_otherwise(box) -> None:
    """The mirror's pip files are copied by content: a damaged or deleted one comes back, the rest stay as
    they are (not sent again), and check mode names the repair without making it."""
    tmp_path, mirror = box
    good = sha(mirror / "demo.run")
    proc, _ = run(tmp_path, mirror, good)
    assert proc.returncode == 0, proc.stdout
    wheels = tmp_path / "cache" / "mirror-wheels"
    kept, damaged = wheels / "demo-0.9.tar.gz", wheels / "demo-1.0-py3-none-any.whl"
    kept_stat = kept.stat()
    damaged.write_bytes(b"half a wheel")

    proc, _ = run(tmp_path, mirror, good, "--check", "--diff")
    assert proc.returncode == 0 and "changed=0" not in recap(proc), proc.stdout
    assert damaged.read_bytes() == b"half a wheel"

    proc, _ = run(tmp_path, mirror, good)
    assert proc.returncode == 0 and "changed=0" not in recap(proc), proc.stdout
    assert damaged.read_bytes() == b"a wheel"
    assert kept.stat().st_mtime_ns == kept_stat.st_mtime_ns and kept.stat().st_ino == kept_stat.st_ino
    assert "demo-1.0-py3-none-any.whl" in proc.stdout and "demo-0.9.tar.gz" not in proc.stdout.split("PLAY RECAP")[0]


def test_wrong_file_in_the_mirror_is_refused_and_removed(box) -> None:
    tmp_path, mirror = box
    want = "a" * 64
    proc, _ = run(tmp_path, mirror, want)
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert f"Expected sha256 {want}" in out and f"has sha256 {sha(mirror / 'demo.run')} and was deleted" in out
    assert not (tmp_path / "cache" / "demo.run").exists()


def test_missing_file_names_the_prefetch_command(box) -> None:
    tmp_path, mirror = box
    good = sha(mirror / "demo.run")
    (mirror / "demo.run").unlink()
    proc, _ = run(tmp_path, mirror, good)
    assert proc.returncode != 0
    assert f"verl-pascal-prefetch --mirror {mirror} --only demo.run" in " ".join(proc.stdout.split())


def test_both_mirrors_set_is_refused(box) -> None:
    tmp_path, mirror = box
    proc, _ = run(tmp_path, mirror, sha(mirror / "demo.run"), url="http://mirror.example.org:8080")
    assert proc.returncode != 0 and "not both" in proc.stdout
    assert not (tmp_path / "cache").exists()


def test_http_mirror_points_pip_at_its_flat_page(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text(PLAYBOOK.split("    - ansible.builtin.include_role:\n        name: artifact\n"
                                                      "        tasks_from: fetch")[0]
                                       + PLAYBOOK.split("demo_sha256\n")[1])
    cases = {"http://mirror.example.org:8080/": ["--no-index", "--find-links", "http://mirror.example.org:8080/find-links.html"],
             "": []}  # no mirror: the roles keep their own index
    for url, args in cases.items():
        proc, facts = run(tmp_path, Path(""), "", url=url)
        assert proc.returncode == 0, proc.stdout
        assert facts["pip_args"] == args


REGISTRY_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    demo_sha256: "{{ demo_sha }}"
    artifacts:
      demo:
        name: demo.run
        url: http://upstream.example.org/demo.run
        sha256: "{{ demo_sha256 }}"
  tasks:
    - ansible.builtin.include_role:
        name: artifact
        tasks_from: fetch
      vars:
        artifact_id: "{{ wanted_id }}"
"""


def run_registry(tmp_path: Path, mirror: Path, wanted_id: str, demo_sha: str) -> subprocess.CompletedProcess:
    (tmp_path / "registry.yml").write_text(REGISTRY_PLAYBOOK)
    variables = {"artifact_mirror_dir": str(mirror), "artifact_mirror_url": "", "artifact_cache_dir": str(tmp_path / "cache"),
                 "wanted_id": wanted_id, "demo_sha": demo_sha}
    return run_playbook(tmp_path, tmp_path / "registry.yml", "-e", json.dumps(variables), env=CONFIG, timeout=300)


def test_an_artifact_of_the_registry_is_fetched_by_its_id(box) -> None:
    """The roles name a file by its registry id; its name, URL and sha256 come from the lock's entry."""
    tmp_path, mirror = box
    proc = run_registry(tmp_path, mirror, "demo", sha(mirror / "demo.run"))
    assert proc.returncode == 0, proc.stdout
    assert (tmp_path / "cache" / "demo.run").read_bytes() == (mirror / "demo.run").read_bytes()

    (tmp_path / "cache" / "demo.run").unlink()
    proc = run_registry(tmp_path, mirror, "demo", "a" * 64)  # the lock's sha256 is wrong for the file
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and f"Expected sha256 {'a' * 64} (artifacts.demo.sha256 in the version lock)" in out
    assert not (tmp_path / "cache" / "demo.run").exists()


def test_an_id_not_in_the_registry_is_refused_naming_the_ids(box) -> None:
    tmp_path, mirror = box
    proc = run_registry(tmp_path, mirror, "nope", sha(mirror / "demo.run"))
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and "No artifact nope in the artifact registry" in out and "it has demo" in out
    assert not (tmp_path / "cache").exists()
