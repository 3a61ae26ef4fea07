"""verl-pascal-report RUN_DIR: PNG charts of a run, from its train.log.

RUN_DIR is a run directory of the launch script (its train.log is read), or
a copied log file. The charts go to RUN_DIR/report/ (or --out), with
summary.json: steps, score at the start and the end, median seconds per
step, peak GPU memory (also printed, to stderr). Exit status:
0 with charts written, 2 when the input is missing or holds no step of
verl's console log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional, Sequence

from . import charts, log, summary

LOG_NAME = "train.log"


def locate(run: str) -> str:
    """The log file of a run directory, or the file itself."""
    return os.path.join(run, LOG_NAME) if os.path.isdir(run) else run


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="verl-pascal-report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN_DIR", help="a run directory (with train.log) or a log file")
    p.add_argument("--out", help="where the PNGs go (default: RUN_DIR/report, or beside the log file)")
    return p.parse_args(argv)


def run(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    path = locate(args.run)
    if not os.path.isfile(path):
        print(f"verl-pascal-report: {path}: no such log (a run directory of verl-ppo holds {LOG_NAME})",
              file=sys.stderr)
        return 2
    steps = log.read(path)
    if not steps:
        print(f"verl-pascal-report: {path}: no step of verl's console log in it (lines 'step:N - key:value'); "
              "was the run started with trainer.logger including console?", file=sys.stderr)
        return 2
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(path)), "report")
    result = charts.draw(steps, out, title=f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}, "
                                          f"steps {int(steps[0]['step'])}-{int(steps[-1]['step'])}")
    numbers = summary.summarize(steps)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(numbers, handle, indent=1)
    for written in result["written"]:
        print(written)
    print(summary.text(numbers), file=sys.stderr)
    if result["skipped"]:
        print("verl-pascal-report: not in this log, so not drawn: " + ", ".join(result["skipped"]), file=sys.stderr)
    return 0


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
