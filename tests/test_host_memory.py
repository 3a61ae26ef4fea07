"""The host memory a run needs at its peak, and preflight's refusal of a box too small (module_utils/host_memory.py,
library/host_memory_check.py).

What a user relies on: a box that cannot hold the run is refused before anything is installed, with what
fits instead; a box that can is let through; a release nobody measured is not judged on a guess.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ANSIBLE, run_ansible_module
from verl_pascal.module_utils import host_memory as hm
from verl_pascal import verl_releases

QWEN_05B = 494_032_768
PRESET_24GB = hm.Offload(param_offload=True, actor_param_offload=False, optimizer_offload=True)
RELEASES = {"0.9.1": 16.9, "0.8.0": None, "0.5.0": 12.3}


@pytest.mark.parametrize("offload, ppo, grpo", [
    # The 24 GB preset: the critic's and the reference's parameters, both optimizers' two Adam states.
    (PRESET_24GB, 2 + 4, 1 + 2),
    # The smaller presets offload the actor's parameters too, where the rollout allows it.
    (hm.Offload(True, True, True), 3 + 4, 2 + 2),
    (hm.Offload(False, False, False), 0, 0),
    (hm.Offload(False, False, True), 4, 2),
])
def test_the_offloaded_copies_follow_the_preset_and_the_algorithm(offload: hm.Offload, ppo: int, grpo: int) -> None:
    assert offload.copies("ppo") == ppo and offload.copies("grpo") == grpo


def test_an_unknown_algorithm_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one of ppo, grpo"):
        PRESET_24GB.copies("dpo")


def test_the_need_is_the_releases_processes_and_the_pinned_copies() -> None:
    """A copy of Qwen2.5-0.5B pinned in host memory is 2.50 GiB (1.84 GiB of fp32 parameters rounded up in
    power-of-two blocks): six of them for the 24 GB preset's PPO, 15.0 GiB."""
    copy = QWEN_05B * hm.FP32 * hm.PINNED_OVERHEAD / hm.GIB
    assert copy == pytest.approx(2.50, abs=0.01)
    assert hm.need_gib(12.3, QWEN_05B, PRESET_24GB, "ppo") == pytest.approx(12.3 + 6 * copy)
    assert hm.need_gib(12.3, QWEN_05B, PRESET_24GB, "grpo") == pytest.approx(12.3 + 3 * copy)


def test_a_box_keeps_five_percent_for_rays_monitor_and_one_gib_for_the_system() -> None:
    assert hm.limit_gib(32.0) == pytest.approx(32 * 0.95 - 1)
    assert hm.box_needs_gib(hm.limit_gib(40.0)) == pytest.approx(40.0)


def test_a_box_too_small_is_refused_with_what_fits_instead() -> None:
    message = hm.shortfall("p40-box", "0.9.1", RELEASES, QWEN_05B, PRESET_24GB, "ppo", total_gib=31.3)
    assert message is not None
    assert message.startswith("p40-box has 31.3 GiB of memory; verl 0.9.1 (PPO")
    assert "needs about 31.9 GiB at its peak" in message
    # What fits, measured the same way: the newest release, and GRPO (no critic) on this release.
    assert "verl_version: 0.5.0 (needs 29.8 GiB)" in message
    assert "launch_algo: grpo" in message
    assert "preflight_host_memory_check: false" in message


def test_a_box_big_enough_and_a_release_not_measured_are_let_through() -> None:
    assert hm.shortfall("big", "0.9.1", RELEASES, QWEN_05B, PRESET_24GB, "ppo", total_gib=64.0) is None
    assert hm.shortfall("small", "0.8.0", RELEASES, QWEN_05B, PRESET_24GB, "ppo", total_gib=8.0) is None


def test_a_box_nothing_fits_is_told_the_memory_it_needs() -> None:
    message = hm.shortfall("tiny", "0.9.1", RELEASES, QWEN_05B, PRESET_24GB, "ppo", total_gib=8.0)
    assert message is not None and "verl_version:" not in message and "launch_algo" not in message
    assert "35 GiB of memory or more in the box" in message


def test_the_newest_release_that_fits_comes_first() -> None:
    fits = hm.fitting_releases({"0.4.1": 1.0, "0.10.0": 2.0, "0.9.1": 3.0, "0.8.0": None}, QWEN_05B,
                               PRESET_24GB, "ppo", total_gib=64.0)
    assert [v for v, _ in fits] == ["0.10.0", "0.9.1", "0.4.1"]


@pytest.mark.parametrize("value", ["16 GiB", -1, 0, True, [1]])
def test_a_bad_measured_figure_names_its_release(value: object) -> None:
    with pytest.raises(ValueError, match="verl 0.9.1: host_memory_gib must be a positive number"):
        hm.measured_releases({"0.9.1": {"host_memory_gib": value}})


def test_every_release_folder_has_a_measured_figure_or_none() -> None:
    measured = hm.measured_releases({v: verl_releases.read(v) for v in verl_releases.versions()})
    assert measured["0.5.0"] and measured["0.9.1"]
    assert all(gib is None or gib > 0 for gib in measured.values())


def test_meminfo_is_read_in_kib() -> None:
    assert hm.meminfo_kib("MemTotal:       32768000 kB\nHugePages_Total:       0\n") == {
        "MemTotal": 32768000, "HugePages_Total": 0}


def _module_args(**extra: object) -> str:
    return json.dumps({"version": "0.9.1", "releases": {v: {"host_memory_gib": g} for v, g in RELEASES.items()},
                       "model_parameters": QWEN_05B, "param_offload": True, "actor_param_offload": False,
                       "optimizer_offload": True, "host": "p40-box", **extra})


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_the_module_refuses_a_box_too_small_and_changes_nothing(tmp_path: Path) -> None:
    """This machine's memory against a model big enough that no box here holds it."""
    result = run_ansible_module(tmp_path, "host_memory_check", _module_args(model_parameters=10 ** 12), "--check")
    assert result.get("failed") is True and result.get("changed") is False, result
    assert result["msg"].startswith("p40-box has ") and "needs about" in result["msg"]
    assert result["total_mib"] > 0 and result["measured"] is True


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_the_module_returns_each_algorithms_need_for_the_launch_script(tmp_path: Path) -> None:
    result = run_ansible_module(tmp_path, "host_memory_check", _module_args(model_parameters=1000))
    assert result.get("failed") is not True, result
    assert set(result["need_mib"]) == {"ppo", "grpo"}
    assert result["need_mib"]["ppo"] == round(16.9 * 1024)  # the processes alone, for a model of 1000 parameters
    assert result["limit_mib"] < result["total_mib"]


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_the_module_does_not_judge_when_told_not_to_or_unmeasured(tmp_path: Path) -> None:
    off = run_ansible_module(tmp_path, "host_memory_check", _module_args(model_parameters=10 ** 12, enforce=False))
    assert off.get("failed") is not True and off["need_mib"]["ppo"] > off["total_mib"]
    unmeasured = run_ansible_module(tmp_path, "host_memory_check",
                                    _module_args(version="0.8.0", model_parameters=10 ** 12))
    assert unmeasured.get("failed") is not True and unmeasured["measured"] is False and unmeasured["need_mib"] == {}
