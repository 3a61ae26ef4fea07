"""The learning benchmark's task (verl_pascal/data/arithmetic.py): GSM8K-format arithmetic.

What the benchmark relies on: the same seed gives the same problems; no
held-out problem (nor its numbers) is in the training split; every answer's
calculations and final number are right; the project's converter takes the
rows, and verl's own GSM8K rule reward (from each release's sdist) gives the
worked answer 1 and a wrong final number 0, as the project's copy of the rule
(used by the warm start to score itself) does on every response tried.
"""

from __future__ import annotations

import importlib.util
import re
import tarfile
from pathlib import Path
from typing import Callable, Tuple

import pytest

from verl_pascal.data import arithmetic, gsm8k

QUESTION = re.compile(r"^(\w+) has (\d+) (\w+)\. \1 buys (\d+) more, then gives away (\d+)\. "
                      r"How many \3 does \1 have now\?$")


def numbers(question: str) -> Tuple[int, int, int]:
    match = QUESTION.match(question)
    assert match, question
    return int(match[2]), int(match[4]), int(match[5])


def test_the_same_seed_gives_the_same_split_and_another_seed_another() -> None:
    assert arithmetic.split(50, 20, seed=3) == arithmetic.split(50, 20, seed=3)
    assert arithmetic.split(50, 20, seed=3) != arithmetic.split(50, 20, seed=4)


def test_no_held_out_problem_or_its_numbers_is_in_the_training_split() -> None:
    data = arithmetic.split(4000, 512, seed=0)
    assert len(data.train) == 4000 and len(data.held_out) == 512
    held = {numbers(r["question"]) for r in data.held_out}
    assert len(held) == 512  # distinct numbers, each held-out problem its own
    trained = {numbers(r["question"]) for r in data.train}
    assert held.isdisjoint(trained)
    assert {r["question"] for r in data.held_out}.isdisjoint(r["question"] for r in data.train)


def test_every_answer_is_worked_right_and_ends_in_its_number() -> None:
    data = arithmetic.split(300, 100, seed=1)
    for row in data.train + data.held_out:
        a, b, c = numbers(row["question"])
        assert arithmetic.LOW <= a <= arithmetic.HIGH and arithmetic.LOW <= b <= arithmetic.HIGH and 1 <= c <= a + b
        for left, op, right, result in re.findall(r"<<(\d+)([+-])(\d+)=(\d+)>>", row["answer"]):
            assert (int(left) + int(right) if op == "+" else int(left) - int(right)) == int(result), row
        assert gsm8k.extract_solution(row["answer"]) == str(a + b - c)
        assert row["answer"].endswith(f"#### {a + b - c}")


def test_the_converter_takes_the_rows_with_the_final_number_as_ground_truth() -> None:
    data = arithmetic.split(5, 5, seed=2)
    rows = gsm8k.convert(data.held_out, "test")
    for source, row in zip(data.held_out, rows):
        a, b, c = numbers(source["question"])
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(a + b - c)}
        assert row["data_source"] == gsm8k.DATA_SOURCE and row["prompt"][0]["content"].startswith(source["question"])


def test_a_split_that_leaves_nothing_to_train_on_is_refused() -> None:
    with pytest.raises(ValueError, match="some must be left for training"):
        arithmetic.split(10, len(arithmetic.all_numbers()), seed=0)
    with pytest.raises(ValueError, match="1 problem or more"):
        arithmetic.split(0, 10)


def test_both_splits_are_written_as_the_launch_script_reads_them(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    data = arithmetic.split(30, 10, seed=0)
    changed = arithmetic.write(str(tmp_path), data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.parquet", "train.parquet"]
    assert set(changed.values()) == {True}
    assert set(arithmetic.write(str(tmp_path), data).values()) == {False}  # the same data: left alone
    test = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert [r["extra_info"]["question"] for r in test] == [r["question"] for r in data.held_out]
    assert {r["extra_info"]["split"] for r in test} == {"test"}


def verl_reward(sdist_path: Path, tmp_path: Path) -> Callable[[str, str], float]:
    with tarfile.open(sdist_path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("verl/utils/reward_score/gsm8k.py"))
        tar.extract(member, tmp_path, filter="data")
    spec = importlib.util.spec_from_file_location("verl_gsm8k_reward", tmp_path / member.name)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", ["0.5.0", "0.9.1"])
def test_verls_rule_reward_scores_the_task_and_the_projects_copy_agrees(version: str, sdist, tmp_path: Path) -> None:
    compute_score = verl_reward(sdist(version), tmp_path)
    rows = gsm8k.convert(arithmetic.split(20, 20, seed=5).held_out, "test")
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        answer = row["extra_info"]["answer"]
        responses = [
            answer,  # the worked answer itself: what the warm start learns to write
            answer.replace(f"#### {truth}", f"#### {int(truth) + 1}"),
            answer.replace(f"#### {truth}", f"The answer is {truth}."),  # no '####': strict gives 0
            f"#### {int(truth) + 3}\n" + answer,  # the last '####' counts
            answer + " and so on" * 40,  # '####' beyond the last 300 characters
            f"#### {truth},",  # a trailing comma is dropped, as verl drops thousands separators
        ]
        expected = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
        assert [float(compute_score(r, truth)) for r in responses] == expected, row
        assert [gsm8k.rule_score(r, truth) for r in responses] == expected, row
