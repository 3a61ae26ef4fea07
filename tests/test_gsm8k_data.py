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

from conftest import REPO_ROOT as REPO  # noqa: E402

from verl_pascal.data import generate, gsm8k  # noqa: E402

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
    with pytest.raises(gsm8k.DataError, match="^row 1: no 'answer' field"):
        gsm8k.convert([GSM8K_ROW, {"question": "q"}], "train")


@pytest.mark.parametrize(("row", "problem"), [
    ({"question": None, "answer": "#### 1"}, "question is null"),
    ({"question": "q", "answer": None}, "answer is null"),
    ({"question": 7, "answer": "#### 1"}, "question is int, not text"),
    (["q", "#### 1"], "not an object but list"),
])
def test_a_null_or_non_text_field_is_refused_not_turned_into_text(row, problem: str) -> None:
    with pytest.raises(gsm8k.DataError) as info:
        gsm8k.convert([GSM8K_ROW, row], "train")
    assert str(info.value).startswith(f"row 1: {problem}")


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


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_outputs_are_readable_by_the_training_user_and_others(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    old_umask = os.umask(0o022)
    try:
        path = tmp_path / "train.parquet"
        assert gsm8k.write_if_changed(str(path), gsm8k.parquet_bytes(gsm8k.convert(generate.problems(2), "train")))
        assert _mode(path) == 0o644
        # a same-content file left 0600 by an older converter is fixed, and that is a change
        path.chmod(0o600)
        assert gsm8k.write_if_changed(str(path), path.read_bytes())
        assert _mode(path) == 0o644
    finally:
        os.umask(old_umask)


def _two_datasets(tmp_path: Path) -> tuple:
    train, test = tmp_path / "train.parquet", tmp_path / "test.parquet"
    train.write_bytes(b"old train")
    test.write_bytes(b"old test")
    return train, test


def test_a_failed_test_write_leaves_both_old_files_and_no_temp_files(tmp_path: Path, monkeypatch) -> None:
    train, test = _two_datasets(tmp_path)
    real_fdopen = os.fdopen
    opened = []

    def fdopen_failing_on_the_second_file(fd, *args, **kwargs):
        opened.append(fd)
        if len(opened) == 2:
            os.close(fd)
            raise OSError(28, "No space left on device")
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(gsm8k.os, "fdopen", fdopen_failing_on_the_second_file)
    with pytest.raises(OSError, match="No space left"):
        gsm8k.write_together({str(train): b"new train", str(test): b"new test"})
    assert train.read_bytes() == b"old train" and test.read_bytes() == b"old test"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.parquet", "train.parquet"]


def test_a_failed_rename_removes_the_temp_files(tmp_path: Path, monkeypatch) -> None:
    train, test = _two_datasets(tmp_path)

    def replace_fails(src, dst):
        raise PermissionError(13, "Permission denied", dst)

    monkeypatch.setattr(gsm8k.os, "replace", replace_fails)
    with pytest.raises(PermissionError):
        gsm8k.write_together({str(train): b"new train", str(test): b"new test"})
    assert train.read_bytes() == b"old train" and test.read_bytes() == b"old test"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.parquet", "train.parquet"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl_pascal.data.cli", *args],
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
    proc = subprocess.run([sys.executable, "-m", "verl_pascal.data.cli", "--generate", "2", "--out", str(tmp_path)],
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
    assert proc.returncode == 2 and f"{bad}:1: no '#### <number>'" in proc.stderr


def _jsonl(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


GOOD = json.dumps(GSM8K_ROW).encode()


@pytest.mark.parametrize(("lines", "message"), [
    ((GOOD, b"", b'["q", "#### 1"]'), ":3: not a JSON object but list"),
    ((GOOD, b'{"question": null, "answer": "#### 1"}'), ":2: question is null"),
    ((GOOD, b'{"question": "q", "answer": null}'), ":2: answer is null"),
    ((GOOD, b'{"question": "caf\xe9", "answer": "#### 1"}'), ":2: not UTF-8 text (byte 0xe9 at column 18)"),
    ((GOOD, b"{oops"), ":2: not JSON"),
], ids=["not-an-object", "null-question", "null-answer", "latin-1", "not-json"])
def test_cli_names_the_file_and_line_of_bad_input(tmp_path: Path, lines, message: str) -> None:
    pytest.importorskip("pyarrow")
    good = _jsonl(tmp_path / "good.jsonl", GOOD)
    bad = _jsonl(tmp_path / "bad.jsonl", *lines)
    proc = run_cli("--train-file", str(good), "--test-file", str(bad), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith(f"gsm8k-to-verl: {bad}{message}"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o" / "train.parquet").exists()  # the good split is not written alone


def test_cli_reports_a_parquet_that_is_not_parquet(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    fake = tmp_path / "train.parquet"
    fake.write_text('{"question": "q", "answer": "#### 1"}\n')
    good = _jsonl(tmp_path / "test.jsonl", GOOD)
    proc = run_cli("--train-file", str(fake), "--test-file", str(good), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"gsm8k-to-verl: {fake}: not a parquet file ("), proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_names_the_row_of_a_null_in_a_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    source = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist([GSM8K_ROW, {"question": None, "answer": "#### 2"}]), source)
    good = _jsonl(tmp_path / "train.jsonl", GOOD)
    proc = run_cli("--train-file", str(good), "--test-file", str(source), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"gsm8k-to-verl: {source}: row 1: question is null"), proc.stderr


def _earlier_output(tmp_path: Path) -> tuple:
    """An output directory that a good run filled, and its files' bytes."""
    out = tmp_path / "o"
    assert run_cli("--generate", "3", "--out", str(out)).returncode == 0
    return out, {p.name: p.read_bytes() for p in out.iterdir()}


def _assert_refused_in_one_line(proc: subprocess.CompletedProcess, start: str, out: Path, before: dict) -> None:
    """Exit 2, one line on stderr that starts with `start`, no traceback, the earlier output untouched
    and no temporary file beside it."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"gsm8k-to-verl: {start}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(("line", "message"), [
    (rb'{"question": "\ud800", "answer": "#### 1"}',
     r"question holds a lone surrogate (\ud800) at character 0, which is not valid Unicode: fix or remove"),
    (rb'{"question": "q", "answer": "#### 1 \udfff"}', r"answer holds a lone surrogate (\udfff) at character 7"),
], ids=["question", "answer"])
def test_cli_names_the_line_of_a_lone_surrogate(tmp_path: Path, line: bytes, message: str) -> None:
    pytest.importorskip("pyarrow")
    out, before = _earlier_output(tmp_path)
    good = _jsonl(tmp_path / "good.jsonl", GOOD)
    bad = _jsonl(tmp_path / "bad.jsonl", GOOD, line)
    proc = run_cli("--train-file", str(good), "--test-file", str(bad), "--out", str(out))
    _assert_refused_in_one_line(proc, f"{bad}:2: {message}", out, before)


def test_an_escaped_surrogate_pair_is_text_and_a_lone_one_is_refused() -> None:
    pair = json.loads(r'{"question": "smile \ud83d\ude00", "answer": "#### 1"}')
    assert gsm8k.convert([pair], "train")[0]["extra_info"]["question"] == "smile \N{GRINNING FACE}"
    for lone in ("\ud83d", "\ude00", "\ude00\ud83d"):
        with pytest.raises(gsm8k.DataError, match=r"^row 0: question holds a lone surrogate"):
            gsm8k.convert([{"question": lone, "answer": "#### 1"}], "train")


DEEP = 100_000


@pytest.mark.parametrize("line", [
    b"[" * DEEP + b"]" * DEEP,
    b'{"a": ' * DEEP + b"1" + b"}" * DEEP,
    b'{"question": "q", "answer": "#### 1", "meta": ' + b"[" * DEEP + b"]" * DEEP + b"}",
], ids=["arrays", "objects", "in-an-extra-field"])
def test_cli_names_the_line_of_deeply_nested_json(tmp_path: Path, line: bytes) -> None:
    pytest.importorskip("pyarrow")
    out, before = _earlier_output(tmp_path)
    good = _jsonl(tmp_path / "good.jsonl", GOOD)
    bad = _jsonl(tmp_path / "bad.jsonl", GOOD, line)
    proc = run_cli("--train-file", str(good), "--test-file", str(bad), "--out", str(out))
    _assert_refused_in_one_line(proc, f"{bad}:2: JSON nested deeper than {gsm8k.MAX_DEPTH} levels", out, before)


def test_nesting_up_to_the_limit_and_brackets_in_text_are_read(tmp_path: Path) -> None:
    def row(meta: bytes, question: str = "q") -> bytes:
        return b'{"question": ' + json.dumps(question).encode() + b', "answer": "#### 1", "meta": ' + meta + b"}"

    limit = gsm8k.MAX_DEPTH - 1  # the row object is one level
    text = "[{" * DEEP + '"\\'  # brackets, a quote and a backslash in text
    ok = _jsonl(tmp_path / "ok.jsonl", row(b"[" * limit + b"]" * limit, text), row(b"1", text))
    assert [r["question"] for _, r in gsm8k.read_rows(str(ok))] == [text, text]
    deep = _jsonl(tmp_path / "deep.jsonl", row(b"[" * (limit + 1) + b"]" * (limit + 1)))
    with pytest.raises(gsm8k.DataError, match=f":1: JSON nested deeper than {gsm8k.MAX_DEPTH} levels"):
        list(gsm8k.read_rows(str(deep)))


def test_cli_names_the_line_of_a_number_too_long_to_read(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    out, before = _earlier_output(tmp_path)
    good = _jsonl(tmp_path / "good.jsonl", GOOD)
    bad = _jsonl(tmp_path / "bad.jsonl", GOOD, b'{"question": "q", "answer": "#### 1", "id": ' + b"7" * 5000 + b"}")
    proc = run_cli("--train-file", str(good), "--test-file", str(bad), "--out", str(out))
    _assert_refused_in_one_line(proc, f"{bad}:2: a number of 5000 digits, too long to read", out, before)


def test_cli_names_the_row_of_text_in_a_parquet_that_is_not_utf8(tmp_path: Path) -> None:
    """A parquet string column can hold bytes that are not UTF-8 (another writer, or a surrogate
    written as CESU-8); pyarrow only finds out when it reads the rows."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    out, before = _earlier_output(tmp_path)
    questions = pa.array([b"q", b"q", "caf\N{LATIN SMALL LETTER E WITH ACUTE}".encode("latin-1")]).view(pa.string())
    source = tmp_path / "test.parquet"
    pq.write_table(pa.table({"question": questions, "answer": ["#### 1"] * 3}), source)
    good = _jsonl(tmp_path / "train.jsonl", GOOD)
    proc = run_cli("--train-file", str(good), "--test-file", str(source), "--out", str(out))
    _assert_refused_in_one_line(proc, f"{source}: row 2: question is not UTF-8 text (byte 0xe9 at byte 4)", out, before)


def test_cli_refuses_an_empty_split_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    good = _jsonl(tmp_path / "train.jsonl", GOOD)
    empty = tmp_path / "test.jsonl"
    empty.write_text("\n")
    out = tmp_path / "o"
    proc = run_cli("--train-file", str(good), "--test-file", str(empty), "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"gsm8k-to-verl: {empty}: no rows"), proc.stderr
    assert not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (("--generate", "0"), "argument --generate: 0 is not 1 or more"),
    (("--generate", "4", "--limit", "-1"), "argument --limit: -1 is not 1 or more"),
    (("--generate", "4", "--limit", "0"), "argument --limit: 0 is not 1 or more"),
])
def test_cli_refuses_counts_that_give_an_empty_dataset(tmp_path: Path, args, message: str) -> None:
    proc = run_cli(*args, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()


def test_cli_failing_to_write_test_keeps_the_old_pair(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "o"
    assert run_cli("--generate", "3", "--out", str(out)).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    # test.parquet cannot be replaced: a directory stands in its place
    (out / "test.parquet").unlink()
    (out / "test.parquet").mkdir()
    (out / "test.parquet" / "keep").write_text("x")
    proc = run_cli("--generate", "5", "--out", str(out))
    assert proc.returncode == 2 and "test.parquet" in proc.stderr, proc.stderr
    assert (out / "train.parquet").read_bytes() == before["train.parquet"]
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet", "train.parquet"]


def test_cli_outputs_are_mode_0644(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    proc = subprocess.run(["sh", "-c", 'umask 022; exec "$@"', "sh", sys.executable, "-m", "verl_pascal.data.cli",
                           "--generate", "2", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: _mode(p) for p in tmp_path.iterdir()} == {"train.parquet": 0o644, "test.parquet": 0o644}


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


def test_the_same_table_written_by_another_pyarrow_is_left_alone(tmp_path: Path) -> None:
    """A verl release's lock brings its own pyarrow, which writes the same rows as other bytes (its
    version is in the file): the converter, run again after such an upgrade, must not rewrite the data.
    Other rows, or a file that is not parquet, are written."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = gsm8k.convert(generate.problems(6), "train")
    path = tmp_path / "train.parquet"
    other_writer = pa.BufferOutputStream()  # the same rows, other bytes: another codec and writer settings
    pq.write_table(pa.Table.from_pylist(rows), other_writer, compression="snappy", version="2.4")
    path.write_bytes(other_writer.getvalue().to_pybytes())
    path.chmod(0o644)
    before = path.read_bytes()
    assert before != gsm8k.parquet_bytes(rows)
    assert gsm8k.write_together({str(path): gsm8k.parquet_bytes(rows)}, holds=gsm8k.same_table) == {str(path): False}
    assert path.read_bytes() == before
    fewer = gsm8k.parquet_bytes(rows[:5])
    assert gsm8k.write_together({str(path): fewer}, holds=gsm8k.same_table) == {str(path): True}
    assert path.read_bytes() == fewer
    path.write_bytes(b"not parquet")
    assert gsm8k.write_together({str(path): fewer}, holds=gsm8k.same_table)[str(path)] is True


def test_the_converter_leaves_data_another_pyarrow_wrote(tmp_path: Path) -> None:
    """gsm8k-to-verl itself (what the launch role runs) judges by the table, not the bytes."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "data"
    assert run_cli("--generate", "8", "--out", str(out)).returncode == 0
    for split in ("train", "test"):
        table = pq.read_table(out / f"{split}.parquet")
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="snappy")
        (out / f"{split}.parquet").write_bytes(sink.getvalue().to_pybytes())
    rewritten = {s: (out / f"{s}.parquet").read_bytes() for s in ("train", "test")}
    again = run_cli("--generate", "8", "--out", str(out))
    assert again.returncode == 0 and not any(v["changed"] for v in json.loads(again.stdout).values())
    assert {s: (out / f"{s}.parquet").read_bytes() for s in ("train", "test")} == rewritten


# --- SFT rows (gsm8k-to-verl --sft; verl-ppo --sft trains on them) -----------------------------------------


def test_an_sft_row_is_rls_prompt_and_gsm8ks_answer_as_two_texts_and_a_conversation() -> None:
    row = gsm8k.to_sft_row(GSM8K_ROW["question"], GSM8K_ROW["answer"], "train", 3)
    rl = gsm8k.to_verl_row(GSM8K_ROW["question"], GSM8K_ROW["answer"], "train", 3)
    prompt = rl["prompt"][0]["content"]  # the text RL's rollout is prompted with
    assert row == {
        "prompt": prompt,
        "response": GSM8K_ROW["answer"],
        "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": GSM8K_ROW["answer"]}],
        "extra_info": {"split": "train", "index": 3},
    }
    assert set(gsm8k.SFT_COLUMNS) <= set(row)


@pytest.mark.parametrize(("row", "problem"), [
    ({"question": "q", "answer": "no number"}, "no '#### <number>' final answer"),  # RL's reward could not score it
    ({"question": "q"}, "no 'answer' field"),
    ({"question": "q", "answer": 5}, "answer is int, not text"),
    ({"extra_info": {"question": "q"}}, "no 'answer' field"),
])
def test_a_bad_row_is_refused_for_sft_as_for_rl(row: dict, problem: str) -> None:
    for make in (gsm8k.to_verl_row, gsm8k.to_sft_row):
        with pytest.raises(gsm8k.DataError) as info:
            gsm8k.convert([GSM8K_ROW, row], "train", make=make)
        assert str(info.value).startswith(f"row 1: {problem}"), make


def test_cli_sft_writes_the_columns_verl_reads_and_from_the_staged_rl_files_the_same_rows(tmp_path: Path) -> None:
    """--sft from GSM8K files, and from the RL files this converter wrote of them (what the launch role
    staged): the same SFT rows, the same prompts RL is given."""
    pq = pytest.importorskip("pyarrow.parquet")
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(GSM8K_ROW) for _ in range(3)) + "\n")
    files = ["--train-file", str(tmp_path / "train.jsonl"), "--test-file", str(tmp_path / "test.jsonl")]
    assert run_cli(*files, "--out", str(tmp_path / "rl")).returncode == 0
    proc = run_cli(*files, "--sft", "--out", str(tmp_path / "sft"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["train"]["rows"] == 3
    staged = run_cli("--sft", "--train-file", str(tmp_path / "rl" / "train.parquet"),
                     "--test-file", str(tmp_path / "rl" / "test.parquet"), "--out", str(tmp_path / "sft-from-rl"))
    assert staged.returncode == 0, staged.stderr
    for split in ("train", "test"):
        rows = pq.read_table(str(tmp_path / "sft" / f"{split}.parquet")).to_pylist()
        assert rows == pq.read_table(str(tmp_path / "sft-from-rl" / f"{split}.parquet")).to_pylist()
        rl = pq.read_table(str(tmp_path / "rl" / f"{split}.parquet")).to_pylist()
        assert [r["prompt"] for r in rows] == [r["prompt"][0]["content"] for r in rl]
        assert [r["messages"][1] for r in rows] == [{"role": "assistant", "content": GSM8K_ROW["answer"]}] * 3
        assert [r["extra_info"] for r in rows] == [{"split": split, "index": i} for i in range(3)]


def test_cli_sft_names_the_line_of_a_bad_row_and_writes_nothing(tmp_path: Path) -> None:
    bad = _jsonl(tmp_path / "qa.jsonl", GOOD, b'{"question": "q", "answer": "forty-two"}')
    proc = run_cli("--sft", "--train-file", str(bad), "--test-file", str(bad), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"gsm8k-to-verl: {bad}:2: no '#### <number>' final answer")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []
