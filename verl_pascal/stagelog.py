"""What `make demo` and `make test` show of a stage's log (scripts/stages.sh).

A stage's output goes to a log file and the terminal gets one line per stage;
this module reads the log for what the terminal must still say:

    python -m verl_pascal.stagelog explain LOG [--from LINE] [--to LINE]  # why the stage failed, in detail
    python -m verl_pascal.stagelog reason LOG [...]   # its failed task and message, or pytest's failed tests
    python -m verl_pascal.stagelog report LOG [...]   # what a playbook's debug tasks printed

LINE is the stage's first line in LOG (1-based; default 1); ``--to LINE``
its last (default: the end). It reads
Ansible's default output (results as YAML or JSON), the same output boxed and
wrapped by Molecule, and pytest's. Exit status 0, also when it finds nothing
to say; 2 on bad usage or a log it cannot read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import yaml

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Molecule prints a playbook's output in a box: "  │ TASK [...]".
BOX = re.compile(r"^ *│ ?")
RESULT = re.compile(r"^(?P<status>fatal|failed|ok|changed): \[(?P<host>[^\]]+)\](?P<middle>.*?)=>(?P<rest>.*)$")
FAILED = ("fatal", "failed")
IGNORING = "...ignoring"
# Where a result's block ends: the next task, play, result or recap.
BOUNDARY = re.compile(r"^(TASK \[|PLAY |PLAY RECAP|RUNNING HANDLER \[|(fatal|failed|ok|changed|skipping|included): )")
MOLECULE_FAILED = "Executed: Failed"
PYTEST_SECTION = re.compile(r"^=+ (FAILURES|ERRORS) =+$")
PYTEST_SUMMARY = re.compile(r"^=+ .*\b(passed|failed|errors?|skipped|deselected|xfailed|xpassed|no tests ran)\b.* =+$")
PYTEST_SHORT = re.compile(r"^=+ short test summary info =+$")
# A command's generic message, after which its stderr says what went wrong.
GENERIC = ("non-zero return code", "MODULE FAILURE")
TAIL = 40  # lines of a failed stage's output shown when nothing better is found
CONTEXT = 80  # lines shown before Molecule's first failed action
MOST_LINES = 400  # of a pytest failures section
MOST_CHARS = 2000  # of one message
STDERR_LINES = 20


@dataclass
class Result:
    """One host's result of one task, as the default callback printed it."""

    task: str
    status: str  # fatal, failed, ok or changed
    host: str
    item: str
    data: Any  # the parsed result; None when it could not be parsed
    text: str  # its lines as printed, joined
    ignored: bool = False
    index: int = 0  # the task's number in the log (results of one task share it)


def plain(lines: Sequence[str]) -> List[str]:
    """The lines as a terminal shows them (the text after a "\r"), without colours and Molecule's box."""
    return [BOX.sub("", ANSI.sub("", line.rstrip("\r\n").rsplit("\r", 1)[-1])) for line in lines]


def _task_name(lines: List[str], at: int) -> Tuple[str, int]:
    """(name, the index after it) of the TASK or RUNNING HANDLER header at ``at``, joined where Molecule wrapped it."""
    text, end = lines[at].split("[", 1)[1], at + 1
    while "]" not in text and end < len(lines) and lines[end].startswith("  "):
        text += " " + lines[end].strip()
        end += 1
    text = text.rstrip(" *")
    return (text[:-1] if text.endswith("]") else text), end


def _ends_block(lines: List[str], at: int, yaml_block: bool) -> bool:
    line = lines[at]
    if not line.strip():
        # An empty line inside a YAML block's text (stderr: |-) is followed by more of it.
        following = next((lines[n] for n in range(at + 1, len(lines)) if lines[n].strip()), "")
        return not (yaml_block and following.startswith("    "))
    if BOUNDARY.match(line) or line.strip() == IGNORING:
        return True
    # A YAML block is indented; a JSON one ends with its closing bracket at the margin.
    return not line.startswith(" ") if yaml_block else not line.startswith((" ", "}", "]"))


def _block(lines: List[str], start: int, rest: str) -> Tuple[Any, str, int]:
    """(data, text, index after the block) of a result whose header line ends with ``rest``."""
    rest = rest.strip()
    end = start
    if rest.startswith(("{", "[")) or not rest:
        while end < len(lines) and not _ends_block(lines, end, not rest):
            end += 1
    body = lines[start:end]
    joined = " ".join([rest] + [b.strip() for b in body]).strip()
    if rest.startswith(("{", "[")):
        # Ansible's own lines, then Molecule's (it wraps long lines, so they are joined back with spaces).
        for candidate in ("\n".join([rest] + body), joined):
            try:
                return json.loads(candidate), joined, end
            except ValueError:
                continue
        return None, joined, end
    if body:
        block = textwrap.dedent("\n".join(body))
        try:
            return yaml.safe_load(block), block, end
        except yaml.YAMLError:
            return None, block, end
    return None, rest, end


def results(lines: Sequence[str]) -> List[Result]:
    """Every result the log shows, in order, each with its task and whether it was ignored."""
    text = plain(lines)
    found: List[Result] = []
    task, index, at = "", 0, 0
    while at < len(text):
        line = text[at]
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task, at = _task_name(text, at)
            index += 1
            continue
        match = RESULT.match(line)
        if not match:
            at += 1
            continue
        middle, rest = match.group("middle"), match.group("rest")
        if rest.strip().startswith("(item=") and ") =>" in rest:  # ok: [host] => (item=...) => {...}
            middle, rest = rest.strip().rsplit(") =>", 1)
            middle += ")"
        item = middle.split("(item=", 1)[1].rsplit(")", 1)[0] if "(item=" in middle else ""
        data, body, end = _block(text, at + 1, rest)
        after = end
        while after < len(text) and not text[after].strip():
            after += 1
        found.append(Result(task=task, status=match.group("status"), host=match.group("host"), item=item,
                            data=data, text=body, ignored=after < len(text) and text[after].strip() == IGNORING,
                            index=index))
        at = end
    return found


def failure(lines: Sequence[str]) -> List[Result]:
    """The results of the last task that failed and was not ignored (one per failed host or item)."""
    failed = [r for r in results(lines) if r.status in FAILED and not r.ignored]
    return [r for r in failed if r.index == failed[-1].index] if failed else []


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def message(result: Result) -> str:
    """What a failed result says: its msg, with the end of its stderr where the msg is only a return code."""
    data = result.data
    if not isinstance(data, dict):
        at = result.text.find('"msg": ')  # a result Molecule wrapped past parsing
        return _cut(result.text[at + len('"msg": '):] if at >= 0 else result.text, MOST_CHARS)
    msg = data.get("msg", "")
    parts = ["\n".join(str(m) for m in msg) if isinstance(msg, list) else str(msg)] if msg else []
    for key in ("stderr", "module_stderr", "stdout", "module_stdout"):
        out = str(data.get(key) or "").strip()
        if out and (not msg or str(msg).startswith(GENERIC)):
            parts.append(f"{key} (its last {STDERR_LINES} lines):\n" + "\n".join(out.splitlines()[-STDERR_LINES:]))
            break
    return _cut("\n".join(parts) or result.text, MOST_CHARS)


def failed_task(lines: Sequence[str]) -> List[str]:
    """"failed task: NAME (on HOST)" and its message, indented; nothing when no task failed."""
    failed = failure(lines)
    if not failed:
        return []
    hosts = ", ".join(dict.fromkeys(r.host for r in failed))
    out = [f"failed task: {failed[0].task or '(no task name)'} (on {hosts})"]
    for result in failed:
        label = f"item {_cut(result.item, 120)}: " if result.item else ""
        out += ["  " + label + line if n == 0 else "  " + line
                for n, line in enumerate(message(result).splitlines() or [""])]
    return out


def before_molecule_failure(lines: Sequence[str]) -> Optional[List[str]]:
    """The lines before Molecule's first failed action; None when no action failed."""
    text = plain(lines)
    for at, line in enumerate(text):
        if MOLECULE_FAILED in line:
            return text[:at]
    return None


def pytest_failures(lines: Sequence[str]) -> List[str]:
    """pytest's failures (or errors) section down to its summary line; nothing when it has none."""
    text = plain(lines)
    start = next((at for at, line in enumerate(text) if PYTEST_SECTION.match(line)), None)
    if start is None:
        return []
    end = next((at for at in range(start, len(text)) if PYTEST_SUMMARY.match(text[at])), len(text) - 1)
    section = text[start:end + 1]
    if len(section) > MOST_LINES:
        keep = MOST_LINES // 2
        section = section[:keep] + [f"[... {len(section) - 2 * keep} lines: the log has them all ...]"] + section[-keep:]
    return section


def pytest_short(lines: Sequence[str]) -> List[str]:
    """pytest's short test summary (FAILED test::name ...) and its summary line."""
    text = plain(lines)
    start = next((at for at, line in enumerate(text) if PYTEST_SHORT.match(line)), None)
    if start is None:
        return []
    return [line for line in text[start + 1:] if line.startswith(("FAILED ", "ERROR ")) or PYTEST_SUMMARY.match(line)]


def explain(lines: Sequence[str]) -> List[str]:
    """Why a stage failed, from its output: the detail a reader needs without the log."""
    before = before_molecule_failure(lines)
    if before is not None:
        return [f"(the {CONTEXT} lines before Molecule's first failed action)"] + before[-CONTEXT:]
    found = pytest_failures(lines) or failed_task(lines)
    if found:
        return found
    text = plain(lines)
    return [f"(the last {min(TAIL, len(text))} lines of its output)"] + text[-TAIL:]


def reason(lines: Sequence[str]) -> List[str]:
    """The failed task and its message, or pytest's list of failed tests; nothing when neither is found."""
    before = before_molecule_failure(lines)
    return failed_task(before if before is not None else lines) or pytest_short(lines)


def report(lines: Sequence[str]) -> List[str]:
    """What the debug tasks printed (the msg of each ok result that has one), one line each."""
    out: List[str] = []
    for result in results(lines):
        if result.status == "ok" and isinstance(result.data, dict) and "msg" in result.data:
            msg = result.data["msg"]
            out += [" ".join(str(m).split()) for m in (msg if isinstance(msg, list) else [msg])]
    return out


COMMANDS = {"explain": explain, "reason": reason, "report": report}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_pascal.stagelog",
                                     description="What the terminal must say of a stage's log.")
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("log")
    parser.add_argument("--from", dest="first", type=int, default=1, metavar="LINE",
                        help="the stage's first line in LOG (1-based)")
    parser.add_argument("--to", dest="last", type=int, metavar="LINE", help="its last line (default: the end)")
    args = parser.parse_args(argv)
    if args.first < 1 or (args.last is not None and args.last < args.first - 1):
        parser.error("--from must be 1 or more, and --to not before it")
    try:
        # Lines end at "\n" alone, as for wc and sed, which number them in scripts/stages.sh
        # (pip and apt rewrite a line with "\r").
        with open(args.log, encoding="utf-8", errors="replace", newline="\n") as handle:
            lines = handle.readlines()[args.first - 1:args.last]
    except OSError as exc:
        print(f"stagelog: cannot read {args.log}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        for line in COMMANDS[args.command](lines):
            print(line)
    except BrokenPipeError:  # the reader stopped early (head): no traceback at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
