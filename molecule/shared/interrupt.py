#!/usr/bin/env python3
"""Run a provisioning command and cut it off at a chosen point, as a kill or a power loss would.

    interrupt.py --container NAME (--pause STANDIN | --process PATTERN) [--log FILE] -- COMMAND...

The command (a nested ``ansible-playbook site.yml``) runs in a session of its
own. Once the chosen point is reached in the test container, the whole
controller-side session gets SIGKILL and so does every process in the
container but its init (``kill -9 -1``): nothing the run started gets to clean
up, not the roles' rescue blocks, not the installers. The point is either

- ``--pause STANDIN``: a STAND-IN installer (``cuda``, ``conda`` or ``apex``)
  that finds its name in PAUSE_FILE writes PAUSED_FILE and sleeps in the
  middle of its work (half of the files written), or
- ``--process PATTERN``: a process whose command line matches (pgrep -f) is
  running, for real installers that take long enough to be caught.

Exit status: 0 cut off as asked; 3 the command ended before the point was
reached (its output's tail is printed); 4 the point was not reached in time;
2 bad usage. Test tooling for the Molecule scenarios, never used on a box.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

PAUSE_FILE = "/var/tmp/verl-pascal-standin-pause"
PAUSED_FILE = "/var/tmp/verl-pascal-standin-paused"
EXIT_CUT, EXIT_USAGE, EXIT_ENDED, EXIT_TIMEOUT = 0, 2, 3, 4


def in_container(container: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "exec", container, *argv], capture_output=True, text=True, timeout=60)


def reached(container: str, pause: Optional[str], pattern: Optional[str]) -> bool:
    if pause:
        return in_container(container, "test", "-e", PAUSED_FILE).returncode == 0
    assert pattern is not None
    return in_container(container, "pgrep", "-f", pattern).returncode == 0


def cut_off(run: "subprocess.Popen[bytes]", container: str) -> None:
    """SIGKILL the controller's session, then every process in the container but init."""
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    in_container(container, "kill", "-9", "-1")


def clear_pause(container: str) -> None:
    in_container(container, "rm", "-f", PAUSE_FILE, PAUSED_FILE)


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def watch(run: "subprocess.Popen[bytes]", args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if reached(args.container, args.pause, args.process):
            cut_off(run, args.container)
            print(f"interrupt: cut off at {args.pause or args.process} after "
                  f"{args.timeout - (deadline - time.monotonic()):.0f} s")
            return EXIT_CUT
        if run.poll() is not None:
            print(f"interrupt: the command ended (exit {run.returncode}) before "
                  f"{args.pause or args.process} was reached:\n{tail(args.log)}")
            return EXIT_ENDED
        time.sleep(args.interval)
    cut_off(run, args.container)
    print(f"interrupt: {args.pause or args.process} not reached in {args.timeout:.0f} s:\n{tail(args.log)}")
    return EXIT_TIMEOUT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interrupt.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--container", required=True)
    point = parser.add_mutually_exclusive_group(required=True)
    point.add_argument("--pause", choices=["cuda", "conda", "apex"])
    point.add_argument("--process", metavar="PATTERN")
    parser.add_argument("--log", type=Path, default=Path("/dev/null"), help="where the command's output goes")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    command: List[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("interrupt: no command after --", file=sys.stderr)
        return EXIT_USAGE
    clear_pause(args.container)
    if args.pause:
        in_container(args.container, "sh", "-c", f"echo {args.pause} >{PAUSE_FILE}")
    try:
        with open(args.log, "wb") as log:
            run = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            return watch(run, args)
    finally:
        clear_pause(args.container)


if __name__ == "__main__":
    sys.exit(main())
