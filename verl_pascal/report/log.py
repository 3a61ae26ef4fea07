"""Read verl's console log: one record of metrics per training step.

verl's console logger (``verl/utils/logger/aggregate_logger.py``) prints each
step as ``step:N - key:value - key:value``, every value through
``pprint.pformat``: plain numbers, or numpy scalars such as
``np.float64(0.25)`` under numpy 2. Ray prefixes what its workers print
(``(TaskRunner pid=123) step:1 - ...``); verl's SFT trainer prints its steps
right after its tqdm progress bar, on the bar's line (``... 2.09it/s]step:4 - ...``).
A resumed run appends to the
same log, so a step can appear twice: the later line wins. A value verl
logged as ``nan``, ``inf`` or ``-inf`` (``np.float64(nan)`` under numpy 2)
is kept as that float: a run that diverged reads as one, not as a run
without the metric.
"""

from __future__ import annotations

import math
import re
from typing import Dict, Iterable, List

STEP_LINE = re.compile(r"(?:^|[\s\]])step:(\d+) - (.*)$")
# np.float64(0.5), np.int64(3), numpy.float32(1e-05): numpy scalars as pformat writes them.
NUMPY_SCALAR = re.compile(r"^(?:np|numpy)\.[a-z]+\d*\((.*)\)$")

Step = Dict[str, float]


def parse_value(text: str) -> float:
    """One logged value as a float; ValueError if it is not a number."""
    text = text.strip()
    match = NUMPY_SCALAR.match(text)
    if match:
        text = match.group(1)
    value = float(text)  # accepts nan and inf as verl prints them
    return value


def parse_line(line: str) -> "Step | None":
    """The metrics of one step line, with ``step``; None for any other line."""
    match = STEP_LINE.search(line.rstrip("\n"))
    if not match:
        return None
    metrics: Step = {"step": float(match.group(1))}
    for part in match.group(2).split(" - "):
        key, sep, value = part.partition(":")
        if not sep:
            continue
        try:
            metrics[key.strip()] = parse_value(value)
        except ValueError:
            continue
    return with_role_peaks(metrics)


#: Per-process peaks that verl's engine workers (0.8 and newer) log once per role
#: (``actor/perf/max_memory_allocated_gb``, ``critic/perf/...``) where the legacy
#: workers log one ``perf/...`` key; the plain key is their largest.
ROLE_PEAKS = ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb")


def with_role_peaks(metrics: Step) -> Step:
    """``metrics`` with each plain peak key filled from the roles' own, when only those were logged."""
    for key in ROLE_PEAKS:
        if key not in metrics:
            roles = [v for k, v in metrics.items() if k.endswith("/" + key)]
            if roles:
                metrics[key] = max(roles)
    return metrics


def parse_lines(lines: Iterable[str]) -> List[Step]:
    """Every step of a log, by step number; a step logged again (a resumed run) keeps its last record."""
    by_step: Dict[int, Step] = {}
    for line in lines:
        record = parse_line(line)
        if record is not None:
            by_step[int(record["step"])] = record
    return [by_step[n] for n in sorted(by_step)]


def read(path: str) -> List[Step]:
    """The steps of the log file at ``path``."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return parse_lines(handle)


def values(steps: List[Step], key: str) -> "tuple[list[float], list[float]]":
    """(steps, values) of every record that has ``key``, nan and inf included: what the log says."""
    xs: List[float] = []
    ys: List[float] = []
    for record in steps:
        value = record.get(key)
        if value is not None:
            xs.append(record["step"])
            ys.append(value)
    return xs, ys


def series(steps: List[Step], key: str) -> "tuple[list[float], list[float]]":
    """(steps, values) of the records that have ``key`` with a finite value (what a chart's line can draw)."""
    xs: List[float] = []
    ys: List[float] = []
    for record in steps:
        value = record.get(key)
        if value is not None and math.isfinite(value):
            xs.append(record["step"])
            ys.append(value)
    return xs, ys
