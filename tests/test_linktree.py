"""cp -lP semantics for putting cuDNN into the CUDA directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import ANSIBLE, run_ansible_module
from verl_pascal.module_utils import linktree as lt


@pytest.fixture()
def trees(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "cudnn"
    (src / "lib").mkdir(parents=True)
    (src / "include").mkdir()
    (src / "include" / "cudnn_version.h").write_text("#define CUDNN_MAJOR 8\n")
    (src / "lib" / "libcudnn.so.8.9.7").write_bytes(b"\x7fELF")
    os.symlink("libcudnn.so.8.9.7", src / "lib" / "libcudnn.so.8")
    os.symlink("libcudnn.so.8", src / "lib" / "libcudnn.so")
    (src / "LICENSE").write_text("not linked")
    # CUDA's layout: include and lib64 are symlinks into targets/x86_64-linux.
    dest = tmp_path / "cuda"
    (dest / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    os.symlink("targets/x86_64-linux/include", dest / "include")
    return src, dest


MAPPING = {"include": "include", "lib": "lib64"}


def link(src: Path, dest: Path, state: str = "present") -> list[lt.Action]:
    actions = lt.plan(state, str(src), str(dest), MAPPING)
    lt.apply(actions)
    return actions


def test_files_are_hard_links_and_symlinks_stay_symlinks(trees) -> None:
    src, dest = trees
    link(src, dest)
    lib = dest / "lib64" / "libcudnn.so.8.9.7"
    assert lib.stat().st_ino == (src / "lib" / "libcudnn.so.8.9.7").stat().st_ino
    assert os.readlink(dest / "lib64" / "libcudnn.so.8") == "libcudnn.so.8.9.7"
    assert os.readlink(dest / "lib64" / "libcudnn.so") == "libcudnn.so.8"
    assert (dest / "lib64" / "libcudnn.so").resolve() == lib.resolve()
    # through CUDA's include symlink, into the real directory
    header = dest / "targets" / "x86_64-linux" / "include" / "cudnn_version.h"
    assert header.stat().st_nlink == 2
    assert os.path.islink(dest / "include")
    assert not (dest / "LICENSE").exists()


def test_second_run_plans_nothing(trees) -> None:
    src, dest = trees
    assert link(src, dest)
    assert lt.plan("present", str(src), str(dest), MAPPING) == []


def test_plan_alone_changes_nothing(trees) -> None:
    src, dest = trees
    actions = lt.plan("present", str(src), str(dest), MAPPING)
    assert {a.kind for a in actions} == {"mkdir", "hardlink", "symlink"}
    assert not (dest / "lib64").exists()


def test_a_stale_copy_and_a_stale_link_are_replaced(trees) -> None:
    src, dest = trees
    (dest / "include" / "cudnn_version.h").write_text("#define CUDNN_MAJOR 7\n")
    (dest / "lib64").mkdir()
    os.symlink("libcudnn.so.8.9.6", dest / "lib64" / "libcudnn.so.8")
    actions = link(src, dest)
    assert any(a.replaces for a in actions)
    assert (dest / "include" / "cudnn_version.h").read_text() == "#define CUDNN_MAJOR 8\n"
    assert os.readlink(dest / "lib64" / "libcudnn.so.8") == "libcudnn.so.8.9.7"


def test_absent_removes_exactly_what_links_to_the_source(trees) -> None:
    src, dest = trees
    link(src, dest)
    (dest / "lib64" / "libcudart.so.11.0").write_bytes(b"cuda's own")
    link(src, dest, "absent")
    assert sorted(p.name for p in (dest / "lib64").iterdir()) == ["libcudart.so.11.0"]
    assert sorted(p.name for p in (dest / "include").iterdir()) == []
    assert (src / "lib" / "libcudnn.so.8.9.7").exists()


def test_a_directory_in_the_way_is_refused(trees) -> None:
    src, dest = trees
    (dest / "lib64" / "libcudnn.so").mkdir(parents=True)
    with pytest.raises(lt.LinkTreeError, match="is a directory"):
        lt.plan("present", str(src), str(dest), MAPPING)


def test_a_missing_subdir_says_the_archive_is_incomplete(trees) -> None:
    src, dest = trees
    with pytest.raises(lt.LinkTreeError, match="unpacked completely"):
        lt.plan("present", str(src), str(dest), {**MAPPING, "bin": "bin"})


def test_a_file_where_the_target_directory_belongs_is_refused(trees) -> None:
    src, dest = trees
    (dest / "lib64").write_text("not a directory")
    with pytest.raises(lt.LinkTreeError, match="not a directory"):
        lt.plan("present", str(src), str(dest), MAPPING)


def test_different_filesystems_are_refused(trees) -> None:
    src, _ = trees
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == src.stat().st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's tmp dir")
    with pytest.raises(lt.LinkTreeError, match="different filesystems"):
        lt.plan("present", str(src), str(other / "verl-pascal-test-cuda"), MAPPING)


def _nothing_linked(src: Path, dest: Path) -> None:
    assert not (dest / "targets" / "x86_64-linux" / "include" / "cudnn_version.h").exists()
    linked = [p for p in dest.rglob("*") if p.name.startswith("libcudnn") or p.name == "cudnn_version.h"]
    assert linked == []


def test_a_destination_symlinked_to_another_filesystem_is_refused_before_any_link(trees, monkeypatch) -> None:
    """include stays on the source's filesystem, lib64 resolves to another one:
    the plan is refused, and nothing (not even include) is linked."""
    src, dest = trees
    other = dest / "targets" / "x86_64-linux" / "lib"
    other.mkdir()
    os.symlink("targets/x86_64-linux/lib", dest / "lib64")
    real_device = lt._device_of_nearest

    def device(path: str) -> int:
        on_other = os.path.realpath(path).startswith(str(other.resolve()))
        return real_device(path) + 1 if on_other else real_device(path)

    monkeypatch.setattr(lt, "_device_of_nearest", device)
    with pytest.raises(lt.LinkTreeError, match="different filesystems") as info:
        link(src, dest)
    assert str(dest / "lib64") in str(info.value) and str(other.resolve()) in str(info.value)
    _nothing_linked(src, dest)


@pytest.fixture
def lib64_elsewhere(trees):
    """dest/lib64 as a symlink to a directory on a real other filesystem (/dev/shm)."""
    src, dest = trees
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or shm.stat().st_dev == src.stat().st_dev:
        pytest.skip("needs a writable /dev/shm on another filesystem than the test's tmp dir")
    other = shm / f"verl-pascal-test-lib64-{os.getpid()}-{dest.parent.name}"
    other.mkdir()
    os.symlink(other, dest / "lib64")
    yield src, dest, other
    for entry in other.iterdir():
        entry.unlink()
    other.rmdir()


def test_lib64_on_a_real_other_filesystem_links_nothing(lib64_elsewhere) -> None:
    src, dest, other = lib64_elsewhere
    with pytest.raises(lt.LinkTreeError, match="different filesystems"):
        link(src, dest)
    _nothing_linked(src, dest)
    assert list(other.iterdir()) == []


def test_apply_records_what_it_did_before_an_error(trees, monkeypatch) -> None:
    src, dest = trees
    actions = lt.plan("present", str(src), str(dest), MAPPING)
    real_link = os.link
    calls = []

    def link_then_fail(source, target):
        calls.append(target)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_link(source, target)

    monkeypatch.setattr(lt.os, "link", link_then_fail)
    done: list = []
    with pytest.raises(OSError):
        lt.apply(actions, done)
    assert done and done == actions[: len(done)]
    assert sum(a.kind == "hardlink" for a in done) == 1


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_module_refuses_a_cross_filesystem_lib64_without_changing_anything(lib64_elsewhere, tmp_path: Path) -> None:
    src, dest, other = lib64_elsewhere
    args = json.dumps({"src": str(src), "dest": str(dest), "dirs": MAPPING})
    result = run_ansible_module(tmp_path, "link_tree", args)
    assert result.get("failed") is True and result.get("changed") is False, result
    assert "different filesystems" in result["msg"] and "nothing was linked" in result["msg"]
    _nothing_linked(src, dest)
    assert list(other.iterdir()) == []
