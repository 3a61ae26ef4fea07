"""verl-pascal-report RUN_DIR: PNG charts of a run, from its train.log.

RUN_DIR is a run directory of the launch script (its train.log is read), or
a copied log file. The charts go to RUN_DIR/report/ (or --out), with
summary.json: steps, score at the first and the last step, median seconds
per step, peak GPU memory (also printed, to stderr).

A metric logged as nan or inf (a run that diverged) is shown, not hidden:
the summary gives the last step's real value (nan, inf), counts the steps
that were not finite per metric and prints a "warning:" line for each (the
run diverged when the last value is still not finite), and the charts mark
where values stopped being finite. Such a run still exits 0: the report's
job is to show a run it could read, and that is what it did; the warning
lines (and summary.json's not_finite) are what a script should check.

Exit status: 0 with charts written (a diverged run included); 2 when the
input is missing or holds no step of verl's console log, or when the output
directory is an existing file, cannot be created or cannot be written (one
line on stderr; each file written is whole: a chart or summary.json is
written beside and renamed, so a failure leaves no half file).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Optional, Sequence

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


class OutputError(Exception):
    """The output directory cannot take the report: one line saying why and what to do."""


def prepare_out(out: str) -> None:
    """Make sure ``out`` is a directory this user can write, creating it if missing; OutputError if not."""
    if os.path.lexists(out) and not os.path.isdir(out):
        raise OutputError(f"{out}: exists and is not a directory; give --out a directory (it is created if missing)")
    created = not os.path.isdir(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create the directory ({exc.strerror}); "
                          "give --out a directory you can write") from None
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        if created:
            os.rmdir(out)
        raise OutputError(f"{out}: cannot write into the directory ({exc.strerror}); "
                          "give --out a directory you can write") from None


def write_whole(path: str, text: str) -> None:
    """Write ``text`` beside ``path`` and rename it: the file is whole or absent."""
    partial = path + ".partial"
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, path)
    except BaseException:
        if os.path.lexists(partial):
            os.remove(partial)
        raise


def write_report(steps: Sequence[log.Step], out: str, title: str, numbers: summary.Summary) -> "dict[str, list[str]]":
    """The charts and summary.json in ``out``; OutputError when a file cannot be written."""
    try:
        result = charts.draw(steps, out, title=title)
        write_whole(os.path.join(out, "summary.json"), summary.to_json(numbers))
    except OSError as exc:
        raise OutputError(f"{out}: cannot write the report ({exc.strerror or exc}); "
                          "free space there or give --out another directory") from None
    return result


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
    title = (f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}, "
             f"steps {int(steps[0]['step'])}-{int(steps[-1]['step'])}")
    numbers = summary.summarize(steps)
    try:
        prepare_out(out)
        result = write_report(steps, out, title, numbers)
    except OutputError as exc:
        print(f"verl-pascal-report: {exc}", file=sys.stderr)
        return 2
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
