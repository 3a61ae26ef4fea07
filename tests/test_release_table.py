"""README's release table is generated from the release folders, and README holds it as generated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verl_pascal import verl_releases

from conftest import REPO_ROOT as REPO  # noqa: E402
README = REPO / "README.md"
DEFAULT = str(yaml.safe_load((REPO / "inventory/group_vars/all/versions.yml").read_text())["verl_version"])


def test_readme_holds_the_table_the_folders_make() -> None:
    text = README.read_text(encoding="utf-8")
    begin, end = text.index(verl_releases.TABLE_BEGIN), text.index(verl_releases.TABLE_END)
    assert text[begin:end + len(verl_releases.TABLE_END)] == verl_releases.table(DEFAULT), (
        "README's release table is stale: paste `python -m verl_pascal.verl_releases --table`")


def test_every_release_folder_is_a_row_newest_first_and_the_default_is_marked() -> None:
    rows = [line for line in verl_releases.table(DEFAULT).splitlines() if line.startswith("| ") and "---" not in line][1:]
    names = [row.split(" | ")[0][2:] for row in rows]
    assert [n.split(" ")[0] for n in names] == list(reversed(verl_releases.versions()))
    assert [n for n in names if n.endswith("(default)")] == [f"{DEFAULT} (default)"]


def test_a_release_without_a_lock_has_no_rollout_and_its_summary_says_so() -> None:
    for version in verl_releases.versions():
        row = next(r for r in verl_releases.table(DEFAULT).splitlines() if r.startswith(f"| {version} "))
        rollout = row.split(" | ")[2]
        assert (rollout == "") == (not verl_releases.locks(version)), row


def test_the_command_prints_the_table_and_a_bad_lock_file_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "verl_pascal.verl_releases", "--table"], capture_output=True,
                          text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == verl_releases.table(DEFAULT)
    bad = tmp_path / "versions.yml"
    bad.write_text("cuda_version: 1\n")
    done = subprocess.run([sys.executable, "-m", "verl_pascal.verl_releases", "--table", "--versions-file", str(bad)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and "cannot read verl_version" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("summary", [{"status": "x"}, {"status": "x", "adds": ""}, "supported"])
def test_a_bad_summary_is_refused(summary: object) -> None:
    data = verl_releases.read(DEFAULT)
    data["summary"] = summary
    with pytest.raises(verl_releases.ReleaseError, match="summary"):
        verl_releases.validate(data, verl_releases.release_file(DEFAULT), DEFAULT)
