"""The box-side wheel: what the launch role installs into the training env.

Built from this checkout with the package list the launch role passes
(roles/launch/vars/main.yml), then installed with pip into a folder, the way a
box gets it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List

import pytest
import yaml

from verl_pascal.module_utils import box_wheel

from conftest import REPO_ROOT as ROOT  # noqa: E402


def role_packages() -> List[str]:
    return yaml.safe_load((ROOT / "roles/launch/vars/main.yml").read_text())["launch_box_packages"]


def copy_checkout(dest: Path) -> Path:
    """The parts of the checkout the build reads, to change them without touching the real ones."""
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(ROOT / "verl_pascal", dest / "verl_pascal", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_the_wheel_installs_and_holds_only_the_box_side_code(tmp_path: Path) -> None:
    built = box_wheel.build(str(ROOT), role_packages(), str(tmp_path / "out"))
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target", str(target), built.path],
        check=True,
    )
    # What the roles run on a box, importable from the installed wheel alone.
    run = subprocess.run(
        [sys.executable, "-c", "import verl_pascal.data.cli, verl_pascal.models.make_model, verl_pascal.p40_rules; print('ok')"],
        cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )
    assert run.stdout.strip() == "ok", run.stderr
    assert (target / "verl_pascal/p40_rules/site/sitecustomize.py").is_file()
    installed = {p.relative_to(target).as_posix() for p in (target / "verl_pascal").rglob("*.py")}
    assert installed == set(built.files)
    # The controller's code stays on the controller.
    assert not any(name.startswith(("verl_pascal/prefetch/", "verl_pascal/module_utils/", "verl_pascal/launch/"))
                   for name in built.files)
    dist_info = next(target.glob("verl_pascal_box-*.dist-info"))
    assert f"Version: {built.version}" in (dist_info / "METADATA").read_text()


def test_the_same_sources_give_the_same_bytes(tmp_path: Path) -> None:
    first = box_wheel.build(str(ROOT), role_packages(), str(tmp_path / "a"))
    second = box_wheel.build(str(ROOT), role_packages(), str(tmp_path / "b"))
    assert (first.filename, first.sha256) == (second.filename, second.sha256)
    assert Path(first.path).read_bytes() == Path(second.path).read_bytes()
    assert first.changed and second.changed
    again = box_wheel.build(str(ROOT), role_packages(), str(tmp_path / "a"))
    assert not again.changed
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [first.filename]


def test_a_changed_source_makes_a_new_version(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path)
    before = box_wheel.build(str(checkout), role_packages(), str(tmp_path / "out"))
    with (checkout / "verl_pascal/data/generate.py").open("a") as handle:
        handle.write("\n# changed\n")
    after = box_wheel.build(str(checkout), role_packages(), str(tmp_path / "out"))
    assert after.version != before.version and after.changed
    assert after.version.split("+")[0] == before.version.split("+")[0] == box_wheel.project_version(
        (ROOT / "pyproject.toml").read_text())


def test_a_corrupt_wheel_in_the_folder_is_rewritten(tmp_path: Path) -> None:
    built = box_wheel.build(str(ROOT), role_packages(), str(tmp_path))
    Path(built.path).write_bytes(b"half a wheel")
    again = box_wheel.build(str(ROOT), role_packages(), str(tmp_path))
    assert again.changed
    assert hashlib.sha256(Path(again.path).read_bytes()).hexdigest() == built.sha256


def test_record_lists_every_file_with_its_hash(tmp_path: Path) -> None:
    built = box_wheel.build(str(ROOT), role_packages(), str(tmp_path))
    with zipfile.ZipFile(built.path) as archive:
        names = archive.namelist()
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(archive.read(record_name).decode())))
        assert sorted(row[0] for row in rows) == sorted(names)
        for name, digest, size in rows:
            if name == record_name:
                assert (digest, size) == ("", "")
                continue
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data))


def test_a_missing_package_is_refused(tmp_path: Path) -> None:
    with pytest.raises(box_wheel.BoxWheelError, match="verl_pascal.nothing"):
        box_wheel.build(str(ROOT), ["verl_pascal.nothing"], str(tmp_path))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ('[project]\nname = "x"\nversion = "1.2.3"\n', "1.2.3"),
        ('[tool.other]\nversion = "9"\n[project]\nversion = "0.4"\n', "0.4"),
    ],
)
def test_project_version_reads_the_project_table(text: str, version: str) -> None:
    assert box_wheel.project_version(text) == version


def test_project_version_without_one_is_an_error() -> None:
    with pytest.raises(box_wheel.BoxWheelError, match=r"\[project\]"):
        box_wheel.project_version('[tool.other]\nversion = "9"\n')


def test_the_commands_of_shipped_modules_come_with_the_wheel(tmp_path: Path) -> None:
    built = box_wheel.build(str(ROOT), role_packages(), str(tmp_path / "out"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                    str(target), built.path], check=True)
    commands = sorted(p.name for p in (target / "bin").iterdir())
    # verl-patch and the prefetch stay on the controller: their modules are not in the wheel.
    assert commands == ["gsm8k-to-verl", "verl-pascal-report"]
    run = subprocess.run([str(target / "bin" / "verl-pascal-report"), "--help"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and "RUN_DIR" in run.stdout, run.stderr


def test_a_new_command_makes_a_new_version(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path)
    before = box_wheel.build(str(checkout), role_packages(), str(tmp_path / "out"))
    pyproject = checkout / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        "[project.scripts]\n", '[project.scripts]\nverl-pascal-extra = "verl_pascal.report.cli:main"\n'))
    after = box_wheel.build(str(checkout), role_packages(), str(tmp_path / "out"))
    assert after.version != before.version and after.files == before.files


def test_project_scripts_reads_only_the_scripts_table() -> None:
    text = ('[project]\nname = "x"\nversion = "1"\n[project.scripts]\n'
            'a-b = "pkg.mod:run"  # a comment\n"quoted" = "pkg.other:main"\n[tool.x]\nc = "pkg.mod:no"\n')
    assert box_wheel.project_scripts(text) == {"a-b": "pkg.mod:run", "quoted": "pkg.other:main"}
    assert box_wheel.shipped_scripts({"a": "pkg.mod:run", "b": "pkgx.mod:run", "c": "pkg:main"}, ["pkg"]) == {
        "a": "pkg.mod:run", "c": "pkg:main"}
