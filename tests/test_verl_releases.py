"""A release folder's release.yml that is malformed, empty or incomplete.

One function (verl_pascal/verl_releases.py, ``validate``) checks every
release.yml the Python tools read; a bad one raises one error whose one-line
message names the file and the key, and makes only its own release
unavailable: verl-patch, verl-pascal-prefetch and the launch renderer keep
working on the others and refuse the bad one with that line, no traceback.
The Ansible side (the verl role's release checks, which preflight runs
first) names the file and the key as well.

Each test works on a copy of the release folders (``verl_releases.FOLDER``
pointed at it, or ``verl_pascal_root`` for Ansible) with verl 0.9.1's
release.yml spoiled; 0.8.0 stands for every other release.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import yaml

from verl_pascal import verl_releases

from conftest import REPO_ROOT as REPO
from conftest import needs_ansible, run_playbook

BAD, GOOD = "0.9.1", "0.8.0"


def _edit(change: Callable[[Dict[str, Any]], None]) -> Callable[[str], str]:
    """A spoiler of the release.yml's text that changes its parsed content."""
    def spoil(text: str) -> str:
        data = yaml.safe_load(text)
        change(data)
        return yaml.safe_dump(data, sort_keys=False)
    return spoil


def _first_file(data: Dict[str, Any]) -> str:
    return next(iter(data["patch_sites"]))


#: case -> (how the release.yml is spoiled, what the one-line error must say besides the file's path).
SPOILED: Dict[str, Tuple[Callable[[str], str], List[str]]] = {
    "not YAML": (lambda t: t.replace("sdist: verl-0.9.1.tar.gz", "sdist: [verl-0.9.1.tar.gz"), ["not valid YAML", "line"]),
    "empty": (lambda t: "", ["is empty", "sha256"]),
    "a list": (lambda t: "- version\n- sdist\n", ["not a mapping", "sha256"]),
    "no sha256": (_edit(lambda d: d.pop("sha256")), ["sha256 is missing"]),
    "a short sha256": (_edit(lambda d: d.update(sha256="814352ab")), ["sha256 is '814352ab'", "64"]),
    "a sha256 YAML reads as a number": (_edit(lambda d: d.update(sha256=12345)), ["sha256 is 12345"]),
    "another version": (_edit(lambda d: d.update(version="0.9.2")), ["version is '0.9.2'", '"0.9.1"']),
    "no sdist": (_edit(lambda d: d.pop("sdist")), ["sdist is missing"]),
    "no patch_sites": (_edit(lambda d: d.pop("patch_sites")), ["patch_sites is missing"]),
    "patch_sites a list": (_edit(lambda d: d.update(patch_sites=["verl/utils/model.py"])), ["patch_sites is ["]),
    "an unknown kind": (_edit(lambda d: d["patch_sites"].update({_first_file(d): {"logsumexp_row": 1}})),
                        ["patch_sites.verl/", "'logsumexp_row'"]),
    "a count of 0": (_edit(lambda d: d["patch_sites"].update({_first_file(d): {"bert_padding_import": 0}})),
                     ["bert_padding_import is 0"]),
    "a bad hf_rollout": (_edit(lambda d: d.update(hf_rollout="hf")), ["hf_rollout is 'hf'"]),
    "a bad host_memory_gib": (_edit(lambda d: d.update(host_memory_gib=-1)), ["host_memory_gib is -1"]),
    "a patch line that is not FILE:LINE KIND": (_edit(lambda d: d.update(patch_lines=["verl/utils/model.py 649"])),
                                                ["patch_lines is ['verl/utils/model.py 649']", "FILE:LINE KIND"]),
    "a patch line of a site patch_sites lacks": (
        _edit(lambda d: d.update(patch_lines=["verl/utils/nowhere.py:1 attn_implementation"])),
        ["patch_lines has verl/utils/nowhere.py:1 attn_implementation", "patch_sites.verl/utils/nowhere.py"]),
    "an sft table without its module": (_edit(lambda d: d["sft"].pop("module")), ["sft is {", "module"]),
    "an sft override that is not text": (_edit(lambda d: d["sft"].update(overrides=[1])), ["sft is {", "overrides"]),
}


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the release folders, at <root>/verl_pascal/releases as in a checkout; verl_releases reads it."""
    copy = tmp_path / "root" / "verl_pascal" / "releases"
    shutil.copytree(str(verl_releases.FOLDER), str(copy))
    monkeypatch.setattr(verl_releases, "FOLDER", copy)
    return copy


def spoil(folders: Path, case: str) -> Path:
    path = folders / f"verl-{BAD}" / "release.yml"
    path.write_text(SPOILED[case][0](path.read_text()))
    return path


def assert_names(message: str, path: Path, case: str) -> None:
    assert str(path) in message and "\n" not in message.strip() and "Traceback" not in message, message
    for words in SPOILED[case][1]:
        assert words in message, (words, message)


def test_every_release_folder_of_the_checkout_validates() -> None:
    good, bad = verl_releases.scan()
    assert bad == {} and list(good) == verl_releases.versions()


@pytest.mark.parametrize("case", sorted(SPOILED))
def test_a_bad_release_yml_is_one_error_naming_its_file_and_key_and_spoils_only_its_release(
        folders: Path, case: str) -> None:
    path = spoil(folders, case)
    with pytest.raises(verl_releases.ReleaseError) as raised:
        verl_releases.read(BAD)
    assert_names(str(raised.value), path, case)
    with pytest.raises(verl_releases.ReleaseError, match="^" + str(path)):
        verl_releases.available(needed=[BAD])
    assert GOOD in verl_releases.available(needed=[GOOD]) and BAD not in verl_releases.available()
    tables = verl_releases.patch_tables()
    assert BAD not in tables and tables[GOOD] == verl_releases.read(GOOD)["patch_sites"]
    warned: List[str] = []
    sdists = verl_releases.sdists(warn=warned.append)
    assert BAD not in sdists and sdists[GOOD]["sha256"] == verl_releases.read(GOOD)["sha256"]
    assert len(warned) == 1
    assert_names(warned[0], path, case)


def test_an_oddly_named_folder_breaks_no_listing(folders: Path) -> None:
    shutil.copytree(str(folders / f"verl-{GOOD}"), str(folders / "verl-0.9.1rc1"))
    assert verl_releases.versions()[-3:] == [GOOD, "0.9.1rc1", BAD]
    assert "0.9.1rc1" in verl_releases.scan()[1]  # its version key is not its folder's
    assert GOOD in verl_releases.patch_tables()


# --------------------------------------------------------------------------
# The commands: verl-patch, verl-pascal-prefetch, the launch renderer
# --------------------------------------------------------------------------

#: verl-patch as its console script runs it, reading the release folders at argv[1].
PATCH_CLI = ("import sys\nfrom pathlib import Path\nfrom verl_pascal import verl_releases\n"
             "verl_releases.FOLDER = Path(sys.argv.pop(1))\nfrom verl_pascal.patch_cli import run\n"
             "sys.argv[0] = 'verl-patch'\nsys.exit(run())\n")


def verl_patch(folders: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PATCH_CLI, str(folders), *args], capture_output=True, text=True,
                          timeout=300, cwd=str(REPO))


def tree_of(tmp_path: Path, version: str) -> Path:
    """A verl package that says it is ``version`` (enough for verl-patch to pick the release)."""
    root = tmp_path / f"tree-{version}"
    (root / "verl" / "version").mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text("")
    (root / "verl" / "version" / "version").write_text(version + "\n")
    return root


@pytest.mark.parametrize("case", ["no sha256", "not YAML"])
def test_verl_patch_refuses_the_bad_release_in_one_line_and_patches_the_others(
        folders: Path, case: str, extracted: Callable[[str], Path], tmp_path: Path) -> None:
    path = spoil(folders, case)
    tree = tree_of(tmp_path, BAD)
    refused = verl_patch(folders, "--source", str(tree), "--profile", "pascal", "--check")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("verl-patch: error: ")
    assert_names(refused.stderr, path, case)
    probe = verl_patch(folders, "--source", str(tree), "--profile", "pascal", "--check",
                       "--allow-unsupported")  # writing the folder: the release is patched as unsupported
    assert probe.returncode in (0, 1) and "Traceback" not in probe.stderr and str(path) in probe.stderr
    other = tmp_path / f"verl-{GOOD}"
    shutil.copytree(str(extracted(GOOD)), str(other))
    checked = verl_patch(folders, "--source", str(other), "--profile", "pascal", "--check")
    assert checked.returncode == 1 and "NOT fully patched" in checked.stdout, checked.stderr
    assert verl_patch(folders, "--source", str(other), "--profile", "pascal").returncode == 0
    assert verl_patch(folders, "--source", str(other), "--profile", "pascal", "--check").returncode == 0
    usage = verl_patch(folders, "--help")
    assert usage.returncode == 0 and f"{GOOD}." in usage.stdout and BAD not in usage.stdout.split("Supported")[-1]


def test_prefetch_lists_the_other_releases_and_names_the_bad_file(folders: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    from verl_pascal.prefetch import cli

    path = spoil(folders, "no sha256")
    assert cli.main(["--list"]) == 0
    out, err = capsys.readouterr()
    assert f"verl_releases[{GOOD}]\tverl-{GOOD}.tar.gz" in out and f"verl_releases[{BAD}]" not in out
    named = [line for line in err.splitlines() if str(path) in line]
    assert len(named) == 1
    assert_names(named[0], path, "no sha256")
    assert cli.main(["--list", "--only", f"verl_releases[{BAD}]"]) != 0
    out, err = capsys.readouterr()
    assert out == "" and str(path) in err and "sha256 is missing" in err and "Traceback" not in err


def test_the_launch_renderer_renders_the_others_and_refuses_the_bad_release(folders: Path) -> None:
    from verl_pascal.launch import render

    path = spoil(folders, "no patch_sites")
    values = {"launch_data_dir": "/d", "launch_model_dir": "/m"}
    assert "verl.trainer.main_ppo" in render.render({**values, "verl_version": GOOD})
    with pytest.raises(verl_releases.ReleaseError) as raised:
        render.render({**values, "verl_version": BAD})
    assert_names(str(raised.value), path, "no patch_sites")


# --------------------------------------------------------------------------
# Ansible: the verl role's release checks (preflight runs them first)
# --------------------------------------------------------------------------

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: verl
        tasks_from: release
"""


def release_checks(tmp_path: Path, folders: Path, version: str) -> subprocess.CompletedProcess:
    """The verl role's release checks for ``version``, over the release folders of ``folders``' checkout."""
    return run_playbook(tmp_path, PLAYBOOK,
                        "-e", f"@{REPO / 'inventory/group_vars/all/versions.yml'}",
                        "-e", f"@{REPO / 'inventory/group_vars/all/settings.yml'}",
                        "-e", f"verl_pascal_root={folders.parent.parent}", "-e", f"verl_version={version}", timeout=300)


ansible = needs_ansible


@ansible
@pytest.mark.parametrize("case, says", [("no sha256", "sha256 is missing"), ("a short sha256", "sha256 is wrong"),
                                        ("another version", "version is wrong"), ("empty", "patch_sites is missing")])
def test_ansible_names_the_file_and_key_of_the_release_asked_for_and_passes_the_others(
        folders: Path, case: str, says: str, tmp_path: Path) -> None:
    spoil(folders, case)
    refused = release_checks(tmp_path, folders, BAD)
    assert refused.returncode != 0
    assert f"verl_pascal/releases/verl-{BAD}/release.yml, the release folder of verl {BAD}" in refused.stdout
    assert says in refused.stdout
    passed = release_checks(tmp_path, folders, GOOD)
    assert passed.returncode == 0, passed.stdout


@ansible
def test_ansible_names_the_release_yml_that_is_not_yaml(folders: Path, tmp_path: Path) -> None:
    """A file that is not YAML stops every play that reads verl_releases (settings.yml parses every folder):
    the release checks name it, with where the parser stopped."""
    spoil(folders, "not YAML")
    for version in (GOOD, BAD):
        proc = release_checks(tmp_path, folders, version)
        assert proc.returncode != 0
        assert re.search(f"verl_pascal/releases/verl-{BAD}/release.yml is not YAML \\([^)]*line [0-9]+", proc.stdout)
