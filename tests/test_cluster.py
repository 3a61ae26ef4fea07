"""The pieces of a fleet that run on the boxes: the GPUs' P2P matrix, the
head's port listener (preflight's reach check), and the cluster check the Ray
role and the launch script run (verl_pascal/cluster/check.py), without Ray.
The whole, with Ray in three containers, is the Molecule fleet scenario."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path
from typing import List, Tuple

import pytest

from verl_pascal.module_utils.nvidia_gpu import NvidiaSmiParseError, gather_p2p, parse_p2p_matrix
from verl_pascal.module_utils.port_probe import listen
from verl_pascal.cluster.check import Expected, missing, pool_fits, wait

from conftest import REPO_ROOT as REPO  # noqa: E402
DATA = REPO / "tests" / "data" / "nvidia-smi"
STANDIN_SMI = REPO / "scripts" / "standins" / "nvidia-smi"


def answering(rc: int, stdout: str):
    calls: List[List[str]] = []

    def run(argv: List[str]) -> Tuple[int, str, str]:
        calls.append(argv)
        return rc, stdout, ""

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_pairs_behind_different_switches_block_p2p_and_are_named() -> None:
    text = (DATA / "topo-p2p-p40x4-two-switches.txt").read_text()
    assert parse_p2p_matrix(text)[(0, 1)] == "OK" and parse_p2p_matrix(text)[(1, 2)] == "NS"
    facts = gather_p2p(answering(0, text), "nvidia-smi", 4)
    assert not facts.ok
    assert facts.pairs == ("GPU0-GPU2: NS", "GPU0-GPU3: NS", "GPU1-GPU2: NS", "GPU1-GPU3: NS")


def test_one_gpu_has_no_pair_and_nvidia_smi_is_not_asked() -> None:
    run = answering(0, "")
    assert gather_p2p(run, "nvidia-smi", 1).ok and run.calls == []


def test_all_pairs_ok_allows_p2p() -> None:
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n"
    assert gather_p2p(answering(0, text), "nvidia-smi", 2).ok


@pytest.mark.parametrize("rc, text", [(3, "Failed to initialize NVML"), (0, "no matrix here"),
                                      (0, " GPU0\tX\tOK\n GPU1\tOK\n")])
def test_a_matrix_that_cannot_be_read_turns_p2p_off_and_says_why(rc: int, text: str) -> None:
    facts = gather_p2p(answering(rc, text), "nvidia-smi", 2)
    assert not facts.ok and facts.error


def test_a_non_square_matrix_is_a_parse_error() -> None:
    with pytest.raises(NvidiaSmiParseError, match="row GPU1 has 1 columns for 2 GPUs"):
        parse_p2p_matrix(" GPU0\tX\tOK\n GPU1\tOK\n")


def test_the_standin_nvidia_smi_answers_as_the_fleet_scenario_sets_it(tmp_path: Path) -> None:
    """The scenario's two-GPU worker: its stand-in must list two P40s and a matrix the parser reads."""
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_SMI_STANDIN_GPUS": "2"}
    csv = subprocess.run([str(STANDIN_SMI), "--query-gpu=index,name", "--format=csv,noheader"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert csv.splitlines() == ["0, Tesla P40", "1, Tesla P40"]
    topo = subprocess.run([str(STANDIN_SMI), "topo", "-p2p", "r"], env=env, capture_output=True, text=True, check=True)
    assert parse_p2p_matrix(topo.stdout) == {(0, 1): "OK", (1, 0): "OK"}


# --------------------------------------------------------------------------
# The head's listener
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect_later(port: int, times: int) -> threading.Thread:
    def go() -> None:
        for _ in range(times):
            for _attempt in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    threading.Event().wait(0.05)

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_the_listener_returns_once_every_worker_connected() -> None:
    port = free_port()
    thread = connect_later(port, 2)
    result = listen("127.0.0.1", port, connections=2, timeout=20)
    thread.join()
    assert result == {"in_use": False, "peers": ["127.0.0.1", "127.0.0.1"]}


def test_the_listener_gives_up_after_its_timeout_with_who_came() -> None:
    port = free_port()
    thread = connect_later(port, 1)
    result = listen("127.0.0.1", port, connections=2, timeout=2)
    thread.join()
    assert result == {"in_use": False, "peers": ["127.0.0.1"]}


def test_a_port_already_taken_is_reported_not_fought_over() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        assert listen("127.0.0.1", taken.getsockname()[1], 1, 5) == {"in_use": True, "peers": []}


def test_an_address_the_host_lacks_is_an_error() -> None:
    with pytest.raises(OSError):
        listen("192.0.2.1", free_port(), 1, 1)


# --------------------------------------------------------------------------
# The cluster check
# --------------------------------------------------------------------------


def node(address: str, gpus: float, alive: bool = True) -> dict:
    return {"NodeManagerAddress": address, "Alive": alive, "Resources": {"GPU": gpus, "CPU": 2.0}}


EXPECTED = [Expected("head", "10.0.0.2", 1), Expected("w1", "10.0.0.3", 1), Expected("w2", "10.0.0.4", 2)]


def test_a_whole_cluster_has_nothing_missing() -> None:
    assert missing([node("10.0.0.2", 1), node("10.0.0.3", 1), node("10.0.0.4", 2)], EXPECTED) == []


def test_missing_dead_and_short_nodes_are_named() -> None:
    nodes = [node("10.0.0.2", 1), node("10.0.0.3", 1, alive=False), node("10.0.0.4", 1)]
    assert missing(nodes, EXPECTED) == ["w1 (10.0.0.3) has not joined the cluster",
                                        "w2 (10.0.0.4) joined with 1 GPU(s), not 2"]


def test_wait_polls_until_the_last_node_joins() -> None:
    states = [[node("10.0.0.2", 1)], [node("10.0.0.2", 1), node("10.0.0.3", 1)],
              [node("10.0.0.2", 1), node("10.0.0.3", 1), node("10.0.0.4", 2)]]
    now = [0.0]
    lines = wait(lambda: states.pop(0), EXPECTED, timeout=60, clock=lambda: now[0],
                 sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert lines == [] and now[0] == 4.0


def test_wait_gives_up_with_what_is_still_missing() -> None:
    now = [0.0]
    lines = wait(lambda: [node("10.0.0.2", 1)], EXPECTED, timeout=10, clock=lambda: now[0],
                 sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert lines == ["w1 (10.0.0.3) has not joined the cluster", "w2 (10.0.0.4) has not joined the cluster"]
    assert now[0] == 10.0


def test_the_pool_must_fit_per_node_not_in_total() -> None:
    nodes = [node("10.0.0.2", 1), node("10.0.0.3", 1), node("10.0.0.4", 2)]
    assert pool_fits(nodes, 3, 1) is None
    short = pool_fits(nodes, 2, 2)  # four GPUs in all, but only one node has two
    assert short is not None and "has 1 such node(s)" in short
    assert pool_fits(nodes[:2], 3, 1) is not None


def test_an_expected_node_is_written_host_address_gpus() -> None:
    assert Expected.parse("w1=10.0.0.3:2") == Expected("w1", "10.0.0.3", 2)
    with pytest.raises(Exception, match="HOST=ADDRESS:GPUS"):
        Expected.parse("w1:2")
