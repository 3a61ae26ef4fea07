"""verl-pascal-standins: the STAND-IN artifacts the Molecule scenarios install.

Each registry entry's stand-in is built here under the name the real lock
gives it, and opened the way its role opens it; the lock variables the
stand-ins override are the ones the registry references.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import List, Optional

import pytest
import yaml

from verl_pascal.standins import build
from verl_pascal.version_lock import Lock

from conftest import REPO_ROOT as REPO  # noqa: E402

LOCK = Lock.from_paths()
NAMES = {art.key: art.path for art in build.registry_artifacts(LOCK)}


@pytest.fixture
def ctx(tmp_path: Path) -> build.Context:
    (tmp_path / "out" / "mirror").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    return build.Context(tmp_path / "out", tmp_path / "work")


def test_every_registry_entry_has_a_builder_and_takes_the_locks_name() -> None:
    assert set(NAMES) == set(build.BUILDERS)
    assert NAMES["cudnn_archive"] == LOCK.get("cudnn_archive_name")
    assert NAMES["miniforge_installer"] == LOCK.get("miniforge_installer_name")


def test_an_entry_without_a_builder_is_named(tmp_path: Path) -> None:
    lock = Lock({"artifacts": {"new_thing": {"url": "https://e.org/new.bin", "sha256": "a" * 64}}})
    with pytest.raises(build.StandinError, match="new_thing: no stand-in builder"):
        build.registry_artifacts(lock)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is missing (scripts/setup-host.sh)")
def test_cudnn_archive_has_the_real_layout(ctx: build.Context, tmp_path: Path) -> None:
    build.build_cudnn_archive(ctx, NAMES["cudnn_archive"])
    top = NAMES["cudnn_archive"][: -len(".tar.xz")]
    with tarfile.open(ctx.mirror / NAMES["cudnn_archive"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())
        assert members[f"{top}/lib/libcudnn.so"].issym() and members[f"{top}/lib/libcudnn.so"].linkname == "libcudnn.so.8"
        assert members[f"{top}/lib/libcudnn.so.8.9.7"].isfile()
        header = tar.extractfile(f"{top}/include/cudnn_version.h").read().decode()  # type: ignore[union-attr]
    assert "#define CUDNN_MAJOR 8" in header and "#define CUDNN_PATCHLEVEL 7" in header


def test_miniforge_installer_installs_its_conda(ctx: build.Context, tmp_path: Path) -> None:
    name = NAMES["miniforge_installer"]
    build.build_miniforge_installer(ctx, name)
    installer = ctx.mirror / name
    assert os.access(installer, os.X_OK)
    prefix = tmp_path / "miniforge3"
    proc = subprocess.run(["sh", str(installer), "-b", "-p", str(prefix)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert os.access(prefix / "bin" / "conda", os.X_OK) and (prefix / "etc/profile.d/conda.sh").is_file()


def test_apex_archive_unpacks_to_its_top_folder_and_is_reproducible(ctx: build.Context, tmp_path: Path) -> None:
    name = NAMES["apex_archive"]
    build.build_apex_archive(ctx, name)
    first = (ctx.mirror / name).read_bytes()
    with tarfile.open(ctx.mirror / name) as tar:
        names = tar.getnames()
    top = name[: -len(".tar.gz")]
    assert f"{top}/setup.py" in names and all(n == top or n.startswith(top + "/") for n in names)
    shutil.rmtree(ctx.work / top)
    build.build_apex_archive(ctx, name)
    assert (ctx.mirror / name).read_bytes() == first


@pytest.mark.skipif(shutil.which("makeself") is None or shutil.which("gcc") is None,
                    reason="makeself or gcc is missing (scripts/setup-host.sh)")
def test_cuda_runfile_passes_the_real_flags_to_its_installer(ctx: build.Context) -> None:
    name = NAMES["cuda_runfile"]
    build.build_cuda_runfile(ctx, name)
    proc = subprocess.run(["sh", str(ctx.mirror / name), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # An unknown flag reaches the stand-in installer, which refuses it (the stock makeself header would itself).
    proc = subprocess.run(["sh", str(ctx.mirror / name), "--no-such-flag"], capture_output=True, text=True)
    assert proc.returncode != 0 and "Unrecognized flag" not in proc.stdout + proc.stderr


def test_standins_yml_overrides_the_variables_the_registry_references(tmp_path: Path) -> None:
    built = {key: build.Artifact(key=key, path=name, url="stand-in", sha256=f"{i:x}" * 64, size=100 + i)
             for i, (key, name) in enumerate(sorted(NAMES.items()), 1)}
    refused = {"version": "99.0.0", "sdist": "verl-99.0.0.tar.gz", "sha256": "f" * 64, "lock_dir": "/x"}
    text = build.standins_yml(build.lock_overrides(LOCK, built), "2.13.0+cpu", tmp_path, refused)
    data = yaml.safe_load(text)
    # Rendered through the real lock with these overrides, the registry points at the stand-ins.
    registry = Lock({**LOCK.raw, **data}).get("artifacts")
    for key, art in built.items():
        assert registry[key]["sha256"] == art.sha256
        if "size" in registry[key]:
            assert int(registry[key]["size"]) == art.size
    assert data["python_version"] == build.PYTHON and data["torch_version"] == "2.13.0+cpu"
    assert data["standin_refused_verl"] == refused


def test_a_registry_value_that_is_no_reference_is_refused() -> None:
    lock = Lock({"artifacts": {"x": {"url": "https://e.org/x.bin", "sha256": "a" * 64}}})
    with pytest.raises(build.StandinError, match="must reference one"):
        build.lock_overrides(lock, {"x": build.Artifact(key="x", path="x.bin", url="", sha256="b" * 64)})


# --- one release (make demo) or every release (the scenarios) -------------------

def prefetched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release: Optional[str]) -> List[str]:
    """The arguments verl_from_the_index gives the prefetch (which is not run)."""
    calls: List[List[str]] = []
    monkeypatch.setattr(build.prefetch_cli, "main", lambda argv: calls.append(list(argv)) or 0)
    build.verl_from_the_index(tmp_path, "2.13.0+cpu", release)
    assert len(calls) == 1
    return calls[0]


def test_one_release_prefetches_its_sdist_and_its_lock_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv = prefetched(monkeypatch, tmp_path, "0.5.0")
    locks = [a.split("=", 1)[1] for a in argv if a.startswith("--pip-lock=")]
    assert locks == [str(REPO / "verl_pascal" / "releases" / "verl-0.5.0" / "py3.11-torch2.13.txt")]
    assert argv[argv.index("--only") + 1] == "verl_releases[0.5.0]"


def test_every_release_prefetches_every_lock_for_the_standin_torch(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    argv = prefetched(monkeypatch, tmp_path, None)
    locks = sorted(a.split("=", 1)[1] for a in argv if a.startswith("--pip-lock="))
    assert locks == sorted(str(p) for p in (REPO / "verl_pascal" / "releases").glob("verl-*/py3.11-torch2.13.txt"))
    assert len(locks) > 1 and argv[argv.index("--only") + 1] == "verl_releases"


def test_a_release_without_a_lock_for_the_standin_torch_is_refused(tmp_path: Path) -> None:
    with pytest.raises(build.StandinError, match="verl 0.0.1 has no lock py3.11-torch2.13.txt"):
        build.verl_from_the_index(tmp_path, "2.13.0+cpu", "0.0.1")


def test_a_build_of_every_release_serves_one_but_not_the_other_way(tmp_path: Path) -> None:
    stamp = tmp_path / ".stamp"
    stamp.write_text(f"abc {build.ALL_RELEASES}\n")
    assert build.up_to_date(stamp, "abc", "0.5.0") and build.up_to_date(stamp, "abc", None)
    assert not build.up_to_date(stamp, "def", "0.5.0")
    stamp.write_text("abc 0.5.0\n")
    assert build.up_to_date(stamp, "abc", "0.5.0")
    assert not build.up_to_date(stamp, "abc", None) and not build.up_to_date(stamp, "abc", "0.9.1")
    stamp.write_text("abc\n")  # a stamp from before releases were recorded
    assert not build.up_to_date(stamp, "abc", None)


def test_one_releases_standins_yml_has_no_refused_release(tmp_path: Path) -> None:
    data = yaml.safe_load(build.standins_yml({}, "2.13.0+cpu", tmp_path, None))
    assert "standin_refused_verl" not in data and data["torch_version"] == "2.13.0+cpu"


@pytest.mark.parametrize("argv", [["--release"], ["--release", "all"], ["--release="], ["-x"], ["a", "b"]])
def test_bad_usage_is_refused_with_the_usage(argv: List[str], capsys: pytest.CaptureFixture) -> None:
    assert build.main(argv) == 2
    assert "verl-pascal-standins [--release VERSION] [OUT]" in capsys.readouterr().err
