"""verl-pascal-report: the charts of a run come from verl's console log.

Two kinds of log: logs recorded on the H200 under P40 rules
(tests/data/report: the step lines of a verl 0.5.0 run killed with SIGKILL
after step 3 and resumed from its step-2 checkpoint by ``verl-ppo --resume``,
and the first steps of a verl 0.9.1 run, whose engine workers log GPU memory
per role), and a STAND-IN whose lines are written by verl's own console
formatter (``concat_dict_to_str``, taken from the real 0.5.0 and 0.9.1
sdists), with numpy 2 scalars as verl's metrics are, Ray's worker prefix, and
a run that crashed and was resumed (steps logged twice). The stand-in's
metric values are made up by the test.
"""

from __future__ import annotations

import ast
import errno
import json
import math
import os
import tarfile
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from verl_pascal.report import charts, cli, log

np = pytest.importorskip("numpy")


def verl_formatter(sdist: Path, version: str) -> Callable[[Dict[str, object], int], str]:
    """verl's concat_dict_to_str, from the release's own aggregate_logger.py (without importing torch)."""
    member = f"verl-{version}/verl/utils/logger/aggregate_logger.py"
    with tarfile.open(sdist) as tar:
        source = tar.extractfile(member).read().decode()
    tree = ast.parse(source)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "concat_dict_to_str")
    namespace: Dict[str, object] = {}
    exec(compile("import numbers, pprint\n" + ast.unparse(func), member, "exec"), namespace)  # noqa: S102
    return namespace["concat_dict_to_str"]  # type: ignore[return-value]


def metrics(step: int, resumed: bool = False) -> Dict[str, object]:
    """A step's metrics under verl's names; numpy scalars where verl computes with numpy."""
    return {
        "critic/score/mean": np.float64(0.1 * step + (0.05 if resumed else 0.0)),
        "critic/rewards/mean": np.float64(0.1 * step - 0.01),
        "response_length/mean": np.float64(200.0 - step),
        "response_length/max": 256.0,
        "actor/reward_kl_penalty": np.float32(0.001 * step),
        "actor/ppo_kl": 0.0002,
        "actor/entropy": np.float64(2.0 - 0.1 * step),
        "training/rollout_probs_diff_mean": 1e-6 * step,
        "training/rollout_probs_diff_max": 1e-4 * step,
        "timing_s/step": 15.0 + step,
        "timing_s/gen": np.float64(9.0),
        "timing_s/update_actor": 3.5,
        "timing_s/ref": 1.5,
        "training/global_step": step,
        "note": "not a number: verl's formatter drops it",
    }


def memory(version: str) -> Dict[str, object]:
    """GPU peaks as each release logs them: one key (legacy workers), or one per role (engine workers, 0.8+)."""
    if version == "0.5.0":
        return {"perf/max_memory_allocated_gb": np.float64(14.2), "perf/max_memory_reserved_gb": 16.7}
    return {"actor/perf/max_memory_allocated_gb": np.float64(14.2), "actor/perf/max_memory_reserved_gb": 16.7,
            "critic/perf/max_memory_allocated_gb": np.float64(9.5), "critic/perf/max_memory_reserved_gb": 16.1}


def recorded_log(sdist: Path, version: str) -> str:
    """Steps 1-4, a crash after step 4, then a resume from the step-2 checkpoint that runs steps 3-6."""
    fmt = verl_formatter(sdist, version)
    lines: List[str] = ["(TaskRunner pid=4242) Checkpoint tracker file does not exist: /x/latest_checkpointed_iteration.txt"]
    lines += [f"(TaskRunner pid=4242) {fmt({**metrics(s), **memory(version)}, step=s)}" for s in range(1, 5)]
    lines += ["Traceback (most recent call last):", "ray.exceptions.RayTaskError: killed", "",
              "verl-ppo: resuming /runs/20261204-010203 from global_step_2"]
    lines += [f"(TaskRunner pid=5151) {fmt({**metrics(s, resumed=True), **memory(version)}, step=s)}" for s in range(3, 7)]
    return "\n".join(lines) + "\n"


@pytest.fixture(params=["0.5.0", "0.9.1"])
def run_dir(request, sdist, tmp_path) -> Path:
    version = request.param
    run = tmp_path / "20261204-010203"
    run.mkdir()
    (run / "train.log").write_text(recorded_log(sdist(version), version))
    return run


def test_every_step_is_read_once_and_a_resumed_step_keeps_its_last_record(run_dir) -> None:
    steps = log.read(str(run_dir / "train.log"))
    assert [int(s["step"]) for s in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[0]["critic/score/mean"] == pytest.approx(0.1)
    assert steps[2]["critic/score/mean"] == pytest.approx(0.35)  # step 3 as the resumed run logged it
    assert steps[1]["actor/reward_kl_penalty"] == pytest.approx(0.002)
    assert steps[5]["training/global_step"] == 6
    assert "note" not in steps[0]


def test_the_step_time_chart_has_the_whole_step_and_each_phase_longest_first(run_dir) -> None:
    steps = log.read(str(run_dir / "train.log"))
    chart = next(c for c in charts.CHARTS if c.name == "step_time")
    drawn = charts.lines_of(chart, steps)
    assert [line.label for line in drawn] == ["whole step", "gen", "update_actor", "ref"]
    assert drawn[0][1] == [1, 2, 3, 4, 5, 6] and drawn[0][2] == [16, 17, 18, 19, 20, 21]


def test_the_report_writes_a_png_per_chart_without_a_display(run_dir, monkeypatch, capsys) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.delenv("DISPLAY", raising=False)
    assert cli.run([str(run_dir)]) == 0
    names = sorted(p.name for p in (run_dir / "report").glob("*.png"))
    assert names == sorted(c.name + ".png" for c in charts.CHARTS)
    import matplotlib.image

    for name in names:
        image = matplotlib.image.imread(str(run_dir / "report" / name))
        assert image.shape[0] > 100 and image.shape[1] > 100
    assert capsys.readouterr().out.splitlines() == [str(run_dir / "report" / c.name) + ".png" for c in charts.CHARTS]


def test_a_copied_log_file_is_enough_and_missing_metrics_are_named_not_drawn(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    copied = tmp_path / "box-a.log"
    copied.write_text("step:1 - critic/score/mean:0.5 - timing_s/step:20.0\nstep:2 - critic/score/mean:nan - "
                      "timing_s/step:np.float64(21.5)\n")
    out = tmp_path / "charts"
    assert cli.run([str(copied), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["reward.png", "step_time.png", "summary.json"]
    err = capsys.readouterr().err
    assert "not drawn: response_length, kl, entropy, rollout_probs, gpu_memory" in err
    assert log.series(log.read(str(copied)), "critic/score/mean") == ([1.0], [0.5])


@pytest.mark.parametrize("content", [None, "", "INFO starting\nno steps yet\n"])
def test_no_log_or_no_step_is_a_usage_error_with_what_to_do(tmp_path, capsys, content) -> None:
    run = tmp_path / "run"
    run.mkdir()
    if content is not None:
        (run / "train.log").write_text(content)
    assert cli.run([str(run)]) == 2
    err = capsys.readouterr().err
    assert ("no such log" in err) if content is None else ("no step of verl's console log" in err)
    assert not (run / "report").exists()


def test_the_summary_gives_the_numbers_a_user_reads_first(run_dir, capsys) -> None:
    pytest.importorskip("matplotlib")
    assert cli.run([str(run_dir)]) == 0
    numbers = json.loads((run_dir / "report" / "summary.json").read_text())
    assert numbers["steps"] == 6 and numbers["first_step"] == 1 and numbers["last_step"] == 6
    assert numbers["score_first"] == pytest.approx(0.1) and numbers["score_last"] == pytest.approx(0.65)
    assert numbers["s_per_step_median"] == pytest.approx(19.0)  # steps 2-6 take 17 to 21 s
    assert numbers["max_allocated_gib"] == pytest.approx(14.2) and numbers["max_reserved_gib"] == pytest.approx(16.7)
    err = capsys.readouterr().err
    assert "seconds per step (median after the first): 19.000" in err and "steps logged: 6" in err


def test_a_summary_leaves_out_what_the_log_lacks() -> None:
    from verl_pascal.report import summary

    numbers = summary.summarize(log.parse_lines(["step:3 - timing_s/step:4.0"]))
    assert numbers["s_per_step_median"] == 4.0 and numbers["score_last"] is None
    assert "score" not in summary.text(numbers)
    assert summary.summarize([])["steps"] == 0


def test_the_summary_gives_the_held_out_score_before_training_and_at_the_last_validation() -> None:
    """verl's validation: a line of its own before the first step, then merged into every test_freq-th step."""
    from verl_pascal.report import summary

    val = "val-core/openai/gsm8k/reward/mean@1"
    numbers = summary.summarize(log.parse_lines([
        f"(TaskRunner pid=3) step:0 - {val}:np.float64(0.25)", "step:1 - critic/score/mean:0.2",
        f"step:2 - critic/score/mean:0.3 - {val}:np.float64(0.4)", "step:3 - critic/score/mean:0.35"]))
    assert (numbers["held_out_first"], numbers["held_out_last"]) == (0.25, 0.4)
    assert (numbers["score_first"], numbers["score_last"]) == (0.2, 0.35)
    text = summary.text(numbers)
    assert "held-out score at the first validation: 0.250" in text and "at the last validation: 0.400" in text


# ---------------------------------------------------------------- logs recorded on the GPU

RECORDED = Path(__file__).parent / "data" / "report"


def test_a_gpu_log_of_a_killed_and_resumed_run_reads_as_one_run() -> None:
    steps = log.read(str(RECORDED / "verl-0.5.0-tiny-killed-and-resumed.train.log"))
    assert [int(s["step"]) for s in steps] == [1, 2, 3, 4, 5, 6]
    # Step 3 ran twice (before the kill and after the resume): the resumed run's record is kept.
    assert steps[2]["training/global_step"] == 3 and steps[2]["timing_s/step"] == pytest.approx(5.6454, abs=1e-3)
    assert all(s["perf/max_memory_allocated_gb"] < 1 for s in steps)  # the tiny model


def test_gpu_memory_of_engine_workers_is_read_from_their_roles(tmp_path, capsys) -> None:
    """verl 0.8+ logs actor/perf/... and critic/perf/...: the memory chart and summary take the larger."""
    pytest.importorskip("matplotlib")
    steps = log.read(str(RECORDED / "verl-0.9.1-qwen2.5-0.5b-shape.train.log"))
    assert [int(s["step"]) for s in steps] == [1, 2, 3, 4]
    assert " - perf/max_memory_allocated_gb:" not in (RECORDED / "verl-0.9.1-qwen2.5-0.5b-shape.train.log").read_text()
    assert steps[-1]["perf/max_memory_allocated_gb"] == pytest.approx(14.2857, abs=1e-3)
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_bytes((RECORDED / "verl-0.9.1-qwen2.5-0.5b-shape.train.log").read_bytes())
    assert cli.run([str(run)]) == 0
    numbers = json.loads((run / "report" / "summary.json").read_text())
    assert numbers["max_allocated_gib"] == pytest.approx(14.2857, abs=1e-3)
    assert numbers["max_reserved_gib"] == pytest.approx(16.705, abs=1e-3)
    assert (run / "report" / "gpu_memory.png").stat().st_size > 0


# ---------------------------------------------------------------- a run whose metrics went nan or inf

SCORE = "critic/score/mean"


def diverged_log(sdist: Path, bad: object, first_bad: int = 6, last: int = 10, version: str = "0.9.1") -> str:
    """Steps 1 to ``last``; from ``first_bad`` on, the score and the reward are ``bad`` (verl's formatter writes them)."""
    fmt = verl_formatter(sdist(version), version)
    lines = []
    for s in range(1, last + 1):
        record = {**metrics(s), **memory(version)}
        if s >= first_bad:
            record[SCORE] = bad
            record["critic/rewards/mean"] = bad
        lines.append(f"(TaskRunner pid=4242) {fmt(record, step=s)}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("version", ["0.5.0", "0.9.1"])
def test_nan_and_inf_as_verl_prints_them_are_kept_as_values(sdist, version) -> None:
    """pformat writes nan, inf, -inf, np.float64(nan), np.float32(inf): each is read as that float, not dropped."""
    fmt = verl_formatter(sdist(version), version)
    line = fmt({"a": float("nan"), "b": float("inf"), "c": float("-inf"), "d": np.float64("nan"),
                "e": np.float32("inf"), "f": np.float64("-inf"), "g": np.float64(0.5)}, step=7)
    (record,) = log.parse_lines([f"(TaskRunner pid=1) {line}"])
    assert math.isnan(record["a"]) and math.isnan(record["d"])
    assert record["b"] == record["e"] == math.inf and record["c"] == record["f"] == -math.inf
    assert record["g"] == 0.5


@pytest.mark.parametrize("bad, shown", [(np.float64("nan"), "nan"), (np.float32("inf"), "inf"), (float("-inf"), "-inf")])
def test_a_diverged_run_reports_the_real_last_value_and_warns(sdist, tmp_path, capsys, bad, shown) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(diverged_log(sdist, bad))
    assert cli.run([str(run)]) == 0  # the report could read the run: it shows it, and warns
    err = capsys.readouterr().err
    assert "score at the first step: 0.100" in err
    assert f"score at the last step: {shown}" in err and "score at the last step: 0.500" not in err
    assert "warning: critic/score/mean is not finite from step 6 (5 of 10 steps): the run diverged" in err
    assert "warning: critic/rewards/mean is not finite from step 6 (5 of 10 steps): the run diverged" in err
    numbers = json.loads((run / "report" / "summary.json").read_text())  # strict JSON: nan and inf as text
    assert numbers["score_last"] == shown and numbers["score_first"] == pytest.approx(0.1)
    assert numbers["not_finite"][SCORE] == {"count": 5, "steps": 10, "first_step": 6, "last": shown}
    assert set(numbers["not_finite"]) == {SCORE, "critic/rewards/mean"}
    assert (run / "report" / "reward.png").stat().st_size > 0
    json.loads((run / "report" / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))


def test_a_metric_whose_every_value_is_nan_is_in_the_log_but_not_finite(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    copied = tmp_path / "box-a.log"
    copied.write_text("".join(f"step:{s} - critic/score/mean:nan - timing_s/step:{10 + s}.0\n" for s in (1, 2, 3)))
    out = tmp_path / "charts"
    assert cli.run([str(copied), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: critic/score/mean is not finite from step 1 (3 of 3 steps): the run diverged" in err
    assert "score at the first step: nan" in err and "score at the last step: nan" in err
    assert "not drawn: response_length, kl, entropy, rollout_probs, gpu_memory" in err  # the reward chart is not "missing from the log"
    assert (out / "reward.png").stat().st_size > 0


def test_a_value_that_is_finite_again_is_counted_but_not_called_a_divergence() -> None:
    from verl_pascal.report import summary

    steps = log.parse_lines([f"step:{s} - critic/score/mean:{'nan' if s == 4 else 0.1 * s}" for s in range(1, 9)])
    text = summary.text(summary.summarize(steps))
    assert "warning: critic/score/mean is not finite at 1 of 8 steps (first at step 4)" in text
    assert "diverged" not in text and "score at the last step: 0.800" in text


def test_when_many_metrics_go_nan_the_charted_ones_are_warned_first_and_the_rest_counted() -> None:
    """A real divergence turns dozens of metrics nan (losses, grad norms, ...): the score must not drown in them."""
    from verl_pascal.report import summary

    losses = [f"actor/loss_{i:02d}" for i in range(12)]
    steps = log.parse_lines([f"step:{s} - " + " - ".join(f"{k}:{'nan' if s >= 3 else 1.0}" for k in [*losses, SCORE])
                             for s in range(1, 5)])
    numbers = summary.summarize(steps)
    warnings = [line for line in summary.text(numbers).splitlines() if line.startswith("warning: ")]
    assert warnings[0] == "warning: critic/score/mean is not finite from step 3 (2 of 4 steps): the run diverged"
    assert len(warnings) == summary.MAX_WARNINGS + 1
    assert warnings[-1].startswith(f"warning: {13 - summary.MAX_WARNINGS} more metrics are not finite")
    assert set(json.loads(summary.to_json(numbers))["not_finite"]) == {*losses, SCORE}


def test_a_chart_draws_the_finite_part_and_marks_where_values_stopped_being_finite(sdist, tmp_path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    steps = log.parse_lines(diverged_log(sdist, np.float64("nan")).splitlines())
    saved = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        saved[Path(fname).name.split(".")[0]] = self
        return real_savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    charts.draw(steps, str(tmp_path), title="run")
    ax = saved["reward"].axes[0]
    score = next(line for line in ax.get_lines() if line.get_label().startswith("score (the reward function)"))
    xs, ys = score.get_data()
    assert [x for x, y in zip(xs, ys) if math.isfinite(y)] == [1, 2, 3, 4, 5]
    assert "not finite from step 6" in score.get_label()
    assert "not finite from step 6" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("score (the reward function)") and "not finite from step 6" in t for t in legend)
    assert any(list(line.get_xdata()) == [6, 6] for line in ax.get_lines())  # a vertical line at step 6


# ---------------------------------------------------------------- --out that cannot take the report


def one_line_error(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verl-pascal-report: "), err
    return lines[0]


def test_out_naming_an_existing_file_is_refused_and_the_file_is_kept(tmp_path, capsys) -> None:
    copied = tmp_path / "box-a.log"
    copied.write_text("step:1 - critic/score/mean:0.5 - timing_s/step:20.0\n")
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    assert cli.run([str(copied), "--out", str(taken)]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert str(taken) in line and "not a directory" in line
    assert taken.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box-a.log", "notes.txt"]


def test_out_below_a_file_cannot_be_created_and_nothing_is_written(tmp_path, capsys) -> None:
    copied = tmp_path / "box-a.log"
    copied.write_text("step:1 - critic/score/mean:0.5 - timing_s/step:20.0\n")
    assert cli.run([str(copied), "--out", str(copied / "charts")]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert str(copied / "charts") in line and "cannot create" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box-a.log"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into a read-only directory")
def test_out_in_a_directory_that_cannot_be_written_is_refused(tmp_path, capsys) -> None:
    copied = tmp_path / "box-a.log"
    copied.write_text("step:1 - critic/score/mean:0.5 - timing_s/step:20.0\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert cli.run([str(copied), "--out", str(locked)]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert str(locked) in line and "cannot write" in line
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def test_a_write_that_fails_half_way_is_one_line_and_leaves_no_partial_file(tmp_path, capsys, monkeypatch) -> None:
    """A full disk (or a directory made read-only meanwhile) while the charts are written: no half file."""
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    copied = tmp_path / "box-a.log"
    copied.write_text("step:1 - critic/score/mean:0.5 - timing_s/step:20.0\nstep:2 - critic/score/mean:0.6 - "
                      "timing_s/step:21.0\n")
    out = tmp_path / "charts"
    real_savefig = matplotlib.figure.Figure.savefig
    calls = []

    def savefig(self, fname, *args, **kwargs):
        calls.append(fname)
        if len(calls) == 2:  # the second chart: half a PNG, then the disk is full
            Path(fname).write_bytes(b"\x89PNG half")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    assert cli.run([str(copied), "--out", str(out)]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "No space left on device" in line and str(out) in line
    assert [p.name for p in out.iterdir()] == ["reward.png"]  # the chart written whole before; no .partial
