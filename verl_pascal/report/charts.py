"""The charts of a run: which of verl's metrics each one draws, and the drawing.

CHARTS is the one list of charts; each names the metrics it draws, as verl
logs them (0.5.0 to 0.9.1 share these names). A chart whose metrics the log
does not have is skipped and reported, never drawn empty. Seconds per step
draws verl's ``timing_s/step`` and each phase (``timing_s/gen``,
``timing_s/update_actor``, ...) found in the log.

A value logged as nan or inf (a run that diverged) cannot be drawn: the line
draws the finite values, breaks where they stop, and a dashed vertical line
and x marks on the axis show the steps that were not finite; the legend and
the title say from which step. A metric whose every value is nan is in the
log: its chart is drawn with those marks, not skipped.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import log

if TYPE_CHECKING:  # matplotlib is imported only to draw
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PHASE_PREFIX = "timing_s/"
STEP_TIME = "timing_s/step"
#: The held-out score: verl's core validation metric (trainer.test_freq) of the val file, the mean
#: over N responses a problem (actor_rollout_ref.rollout.val_kwargs.n; verl's default is 1). verl
#: names it by the reward's variable: ``reward`` where the reward function returns a number (0.5.0),
#: ``acc`` where it returns one with an ``acc`` entry (0.9.1's GSM8K reward; there ``reward`` is
#: logged too, as val-aux).
VAL_PREFIXES = ("val-core/openai/gsm8k/reward/mean@", "val-core/openai/gsm8k/acc/mean@")
VAL_PREFIX = VAL_PREFIXES[0]
VAL_SCORE = VAL_PREFIX + "1"
ENTROPY = "actor/entropy"
#: |p_rollout - p_actor| per response token: how far the rollout's probabilities are from the actor's
#: for the same tokens. Logged where the rollout returns log-probs: verl 0.9.1 by default (0.7.1 and
#: 0.8.0 with actor_rollout_ref.rollout.calculate_log_probs=True); never with verl's own HF rollout
#: (0.5.0) or the project's 0.6.1 rollout.
PROBS_DIFF_MEAN = "training/rollout_probs_diff_mean"
PROBS_DIFF_MAX = "training/rollout_probs_diff_max"


@dataclass(frozen=True)
class Chart:
    name: str  # the PNG's file name, without .png
    title: str
    ylabel: str
    metrics: Tuple[Tuple[str, str], ...]  # (verl's key, legend label)


CHARTS: Tuple[Chart, ...] = (
    Chart("reward", "Reward and score per step", "mean per sample", (
        ("critic/score/mean", "score (the reward function)"),
        ("critic/rewards/mean", "reward (score less the KL penalty)"),
        (VAL_SCORE, "validation score (GSM8K test)"),
    )),
    Chart("response_length", "Response length", "tokens", (
        ("response_length/mean", "mean"),
        ("response_length/max", "max"),
    )),
    Chart("kl", "KL to the reference", "KL", (
        ("actor/reward_kl_penalty", "KL penalty in the reward (PPO)"),
        ("actor/kl_loss", "KL loss (GRPO)"),
        ("actor/ppo_kl", "KL to the rollout policy (PPO clip)"),
    )),
    Chart("entropy", "Entropy of the actor on its responses", "nats per token", ((ENTROPY, "entropy"),)),
    Chart("rollout_probs", "Rollout against actor: the same tokens' probabilities", "|p_rollout - p_actor|", (
        (PROBS_DIFF_MEAN, "mean"),
        (PROBS_DIFF_MAX, "max"),
    )),
    Chart("step_time", "Seconds per step and its phases", "seconds", ((STEP_TIME, "whole step"),)),
    Chart("gpu_memory", "GPU memory per process (peak of the step)", "GiB", (
        ("perf/max_memory_allocated_gb", "max allocated"),
        ("perf/max_memory_reserved_gb", "max reserved"),
    )),
)


class Line(NamedTuple):
    """One metric of a chart as the log has it."""

    label: str
    xs: List[float]  # the steps with a finite value
    ys: List[float]
    not_finite: List[float]  # the steps whose value is nan, inf or -inf
    logged: int  # the steps that logged the metric

    def legend(self) -> str:
        if not self.not_finite:
            return self.label
        return (f"{self.label}: not finite from step {self.not_finite[0]:g} "
                f"({len(self.not_finite)} of {self.logged} steps)")


def phases(steps: Sequence[log.Step]) -> List[str]:
    """The phase keys (timing_s/*) a log has, beside the whole step, longest first."""
    totals: Dict[str, float] = {}
    for record in steps:
        for key, value in record.items():
            if key.startswith(PHASE_PREFIX) and key != STEP_TIME:
                totals[key] = totals.get(key, 0.0) + (value if math.isfinite(value) else 0.0)
    return sorted(totals, key=lambda key: -totals[key])


def val_n(key: str) -> Optional[int]:
    """N of a held-out score key (one of VAL_PREFIXES and N); None for any other key."""
    for prefix in VAL_PREFIXES:
        if key.startswith(prefix) and key[len(prefix):].isdigit():
            return int(key[len(prefix):])
    return None


def val_keys(steps: Sequence[log.Step]) -> List[str]:
    """The held-out score keys a log has, by N."""
    found = {key for record in steps for key in record if val_n(key) is not None}
    return sorted(found, key=lambda key: (val_n(key), key))


def line_of(label: str, steps: Sequence[log.Step], key: str) -> "Line | None":
    """The line of ``key``, or None when no step logged it (a value of nan counts as logged)."""
    xs, ys = log.values(list(steps), key)
    if not xs:
        return None
    finite = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
    return Line(label, [x for x, _ in finite], [y for _, y in finite],
                [x for x, y in zip(xs, ys) if not math.isfinite(y)], len(xs))


def lines_of(chart: Chart, steps: Sequence[log.Step]) -> List[Line]:
    """Each line the chart draws from this log."""
    metrics = list(chart.metrics)
    if chart.name == "step_time":
        metrics += [(key, key[len(PHASE_PREFIX):]) for key in phases(steps)]
    if chart.name == "reward":
        metrics += [(key, f"validation score, {val_n(key)} responses a problem")
                    for key in val_keys(steps) if key != VAL_SCORE]
    drawn = [line_of(label, steps, key) for key, label in metrics]
    return [line for line in drawn if line is not None]


def with_gaps(line: Line) -> Tuple[List[float], List[float]]:
    """The line's points by step, nan where the value was not finite: matplotlib breaks the line there."""
    points = sorted([*zip(line.xs, line.ys), *((x, math.nan) for x in line.not_finite)])
    return [x for x, _ in points], [y for _, y in points]


def mark_not_finite(ax: "Axes", line: Line, color: str) -> None:
    """A dashed vertical line where the values stop being finite, and an x at each such step on the axis."""
    import matplotlib.transforms

    ax.axvline(line.not_finite[0], color=color, linestyle="--", linewidth=1)
    on_axis = matplotlib.transforms.blended_transform_factory(ax.transData, ax.transAxes)
    ax.plot(line.not_finite, [0.03] * len(line.not_finite), linestyle="none", marker="x", color=color,
            transform=on_axis, clip_on=False)


def title_of(chart: Chart, lines: Sequence[Line], title: str) -> str:
    """The chart's title, with a line saying from which step values were not finite."""
    bad = [line for line in lines if line.not_finite]
    if not bad:
        return f"{chart.title}\n{title}"
    first = min(line.not_finite[0] for line in bad)
    diverged = any(not line.xs or line.not_finite[-1] > line.xs[-1] for line in bad)
    return (f"{chart.title}\n{title}\nnot finite from step {first:g} (nan or inf, marked x)"
            + (": the run diverged" if diverged else ""))


def figure(chart: Chart, lines: Sequence[Line], title: str) -> "Figure":
    """The chart of these lines (the caller closes it)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    for line in lines:
        xs, ys = with_gaps(line)
        (drawn,) = ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=line.legend())
        if line.not_finite:
            mark_not_finite(ax, line, drawn.get_color())
    ax.set_title(title_of(chart, lines, title), fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(chart.ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save(fig: "Figure", path: str) -> None:
    """Write the PNG beside and rename it: a kill or a full disk never leaves half a PNG under its name."""
    partial = path + ".partial"
    try:
        fig.savefig(partial, dpi=100, format="png")
        os.replace(partial, path)
    except BaseException:
        if os.path.lexists(partial):
            os.remove(partial)
        raise


def draw(steps: Sequence[log.Step], out_dir: str, title: str) -> Dict[str, List[str]]:
    """Write one PNG per chart with data into ``out_dir``: {"written": paths, "skipped": names}.

    OSError when a PNG cannot be written; each PNG is whole or absent."""
    import matplotlib

    matplotlib.use("Agg")  # a box or a CI machine has no display
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    written: List[str] = []
    skipped: List[str] = []
    for chart in CHARTS:
        lines = lines_of(chart, steps)
        if not lines:
            skipped.append(chart.name)
            continue
        fig = figure(chart, lines, title)
        path = os.path.join(out_dir, chart.name + ".png")
        try:
            save(fig, path)
        finally:
            plt.close(fig)
        written.append(path)
    return {"written": written, "skipped": skipped}
