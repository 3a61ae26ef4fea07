"""verl-patch killed for real (SIGKILL) at every file-system write, then run again.

The engine's test hook (``VERL_PATCH_FAULT_AT_WRITE=N``, read by
module_utils/verl_patch/atomic.py) makes the process SIGKILL itself at its Nth write
point: right before each write, and once after the last one. Each test runs the
real CLI as a subprocess on a copy of the real verl 0.5.0 sdist tree.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
from conftest import ANSIBLE, run_ansible_module
from verl_pascal import verl_releases

from verl_pascal.module_utils import verl_patch

from conftest import REPO_ROOT  # noqa: E402
# The verl-patch command, as its console script runs it.
CLI = [sys.executable, "-m", "verl_pascal.patch_cli"]
# The module's arguments as the verl role passes them for verl 0.5.0 on pascal.
MODULE_ARGS = "source=%s patch=fp32 version=0.5.0 sites='" + json.dumps(verl_releases.read("0.5.0")["patch_sites"]) + "'"
VERSION = "0.5.0"
JOURNAL = "verl/" + verl_patch.JOURNAL_NAME
KILLED = -signal.SIGKILL


def run_cli(tree: Path, *args: str, fault_at: Optional[int] = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != verl_patch.FAULT_ENV}
    if fault_at is not None:
        env[verl_patch.FAULT_ENV] = str(fault_at)
    cmd = [*CLI, "--source", str(tree), "--profile", "pascal"] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def tree_files(root: Path) -> Dict[str, bytes]:
    """The bytes of every file under root, hidden ones included."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def stray_files(root: Path) -> List[str]:
    """Temporary files and journals of the patcher left in the tree."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.name.startswith(verl_patch.TEMP_PREFIX) or p.name == verl_patch.JOURNAL_NAME
    )


@pytest.fixture(scope="module")
def pristine(extracted: Callable[[str], Path]) -> Path:
    return extracted(VERSION)


@pytest.fixture(scope="module")
def reference(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, bytes]:
    """The tree an uninterrupted patch produces."""
    tree = tmp_path_factory.mktemp("reference") / "verl"
    shutil.copytree(str(pristine), str(tree))
    proc = run_cli(tree)
    assert proc.returncode == 0, proc.stderr
    return tree_files(tree)


def copy_of(source: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(str(dest))
    shutil.copytree(str(source), str(dest))
    return dest


def changed_files(pristine: Path, reference: Dict[str, bytes]) -> List[str]:
    before = tree_files(pristine)
    return [rel for rel, data in reference.items() if before.get(rel) != data]


def assert_repaired_by_a_rerun(tree: Path, reference: Dict[str, bytes], label: str) -> None:
    rerun = run_cli(tree)
    assert rerun.returncode == 0, "%s: re-run failed:\n%s%s" % (label, rerun.stdout, rerun.stderr)
    assert stray_files(tree) == [], label
    files = tree_files(tree)
    differ = sorted(rel for rel in set(files) | set(reference) if files.get(rel) != reference.get(rel))
    assert differ == [], "%s: differs from an uninterrupted patch: %s" % (label, differ)
    check = run_cli(tree, "--check")
    assert check.returncode == 0, "%s: --check after the re-run:\n%s%s" % (label, check.stdout, check.stderr)


def assert_check_reports_the_interruption(tree: Path, label: str) -> None:
    """--check on the killed tree writes nothing and never blames upstream."""
    before = tree_files(tree)
    check = run_cli(tree, "--check")
    assert tree_files(tree) == before, "%s: --check wrote something" % label
    assert "upstream" not in check.stderr, "%s: %s" % (label, check.stderr)
    if (tree / JOURNAL).exists():
        assert check.returncode == 1, "%s: %s%s" % (label, check.stdout, check.stderr)
        assert "interrupted patch is pending" in check.stdout and "without --check" in check.stdout, label
    else:
        assert check.returncode in (0, 1), "%s: %s%s" % (label, check.stdout, check.stderr)
        if stray_files(tree):
            assert "stray temporary file" in check.stdout, label


def test_patch_killed_at_every_write_is_completed_by_the_next_run(
    pristine: Path, reference: Dict[str, bytes], tmp_path: Path
) -> None:
    changed = changed_files(pristine, reference)
    half_patched = 0
    n = 0
    while True:
        n += 1
        tree = copy_of(pristine, tmp_path / "tree")
        first = run_cli(tree, fault_at=n)
        if first.returncode != KILLED:  # n is past the last write point: the run went through
            assert first.returncode == 0 and n > 1, "N=%d: %s%s" % (n, first.stdout, first.stderr)
            assert tree_files(tree) == reference
            break
        written = sum(1 for rel in changed if (tree / rel).is_file() and (tree / rel).read_bytes() == reference[rel])
        half_patched += 0 < written < len(changed)
        assert_check_reports_the_interruption(tree, "N=%d" % n)
        assert_repaired_by_a_rerun(tree, reference, "N=%d" % n)
    kills = n - 1
    # Each changed file is written through its own temporary file and a rename, after the journal.
    assert kills >= 2 * len(changed) + 3, (kills, changed)
    assert half_patched >= len(changed) - 1  # the case: killed with some files written, others not


def test_write_error_part_way_is_completed_by_the_next_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that fills up after a few files: the error says a re-run completes the patch, and it does."""
    synthetic = REPO_ROOT / "tests/data/verl_patch/synthetic"
    expected = copy_of(synthetic, tmp_path / "expected")
    verl_patch.patch_tree(str(expected), allow_unsupported=True)
    tree = copy_of(synthetic, tmp_path / "tree")
    real_replace = os.replace
    calls: List[str] = []

    def replace_until_full(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 3:  # the journal, one source, then the disk is full
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_until_full)
    with pytest.raises(verl_patch.InterruptedPatchError, match="No space left.*run the patcher again"):
        verl_patch.patch_tree(str(tree), allow_unsupported=True)
    monkeypatch.undo()
    assert (tree / JOURNAL).exists() and stray_files(tree) == [JOURNAL]
    again = verl_patch.patch_tree(str(tree), allow_unsupported=True)
    assert again.recovered and not again.changes
    assert tree_files(tree) == tree_files(expected) and stray_files(tree) == []


def _killed_half_way(pristine: Path, reference: Dict[str, bytes], dest: Path) -> Path:
    """A tree whose patch was killed with about half of its files written."""
    changed = changed_files(pristine, reference)
    tree = copy_of(pristine, dest)
    # write points: journal temp, journal rename, then a temp and a rename per file
    first = run_cli(tree, fault_at=2 + len(changed))
    assert first.returncode == KILLED, first.stderr
    assert (tree / JOURNAL).exists()
    written = [rel for rel in changed if (tree / rel).is_file() and (tree / rel).read_bytes() == reference[rel]]
    assert 0 < len(written) < len(changed)
    return tree


def test_recovery_killed_at_every_write_is_completed_by_the_next_run(
    pristine: Path, reference: Dict[str, bytes], tmp_path: Path
) -> None:
    state = _killed_half_way(pristine, reference, tmp_path / "state")
    m = 0
    while True:
        m += 1
        tree = copy_of(state, tmp_path / "tree")
        recovery = run_cli(tree, fault_at=m)
        if recovery.returncode != KILLED:
            assert recovery.returncode == 0 and m > 3, recovery.stdout + recovery.stderr
            assert "completed an interrupted patch" in recovery.stdout
            assert tree_files(tree) == reference and stray_files(tree) == []
            break
        assert_check_reports_the_interruption(tree, "recovery M=%d" % m)
        assert_repaired_by_a_rerun(tree, reference, "recovery M=%d" % m)


def test_a_patch_killed_half_way_and_completed_leaves_the_sft_trainer_fp32(
    pristine: Path, reference: Dict[str, bytes], tmp_path: Path
) -> None:
    """verl-ppo --sft runs fsdp_sft_trainer.py: its FSDP policies' bf16 parameters are among what a killed
    patch's re-run completes."""
    rel = "verl/trainer/fsdp_sft_trainer.py"
    assert rel in changed_files(pristine, reference)
    tree = _killed_half_way(pristine, reference, tmp_path / "tree")
    assert run_cli(tree).returncode == 0
    text = (tree / rel).read_text()
    assert "param_dtype=torch.bfloat16" not in text and text.count("param_dtype=torch.float32") == 2
    assert run_cli(tree, "--check").returncode == 0


def test_file_changed_since_the_interruption_is_refused(
    pristine: Path, reference: Dict[str, bytes], tmp_path: Path
) -> None:
    tree = _killed_half_way(pristine, reference, tmp_path / "tree")
    journal = json.loads((tree / JOURNAL).read_text())
    unwritten = [  # sources still as released
        e["path"]
        for e in journal["files"]
        if e["before_sha256"] and (tree / "verl" / e["path"]).read_bytes() != e["after"].encode("utf-8")
    ]
    target = tree / "verl" / unwritten[0]
    target.write_bytes(target.read_bytes() + b"# edited by hand\n")
    before = tree_files(tree)
    for args in ((), ("--check",)):
        proc = run_cli(tree, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert unwritten[0] in proc.stderr and "changed since the interrupted patch" in proc.stderr
        assert "reinstall verl from its sdist" in proc.stderr
        assert tree_files(tree) == before


def test_stray_temporary_files_are_reported_then_removed(reference: Dict[str, bytes], tmp_path: Path) -> None:
    """Temporary files an older patcher left behind when it was killed."""
    tree = tmp_path / "tree"
    for rel, data in reference.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    stray = tree / "verl/workers/actor" / (verl_patch.TEMP_PREFIX + "k2j4x9")
    stray.write_bytes(b"half a file")
    check = run_cli(tree, "--check")
    assert check.returncode == 1 and "stray temporary file" in check.stdout
    assert "verl/workers/actor/" + stray.name in check.stdout and stray.exists()
    run = run_cli(tree)
    assert run.returncode == 0 and "removed 1 stray temporary file" in run.stdout
    assert not stray.exists() and tree_files(tree) == reference
    assert run_cli(tree, "--check").returncode == 0


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_module_reports_then_completes_an_interrupted_patch(
    pristine: Path, reference: Dict[str, bytes], tmp_path: Path
) -> None:
    tree = _killed_half_way(pristine, reference, tmp_path / "tree")
    before = tree_files(tree)
    checked = run_ansible_module(tmp_path, "verl_patch", MODULE_ARGS % tree, "--check", "--diff")
    assert checked.get("failed") is not True, checked
    assert checked["changed"] is True and checked["interrupted"].endswith(JOURNAL)
    assert any("interrupted patch is pending" in w for w in checked.get("warnings", [])), checked
    assert "verl/.verl_pascal_patch.json" in checked["files_changed"] and checked["diff"]
    assert tree_files(tree) == before, "check mode wrote something"

    applied = run_ansible_module(tmp_path, "verl_patch", MODULE_ARGS % tree)
    assert applied.get("failed") is not True, applied
    assert applied["changed"] is True and "verl/.verl_pascal_patch.json" in applied["recovered"]
    assert tree_files(tree) == reference and stray_files(tree) == []
    again = run_ansible_module(tmp_path, "verl_patch", MODULE_ARGS % tree)
    assert again["changed"] is False and again["recovered"] == []
