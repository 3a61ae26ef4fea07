"""A run's host memory (bench/host_memory.py), measured on real processes.

What a user relies on: the benchmark's peak is the system's memory in use
(what the OOM killer and Ray's memory monitor judge), and its breakdown counts
the run's processes, each once, under the kind a user recognises, and nobody
else's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from bench import host_memory, procs

MIB = 1024 ** 2

#: A child that touches N MiB, optionally forks a child that keeps the same command line, then waits for stdin.
HOLDER = textwrap.dedent("""
    import os, sys
    size = int(sys.argv[1]) * 1024 * 1024
    block = bytearray(size)
    for i in range(0, size, 4096):
        block[i] = 1
    if sys.argv[2] == "fork" and os.fork() == 0:
        sys.stdin.read()
        os._exit(0)
    print("ready", flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def holders() -> Iterator[List[subprocess.Popen]]:
    started: List[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=30)


def _hold(started: List[subprocess.Popen], mib: int, work: str = "", fork: bool = False) -> subprocess.Popen:
    env = {**os.environ, procs.MARK: work} if work else {k: v for k, v in os.environ.items() if k != procs.MARK}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(mib), "fork" if fork else "-"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    started.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("cmdline, kind", [
    ("ray::TaskRunner.run", "trainer (TaskRunner)"),
    ("ray::TaskRunnerV1.run", "trainer (TaskRunner)"),
    ("ray::IDLE", "ray idle workers"),
    # A worker before it takes its title, then after: judged again at every sample.
    ("/env/bin/python /x/site-packages/ray/_private/workers/default_worker.py --node-ip-address=1",
     "ray idle workers"),
    ("ray::WorkerDict.actor_rollout_compute_log_prob", "GPU workers (actor, critic, ref)"),
    ("ray::AgentLoopWorker.generate_sequences", "agent-loop workers"),
    ("ray::RewardLoopWorker.compute_score", "reward workers"),
    ("ray::SimpleStorageUnit", "TransferQueue"),
    ("ray::TransferQueueController", "TransferQueue"),
    ("ray::PascalServer.generate", "rollout server"),
    ("/x/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray", "Ray daemons"),
    ("/x/site-packages/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/r", "Ray daemons"),
    ("/env/bin/python /x/site-packages/ray/dashboard/agent.py --node-ip-address=1", "Ray daemons"),
    ("/env/bin/python -u /x/site-packages/ray/_private/log_monitor.py --session-dir=/s", "Ray daemons"),
    ("/env/bin/python -m verl.trainer.main_ppo data.train_batch_size=32", "driver (main_ppo)"),
    ("bash /opt/verl-pascal/bin/verl-ppo --algo ppo", "launch script (bash, tee)"),
    ("tee -a /opt/verl-pascal/runs/x/train.log", "launch script (bash, tee)"),
    ("/usr/bin/somethingelse --flag", "other (somethingelse)"),
])
def test_each_process_of_a_run_gets_the_kind_a_user_recognises(cmdline: str, kind: str) -> None:
    assert host_memory.kind_of(cmdline) == kind


def test_a_marked_process_is_counted_and_nobody_elses(tmp_path: Path,
                                                                  holders: List[subprocess.Popen]) -> None:
    work = str(tmp_path / "run")
    with host_memory.HostSampler(work, every_s=0.1) as sampler:
        _hold(holders, 200, work)
        _hold(holders, 200)  # not the run's: the system sees it, the breakdown must not
        time.sleep(0.5)
    report = sampler.report()
    # The run's own process, once, with what it touched (judged at the run's own peak: the system's
    # peak may fall on a moment of another program's).
    assert report["max_processes"] == 1
    assert 190 * MIB / host_memory.GIB <= report["peak_run_pss_gib"] <= 260 * MIB / host_memory.GIB


def test_a_fork_that_keeps_its_parents_name_is_counted_as_that_kinds_fork(tmp_path: Path,
                                                                       holders: List[subprocess.Popen]) -> None:
    work = str(tmp_path / "run")
    _hold(holders, 100, work, fork=True)
    kinds = host_memory.HostSampler(work).sample().by_kind()
    parent_kind = next(k for k in kinds if not k.endswith(host_memory.FORKS))
    assert kinds[parent_kind]["count"] == 1
    assert kinds[parent_kind + host_memory.FORKS]["count"] == 1
    # Copy-on-write pages are shared: PSS splits them, RSS counts them in both.
    both_pss = kinds[parent_kind]["pss_gib"] + kinds[parent_kind + host_memory.FORKS]["pss_gib"]
    both_rss = kinds[parent_kind]["rss_gib"] + kinds[parent_kind + host_memory.FORKS]["rss_gib"]
    assert both_pss < both_rss


def test_a_run_with_no_process_reports_no_breakdown_but_the_system(tmp_path: Path) -> None:
    with host_memory.HostSampler(str(tmp_path / "nothing"), every_s=0.05) as sampler:
        time.sleep(0.2)
    report = sampler.report()
    assert report["samples"] >= 2
    assert report["processes_at_peak"] == 0 and report["by_kind_at_peak"] == {}
    assert report["peak_used_gib"] > 0


def test_the_table_lists_every_kind_and_the_total() -> None:
    report = {"by_kind_at_peak": {"trainer (TaskRunner)": {"count": 1, "pss_gib": 1.5, "rss_gib": 2.0},
                                  "reward workers": {"count": 8, "pss_gib": 4.0, "rss_gib": 9.0}},
              "processes_at_peak": 9, "run_pss_at_peak_gib": 5.5}
    lines = host_memory.table(report).splitlines()
    assert lines[2] == "| trainer (TaskRunner) | 1 | 1.50 | 2.00 |"
    assert lines[3] == "| reward workers | 8 | 4.00 | 9.00 |"
    assert lines[-1].startswith("| all of the run | 9 | 5.50 |")


def test_a_process_that_renames_itself_is_counted_under_its_new_name(tmp_path: Path) -> None:
    """Ray's workers start as default_worker.py, become ray::IDLE, then take an actor's name: the same pid
    under another command line. Here a shell that execs sleep (same pid, new command line)."""
    work = str(tmp_path / "run")
    proc = subprocess.Popen(["bash", "-c", "echo ready; read -r _; exec sleep 30"], env={**os.environ, procs.MARK: work},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        sampler = host_memory.HostSampler(work)
        assert sampler.kind(proc.pid) == "launch script (bash, tee)"
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 10
        while host_memory.cmdline_of(proc.pid).startswith("bash") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sampler.kind(proc.pid) == "other (sleep)"
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _fake_proc(root: Path, used_mib: int, pids: Dict[int, Tuple[str, int]], work: str) -> None:
    """A /proc with MemTotal 64 GiB, ``used_mib`` in use, and ``pids``: pid -> (command line, PSS MiB)."""
    root.mkdir(exist_ok=True)
    total = 64 * 1024 * 1024
    (root / "meminfo").write_text(f"MemTotal: {total} kB\nMemFree: 1 kB\nMemAvailable: {total - used_mib * 1024} kB\n"
                                  f"Shmem: 2048 kB\n")
    for pid, (cmdline, pss) in pids.items():
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "environ").write_bytes(f"{procs.MARK}={work}\0".encode())
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
        (d / "stat").write_text(f"{pid} (x) S 1 {pid} {pid}")
        (d / "smaps_rollup").write_text(f"Rss: {pss * 2048} kB\nPss: {pss * 1024} kB\n")


def test_the_peak_is_the_systems_and_its_breakdown_is_taken_at_that_moment(tmp_path: Path) -> None:
    """With a /proc of our own, so other processes of the machine cannot move the numbers."""
    proc, work = tmp_path / "proc", "/runs/a"
    _fake_proc(proc, 1024, {}, work)
    sampler = host_memory.HostSampler(work, proc=str(proc))
    sampler.idle = host_memory.system_used(host_memory.meminfo(str(proc)))
    _fake_proc(proc, 5 * 1024, {10: ("ray::TaskRunner.run", 1024), 11: ("ray::IDLE", 512)}, work)
    sampler.samples.append(sampler.sample())
    _fake_proc(proc, 9 * 1024, {10: ("ray::TaskRunner.run", 2048), 12: ("ray::RewardLoopWorker", 1024)}, work)
    (proc / "11").rename(proc / "gone")  # ray::IDLE ended
    sampler.samples.append(sampler.sample())
    _fake_proc(proc, 3 * 1024, {10: ("ray::TaskRunner.run", 4096)}, work)
    (proc / "12").rename(proc / "gone2")
    sampler.samples.append(sampler.sample())
    report = sampler.report()
    assert report["idle_used_gib"] == 1.0 and report["peak_used_gib"] == 9.0
    # At the system's peak: the trainer's 2 GiB and the reward worker's 1 GiB, 8 GiB above idle in all.
    assert report["by_kind_at_peak"] == {"trainer (TaskRunner)": {"count": 1, "pss_gib": 2.0, "rss_gib": 4.0},
                                         "reward workers": {"count": 1, "pss_gib": 1.0, "rss_gib": 2.0}}
    assert report["run_pss_at_peak_gib"] == 3.0 and report["unattributed_gib"] == 5.0
    # Each kind's own peak, wherever it fell: the trainer's is later than the system's.
    assert report["peak_pss_by_kind_gib"]["trainer (TaskRunner)"] == 4.0
    assert report["peak_pss_by_kind_gib"]["ray idle workers"] == 0.5
    assert report["peak_shmem_gib"] == 0.0 and report["max_processes"] == 2
