"""module_utils/env_probe.py: what an env holds, read by the env's own Python in one process.

The verl, pytorch, apex, conda and launch roles skip pip and their import
checks when this says the env is as they left it, so it must notice each way
an env drifts: a pin at another version or gone, a file of an installed
distribution deleted or rewritten (a pip run cut off, a hand edit), another
tree behind the editable verl. Run as the roles run it: its source with ``-c``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from verl_pascal.module_utils import env_probe

SOURCE = Path(env_probe.__file__).read_text()


def run_probe(site: Path, **request: Any) -> Dict[str, Any]:
    """The probe's answer in a fresh Python that sees the distributions under site."""
    env = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run([sys.executable, "-B", "-c", SOURCE, json.dumps(request)], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(done.stdout))


def make_dist(site: Path, name: str, version: str, files: Dict[str, bytes], direct_url: Any = None) -> Path:
    """An installed distribution as pip leaves it: its files, and a RECORD with each one's size."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
        lines.append(f"{rel},sha256=x,{len(data)}")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
        lines.append(f"{info.name}/direct_url.json,,")
    lines += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    return info


@pytest.mark.parametrize("found, wanted, same", [
    ("2.5.1", "2.5.1", True), ("1.0", "1.0.0", True), ("2.6.0+cu118", "2.6.0+cu118", True),
    ("2.6.0+cu118", "2.6.0", False), ("2.6.0", "2.6.0+cu118", False), ("2.5.1", "2.5.2", False),
])
def test_versions_compare_as_pip_compares_them(found: str, wanted: str, same: bool) -> None:
    assert env_probe.same_version(found, wanted) is same


def test_pins_missing_or_at_another_version_are_missing() -> None:
    installed = {"absl-py": "2.5.1", "numpy": "1.26.4"}
    pins = ["absl-py==2.5.1", "numpy==2.0.0", "pyarrow==17.0.0"]
    assert env_probe.missing_pins(pins, installed.get) == ["numpy==2.0.0", "pyarrow==17.0.0"]


@pytest.mark.parametrize("pin", ["absl-py", "absl-py>=2", "==2.5.1", "absl-py=="])
def test_a_line_that_is_not_a_pin_is_refused_naming_it(pin: str) -> None:
    with pytest.raises(ValueError, match="not a pin"):
        env_probe.split_pin(pin)


def test_a_whole_install_is_named_by_its_files(tmp_path: Path) -> None:
    make_dist(tmp_path, "apex", "0.1", {"apex/__init__.py": b"x = 1\n", "apex_C.so": b"\x7fELF"})
    got = run_probe(tmp_path, versions=["apex"], intact=["apex"])
    assert got["versions"] == {"apex": "0.1"} and got["damaged"] == {}
    assert len(got["files_sha256"]["apex"]) == 64


@pytest.mark.parametrize("damage, why", [
    (lambda site: (site / "apex_C.so").unlink(), "apex_C.so is missing"),
    (lambda site: (site / "apex_C.so").write_bytes(b"\x7fELF, cut off"), "apex_C.so has 13 bytes, RECORD says 4"),
])
def test_a_file_missing_or_of_another_size_marks_the_install_damaged(tmp_path: Path, damage: Any, why: str) -> None:
    make_dist(tmp_path, "apex", "0.1", {"apex/__init__.py": b"x = 1\n", "apex_C.so": b"\x7fELF"})
    damage(tmp_path)
    got = run_probe(tmp_path, intact=["apex"])
    assert got["damaged"] == {"apex": why} and "apex" not in got["files_sha256"]


def test_a_file_rewritten_at_the_same_size_changes_the_install_sha256(tmp_path: Path) -> None:
    make_dist(tmp_path, "apex", "0.1", {"apex/__init__.py": b"x = 1\n"})
    before = run_probe(tmp_path, intact=["apex"])["files_sha256"]["apex"]
    target = tmp_path / "apex" / "__init__.py"
    target.write_bytes(b"x = 2\n")
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    after = run_probe(tmp_path, intact=["apex"])
    assert after["damaged"] == {} and after["files_sha256"]["apex"] != before


def test_a_distribution_without_record_is_damaged_and_one_not_installed_is_left_out(tmp_path: Path) -> None:
    info = make_dist(tmp_path, "apex", "0.1", {"apex/__init__.py": b""})
    (info / "RECORD").unlink()
    got = run_probe(tmp_path, intact=["apex", "verl-pascal-no-such-dist"])
    assert list(got["damaged"]) == ["apex"] and "no RECORD" in got["damaged"]["apex"]
    assert got["files_sha256"] == {}


def test_an_editable_verl_names_its_tree(tmp_path: Path) -> None:
    make_dist(tmp_path, "verl", "0.5.0", {}, direct_url={"url": "file:///opt/verl%20pascal/verl/0.5.0-pascal/",
                                                          "dir_info": {"editable": True}})
    got = run_probe(tmp_path, versions=["verl"], editable=["verl", "verl-pascal-no-such-dist"])
    assert got["versions"] == {"verl": "0.5.0"}
    assert got["editable"] == {"verl": "/opt/verl pascal/verl/0.5.0-pascal", "verl-pascal-no-such-dist": None}


def test_a_verl_that_is_not_editable_has_no_tree(tmp_path: Path) -> None:
    make_dist(tmp_path, "verl", "0.4.1", {})
    assert run_probe(tmp_path, editable=["verl"])["editable"] == {"verl": None}


def test_the_pins_are_read_from_the_envs_own_distributions(tmp_path: Path) -> None:
    make_dist(tmp_path, "absl_py", "2.5.1", {})
    got = run_probe(tmp_path, pins=["absl-py==2.5.1", "absl-py==2.5.2"])
    assert got["missing_pins"] == ["absl-py==2.5.2"]
    assert got["python"] == "%d.%d.%d" % sys.version_info[:3]
