"""cp -lP semantics for putting cuDNN into the CUDA directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from module_utils import linktree as lt


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
