"""verl-pascal-prefetch: lock reading, artifact discovery, and downloads against a local server."""

from __future__ import annotations

import errno
import importlib.util
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import yaml

from conftest import REPO_ROOT  # noqa: E402

from hostile_sdist import hostile_sdist  # noqa: E402
from prefetch_server import Upstream, simple_page  # noqa: E402
from verl_pascal.prefetch import artifacts, cli, pipwheels  # noqa: E402
from verl_pascal.version_lock import Lock, LockError, parse_overrides  # noqa: E402

CHUNK = 16 * 1024  # --chunk-size 16 (KiB): small, so a drop lands on a chunk boundary


def needs_setuptools() -> None:
    """Skip without setuptools, which pip needs to prepare the hostile sdist (in its own process). Looked up,
    not imported: importing setuptools after another test imported the standard library's distutils (pip's
    internals do) fails in setuptools' own check."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed")

def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n)


def registry(**entries: Dict[str, object]) -> str:
    """A lock's artifact registry (``artifacts: {id: {url, sha256, ...}}``), as YAML."""
    return yaml.safe_dump({"artifacts": entries}, sort_keys=True)


def write_lock(path: Path, server: Upstream, files: Dict[str, bytes], sizes: bool = True) -> Path:
    """A lock whose registry has one entry per file; id = name without dots."""
    entries: Dict[str, Dict[str, object]] = {}
    for name, data in files.items():
        key = name.replace(".", "_").replace("-", "_")
        entries[key] = {"url": f"{server.url}/{name}", "sha256": sha(data)}
        if sizes:
            entries[key]["size"] = len(data)
    path.write_text("---\n" + registry(**entries))
    return path


def prefetch(capsys: pytest.CaptureFixture, *argv: str) -> Tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


FAST = ("--no-progress", "--backoff", "0.01", "--retries", "2", "--timeout", "5", "--chunk-size", "16")


@pytest.fixture
def env(tmp_path: Path):
    """(files, server, lock path, mirror) for two files; tests set server.modes."""
    files = {"alpha.run": blob(200 * 1024, 1), "beta.tar.xz": blob(96 * 1024, 2)}
    with Upstream(files) as server:
        lock = write_lock(tmp_path / "lock.yml", server, files)
        yield files, server, lock, tmp_path / "mirror"


# --- lock reading and discovery ----------------------------------------------

def test_real_lock_has_cuda_and_cudnn() -> None:
    found = artifacts.discover(Lock.from_paths())
    by_key = {a.key: a for a in found.artifacts}
    assert not found.errors
    cuda, cudnn = by_key["cuda_runfile"], by_key["cudnn_archive"]
    assert cuda.url == ("https://developer.download.nvidia.com/compute/cuda/11.8.0/local_installers/"
                        "cuda_11.8.0_520.61.05_linux.run")
    assert cuda.sha256 == "9223c4af3aebe4a7bbed9abd9b163b03a1b34b855fbc2b4a0d1b706ac09a5a16"
    assert (cuda.path, cuda.size) == ("cuda_11.8.0_520.61.05_linux.run", 4336730777)
    assert cudnn.url == ("https://developer.download.nvidia.com/compute/cudnn/redist/cudnn/linux-x86_64/"
                         "cudnn-linux-x86_64-8.9.7.29_cuda11-archive.tar.xz")
    assert cudnn.sha256 == "a3e2509028cecda0117ce5a0f42106346e82e86d390f4bb9475afc976c77402e"
    assert (cudnn.path, cudnn.size) == ("cudnn-linux-x86_64-8.9.7.29_cuda11-archive.tar.xz", 860967256)
    # The registry, and nothing else: the roles fetch these four by id.
    assert sorted(k for k in by_key if not k.startswith("verl_releases[")) == [
        "apex_archive", "cuda_runfile", "cudnn_archive", "miniforge_installer"]
    assert by_key["miniforge_installer"].path == "Miniforge3-26.3.2-3-Linux-x86_64.sh"


def test_real_lock_renders_jinja_settings() -> None:
    lock = Lock.from_paths()
    assert lock.get("conda_env_prefix") == "/opt/miniforge3/envs/verl-p40"  # simple references
    pytest.importorskip("ansible")
    assert lock.get("cuda_toolkit_path") == "/usr/local/cuda-11.8"  # a filter: Ansible's Templar


SYNTHETIC = """---
miniforge_version: "24.11.3-0"
miniforge_sha: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA
apex_commit: 0123abc
artifact_mirror_url: http://mirror:8080
artifacts:
  miniforge:
    url: "https://github.com/conda-forge/miniforge/releases/download/{{ miniforge_version }}/Miniforge3-{{ miniforge_version }}-Linux-x86_64.sh"
    sha256: "{{ miniforge_sha }}"
  apex:
    url: "https://github.com/NVIDIA/apex/archive/{{ apex_commit }}.tar.gz"
    name: "apex-{{ apex_commit }}.tar.gz"
    sha256: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    size: "1234"
  todo:
    url: https://example.org/todo.bin
    sha256: ""
verl_releases:
  - version: "0.5.0"
    url: https://sdists.example.org/verl/verl-0.5.0.tar.gz
    sha256: cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc
  - version: "0.4.1"
    url: https://sdists.example.org/verl/verl-0.4.1.tar.gz
    sha256: dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd
    size: 99
"""


def test_synthetic_lock_discovery(tmp_path: Path) -> None:
    (tmp_path / "lock.yml").write_text(SYNTHETIC)
    found = artifacts.discover(Lock.from_paths([tmp_path / "lock.yml"]))
    by_key = {a.key: a for a in found.artifacts}
    assert sorted(by_key) == ["apex", "miniforge", "verl_releases[0.4.1]", "verl_releases[0.5.0]"]
    mf = by_key["miniforge"]
    assert mf.url.endswith("/24.11.3-0/Miniforge3-24.11.3-0-Linux-x86_64.sh")
    assert (mf.path, mf.sha256, mf.size) == ("Miniforge3-24.11.3-0-Linux-x86_64.sh", "a" * 64, None)
    assert (by_key["apex"].path, by_key["apex"].size) == ("apex-0123abc.tar.gz", 1234)
    assert by_key["verl_releases[0.4.1]"].path == "verl-0.4.1.tar.gz"
    assert by_key["verl_releases[0.4.1]"].size == 99
    assert "todo" in found.skipped and not found.errors
    assert [a.key for a in artifacts.select(found.artifacts, ["verl_releases"])] == [
        "verl_releases[0.4.1]", "verl_releases[0.5.0]"]
    assert [a.key for a in artifacts.select(found.artifacts, ["apex-0123abc.tar.gz"])] == ["apex"]
    with pytest.raises(LockError, match="nope"):
        artifacts.select(found.artifacts, ["nope"])


def test_only_the_registry_names_artifacts(tmp_path: Path) -> None:
    """Entries that look like artifacts by their names are not; registry entries reference them."""
    (tmp_path / "lock.yml").write_text(
        "---\nmf_version: '1.0'\nmf_installer_name: 'MF-{{ mf_version }}.sh'\n"
        "mf_installer_url: 'https://e.org/dl/{{ mf_installer_name }}'\nmf_sha256: " + "a" * 64 + "\n"
        "x_url: https://e.org/x.bin\nx_sha256: " + "b" * 64 + "\n"
        + registry(mf_installer={"name": "{{ mf_installer_name }}", "url": "{{ mf_installer_url }}",
                                 "sha256": "{{ mf_sha256 }}"}))
    found = artifacts.discover(Lock.from_paths([tmp_path / "lock.yml"]))
    by_key = {a.key: a for a in found.artifacts}
    assert sorted(by_key) == ["mf_installer"] and not found.errors  # x_url/x_sha256: not in the registry
    assert (by_key["mf_installer"].path, by_key["mf_installer"].sha256) == ("MF-1.0.sh", "a" * 64)


def test_a_lock_without_a_registry_says_so(tmp_path: Path) -> None:
    (tmp_path / "lock.yml").write_text("---\nx_url: https://e.org/x.bin\nx_sha256: " + "b" * 64 + "\n")
    found = artifacts.discover(Lock.from_paths([tmp_path / "lock.yml"]))
    assert not found.artifacts and "no artifact registry" in found.skipped["artifacts"]


def test_releases_mapping_by_version(tmp_path: Path) -> None:
    """The verl role's shape: releases keyed by version, file name in ``sdist``; no url: the index has it."""
    (tmp_path / "lock.yml").write_text(
        "---\nverl_releases:\n"
        "  '0.5.0': {sdist: verl-0.5.0.tar.gz, url: 'https://e.org/v/verl-0.5.0.tar.gz?x=1', sha256: " + "c" * 64 + "}\n"
        "  '0.4.1': {sdist: verl-0.4.1.tar.gz, sha256: " + "d" * 64 + "}\n"
        "  '0.3.0': {sha256: " + "e" * 64 + "}\n"  # neither url nor sdist: not an artifact
        "  '0.2.0': {sdist: verl.tar.gz, sha256: " + "f" * 64 + "}\n")  # no version in the name: no project to ask for
    found = artifacts.discover(Lock.from_paths([tmp_path / "lock.yml"]))
    by_key = {a.key: a for a in found.artifacts}
    assert sorted(by_key) == ["verl_releases[0.4.1]", "verl_releases[0.5.0]"]
    assert (by_key["verl_releases[0.5.0]"].source, by_key["verl_releases[0.5.0]"].path) == ("lock", "verl-0.5.0.tar.gz")
    pip_one = by_key["verl_releases[0.4.1]"]
    assert (pip_one.source, pip_one.url, pip_one.sha256) == ("pip-sdist", "pip:verl==0.4.1", "d" * 64)
    assert "no url or sdist" in found.skipped["verl_releases[0.3.0]"]
    assert "not an sdist file name" in found.errors["verl_releases[0.2.0]"]


def test_real_lock_fetches_verl_sdists_from_the_index() -> None:
    found = artifacts.discover(Lock.from_paths())
    sdists = {a.key: a for a in found.artifacts if a.key.startswith("verl_releases[")}
    assert sdists["verl_releases[0.5.0]"].url == "pip:verl==0.5.0"
    assert sdists["verl_releases[0.5.0]"].sha256 == "0aabeab59459f947c826a3cfef35836e52691e50083f7611a4ef28a504796409"
    assert [a.key for a in artifacts.select(found.artifacts, ["verl-0.4.1.tar.gz"])] == ["verl_releases[0.4.1]"]


def test_overrides_and_directory_lock(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(SYNTHETIC)
    (tmp_path / "b.yml").write_text("---\napex_commit: fedcba9\n")  # later file wins, as in Ansible
    lock = Lock.from_paths([tmp_path], parse_overrides(["miniforge_version=25.1.1-2"]))
    by_key = {a.key: a for a in artifacts.discover(lock).artifacts}
    assert by_key["apex"].path == "apex-fedcba9.tar.gz"
    assert "/25.1.1-2/" in by_key["miniforge"].url
    with pytest.raises(LockError):
        parse_overrides(["no-equals-sign"])


A64 = "a" * 64


@pytest.mark.parametrize("text, message", [
    (registry(x={"url": "https://e.org/x.bin", "sha256": "1234"}), "not a sha256"),
    (registry(x={"url": "ftp://e.org/x.bin", "sha256": A64}), "not an http"),
    (registry(x={"url": "https://e.org/x.bin", "sha256": A64, "size": "big"}), "not a size"),
    (registry(x={"url": "https://e.org/{{ nope }}", "sha256": A64}), "undefined variable"),
    ("x_url: https://e.org/{{ y }}\ny: '{{ x_url }}'\n" + registry(x={"url": "{{ x_url }}", "sha256": A64}),
     "template loop"),
    (registry(x={"url": "https://e.org/a/x.bin", "sha256": A64}, y={"url": "https://e.org/b/x.bin", "sha256": "b" * 64}),
     "also x's"),
    (registry(x={"url": "https://e.org/x/", "sha256": A64}), "plain file name"),
    (registry(x={"url": "https://e.org/x.bin"}), "needs at least url and sha256"),
    ("artifacts: [a, b]\n", "not a mapping"),
])
def test_bad_lock_entries(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "lock.yml").write_text("---\n" + text)
    found = artifacts.discover(Lock.from_paths([tmp_path / "lock.yml"]))
    assert any(message in m for m in found.errors.values()), found.errors


def test_lock_error_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "lock.yml").write_text("---\n" + registry(x={"url": "https://e.org/x.bin", "sha256": "1234"}))
    code, _, err = prefetch(capsys, "--lock", str(tmp_path / "lock.yml"), "--mirror", str(tmp_path / "m"))
    assert code == 2 and "not a sha256" in err
    code, _, err = prefetch(capsys, "--mirror", str(tmp_path / "m"), "--only", "no_such_thing")
    assert code == 2 and "no_such_thing" in err and "cuda_runfile" in err


def test_list_downloads_nothing(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    code, out, _ = prefetch(capsys, "--lock", str(lock), "--list")
    assert code == 0 and "alpha_run\talpha.run" in out and "beta.tar.xz" in out
    assert server.log == [] and not mirror.exists()


# --- downloads ------------------------------------------------------------------

def test_fetch_writes_files_manifest_and_sums(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)
    assert code == 0, err
    assert "2 fetched" in out
    for name, data in files.items():
        assert (mirror / name).read_bytes() == data
    assert not list(mirror.glob("*.part"))
    manifest = json.loads((mirror / "manifest.json").read_text())
    assert manifest["format"] == 1
    assert manifest["files"] == [
        {"name": "alpha.run", "url": f"{server.url}/alpha.run", "size": len(files["alpha.run"]),
         "sha256": sha(files["alpha.run"]), "key": "alpha_run", "source": "lock"},
        {"name": "beta.tar.xz", "url": f"{server.url}/beta.tar.xz", "size": len(files["beta.tar.xz"]),
         "sha256": sha(files["beta.tar.xz"]), "key": "beta_tar_xz", "source": "lock"},
    ]
    sums = (mirror / "SHA256SUMS").read_text()
    assert sums == f"{sha(files['alpha.run'])}  alpha.run\n{sha(files['beta.tar.xz'])}  beta.tar.xz\n"
    assert subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=mirror).returncode == 0


def test_good_file_is_never_downloaded_again(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)[0] == 0
    seen = len(server.log)
    code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)
    assert code == 0 and "2 already present" in out and "present alpha.run" in err
    assert len(server.log) == seen  # not even a HEAD request


def test_resume_after_dropped_connection(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    server.modes["alpha.run"] = {"drop": True, "drop_at": 5 * CHUNK}
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--only", "alpha_run", *FAST)
    assert code == 0, err
    assert (mirror / "alpha.run").read_bytes() == files["alpha.run"]
    assert server.requests_for("alpha.run") == [("alpha.run", None, 200),
                                                ("alpha.run", f"bytes={5 * CHUNK}-", 206)]
    assert "retry 1/2" in err


def test_server_ignoring_range_restarts_from_zero(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    server.modes["alpha.run"] = {"drop": True, "drop_at": 3 * CHUNK, "norange": True}
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--only", "alpha.run", *FAST)
    assert code == 0, err
    assert (mirror / "alpha.run").read_bytes() == files["alpha.run"]
    assert server.requests_for("alpha.run")[1] == ("alpha.run", f"bytes={3 * CHUNK}-", 200)
    assert "ignored the range request" in err


def test_stale_part_is_resumed(env, capsys: pytest.CaptureFixture) -> None:
    """An interrupted earlier run (a .part on disk) resumes where it stopped."""
    files, server, lock, mirror = env
    mirror.mkdir()
    (mirror / "beta.tar.xz.part").write_bytes(files["beta.tar.xz"][:40000])
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--only", "beta_tar_xz", *FAST)
    assert code == 0, err
    assert server.requests_for("beta.tar.xz") == [("beta.tar.xz", "bytes=40000-", 206)]
    assert (mirror / "beta.tar.xz").read_bytes() == files["beta.tar.xz"]


def test_corrupt_resumed_part_gets_one_clean_download(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    mirror.mkdir()
    (mirror / "beta.tar.xz.part").write_bytes(b"\0" * 40000)
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--only", "beta_tar_xz", *FAST)
    assert code == 0, err
    assert [r[1] for r in server.requests_for("beta.tar.xz")] == ["bytes=40000-", None]
    assert (mirror / "beta.tar.xz").read_bytes() == files["beta.tar.xz"]


def test_wrong_bytes_are_caught_and_removed(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    server.modes["alpha.run"] = {"wrong": True}
    code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)
    assert code == 1
    bad = bytes(b ^ 0x5A for b in files["alpha.run"])
    assert "alpha.run" in err and sha(files["alpha.run"]) in err and sha(bad) in err
    assert f"expected {sha(files['alpha.run'])}, actual {sha(bad)}" in err
    assert not (mirror / "alpha.run").exists() and not (mirror / "alpha.run.part").exists()
    assert (mirror / "beta.tar.xz").read_bytes() == files["beta.tar.xz"]  # the good one still lands
    names = [e["name"] for e in json.loads((mirror / "manifest.json").read_text())["files"]]
    assert names == ["beta.tar.xz"]
    assert "alpha.run" not in (mirror / "SHA256SUMS").read_text()
    assert len(server.requests_for("alpha.run")) == 1  # a full download with wrong bytes is final


def test_size_contradicting_lock_is_final(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with Upstream({"x.bin": b"12345"}) as server:
        lock = tmp_path / "lock.yml"
        lock.write_text("---\n" + registry(x={"url": f"{server.url}/x.bin", "sha256": sha(b"12345"), "size": 6}))
        code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(tmp_path / "m"), *FAST)
        assert code == 1 and "the lock says 6" in err
        assert len(server.log) == 1
        assert not (tmp_path / "m" / "x.bin").exists() and not (tmp_path / "m" / "x.bin.part").exists()


@pytest.mark.parametrize("status, requests", [(500, 3), (503, 3), (404, 1)])
def test_retries_stop_at_their_bound(env, capsys: pytest.CaptureFixture, status: int, requests: int) -> None:
    files, server, lock, mirror = env
    server.modes["beta.tar.xz"] = {"status": status}
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)  # --retries 2
    assert code == 1
    assert len(server.requests_for("beta.tar.xz")) == requests
    assert f"HTTP {status}" in err and "beta.tar.xz" in err
    assert not (mirror / "beta.tar.xz").exists() and not (mirror / "beta.tar.xz.part").exists()
    assert (mirror / "alpha.run").exists()


def test_slow_first_attempt_times_out_then_succeeds(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    server.modes["beta.tar.xz"] = {"slow": 1.0}
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--only", "beta_tar_xz",
                            *FAST, "--timeout", "0.3")
    assert code == 0, err
    assert server.arrivals.count("beta.tar.xz") == 2 and "timed out" in err.lower()


def test_jobs_bounds_concurrency(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    files = {f"f{i}.bin": blob(4096, i) for i in range(6)}
    with Upstream(files, {n: {"delay": 0.15} for n in files}) as server:
        lock = write_lock(tmp_path / "lock.yml", server, files, sizes=False)
        code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(tmp_path / "m"), *FAST, "--jobs", "2")
        assert code == 0, err
        assert server.max_active == 2
        assert "6 fetched" in out


def test_verify(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)[0] == 0
    requests = len(server.log)
    code, out, _ = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify")
    assert code == 0 and "2 file(s)" in out
    path = mirror / "alpha.run"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify")
    assert code == 1 and "alpha.run: sha256 mismatch" in err and sha(bytes(data)) in err
    code, _, _ = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify", "--only", "beta_tar_xz")
    assert code == 0
    (mirror / "beta.tar.xz").unlink()
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify", "--only", "beta_tar_xz")
    assert code == 1 and "beta.tar.xz: missing" in err
    assert len(server.log) == requests  # --verify downloads nothing


def test_progress_bars_appear(env, capsys: pytest.CaptureFixture) -> None:
    files, server, lock, mirror = env
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--chunk-size", "16")
    assert code == 0
    assert "total" in err and "alpha.run" in err and "100%" in err and "KiB" in err
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(tmp := mirror.parent / "m2"),
                            "--no-progress")
    assert code == 0 and "%" not in err and tmp.exists()


def test_every_byte_received_is_kept_for_the_resume(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A server that drops every connection after 300 KiB: with 1 MiB reads, each resume starts at the last byte."""
    cap = 300 * 1024
    files = {"big.bin": blob(2 * 1024 * 1024, 7)}
    with Upstream(files, {"big.bin": {"cap": cap}}) as server:
        lock = write_lock(tmp_path / "lock.yml", server, files)
        mirror = tmp_path / "m"
        # The default read size (1 MiB) and two retries in a row without a new byte.
        code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--no-progress",
                                "--backoff", "0.01", "--retries", "2", "--timeout", "5")
        assert code == 0, err
        assert (mirror / "big.bin").read_bytes() == files["big.bin"]
        ranges = [r[1] for r in server.requests_for("big.bin")]
        assert ranges == [None] + [f"bytes={n * cap}-" for n in range(1, 7)]


def test_disk_full_names_the_file_the_space_and_deletes_its_part(env, capsys: pytest.CaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while writing alpha.run (200 KiB) with 64 KiB free: say so, keep no .part, record what finished."""
    files, server, lock, mirror = env
    real_open = open
    free = 64 * 1024

    class FullDisk:
        def __init__(self, handle) -> None:
            self.handle, self.written = handle, 0

        def write(self, data: bytes) -> int:
            if self.written + len(data) > free:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
            return self.handle.write(data)

        def __getattr__(self, name: str):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.handle.close()

    def small_disk_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return FullDisk(handle) if str(path).endswith("alpha.run.part") else handle

    monkeypatch.setattr("builtins.open", small_disk_open)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 << 30, (10 << 30) - free, free))
    code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)
    assert code == 1
    assert "Traceback" not in err, err
    assert "no space left" in err and "alpha.run needs 200.0 KiB, 64.0 KiB is free (at least 136.0 KiB more)" in err
    assert "partial file was deleted" in err
    assert not (mirror / "alpha.run.part").exists() and not (mirror / "alpha.run").exists()
    assert len(server.requests_for("alpha.run")) == 1  # a full disk is not retried
    names = [e["name"] for e in json.loads((mirror / "manifest.json").read_text())["files"]]
    assert names == ["beta.tar.xz"]


def one_entry(**values: object) -> str:
    """manifest.json with one entry: a valid one for alpha.run, with ``values`` changed."""
    entry = {"name": "alpha.run", "url": "http://h/alpha.run", "size": 1, "sha256": "a" * 64}
    entry.update(values)
    return json.dumps({"format": 1, "files": [entry]})


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("text, problem", [
    ('{"format": 1, "files": [{"name": "alpha.run", "url": "x", "si', "it is not valid JSON"),
    ('[{"name": "alpha.run"}]', "it holds a JSON list, not an object"),
    ('{"format": 1, "files": [{"name": "alpha.run", "url": "x", "size": 1}]}', "files entry 1 (alpha.run) lacks sha256"),
    ('{"format": 1, "files": ' + nested(200_000) + "}", "it is nested more than 32 levels deep"),
    (one_entry(note=json.loads(nested(600))), "it is nested more than 32 levels deep"),
    (one_entry(name=5), "files entry 1 (5) has a name that is a JSON int, not a string"),
    (one_entry(size="1"), "files entry 1 (alpha.run) has a size that is not a number of bytes ('1')"),
    (one_entry(sha256='"><script>'), "files entry 1 (alpha.run) has a sha256 that is not 64 lowercase hex digits"),
    (one_entry(url=["x"]), "files entry 1 (alpha.run) has a url that is a JSON list, not a string"),
    (one_entry(key={"k": 1}), "files entry 1 (alpha.run) has a key that is a JSON dict, not a string"),
    (one_entry(name="/etc/hostname"), "files entry 1 (/etc/hostname) is an absolute path"),
    (one_entry(name="../../etc/hostname"), "files entry 1 (../../etc/hostname) has an empty, '.' or '..' component"),
    (one_entry(name="simple/./x.whl"), "files entry 1 (simple/./x.whl) has an empty, '.' or '..' component"),
    (one_entry(name="a\nb"), "files entry 1 ('a\\nb') has a name with a control character or a backslash"),
], ids=["truncated", "list", "entry-without-sha256", "200000-deep", "600-deep-in-an-entry", "name-not-a-string",
        "size-a-string", "sha256-not-hex", "url-a-list", "key-an-object", "absolute-name", "dotdot-name",
        "dot-name", "name-with-a-newline-shown-on-one-line"])
def test_damaged_manifest_says_what_to_do(env, capsys: pytest.CaptureFixture, text: str, problem: str) -> None:
    files, server, lock, mirror = env
    mirror.mkdir()
    (mirror / "manifest.json").write_text(text)
    for mode in ([], ["--verify"]):
        code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST, *mode)
        assert code == 2, err
        assert f"{mirror / 'manifest.json'} is damaged: {problem}" in err
        assert "delete it and SHA256SUMS beside it, then run verl-pascal-prefetch --mirror" in err
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert server.log == []  # stopped before any download
    (mirror / "manifest.json").unlink()  # what the message says: the next run records the mirror again
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)[0] == 0
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify")[0] == 0


def record_opens(monkeypatch: pytest.MonkeyPatch) -> List[Path]:
    """Every file this process opens from now on (builtins.open and io.open), resolved."""
    opened: List[Path] = []
    real_open = io.open

    def spy(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            opened.append(Path(file).resolve())
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    monkeypatch.setattr(io, "open", spy)
    return opened


@pytest.mark.parametrize("case", ["dotdot", "absolute", "linked-folder", "linked-file"])
def test_manifest_entry_outside_the_mirror_is_refused_and_never_opened(
        env, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """An entry that reaches a file outside the mirror, with that file's true sha256 and size in the records."""
    files, server, lock, mirror = env
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)[0] == 0
    elsewhere = mirror.parent / "elsewhere"
    elsewhere.mkdir()
    secret = elsewhere / "secret.whl"
    secret.write_bytes(b"not the mirror's\n")
    (mirror / "simple").mkdir()
    (mirror / "simple" / "evil").symlink_to(elsewhere, target_is_directory=True)
    name = {"dotdot": "../elsewhere/secret.whl", "absolute": str(secret), "linked-folder": "simple/evil/secret.whl",
            "linked-file": "simple/secret.whl"}[case]
    (mirror / "simple" / "secret.whl").symlink_to(secret)
    manifest = json.loads((mirror / "manifest.json").read_text())
    manifest["files"].append({"name": name, "url": "http://h/secret.whl", "size": secret.stat().st_size,
                              "sha256": sha(secret.read_bytes()), "key": "pip:secret", "source": "pip"})
    (mirror / "manifest.json").write_text(json.dumps(manifest))
    with (mirror / "SHA256SUMS").open("a") as sums:
        sums.write(f"{sha(secret.read_bytes())}  {name}\n")
    requests = len(server.log)
    opened = record_opens(monkeypatch)
    for mode in (["--verify"], []):
        code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST, *mode)
        assert code == 2, out + err
        assert f"{mirror / 'manifest.json'} is " in err and f"files entry 3 ({name})" in err
        if case.startswith("linked"):
            assert f"leads outside the mirror through the symbolic link {mirror / 'simple'}/" in err
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert [p for p in opened if p.is_relative_to(elsewhere)] == []
    assert len(server.log) == requests  # nothing downloaded either


def test_verify_does_not_read_a_lock_file_linked_from_outside(env, capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """alpha.run replaced by a link to a copy outside the mirror (and no longer recorded): FAIL, unread."""
    files, server, lock, mirror = env
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)[0] == 0
    copy = mirror.parent / "elsewhere.run"
    copy.write_bytes(files["alpha.run"])
    (mirror / "alpha.run").unlink()
    (mirror / "alpha.run").symlink_to(copy)
    manifest = json.loads((mirror / "manifest.json").read_text())
    manifest["files"] = [e for e in manifest["files"] if e["name"] != "alpha.run"]
    (mirror / "manifest.json").write_text(json.dumps(manifest))
    opened = record_opens(monkeypatch)
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify")
    assert code == 1
    assert f"FAIL alpha.run: leads outside the mirror through the symbolic link {mirror / 'alpha.run'}" in err
    assert copy.resolve() not in opened


class Lines:
    """A subprocess's stream, read on a thread; ``wait_for`` a line holding some text."""

    def __init__(self, stream) -> None:
        self.lines: List[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, needle: str, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: any(needle in line for line in self.lines), timeout)

    def text(self) -> str:
        self._thread.join(10)
        return "".join(self.lines)


def test_ctrl_c_stops_within_seconds_records_what_finished_and_resumes(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    files = {"small.bin": blob(64 * 1024, 3), "slow.bin": blob(8 * 1024 * 1024, 4)}
    with Upstream(files, {"slow.bin": {"rate": 256 * 1024}}) as server:  # 32 s for the whole file
        lock = write_lock(tmp_path / "lock.yml", server, files)
        mirror = tmp_path / "m"
        proc = subprocess.Popen([sys.executable, "-m", "verl_pascal.prefetch.cli", "--lock", str(lock),
                                 "--mirror", str(mirror), "--no-progress", "--jobs", "2", "--timeout", "30"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr = Lines(proc.stderr)
        try:
            assert stderr.wait_for("fetched small.bin", 60), "".join(stderr.lines)
            part = mirror / "slow.bin.part"
            deadline = time.monotonic() + 30
            while (not part.exists() or part.stat().st_size < 256 * 1024) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert part.exists() and part.stat().st_size < len(files["slow.bin"])  # mid-download
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=15)  # "within seconds", generously bounded
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err = stderr.text()
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "run the same command again to resume" in err
        assert "not finished: slow.bin (slow.bin.part kept" in err
        kept = part.stat().st_size
        assert 0 < kept < len(files["slow.bin"]) and not (mirror / "slow.bin").exists()
        assert part.read_bytes() == files["slow.bin"][:kept]
        names = [e["name"] for e in json.loads((mirror / "manifest.json").read_text())["files"]]
        assert names == ["small.bin"] and "small.bin" in (mirror / "SHA256SUMS").read_text()

        server.modes.clear()
        code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), *FAST)
        assert code == 0, err
        assert server.requests_for("slow.bin")[-1][1:] == (f"bytes={kept}-", 206)
        assert (mirror / "slow.bin").read_bytes() == files["slow.bin"]
        assert "1 fetched, 1 already present" in out


# --- the pip hook -----------------------------------------------------------------

def make_wheel(folder: Path, name: str, version: str, requires: List[str] = ()) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    members = {
        f"{name.replace('-', '_')}/__init__.py": "",
        f"{dist}.dist-info/METADATA": meta,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for member, text in members.items():
            zf.writestr(member, text)
        zf.writestr(f"{dist}.dist-info/RECORD", "".join(f"{m},,\n" for m in members) + f"{dist}.dist-info/RECORD,,\n")
    path.write_bytes(buf.getvalue())
    return path


def test_pip_hook_builds_a_pep503_index(tmp_path: Path, capsys: pytest.CaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    links = tmp_path / "links"
    links.mkdir()
    top = make_wheel(links, "vp-demo-top", "1.0", ["vp_demo.dep==2.0"])
    dep = make_wheel(links, "vp_demo.dep", "2.0")
    req = tmp_path / "requirements.txt"
    req.write_text("vp-demo-top==1.0\n")
    lock = tmp_path / "lock.yml"
    lock.write_text("---\npython_version: '3.10.12'\n")
    mirror = tmp_path / "mirror"
    code, out, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--no-progress",
                              "--pip-requirements", str(req), "--pip-find-links", str(links),
                              "--pip-arg=--no-index", "--pip-arg=--isolated")
    assert code == 0, err
    assert "Saved" in err  # pip's own output
    entries = {e["name"]: e for e in json.loads((mirror / "manifest.json").read_text())["files"]}
    assert sorted(entries) == [f"simple/vp-demo-dep/{dep.name}", f"simple/vp-demo-top/{top.name}"]
    entry = entries[f"simple/vp-demo-top/{top.name}"]
    assert entry["sha256"] == sha(top.read_bytes()) and entry["source"] == "pip" and entry["key"] == "pip:vp-demo-top"
    assert entry["url"] == top.as_uri() and entry["size"] == top.stat().st_size
    page = (mirror / "simple" / "vp-demo-top" / "index.html").read_text()
    assert f'href="{top.name}#sha256={sha(top.read_bytes())}"' in page
    assert 'href="vp-demo-dep/"' in (mirror / "simple" / "index.html").read_text()
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify")[0] == 0

    # Any static HTTP server makes the mirror a package index pip installs from.
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(mirror)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        out_dir = tmp_path / "got"
        subprocess.run([sys.executable, "-m", "pip", "download", "--isolated", "-q", "--dest", str(out_dir),
                        "--index-url", f"http://127.0.0.1:{server.server_address[1]}/simple/", "vp-demo-top==1.0"],
                       check=True)
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([dep.name, top.name])


def test_deleted_manifest_is_rebuilt_with_the_wheels_already_in_the_mirror(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the damaged-manifest message promises: delete it, run again, every file is recorded again."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    links = tmp_path / "links"
    links.mkdir()
    wheel = make_wheel(links, "vp-demo", "1.0")
    req = tmp_path / "requirements.txt"
    req.write_text("vp-demo==1.0\n")
    lock = tmp_path / "lock.yml"
    lock.write_text("---\npython_version: '3.10.12'\n")
    mirror = tmp_path / "mirror"
    argv = ("--lock", str(lock), "--mirror", str(mirror), "--no-progress", "--pip-requirements", str(req),
            "--pip-find-links", str(links), "--pip-arg=--no-index", "--pip-arg=--isolated")
    assert prefetch(capsys, *argv)[0] == 0
    before = json.loads((mirror / "manifest.json").read_text())["files"]
    assert [e["name"] for e in before] == [f"simple/vp-demo/{wheel.name}"]
    (mirror / "manifest.json").unlink()
    (mirror / "SHA256SUMS").unlink()
    code, _, err = prefetch(capsys, *argv)
    assert code == 0, err
    after = json.loads((mirror / "manifest.json").read_text())["files"]
    assert [(e["name"], e["sha256"], e["size"]) for e in after] == [(e["name"], e["sha256"], e["size"]) for e in before]
    assert prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--verify")[0] == 0


def make_sdist(folder: Path, name: str, version: str) -> Path:
    """A real setuptools sdist (pyproject.toml, PKG-INFO) that pip can prepare without the network."""
    top = f"{name}-{version}"
    files = {
        f"{top}/pyproject.toml": ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
                                  f'[project]\nname = "{name}"\nversion = "{version}"\n'),
        f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{top}/{name.replace('-', '_')}.py": "",
    }
    path = folder / f"{top}.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path


class Serve:
    """A static HTTP server on 127.0.0.1 for a directory (what serves a mirror, or an index)."""

    def __init__(self, directory: Path):
        self.requests: List[str] = []
        log = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:  # noqa: D401 - quiet, but keep the paths
                log.append(self.path)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(directory)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Serve":
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


OFFLINE_PIP = ("--pip-arg=--no-index", "--pip-arg=--isolated", "--pip-arg=--no-build-isolation")


def test_sdist_without_url_comes_from_the_index_and_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """verl_releases items carry no URL: the index's simple API gives it, the lock's sha256 decides."""
    links = tmp_path / "links"
    links.mkdir()
    good = make_sdist(links, "vp-demo", "1.0")
    other = make_sdist(links, "vp_other", "2.0")
    files = {f"files/{p.name}": p.read_bytes() for p in (good, other)}
    files["simple/vp-demo/"] = simple_page({good.name: sha(good.read_bytes()), "vp-demo-1.0-py3-none-any.whl": None})
    files["simple/vp-other/"] = simple_page({other.name: None})  # no hash on the page: downloaded, then checked
    lock = tmp_path / "lock.yml"
    lock.write_text("---\nverl_releases:\n"
                    f"  '1.0': {{sdist: {good.name}, sha256: {sha(good.read_bytes())}}}\n"
                    f"  '2.0': {{sdist: {other.name}, sha256: {'e' * 64}}}\n"  # a lock entry that does not match
                    f"  '3.0': {{sdist: vp-demo-3.0.tar.gz, sha256: {'f' * 64}}}\n"  # not on the index
                    f"  '4.0': {{sdist: vp-nowhere-4.0.tar.gz, sha256: {'f' * 64}}}\n")  # no such project
    mirror = tmp_path / "mirror"
    with Upstream(files) as server:
        argv = ("--lock", str(lock), "--mirror", str(mirror), *FAST, "--pip-index-url", server.url + "/simple/")
        code, out, err = prefetch(capsys, *argv)
        assert code == 1, err
        assert (mirror / good.name).read_bytes() == good.read_bytes()
        assert f"expected {'e' * 64}, actual {sha(other.read_bytes())}" in err
        assert "vp-demo-3.0.tar.gz is not listed on" in err and "versions listed: 1.0" in err
        assert "project page not found" in err and "'vp-nowhere'" in err
        assert sorted(p.name for p in mirror.iterdir()) == sorted([good.name, "manifest.json", "SHA256SUMS"])
        entries = {e["name"]: e for e in json.loads((mirror / "manifest.json").read_text())["files"]}
        assert sorted(entries) == [good.name]
        assert entries[good.name]["url"] == f"{server.url}/files/{good.name}"
        assert entries[good.name]["key"] == "verl_releases[1.0]"
        assert f"{sha(good.read_bytes())}  {good.name}" in (mirror / "SHA256SUMS").read_text()
        # Present with the right sha256: the index is not asked again.
        server.log.clear()
        code, out, _ = prefetch(capsys, *argv, "--only", good.name)
        assert code == 0 and "1 already present" in out and server.arrivals.count(f"files/{good.name}") == 1
        assert server.log == []


def clean_pip_env(**extra: str) -> Dict[str, str]:
    """This environment without any PIP_* setting nor pip's config files, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


@pytest.mark.parametrize("page_hash", [False, True], ids=["page-without-hash", "page-with-its-hash"])
def test_hostile_sdist_is_refused_before_anything_opens_it(tmp_path: Path, page_hash: bool) -> None:
    """A substituted verl-0.5.0.tar.gz on pip's index: the real lock's sha256 stops it; its setup.py never runs."""
    needs_setuptools()
    lock_sha = artifacts.discover(Lock.from_paths()).artifacts
    lock_sha = next(a.sha256 for a in lock_sha if a.path == "verl-0.5.0.tar.gz")
    marker = tmp_path / "setup-py-ran"
    (tmp_path / "dist").mkdir()
    bad = hostile_sdist(tmp_path / "dist", marker, "verl", "0.5.0")
    bad_sha = sha(bad.read_bytes())
    files = {f"files/{bad.name}": bad.read_bytes(),
             "simple/verl/": simple_page({bad.name: bad_sha if page_hash else None})}
    mirror = tmp_path / "mirror"
    with Upstream(files, {"simple/verl/": {"type": "text/html"}}) as server:
        # The index comes from pip's own configuration (PIP_INDEX_URL here); build isolation is off, so
        # that a tool that let pip prepare the sdist would run its setup.py with this Python's setuptools.
        env = clean_pip_env(PIP_INDEX_URL=f"{server.url}/simple/", PIP_NO_BUILD_ISOLATION="0")
        proc = subprocess.run([sys.executable, "-m", "verl_pascal.prefetch.cli", "--mirror", str(mirror),
                               "--only", "verl-0.5.0.tar.gz", "--no-progress", "--retries", "0", "--timeout", "10"],
                              env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "verl-0.5.0.tar.gz" in proc.stderr and lock_sha in proc.stderr and bad_sha in proc.stderr
    assert "sha256 mismatch" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()
    assert [f for f in mirror.rglob("*") if f.name not in ("manifest.json", "SHA256SUMS")] == []
    assert json.loads((mirror / "manifest.json").read_text())["files"] == []
    asked = server.arrivals.count(f"files/{bad.name}")
    assert asked == (0 if page_hash else 1)  # a page that lists another sha256 stops the download before it starts


def test_pip_lock_takes_each_lock_without_deps_and_sdists(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two complete locks pinning different versions, a dependency no lock lists, a project with no wheel."""
    needs_setuptools()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    links = tmp_path / "links"
    links.mkdir()
    old = make_wheel(links, "vp-demo", "1.0")
    new = make_wheel(links, "vp-demo", "2.0", ["vp-not-anywhere==9"])  # --no-deps: never looked up
    only_sdist = make_sdist(links, "vp-sdist-only", "0.3")
    lock_a, lock_b = tmp_path / "a.txt", tmp_path / "b.txt"
    lock_a.write_text(f"# lock A\nvp-demo==1.0 --hash=sha256:{sha(old.read_bytes())}  # via x\n")
    lock_b.write_text(f"vp-demo==2.0 \\\n    --hash=sha256:{sha(new.read_bytes())}\n"
                      f"vp-sdist-only==0.3 --hash sha256:{sha(only_sdist.read_bytes())}\n")
    lock = tmp_path / "lock.yml"
    lock.write_text("---\npython_version: '3.11.2'\n")
    mirror = tmp_path / "mirror"
    code, _, err = prefetch(capsys, "--lock", str(lock), "--mirror", str(mirror), "--no-progress",
                            "--pip-lock", str(lock_a), "--pip-lock", str(lock_b), "--pip-find-links", str(links),
                            *OFFLINE_PIP)
    assert code == 0, err
    want = {f"simple/vp-demo/{old.name}": old, f"simple/vp-demo/{new.name}": new,
            f"simple/vp-sdist-only/{only_sdist.name}": only_sdist}
    entries = {e["name"]: e for e in json.loads((mirror / "manifest.json").read_text())["files"]}
    assert sorted(entries) == sorted(want)
    assert all(entries[n]["sha256"] == sha(p.read_bytes()) for n, p in want.items())
    flat = (mirror / "find-links.html").read_text()
    for name, path in want.items():
        assert f'href="{name}#sha256={sha(path.read_bytes())}"' in flat

    # The flat page is all pip needs: --no-index --find-links <mirror URL>/find-links.html.
    with Serve(mirror) as server:
        got = tmp_path / "got"
        subprocess.run([sys.executable, "-m", "pip", "download", "--isolated", "-q", "--no-index", "--no-deps",
                        "--find-links", f"{server.url}/find-links.html", "--dest", str(got),
                        "vp-demo==1.0", "vp-sdist-only==0.3", "--no-build-isolation"], check=True)
    assert sorted(p.name for p in got.iterdir()) == sorted([old.name, only_sdist.name])


def test_pip_lock_download_fails_loudly(tmp_path: Path, capsys: pytest.CaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    (tmp_path / "links").mkdir()
    (tmp_path / "a.txt").write_text(f"vp-missing==1.0 --hash=sha256:{'0' * 64}\n")
    (tmp_path / "lock.yml").write_text("---\n")
    code, _, err = prefetch(capsys, "--lock", str(tmp_path / "lock.yml"), "--mirror", str(tmp_path / "m"),
                            "--no-progress", "--pip-lock", str(tmp_path / "a.txt"),
                            "--pip-find-links", str(tmp_path / "links"), *OFFLINE_PIP)
    assert code == 1 and "pip download failed" in err
    assert not list((tmp_path / "m").glob("simple/*/*.whl"))


def hostile_index(tmp_path: Path) -> Tuple[Dict[str, bytes], Path]:
    """An index's files for Upstream: vp-hostile 1.0, an sdist whose setup.py leaves the marker it returns."""
    marker = tmp_path / "setup-py-ran"
    (tmp_path / "dist").mkdir()
    bad = hostile_sdist(tmp_path / "dist", marker, "vp-hostile", "1.0")
    return {f"files/{bad.name}": bad.read_bytes(), "simple/vp-hostile/": simple_page({bad.name: None})}, marker


HOSTILE_PAGE = {"simple/vp-hostile/": {"type": "text/html"}}
PIP_TO_INDEX = ("--pip-arg=--isolated", "--pip-arg=--no-build-isolation")  # setup.py would run with this Python


def record_processes(monkeypatch: pytest.MonkeyPatch) -> List[List[str]]:
    """The command of every process started from now on (they still run)."""
    started: List[List[str]] = []
    real_popen = subprocess.Popen

    def spy(cmd, *args, **kwargs):
        started.append([str(word) for word in cmd])
        return real_popen(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    return started


@pytest.mark.parametrize("text, number, requirement", [
    ("vp-hostile==1.0\n", 1, "vp-hostile==1.0"),
    (f"# a lock\nvp-demo==1.0 \\\n    --hash=sha256:{'0' * 64}\n    # via x\n"
     f"vp-hostile==1.0  # --hash=sha256:{'1' * 64}\n", 5, "vp-hostile==1.0"),
], ids=["nothing-hashed", "the-last-of-two-pins"])
def test_pip_lock_with_a_pin_without_hash_is_refused_before_pip_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
        text: str, number: int, requirement: str) -> None:
    """Without the refusal, pip downloads the sdist and runs its setup.py to prepare its metadata."""
    needs_setuptools()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    files, marker = hostile_index(tmp_path)
    pins = tmp_path / "pins.txt"
    pins.write_text(text)
    (tmp_path / "lock.yml").write_text("---\n")
    mirror = tmp_path / "mirror"
    started = record_processes(monkeypatch)
    with Upstream(files, HOSTILE_PAGE) as server:
        code, out, err = prefetch(capsys, "--lock", str(tmp_path / "lock.yml"), "--mirror", str(mirror),
                                  "--no-progress", "--pip-lock", str(pins), "--pip-index-url", f"{server.url}/simple/",
                                  *PIP_TO_INDEX)
    assert code == 2, out + err
    assert err.splitlines() == [err.rstrip("\n")] and "Traceback" not in err
    assert f"{pins}: line {number}: {requirement} has no --hash=sha256:..." in err
    assert "write it with verl-pascal-pip-lock, or pip-compile --generate-hashes" in err
    assert started == [] and server.arrivals == [] and not marker.exists() and not mirror.exists()


def test_pip_downloads_a_lock_with_require_hashes(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The second line of defence: a requirement that reaches pip without a hash (here from --pip-arg, beside a
    lock that pins nothing) is refused by pip itself before it prepares the sdist."""
    needs_setuptools()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    files, marker = hostile_index(tmp_path)
    pins = tmp_path / "pins.txt"
    pins.write_text("# every pin is elsewhere\n")
    (tmp_path / "lock.yml").write_text("---\n")
    mirror = tmp_path / "mirror"
    with Upstream(files, HOSTILE_PAGE) as server:
        code, out, err = prefetch(capsys, "--lock", str(tmp_path / "lock.yml"), "--mirror", str(mirror),
                                  "--no-progress", "--pip-lock", str(pins), "--pip-index-url", f"{server.url}/simple/",
                                  *PIP_TO_INDEX, "--pip-arg=vp-hostile==1.0")
    assert code == 1 and "pip download failed" in err, out + err
    assert not marker.exists()
    assert not list(mirror.glob("simple/*/*.tar.gz"))


@pytest.mark.parametrize("text, found", [
    (f"a==1 --hash=sha256:{'0' * 64}\n--index-url https://i/simple\n-c constraints.txt\n", None),
    (f"a==1 \\\n  --hash=sha256:{'0' * 64} \\\n  --hash=sha256:{'1' * 64}\n  # via b\n\n"
     f"b==2 --hash sha256:{'2' * 64}\n", None),
    (f"a==1  # --hash=sha256:{'0' * 64}\n", (1, "a==1")),  # a hash in a comment is no hash
    (f"a==1 \\\n  # via b\n  --hash=sha256:{'0' * 64}\n", (1, "a==1")),  # pip ends the pin at the comment
    (f"a==1 --hash=sha512:{'0' * 128}\n", (1, "a==1")),
    ("a==1 --hash=sha256:0123\n", (1, "a==1")),
    (f"a==1 --hash=sha256:{'0' * 64}\nb @ https://h/b-2.tar.gz\n", (2, "b @ https://h/b-2.tar.gz")),
    ("-r more-pins.txt\n", (1, "-r more-pins.txt")),
    ("--editable ./src\n", (1, "--editable ./src")),
], ids=["hashed-with-options", "pip-compile-layout", "hash-in-a-comment", "comment-ends-the-pin", "sha512-only",
        "short-hash", "url-without-hash", "include", "editable"])
def test_the_pin_without_a_hash_is_found_as_pip_reads_the_lock(text: str, found: object) -> None:
    assert pipwheels.unhashed_pin(text) == found


def test_the_repositorys_locks_are_taken() -> None:
    locks = sorted((REPO_ROOT / "verl_pascal" / "releases").glob("*/*.txt"))
    assert locks
    for lock in locks + [REPO_ROOT / "roles" / "conda" / "files" / "build-requirements.txt"]:
        pipwheels.check_lock(lock)


def test_pip_defaults_follow_the_lock() -> None:
    args = cli.build_parser().parse_args(["--pip-requirements", "r.txt", "--pip-platform", "linux_x86_64"])
    opts = cli.pip_options(args, Lock.from_paths())
    assert opts.python_version == "3.10" and opts.platforms == ["linux_x86_64"]
    cmd = pipwheels.pip_command(opts, Path("/tmp/d"))
    assert cmd[3:5] == ["download", "--dest"] and "--only-binary=:all:" in cmd
    locked = pipwheels.pip_command(opts, Path("dest"), lock=Path("pins.txt"))
    assert "--no-deps" in locked and "--require-hashes" in locked and "--only-binary=:all:" not in locked
    assert cmd[cmd.index("--python-version") + 1] == "3.10"
    assert "manylinux_2_17_x86_64" in pipwheels.default_platforms() and "linux_x86_64" in pipwheels.default_platforms()
    assert pipwheels.project_of("Foo.Bar-1.0-py3-none-any.whl") == "foo-bar"
    assert pipwheels.project_of("antlr4-python3-runtime-4.9.3.tar.gz") == "antlr4-python3-runtime"
