"""bench/rerun.py: what it reports from the timing callback's records (the box itself is the bench's)."""

from __future__ import annotations

import pytest

from bench import rerun

RECORDS = [
    {"role": "", "task": "Gathering Facts", "status": "ok", "seconds": 1.5},
    {"role": "conda", "task": "Read the env", "status": "ok", "seconds": 0.5},
    {"role": "conda", "task": "Give the env to verl", "status": "skipped", "seconds": 0.01},
    {"role": "verl", "task": "Install the locked dependencies", "status": "changed", "seconds": 7.0},
    {"role": "verl", "task": "Check the tree", "status": "failed", "seconds": 0.2},
]


def test_tasks_count_as_the_play_recap_counts_them_and_roles_add_up() -> None:
    run = rerun.summarize("second converge", 12.34, 2, RECORDS, load=4.5)
    assert (run.seconds, run.rc, run.load) == (12.3, 2, 4.5)
    assert (run.tasks, run.changed, run.skipped, run.failed) == (4, 1, 1, 1)
    assert [(r.role, r.tasks, r.skipped, r.seconds) for r in run.roles] == [
        ("verl", 2, 0, 7.2), ("(play)", 1, 0, 1.5), ("conda", 1, 1, 0.51)]
    assert run.top[0] == {"role": "verl", "task": "Install the locked dependencies", "status": "changed", "seconds": 7.0}


def test_the_recap_line_is_not_a_task(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "run.jsonl"
    log.write_text('{"role": "", "task": "t", "status": "ok", "seconds": 1}\n{"recap": {}, "seconds": 2}\n')
    assert [r["task"] for r in rerun.read_records(log)] == ["t"]
    assert rerun.read_records(tmp_path / "none.jsonl") == []


@pytest.mark.parametrize("argv, message", [(["--runs", "0"], "--runs"), (["--switch", "0.5.0", "0.5.0"], "--switch")])
def test_bad_arguments_are_refused(argv, message, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        rerun.parse_args(argv)
    assert message in capsys.readouterr().err
