"""The pytorch role's torch check (roles/pytorch/files/verl_pascal_torch_check.py),
with fake torch modules standing in for CUDA builds this machine cannot run."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "roles" / "pytorch" / "files" / "verl_pascal_torch_check.py"
spec = importlib.util.spec_from_file_location("verl_pascal_torch_check", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

# torch 2.6.0+cu118's arch list: no sm_61 (the P40 runs the sm_60 code).
CU118 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
# cu128 builds dropped Pascal.
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize(
    ("arch_list", "cap", "expected"),
    [
        (CU118, "6.1", "sm_60"),  # sm_60 SASS runs on 6.1
        (CU118, "6.0", "sm_60"),
        (CU118, "8.9", "sm_86"),
        (CU128, "6.1", None),
        (["sm_61"], "6.0", None),  # a higher minor does not run on a lower one
        (["sm_70"], "8.0", None),  # SASS never crosses a major version
        (["sm_90a"], "9.0", "sm_90a"),
        (["sm_90a"], "10.0", None),
        (["compute_70"], "8.6", "compute_70"),  # PTX is JIT-compiled upwards
        (["compute_70"], "6.1", None),
        (["sm_100", "sm_120"], "12.0", "sm_120"),
    ],
)
def test_arch_covering(arch_list, cap, expected):
    assert check.arch_covering(arch_list, cap) == expected


def test_bf16_is_decided_by_capability():
    assert not check.bf16_native(["6.1"])
    assert not check.bf16_native(["7.5", "8.0"])
    assert check.bf16_native(["8.0", "9.0"])
    assert not check.bf16_native([])


@pytest.mark.parametrize(
    ("count", "cuda_build", "available", "run", "reason"),
    [
        (0, True, True, False, "no GPU"),
        (1, False, False, False, "CPU build"),
        (1, True, False, False, "is_available() is False"),
        (1, True, True, True, ""),
    ],
)
def test_gpu_plan(count, cuda_build, available, run, reason):
    got_run, why = check.gpu_plan(count, cuda_build, available)
    assert got_run == run
    assert reason in why


def fake_torch(version, cuda=None, available=False, arch_list=(), bf16_claim=True):
    """A torch module as far as the check looks at it; no GPU to multiply on."""

    def is_bf16_supported():  # must never be consulted
        raise AssertionError("torch.cuda.is_bf16_supported() was called")

    return SimpleNamespace(
        __version__=version,
        version=SimpleNamespace(cuda=cuda),
        cuda=SimpleNamespace(
            is_available=lambda: available,
            get_arch_list=lambda: list(arch_list),
            device_count=lambda: 0,
            is_bf16_supported=is_bf16_supported,
        ),
        backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace()), cudnn=SimpleNamespace()),
        Generator=lambda: SimpleNamespace(manual_seed=lambda seed: None),
        randn=lambda *a, **k: SimpleNamespace(__matmul__=lambda other: None),
        float32="float32",
    )


def test_cpu_build_passes_with_gpu_checks_skipped():
    report = check.verify(fake_torch("2.13.0+cpu"), "2.13.0+cpu", "11.8", 1, ["6.1"])
    assert report["ok"], report
    assert any("CPU build" in s for s in report["skipped"])
    assert any("GPU checks" in s for s in report["skipped"])
    assert report["facts"]["bf16_native"] is False


def test_wrong_local_label_names_wanted_and_found():
    report = check.verify(fake_torch("2.6.0+cu124", cuda="12.4"), "2.6.0+cu118", "11.8", 0, [])
    assert not report["ok"]
    assert any("wanted 2.6.0+cu118, found 2.6.0+cu124" in e for e in report["errors"])
    assert any("torch.version.cuda is 12.4" in e for e in report["errors"])


def test_cuda_build_that_cannot_see_the_gpu_fails():
    report = check.verify(fake_torch("2.6.0+cu118", cuda="11.8", available=False), "2.6.0+cu118", "11.8", 1, ["6.1"])
    assert not report["ok"]
    assert any("cannot use them" in e for e in report["errors"])


def test_arch_list_must_cover_the_p40():
    torch = fake_torch("2.8.0+cu128", cuda="12.8", available=True, arch_list=CU128)
    report = check.verify(torch, "2.8.0+cu128", "12.8", 1, ["6.1"])
    assert not report["ok"]
    assert any("compute capability 6.1" in e for e in report["errors"])


def test_cu118_build_on_a_p40():
    torch = fake_torch("2.6.0+cu118", cuda="11.8", available=True, arch_list=CU118)
    report = check.verify(torch, "2.6.0+cu118", "11.8.0", 1, ["6.1"])
    assert report["ok"], report
    assert any("covers compute capability 6.1 (sm_60)" in c for c in report["checks"])
    assert any("bf16: not native" in c for c in report["checks"])


def test_real_cpu_torch_through_main(capsys):
    torch = pytest.importorskip("torch")
    rc = check.main(["--torch", str(torch.__version__), "--cuda", "11.8", "--gpu-count", "1", "--gpu-cap", "6.1"])
    out = capsys.readouterr().out
    assert rc == (0 if torch.version.cuda is None else rc), out
    assert '"torch_version"' in out
