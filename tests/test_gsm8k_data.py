"""GSM8K to verl's schema, the problem generator, and verl's own rule reward
on the converted data (loaded from the real verl sdist)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

from verl_pascal_data import generate, gsm8k  # noqa: E402

GSM8K_ROW = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
}


def test_final_answer_is_taken_as_verl_takes_it() -> None:
    assert gsm8k.extract_solution(GSM8K_ROW["answer"]) == "72"
    assert gsm8k.extract_solution("so ... #### 1,234") == "1234"
    assert gsm8k.extract_solution("#### -5") == "-5"
    with pytest.raises(gsm8k.DataError, match="####"):
        gsm8k.extract_solution("no final answer here")


def test_row_has_exactly_verls_schema() -> None:
    row = gsm8k.to_verl_row(GSM8K_ROW["question"], GSM8K_ROW["answer"], "train", 7)
    assert row == {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": GSM8K_ROW["question"]
                    + " Let's think step by step and output the final answer after \"####\"."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "72"},
        "extra_info": {"split": "train", "index": 7, "answer": GSM8K_ROW["answer"], "question": GSM8K_ROW["question"]},
    }


def test_convert_limits_and_names_bad_rows() -> None:
    rows = gsm8k.convert([GSM8K_ROW] * 5, "test", limit=3)
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2]
    with pytest.raises(gsm8k.DataError, match="row 1 has no 'answer'"):
        gsm8k.convert([GSM8K_ROW, {"question": "q"}], "train")


def test_generated_problems_are_gsm8k_format_and_deterministic() -> None:
    first = generate.problems(20, seed=3)
    assert first == generate.problems(20, seed=3)
    assert first != generate.problems(20, seed=4)
    for p in first:
        left = int(gsm8k.extract_solution(p["answer"]))
        # the worked answer's last step computes the final number
        assert f"={left}>>{left}" in p["answer"]


def test_parquet_round_trip_and_idempotent_write(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = gsm8k.convert(generate.problems(10), "train")
    path = tmp_path / "train.parquet"
    assert gsm8k.write_if_changed(str(path), gsm8k.parquet_bytes(rows))
    mtime = path.stat().st_mtime_ns
    assert not gsm8k.write_if_changed(str(path), gsm8k.parquet_bytes(rows))
    assert path.stat().st_mtime_ns == mtime
    assert pq.read_table(path).to_pylist() == rows


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bin" / "gsm8k-to-verl"), *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_from_local_jsonl_and_generated(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(GSM8K_ROW) for _ in range(4)) + "\n")
    out = tmp_path / "out"
    proc = run_cli("--train-file", str(tmp_path / "train.jsonl"), "--test-file", str(tmp_path / "test.jsonl"),
                   "--limit", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["train"]["rows"] == 3 and report["train"]["changed"] is True
    again = json.loads(run_cli("--train-file", str(tmp_path / "train.jsonl"), "--test-file",
                               str(tmp_path / "test.jsonl"), "--limit", "3", "--out", str(out)).stdout)
    assert again["train"]["changed"] is False and again["test"]["changed"] is False
    gen = run_cli("--generate", "8", "--out", str(tmp_path / "gen"))
    assert gen.returncode == 0 and json.loads(gen.stdout)["test"]["rows"] == 8


def test_cli_runs_as_a_module_the_way_the_launch_role_calls_it(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    proc = subprocess.run([sys.executable, "-m", "verl_pascal_data.cli", "--generate", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["train"]["rows"] == 2


def test_cli_refuses_an_unpinned_hub_dataset(tmp_path: Path) -> None:
    proc = run_cli("--hub", "openai/gsm8k", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--revision" in proc.stderr


def test_cli_bad_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no number"}\n')
    proc = run_cli("--train-file", str(bad), "--test-file", str(bad), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "row 0" in proc.stderr


def _verl_reward(sdist_path: Path, tmp_path: Path):
    with tarfile.open(sdist_path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("verl/utils/reward_score/gsm8k.py"))
        tar.extract(member, tmp_path, filter="data")
    spec = importlib.util.spec_from_file_location("verl_gsm8k_reward", tmp_path / member.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


@pytest.mark.parametrize("version", ["0.4.1", "0.5.0"])
def test_verls_own_reward_scores_converted_rows(version: str, sdist, tmp_path: Path) -> None:
    compute_score = _verl_reward(sdist(version), tmp_path)
    for row in gsm8k.convert(generate.problems(5) + [GSM8K_ROW], "test"):
        truth = row["reward_model"]["ground_truth"]
        assert compute_score(f"Let me think. The answer is\n#### {truth}", truth) == 1.0
        assert compute_score(f"#### {int(truth) + 1}", truth) == 0.0
