"""Free-space planning used by the preflight role."""

from __future__ import annotations

import os

import pytest

from verl_pascal.module_utils import disk_space as ds

EXISTING = {"/", "/var", "/usr", "/usr/local", "/data"}
DEVICES = {"/": 1, "/var": 1, "/usr": 1, "/usr/local": 1, "/data": 2}


def exists(path: str) -> bool:
    return path in EXISTING


def run(reqs, free):
    return ds.plan(reqs, exists=exists, device_of=DEVICES.__getitem__, free_of=lambda p: free[DEVICES[p]])


def test_missing_path_is_measured_at_its_nearest_existing_parent() -> None:
    assert ds.existing_parent("/usr/local/cuda-11.8/lib64", exists) == "/usr/local"
    assert ds.existing_parent("/nowhere/at/all", exists) == "/"


def test_requirements_on_one_filesystem_add_up() -> None:
    reqs = [
        ds.Requirement("cache", "/var/cache/verl-pascal", 6 * ds.GIB),
        ds.Requirement("toolkit", "/usr/local/cuda-11.8", 5 * ds.GIB),
    ]
    (fs,) = run(reqs, free={1: 10 * ds.GIB})
    assert fs.needed_bytes == 11 * ds.GIB
    assert not fs.ok
    msg = ds.shortfall_message([fs])
    assert msg is not None
    assert "10.0 GiB free" in msg and "needs 11.0 GiB" in msg
    assert "cache" in msg and "toolkit" in msg


def test_separate_filesystems_are_judged_separately() -> None:
    reqs = [
        ds.Requirement("cache", "/data/cache", 6 * ds.GIB),
        ds.Requirement("CUDA install", "/usr/local/cuda-11.8", 5 * ds.GIB),
    ]
    result = run(reqs, free={1: 5 * ds.GIB, 2: 1 * ds.GIB})
    by_probe = {fs.probe: fs for fs in result}
    assert by_probe["/usr/local"].ok
    assert not by_probe["/data"].ok
    msg = ds.shortfall_message(result)
    assert msg is not None
    assert "holding /data" in msg and "cache" in msg
    assert "CUDA install" not in msg


def test_installed_parts_are_skipped() -> None:
    EXISTING.add("/usr/local/cuda-11.8/version.json")
    try:
        reqs = [ds.Requirement("toolkit", "/usr/local/cuda-11.8", 50 * ds.GIB, "/usr/local/cuda-11.8/version.json")]
        assert run(reqs, free={1: 0}) == []
    finally:
        EXISTING.discard("/usr/local/cuda-11.8/version.json")


def test_enough_space_gives_no_message() -> None:
    reqs = [ds.Requirement("cache", "/var/cache", ds.GIB)]
    assert ds.shortfall_message(run(reqs, free={1: 2 * ds.GIB})) is None


def test_negative_size_is_rejected() -> None:
    with pytest.raises(ValueError):
        run([ds.Requirement("x", "/var", -1)], free={1: 0})


def test_real_filesystem(tmp_path) -> None:
    (fs,) = ds.plan([ds.Requirement("x", str(tmp_path / "a" / "b"), 1)])
    assert fs.probe == str(tmp_path)
    assert fs.free_bytes > 0
    assert fs.device == os.stat(tmp_path).st_dev


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 bytes"),
    (1023, "1023 bytes"),
    (ds.MIB, "1.0 MiB"),
    (300 * ds.MIB, "300.0 MiB"),
    (int(0.3 * ds.GIB), "307.2 MiB"),
    (ds.GIB - 1, "1.0 GiB"),
    (ds.GIB, "1.0 GiB"),
    (int(10.25 * ds.GIB), "10.2 GiB"),
    (2000 * ds.GIB, "2000.0 GiB"),
])
def test_sizes_are_mib_below_one_gib_and_gib_above(size: int, text: str) -> None:
    assert ds.human_size(size) == text


def test_a_small_shortfall_is_told_in_mib_not_as_zero_gib() -> None:
    reqs = [ds.Requirement("cuDNN tarball", "/var/cache/verl-pascal", 900 * ds.MIB)]
    msg = ds.shortfall_message(run(reqs, free={1: 300 * ds.MIB}))
    assert msg is not None
    assert "has 300.0 MiB free but needs 900.0 MiB" in msg
    assert "cuDNN tarball (900.0 MiB) at /var/cache/verl-pascal" in msg
    assert "GiB" not in msg
