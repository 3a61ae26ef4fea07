"""A run in a few numbers, beside its charts: what a user reads first on a headless box.

Steps logged, the score at the start and the end, seconds per step (the
median over the steps after the first, which also compiles and warms up),
and the peak GPU memory any step reported.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence

from . import log

SCORE = "critic/score/mean"
STEP_TIME = "timing_s/step"
ALLOCATED = "perf/max_memory_allocated_gb"
RESERVED = "perf/max_memory_reserved_gb"


def _last(values: List[float]) -> Optional[float]:
    return values[-1] if values else None


def summarize(steps: Sequence[log.Step]) -> Dict[str, Optional[float]]:
    records = list(steps)
    _, score = log.series(records, SCORE)
    _, step_s = log.series(records, STEP_TIME)
    _, allocated = log.series(records, ALLOCATED)
    _, reserved = log.series(records, RESERVED)
    after_first = step_s[1:] or step_s
    return {
        "steps": float(len(records)),
        "first_step": records[0]["step"] if records else None,
        "last_step": records[-1]["step"] if records else None,
        "score_first": score[0] if score else None,
        "score_last": _last(score),
        "s_per_step_median": statistics.median(after_first) if after_first else None,
        "max_allocated_gib": max(allocated) if allocated else None,
        "max_reserved_gib": max(reserved) if reserved else None,
    }


def text(summary: Dict[str, Optional[float]]) -> str:
    """One line per number, those the log has."""
    labels = {
        "steps": "steps logged", "first_step": "first step", "last_step": "last step",
        "score_first": "score at the first step", "score_last": "score at the last step",
        "s_per_step_median": "seconds per step (median after the first)",
        "max_allocated_gib": "GPU memory, max allocated (GiB)", "max_reserved_gib": "GPU memory, max reserved (GiB)",
    }
    lines = []
    for key, label in labels.items():
        value = summary.get(key)
        if value is not None:
            lines.append(f"{label}: {value:g}" if key.endswith("step") or key == "steps" else f"{label}: {value:.3f}")
    return "\n".join(lines)
