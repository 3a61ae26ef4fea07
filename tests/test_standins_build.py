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

import pytest
import yaml

from verl_pascal.prefetch.lock import Lock
from verl_pascal.standins import build

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
