"""A run in a few numbers, beside its charts: what a user reads first on a headless box.

Steps logged, the score at the first and the last step (the values the log
has there, nan or inf included), the held-out score (verl's validation) at the
first and the last step that ran it, seconds per step (the median over the
steps after the first, which also compiles and warms up), and the peak GPU
memory any step reported.

A metric that verl logged as nan, inf or -inf at some step is counted
(``not_finite``: how many of the steps that logged it, from which step, its
last value) and warned about, one ``warning:`` line each: "the run diverged"
when its last value is still not finite, otherwise the steps it was not
finite at. The charted metrics come first; past MAX_WARNINGS lines, one more
line says how many others summary.json lists.

summary.json is strict JSON: a value that is not finite is written as the
text "nan", "inf" or "-inf" (JSON has no such number; Python's NaN token
would read as null in jq and fail in a browser).
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Dict, List, Optional, Sequence, Tuple, TypedDict, Union

from . import charts, log

SCORE = "critic/score/mean"
STEP_TIME = "timing_s/step"
ALLOCATED = "perf/max_memory_allocated_gb"
RESERVED = "perf/max_memory_reserved_gb"

#: Warning lines printed before the rest are only counted.
MAX_WARNINGS = 8

#: The metrics a user sees in the charts: their warnings come first.
CHARTED = tuple(key for chart in charts.CHARTS for key, _ in chart.metrics)


class NotFinite(TypedDict):
    count: int  # the steps whose value is nan, inf or -inf
    steps: int  # the steps that logged the metric
    first_step: int  # the first of them
    last: float  # the metric's last logged value


class Summary(TypedDict):
    steps: float
    first_step: Optional[float]
    last_step: Optional[float]
    score_first: Optional[float]
    score_last: Optional[float]
    held_out_first: Optional[float]
    held_out_last: Optional[float]
    s_per_step_median: Optional[float]
    max_allocated_gib: Optional[float]
    max_reserved_gib: Optional[float]
    not_finite: Dict[str, NotFinite]


def _first(values: List[float]) -> Optional[float]:
    return values[0] if values else None


def _last(values: List[float]) -> Optional[float]:
    return values[-1] if values else None


def keys_of(steps: Sequence[log.Step]) -> List[str]:
    """Every metric the log has, in the order it first appears."""
    keys: Dict[str, None] = {}
    for record in steps:
        keys.update((key, None) for key in record if key != "step")
    return list(keys)


def not_finite_of(steps: Sequence[log.Step], key: str) -> Optional[NotFinite]:
    """How ``key`` was not finite, or None when every value it logged is finite."""
    xs, ys = log.values(list(steps), key)
    bad = [x for x, y in zip(xs, ys) if not math.isfinite(y)]
    if not bad:
        return None
    return NotFinite(count=len(bad), steps=len(xs), first_step=int(bad[0]), last=ys[-1])


def not_finite(steps: Sequence[log.Step]) -> Dict[str, NotFinite]:
    """The metrics that were nan or inf at some step: the charted ones first, then by first step and name."""
    found = {key: entry for key in keys_of(steps) if (entry := not_finite_of(steps, key)) is not None}
    order = sorted(found, key=lambda key: (key not in CHARTED, found[key]["first_step"], key))
    return {key: found[key] for key in order}


def summarize(steps: Sequence[log.Step]) -> Summary:
    records = list(steps)
    _, score = log.values(records, SCORE)
    held_keys = charts.val_keys(records)
    _, held_out = log.values(records, held_keys[-1]) if held_keys else ([], [])
    _, step_s = log.series(records, STEP_TIME)
    _, allocated = log.series(records, ALLOCATED)
    _, reserved = log.series(records, RESERVED)
    after_first = step_s[1:] or step_s
    return Summary(
        steps=float(len(records)),
        first_step=records[0]["step"] if records else None,
        last_step=records[-1]["step"] if records else None,
        score_first=_first(score),
        score_last=_last(score),
        held_out_first=_first(held_out),
        held_out_last=_last(held_out),
        s_per_step_median=statistics.median(after_first) if after_first else None,
        max_allocated_gib=max(allocated) if allocated else None,
        max_reserved_gib=max(reserved) if reserved else None,
        not_finite=not_finite(records),
    )


LABELS: Tuple[Tuple[str, str], ...] = (
    ("steps", "steps logged"), ("first_step", "first step"), ("last_step", "last step"),
    ("score_first", "score at the first step"), ("score_last", "score at the last step"),
    ("held_out_first", "held-out score at the first validation"),
    ("held_out_last", "held-out score at the last validation"),
    ("s_per_step_median", "seconds per step (median after the first)"),
    ("max_allocated_gib", "GPU memory, max allocated (GiB)"), ("max_reserved_gib", "GPU memory, max reserved (GiB)"),
)


def warning(key: str, entry: NotFinite) -> str:
    """One line on a metric that was not finite."""
    if not math.isfinite(entry["last"]):
        return (f"warning: {key} is not finite from step {entry['first_step']} "
                f"({entry['count']} of {entry['steps']} steps): the run diverged")
    return (f"warning: {key} is not finite at {entry['count']} of {entry['steps']} steps "
            f"(first at step {entry['first_step']})")


def warnings(summary: Summary) -> List[str]:
    """The warning lines: MAX_WARNINGS metrics, then a count of the others."""
    entries = list(summary["not_finite"].items())
    lines = [warning(key, entry) for key, entry in entries[:MAX_WARNINGS]]
    if len(entries) > MAX_WARNINGS:
        lines.append(f"warning: {len(entries) - MAX_WARNINGS} more metrics are not finite "
                     "(summary.json lists them all under not_finite)")
    return lines


def text(summary: Summary) -> str:
    """One line per number the log has (nan or inf as the log has them), then the warnings."""
    lines = []
    for key, label in LABELS:
        value = summary.get(key)
        if isinstance(value, float):
            lines.append(f"{label}: {value:g}" if key.endswith("step") or key == "steps" else f"{label}: {value:.3f}")
    return "\n".join(lines + warnings(summary))


Plain = Union[None, bool, int, float, str, List["Plain"], Dict[str, "Plain"]]


def plain(value: object) -> Plain:
    """``value`` for strict JSON: a float that is not finite as its text ("nan", "inf", "-inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value  # type: ignore[return-value]


def to_json(summary: Summary) -> str:
    """summary.json's text."""
    return json.dumps(plain(summary), indent=1, allow_nan=False) + "\n"
