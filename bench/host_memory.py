"""A run's host memory as a user sees it: the system's memory in use, and what each kind of process of the run holds.

Two views, sampled together every ``every_s`` seconds while a run goes:

- **The system's**: memory in use as the kernel's OOM killer and Ray's memory
  monitor judge it, ``MemTotal - MemAvailable`` from /proc/meminfo (what
  ``free`` calls used, page cache that can be dropped not counted); its peak,
  and the idle value before the run started. ``Shmem`` is reported beside it:
  Ray's object store lives in /dev/shm.
- **The run's processes'**: every process carrying the bench's mark
  (bench/procs.py: the launch script, verl's driver, Ray's own daemons and
  every Ray worker inherit it), each read from /proc/PID/smaps_rollup. The
  proportional set size (PSS) is the sum that adds up: a library page that 40
  processes map counts a 40th in each. RSS is reported too (it counts such a
  page in every process). Processes are grouped by kind: Ray names a worker
  after its actor (``ray::TaskRunner``, ``ray::WorkerDict``,
  ``ray::RewardLoopWorker``, ...); a process forked from a worker with the same
  name (a PyTorch DataLoader's workers) is counted as that kind's forks.

The peak of the system's memory is what decides whether a box is big enough;
the breakdown at that moment says where it went. The part of the system's
peak above its idle value that no process's PSS accounts for is reported as
``unattributed_gib``: memory the kernel holds for the run outside any
process's page tables (the GPU driver's pinned host buffers can be such).

    python3 -m bench.host_memory --work WORK --seconds 60    # sample a run already going
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench import procs

GIB = 1024 ** 3
#: Added to a kind for the processes forked from one of that kind that kept its command line
#: (in a verl run: the trainer's PyTorch DataLoader workers).
FORKS = ": forked children"

#: Process kinds by their command line (Ray's title for its workers), first match wins.
#: The names verl and TransferQueue give their actors map to the kinds a user asks about.
KINDS: Sequence[Tuple[str, str]] = (
    (r"^ray::IDLE|ray/_private/workers/default_worker\.py", "ray idle workers"),
    (r"^ray::(TaskRunner|TaskRunnerV1)\b", "trainer (TaskRunner)"),
    (r"^ray::\w*AgentLoopWorker", "agent-loop workers"),
    (r"^ray::\w*Reward\w*", "reward workers"),
    (r"^ray::\w*(Storage|TransferQueue|Controller)\w*", "TransferQueue"),
    (r"^ray::PascalServer", "rollout server"),
    (r"^ray::\w*(WorkerDict|Worker)\b", "GPU workers (actor, critic, ref)"),
    (r"^ray::", "other Ray actors"),
    (r"(^|/)(gcs_server|raylet)(\s|$)", "Ray daemons"),
    (r"ray/(dashboard|_private|autoscaler)/|ray-dashboard|ray\.util\.client|log_monitor|runtime_env", "Ray daemons"),
    (r"verl\.trainer\.main_ppo|verl_pascal\.runconfig", "driver (main_ppo)"),
    (r"^(\S*/)?(bash|sh|tee|flock)(\s|$)", "launch script (bash, tee)"),
)


def kind_of(cmdline: str) -> str:
    """The kind of a process of a run, from its command line (Ray's title for a worker)."""
    for pattern, kind in KINDS:
        if re.search(pattern, cmdline):
            return kind
    first = cmdline.split()[0] if cmdline.strip() else "?"
    return f"other ({os.path.basename(first)})"


def meminfo(proc: str = procs.PROC) -> Dict[str, int]:
    """/proc/meminfo in bytes."""
    out: Dict[str, int] = {}
    with open(os.path.join(proc, "meminfo")) as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def system_used(info: Dict[str, int]) -> int:
    """Memory in use, as the OOM killer and Ray's memory monitor see it: what cannot be given back without a swap."""
    return info["MemTotal"] - info.get("MemAvailable", info.get("MemFree", 0))


def rollup(pid: int, proc: str = procs.PROC) -> Optional[Dict[str, int]]:
    """A process's smaps_rollup (Rss, Pss, Pss_Anon, ...) in bytes; None when it is gone or unreadable."""
    try:
        with open(os.path.join(proc, str(pid), "smaps_rollup")) as f:
            text = f.read()
    except OSError:
        return None
    out: Dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out if "Pss" in out else None


def cmdline_of(pid: int, proc: str = procs.PROC) -> str:
    """A process's command line, its arguments joined by spaces ('' when gone)."""
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part).strip()


def parent_of(pid: int, proc: str = procs.PROC) -> int:
    try:
        with open(os.path.join(proc, str(pid), "stat")) as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@dataclass
class Sample:
    """One moment: the system's memory in use and each marked process's (kind, pss, rss)."""

    at_s: float
    used: int
    shmem: int
    processes: Dict[int, Tuple[str, int, int]]

    def by_kind(self) -> Dict[str, Dict[str, float]]:
        """Kind -> count, PSS and RSS (GiB) at this moment, the largest PSS first."""
        kinds: Dict[str, Dict[str, float]] = {}
        for kind, pss, rss in self.processes.values():
            row = kinds.setdefault(kind, {"count": 0, "pss_gib": 0.0, "rss_gib": 0.0})
            row["count"] += 1
            row["pss_gib"] += pss / GIB
            row["rss_gib"] += rss / GIB
        ordered = sorted(kinds.items(), key=lambda item: -item[1]["pss_gib"])
        return {kind: {"count": int(row["count"]), "pss_gib": round(row["pss_gib"], 2),
                       "rss_gib": round(row["rss_gib"], 2)} for kind, row in ordered}

    @property
    def pss(self) -> int:
        return sum(pss for _, pss, _ in self.processes.values())


@dataclass
class HostSampler:
    """Samples the system's memory and the processes marked with ``work`` until stopped (a context manager)."""

    work: str
    every_s: float = 1.0
    proc: str = procs.PROC
    idle: int = 0
    samples: List[Sample] = field(default_factory=list)
    _parents: Dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._start = time.monotonic()

    def kind(self, pid: int) -> str:
        """A pid's kind now (a Ray worker renames itself when it takes an actor or a task): a process
        forked from one with the same command line is that kind's fork."""
        cmdline = cmdline_of(pid, self.proc)
        kind = kind_of(cmdline)
        if pid not in self._parents:
            self._parents[pid] = parent_of(pid, self.proc)
        parent = self._parents[pid]
        if cmdline and parent and cmdline_of(parent, self.proc) == cmdline:
            kind = kind + FORKS
        return kind

    def sample(self) -> Sample:
        info = meminfo(self.proc)
        processes: Dict[int, Tuple[str, int, int]] = {}
        for pid in procs.marked(self.work, self.proc):
            roll = rollup(pid, self.proc)
            if roll is not None:
                processes[pid] = (self.kind(pid), roll["Pss"], roll.get("Rss", 0))
        return Sample(round(time.monotonic() - self._start, 1), system_used(info), info.get("Shmem", 0), processes)

    def _loop(self) -> None:
        while True:
            self.samples.append(self.sample())
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> "HostSampler":
        self.idle = system_used(meminfo(self.proc))
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> Dict[str, Any]:
        """The run's host memory: the system's peak and idle, the breakdown at that peak, each kind's own peak."""
        if not self.samples:
            return {"samples": 0}
        peak = max(self.samples, key=lambda s: s.used)
        by_pss = max(self.samples, key=lambda s: s.pss)
        kind_peaks: Dict[str, float] = {}
        for s in self.samples:
            for kind, row in s.by_kind().items():
                kind_peaks[kind] = max(kind_peaks.get(kind, 0.0), row["pss_gib"])
        return {
            "samples": len(self.samples),
            "every_s": self.every_s,
            "idle_used_gib": round(self.idle / GIB, 2),
            "peak_used_gib": round(peak.used / GIB, 2),
            "peak_at_s": peak.at_s,
            "peak_shmem_gib": round(max(s.shmem for s in self.samples) / GIB, 2),
            "run_pss_at_peak_gib": round(peak.pss / GIB, 2),
            "unattributed_gib": round((peak.used - self.idle - peak.pss) / GIB, 2),
            "processes_at_peak": len(peak.processes),
            "by_kind_at_peak": peak.by_kind(),
            "peak_run_pss_gib": round(by_pss.pss / GIB, 2),
            "peak_pss_by_kind_gib": {k: round(v, 2) for k, v in sorted(kind_peaks.items(), key=lambda kv: -kv[1])},
            "max_processes": max(len(s.processes) for s in self.samples),
        }


def table(report: Dict[str, Any]) -> str:
    """The breakdown at the system's peak as a Markdown table (kind, processes, PSS, RSS)."""
    lines = ["| process kind | processes | PSS GiB | RSS GiB |", "|---|---|---|---|"]
    for kind, row in report.get("by_kind_at_peak", {}).items():
        lines.append(f"| {kind} | {row['count']} | {row['pss_gib']:.2f} | {row['rss_gib']:.2f} |")
    lines.append(f"| all of the run | {report.get('processes_at_peak', 0)} | {report.get('run_pss_at_peak_gib', 0):.2f} | |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", required=True, help="the bench's work directory: the run's processes carry it")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--every", type=float, default=1.0)
    args = p.parse_args(argv)
    with HostSampler(os.path.abspath(args.work), args.every) as sampler:
        time.sleep(args.seconds)
    report = sampler.report()
    print(json.dumps(report))
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
