"""The charts of a run: which of verl's metrics each one draws, and the drawing.

CHARTS is the one list of charts; each names the metrics it draws, as verl
logs them (0.5.0 to 0.9.1 share these names). A chart whose metrics the log
does not have is skipped and reported, never drawn empty. Seconds per step
draws verl's ``timing_s/step`` and each phase (``timing_s/gen``,
``timing_s/update_actor``, ...) found in the log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from . import log

PHASE_PREFIX = "timing_s/"
STEP_TIME = "timing_s/step"


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
        ("val-core/openai/gsm8k/reward/mean@1", "validation score (GSM8K test)"),
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
    Chart("step_time", "Seconds per step and its phases", "seconds", ((STEP_TIME, "whole step"),)),
    Chart("gpu_memory", "GPU memory per process (peak of the step)", "GiB", (
        ("perf/max_memory_allocated_gb", "max allocated"),
        ("perf/max_memory_reserved_gb", "max reserved"),
    )),
)


def phases(steps: Sequence[log.Step]) -> List[str]:
    """The phase keys (timing_s/*) a log has, beside the whole step, longest first."""
    totals: Dict[str, float] = {}
    for record in steps:
        for key, value in record.items():
            if key.startswith(PHASE_PREFIX) and key != STEP_TIME:
                totals[key] = totals.get(key, 0.0) + value
    return sorted(totals, key=lambda key: -totals[key])


def lines_of(chart: Chart, steps: Sequence[log.Step]) -> List[Tuple[str, List[float], List[float]]]:
    """(label, steps, values) of each line the chart draws from this log."""
    metrics = list(chart.metrics)
    if chart.name == "step_time":
        metrics += [(key, key[len(PHASE_PREFIX):]) for key in phases(steps)]
    drawn = []
    for key, label in metrics:
        xs, ys = log.series(list(steps), key)
        if xs:
            drawn.append((label, xs, ys))
    return drawn


def draw(steps: Sequence[log.Step], out_dir: str, title: str) -> Dict[str, List[str]]:
    """Write one PNG per chart with data into ``out_dir``: {"written": paths, "skipped": names}."""
    import matplotlib

    matplotlib.use("Agg")  # a box or a CI machine has no display
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    written: List[str] = []
    skipped: List[str] = []
    for chart in CHARTS:
        drawn = lines_of(chart, steps)
        if not drawn:
            skipped.append(chart.name)
            continue
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for label, xs, ys in drawn:
            ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=label)
        ax.set_title(f"{chart.title}\n{title}", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(chart.ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, chart.name + ".png")
        partial = path + ".partial"
        fig.savefig(partial, dpi=100, format="png")
        plt.close(fig)
        os.replace(partial, path)  # a kill never leaves half a PNG under the chart's name
        written.append(path)
    return {"written": written, "skipped": skipped}
