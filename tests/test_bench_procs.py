"""A benchmark's run never outlives its bench (bench/procs.py), with real processes.

The failure these guard against happened on a GPU machine: a bench killed by
its job's timeout left its run (started in a session of its own) training, and
the next bench in the same work directory measured two runs at once and read
the other's log lines as its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from bench import procs
from bench.ppo_p40_rules import SmiSampler

from conftest import REPO_ROOT as REPO  # noqa: E402


def _wait_for(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[List[subprocess.Popen]]:
    """Processes a test starts, each in a session of its own; whatever is left of them, and of the runs
    marked under the test's directory, is killed afterwards."""
    started: List[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    procs.kill_marked(str(tmp_path))


def _run_tree(work: str, started: List[subprocess.Popen]) -> subprocess.Popen:
    """A stand-in for a launch script: a shell in a session of its own with a child, marked with ``work``.
    Returns once the child has become ``sleep``: one caught between fork and exec may read as unmarked."""
    env: Dict[str, str] = {**os.environ, procs.MARK: work}
    proc = subprocess.Popen(["bash", "-c", "sleep 300 & wait"], env=env, start_new_session=True)
    started.append(proc)
    assert _wait_for(lambda: len(procs.marked(work)) == 2 and "sleep" in map(_comm, procs.marked(work))), \
        "the shell and its child carry the mark"
    return proc


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _bench(tmp_path: Path, work: str, reaped: bool) -> subprocess.Popen:
    """A stand-in for a bench: starts a marked run in its own session and waits on it, as ppo_p40_rules does."""
    script = tmp_path / "bench_standin.py"
    script.write_text(textwrap.dedent(f"""
        import contextlib, os, subprocess, sys
        from bench import procs
        work = {work!r}
        guard = procs.reaped(work) if {reaped!r} else contextlib.nullcontext()
        with guard:
            proc = subprocess.Popen(["bash", "-c", "sleep 300 & wait"], env={{**os.environ, procs.MARK: work}},
                                    start_new_session=True)
            print(proc.pid, flush=True)
            proc.wait()
    """))
    # SIGINT as in a terminal's foreground job: a job started in the background (as CI's may be)
    # inherits it ignored, and Python then installs no KeyboardInterrupt for it.
    return subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_the_next_run_kills_what_a_killed_bench_left_running(tmp_path: Path, spawned: List[subprocess.Popen]) -> None:
    work, other = str(tmp_path / "work"), str(tmp_path / "other-work")
    left = _run_tree(work, spawned)
    tree = procs.marked(work)
    elsewhere = _run_tree(other, spawned)
    with procs.reaped(work) as killed:
        assert killed == tree
        assert not any(procs.alive(pid) for pid in tree), "the orphaned shell and its child are gone"
        assert procs.marked(work) == []
    left.wait(timeout=10)
    assert elsewhere.poll() is None, "a run in another work directory is not touched"
    assert len(procs.marked(other)) == 2


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_to_the_bench_ends_its_run(sig: int, tmp_path: Path, spawned: List[subprocess.Popen]) -> None:
    """The run is in a session of its own: Ctrl-C in the bench's terminal does not reach it either."""
    work = str(tmp_path / "work")
    bench = _bench(tmp_path, work, reaped=True)
    spawned.append(bench)
    assert bench.stdout is not None
    run_pid = int(bench.stdout.readline())
    assert _wait_for(lambda: len(procs.marked(work)) == 2)
    bench.send_signal(sig)
    assert bench.wait(timeout=20) == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGINT)
    assert not procs.alive(run_pid)
    assert procs.marked(work) == []


def test_control_without_reaping_a_killed_bench_leaves_its_run_training(
        tmp_path: Path, spawned: List[subprocess.Popen]) -> None:
    """What happened before: the run lives on after its bench (so the test above can fail)."""
    work = str(tmp_path / "work")
    bench = _bench(tmp_path, work, reaped=False)
    spawned.append(bench)
    assert bench.stdout is not None
    run_pid = int(bench.stdout.readline())
    bench.send_signal(signal.SIGTERM)
    bench.wait(timeout=20)
    time.sleep(0.5)
    assert procs.alive(run_pid), "the run outlived its bench"
    assert len(procs.kill_marked(work)) == 2


def test_the_sampler_tells_this_runs_gpu_processes_from_others(tmp_path: Path, spawned: List[subprocess.Popen]) -> None:
    work = str(tmp_path / "work")
    _run_tree(work, spawned)
    ours = procs.marked(work)[0]
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    spawned.append(stranger)
    sampler = SmiSampler(work)
    sampler.record(f"{ours}, 1200\n{stranger.pid}, 900\nNo running processes found\n")
    sampler.record(f"{ours}, 1800\n{stranger.pid}, 700\n")
    assert sampler.peaks == {str(ours): 1800}
    assert sampler.others == {str(stranger.pid): 900}


def test_a_process_gone_or_unreadable_is_neither_marked_nor_alive() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert procs.environ_of(gone.pid) is None
    assert not procs.is_marked(gone.pid, "/anywhere")
    assert not procs.alive(gone.pid)


def test_a_sweep_reaps_its_cells_and_a_cell_reaps_from_any_thread(
        tmp_path: Path, spawned: List[subprocess.Popen]) -> None:
    """A sweep's cells run in threads, each marked with its own directory under the sweep's."""
    sweep = tmp_path / "sweep"
    _run_tree(str(sweep / "b8-sdpa-offload"), spawned)
    sibling = _run_tree(str(tmp_path / "sweep-other"), spawned)
    errors: List[BaseException] = []

    def cell() -> None:
        try:
            with procs.reaped(str(sweep / "b8-sdpa")) as killed:
                assert killed == [], "a cell's directory is not a prefix of its neighbour's"
        except BaseException as exc:  # noqa: BLE001 - reported to the test's thread below
            errors.append(exc)

    thread = threading.Thread(target=cell)
    thread.start()
    thread.join()
    assert errors == []
    with procs.reaped(str(sweep)) as killed:
        assert len(killed) == 2, "the sweep's directory covers its cells"
    assert sibling.poll() is None and len(procs.marked(str(tmp_path / "sweep-other"))) == 2
