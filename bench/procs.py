"""The processes of one benchmark run, found by a mark in their environment, so that none outlives its bench.

A bench starts verl's launch script in a session of its own, so that a timeout
can kill the whole run with one signal. The other side of that: when the bench
itself is killed (a job's timeout, a SIGTERM, Ctrl-C in another terminal), the
run is not, and it goes on training on the GPU. The next bench on that GPU then
measures two runs at once, and, in the same work directory, reads the other
run's log lines and memory summaries as its own.

So every process of a run carries ``MARK=<work directory>`` in its environment
(verl's Ray workers inherit it, as they inherit the P40 rules), and:

- ``reaped(work)`` kills what an earlier run in (or under) ``work`` left before this one
  starts, and everything of this run when it ends, however it ends (SIGTERM and
  SIGHUP are turned into an exit, so that the ``finally`` runs);
- ``is_marked(pid, work)`` tells this run's GPU processes from anyone else's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Dict, Iterator, List, Optional

MARK = "VERL_PASCAL_BENCH_WORK"
PROC = "/proc"


def environ_of(pid: int, proc: str = PROC) -> Optional[Dict[str, str]]:
    """The environment ``pid`` started with, or None when it is gone or not ours to read."""
    try:
        with open(os.path.join(proc, str(pid), "environ"), "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env: Dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def is_marked(pid: int, work: str, proc: str = PROC) -> bool:
    """True for a process of a run in ``work`` or in a directory under it (a sweep's cells)."""
    env = environ_of(pid, proc)
    mark = None if env is None else env.get(MARK)
    return mark is not None and (mark == work or mark.startswith(work.rstrip(os.sep) + os.sep))


def marked(work: str, proc: str = PROC) -> List[int]:
    """The live processes of runs in or under ``work`` (never this process)."""
    me = os.getpid()
    return sorted(int(name) for name in os.listdir(proc)
                  if name.isdigit() and int(name) != me and is_marked(int(name), work, proc))


def alive(pid: int, proc: str = PROC) -> bool:
    """True while ``pid`` runs; a zombie (killed, not yet reaped) counts as gone."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def kill_marked(work: str, wait_s: float = 10.0, proc: str = PROC) -> List[int]:
    """SIGKILL the processes of runs in or under ``work`` and wait until they are gone; their pids."""
    pids = marked(work, proc)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while any(alive(pid, proc) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def _exit_on(signum: int, frame: Optional[FrameType]) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def reaped(work: str) -> Iterator[List[int]]:
    """Within: no process of an earlier run in or under ``work``; after: none of this run. Yields the pids killed first.

    Signals can be caught only in the main thread: in another (a sweep's cells), the main
    thread's own ``reaped`` of the directory above ends the runs on a signal."""
    left = kill_marked(work)
    if left:
        print(f"bench: killed {len(left)} processes an earlier run in {work} had left running: {left}",
              file=sys.stderr)
    main = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGTERM, signal.SIGHUP) if main else ()
    previous = {sig: signal.signal(sig, _exit_on) for sig in signals}
    try:
        yield left
    finally:
        kill_marked(work)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
