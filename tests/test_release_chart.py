"""bench/release_chart.py: the releases' table and chart come from the measured runs' file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import release_chart


def runs(tmp_path, rows):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"shape_runs": rows, "tiny_runs": []}))
    return str(path)


ROW = {"verl": "9.9.9", "date": "2026-01-01", "gpu": "H100", "steps_done": 7, "steps_asked": 10, "s_per_step_median": 12.345,
       "s_per_step_first": 30.0, "gen_tokens_per_s_mean": 812.4, "max_allocated_gib": 14.0, "max_reserved_gib": 16.5,
       "nvidia_smi_mib": 18000, "stack": "torch X"}


def test_the_table_has_a_row_per_measured_run_with_its_numbers(tmp_path) -> None:
    table = release_chart.markdown(release_chart.load(runs(tmp_path, [ROW, {**ROW, "verl": "9.9.8"}])))
    lines = table.splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| 1 | 9.9.9 | 2026-01-01 | H100 | 7 of 10 | 12.35 (30.00) | 812 | 14.00 GiB | 16.50 GiB | 18000 MiB")


def test_the_chart_is_a_png_drawn_without_a_display(tmp_path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.delenv("DISPLAY", raising=False)
    out = tmp_path / "chart.png"
    assert release_chart.main(["--data", runs(tmp_path, [ROW]), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_alike_in_release_day_gpu_and_steps_get_a_bar_each_named_by_their_row() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig = release_chart.figure({"shape_runs": [ROW, {**ROW, "s_per_step_median": 20.0}], "tiny_runs": []})
    try:
        steps = fig.axes[0]
        assert sorted(round(bar.get_height(), 3) for bar in steps.patches) == [12.345, 20.0]
        assert len({bar.get_x() for bar in steps.patches}) == 2  # side by side, not one drawn over the other
        assert [label.get_text().split()[0] for label in steps.get_xticklabels()] == ["#1", "#2"]
    finally:
        plt.close(fig)


def test_the_committed_runs_name_their_date_gpu_and_stack() -> None:
    data = release_chart.load()
    assert data["shape_runs"] and all(r["date"] and r["stack"] and r["gpu"] for r in data["shape_runs"])


def test_the_table_in_the_benchmarks_page_is_the_one_the_committed_runs_give() -> None:
    page = Path(release_chart.REPO, "docs", "benchmarks.md").read_text()
    assert release_chart.markdown(release_chart.load()) in page, "run: python3 -m bench.release_chart --markdown"
