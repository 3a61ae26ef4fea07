"""verl-pascal-pip-lock: a pip installation report turned into a lock whose every pin carries sha256 lines."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any, Dict

import pytest


from verl_pascal.prefetch import hashlock, pipwheels  # noqa: E402


def item(name: str, version: str, url: str, requested: bool = False, **archive: Any) -> Dict[str, Any]:
    return {"metadata": {"name": name, "version": version}, "requested": requested,
            "download_info": {"url": url, "archive_info": archive}}


def test_each_pin_gets_the_hash_the_report_gives_and_comes_sorted_by_normalized_name() -> None:
    report = {"install": [
        item("Typing_Extensions", "4.12.2", "https://i/t.whl", hashes={"sha256": "b" * 64}),
        item("torch", "2.6.0+cu118", "https://i/torch.whl", requested=True, hash="sha256=" + "a" * 64),
    ]}
    assert hashlock.lock_lines(report) == [
        "torch==2.6.0+cu118 \\", f"    --hash=sha256:{'a' * 64}", "    # requested",
        "typing-extensions==4.12.2 \\", f"    --hash=sha256:{'b' * 64}",
    ]


def test_the_lock_it_writes_is_one_verl_pascal_prefetch_pip_lock_takes(tmp_path: Path) -> None:
    """--pip-lock refuses a pin without --hash=sha256 (and names this tool): what this tool writes must pass."""
    report = {"install": [
        item("torch", "2.6.0+cu118", "https://i/torch.whl", requested=True, hashes={"sha256": "a" * 64}),
        item("ninja", "1.13.2", "https://i/n.whl", hashes={"sha256": "c" * 64}),
    ]}
    lock = tmp_path / "lock.txt"
    lock.write_text("# header\n" + "\n".join(hashlock.lock_lines(report, lambda n, v: {"d" * 64})) + "\n")
    assert pipwheels.unhashed_pin(lock.read_text()) is None
    pipwheels.check_lock(lock)
    lock.write_text(lock.read_text() + "numpy==2.0.0\n")
    with pytest.raises(pipwheels.PipLockError, match="numpy==2.0.0 has no --hash=sha256"):
        pipwheels.check_lock(lock)


def test_every_file_the_index_lists_for_the_version_is_added() -> None:
    report = {"install": [item("ninja", "1.13.2", "https://i/n.whl", hashes={"sha256": "c" * 64})]}
    lines = hashlock.lock_lines(report, lambda name, version: {"d" * 64, "c" * 64} if version == "1.13.2" else set())
    assert lines == ["ninja==1.13.2 \\", f"    --hash=sha256:{'c' * 64} \\", f"    --hash=sha256:{'d' * 64}"]


def test_a_local_file_without_a_hash_is_hashed(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel bytes")
    assert hashlock.sha256_of(item("x", "1.0", wheel.as_uri())) == hashlib.sha256(b"wheel bytes").hexdigest()


def test_a_remote_file_without_a_hash_is_an_error_not_an_unhashed_pin() -> None:
    with pytest.raises(hashlock.LockGenError, match="gives no sha256 for x"):
        hashlock.lock_lines({"install": [item("x", "1.0", "https://i/x.whl")]})


def test_an_empty_report_is_an_error() -> None:
    with pytest.raises(hashlock.LockGenError, match="installs nothing"):
        hashlock.lock_lines({"install": []})


def test_index_hashes_reads_the_versions_files_on_a_pep503_page(tmp_path: Path) -> None:
    page = tmp_path / "simple" / "ninja"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        f'<a href="ninja-1.13.2-py3-none-manylinux_2_17_x86_64.whl#sha256={"1" * 64}">a</a>\n'
        f'<a href="ninja-1.13.2.tar.gz#sha256={"2" * 64}">b</a>\n'
        f'<a href="ninja-1.13.0-py3-none-manylinux_2_17_x86_64.whl#sha256={"3" * 64}">c</a>\n'
        '<a href="ninja-1.13.2-py3-none-musllinux_1_1_x86_64.whl">no hash</a>\n')
    lookup = hashlock.index_hashes([(tmp_path / "simple").as_uri(), (tmp_path / "missing").as_uri()])
    assert lookup("ninja", "1.13.2") == {"1" * 64, "2" * 64}
    assert lookup("other", "1.0") == set()


def test_requirements_from_a_file_drop_comments(tmp_path: Path) -> None:
    reqs = tmp_path / "build.in"
    reqs.write_text("# tools\nsetuptools\n\nwheel  # for bdist\n")
    assert hashlock.expand(["@" + str(reqs), "ninja"]) == ["setuptools", "wheel", "ninja"]


def test_the_pip_command_resolves_for_the_target_not_this_machine(tmp_path: Path) -> None:
    cmd = hashlock.report_command(["torch==2.6.0+cu118"], tmp_path / "t", tmp_path / "r.json", "3.10",
                                  ["linux_x86_64"], "https://index/whl", [], python="py")
    assert cmd[:4] == ["py", "-m", "pip", "install"]
    for flag in ["--dry-run", "--ignore-installed", "--only-binary=:all:"]:
        assert flag in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.10"
    assert cmd[cmd.index("--index-url") + 1] == "https://index/whl"
    assert cmd[-1] == "torch==2.6.0+cu118"


def test_a_failed_resolution_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    index = tmp_path / "simple"
    index.mkdir()
    (index / "index.html").write_text("")
    out = tmp_path / "lock.txt"
    code = hashlock.run(["--python-version", "3.11", "--index-url", index.as_uri(), "-o", str(out),
                         "no-such-project==1.0"])
    assert code == hashlock.EXIT_FAILED and not out.exists()
    assert "could not resolve no-such-project==1.0" in capsys.readouterr().err
