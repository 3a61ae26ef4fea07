"""verl_pascal.rollout.check's choice of mode (``--mode auto``): async from verl 0.7 on, by the
installed verl's version. verl 0.6.1 ships verl.workers.rollout.replica too (it imports once
pydantic is there, as a downgrade from 0.9.1 leaves it): it must still be checked in sync mode."""

from __future__ import annotations

import sys
import types

import pytest

from verl_pascal.rollout import check


@pytest.mark.parametrize("version, expected", [("0.5.0", False), ("0.6.1", False), ("0.7.1", True),
                                               ("0.8.0", True), ("0.9.1", True), ("0.10.0.dev0", True)])
def test_auto_mode_follows_the_verl_version(monkeypatch: pytest.MonkeyPatch, version: str, expected: bool) -> None:
    verl = types.ModuleType("verl")
    verl.__version__ = version  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verl", verl)
    # A replica module that imports, as 0.6.1's does with pydantic installed.
    replica = types.ModuleType("verl.workers.rollout.replica")
    replica.RolloutReplicaRegistry = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verl.workers.rollout.replica", replica)
    assert check.async_release() is expected
