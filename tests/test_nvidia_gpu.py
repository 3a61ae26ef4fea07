"""Tests for module_utils/nvidia_gpu.py and the nvidia_gpu_facts module.

The recorded outputs in tests/data/nvidia-smi/ are what nvidia-smi prints for
``--query-gpu=... --format=csv,noheader,nounits`` on each kind of box (see the
README there). The last tests run the real module through ``ansible`` against
fake nvidia-smi scripts.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from verl_pascal.module_utils import nvidia_gpu
from verl_pascal.module_utils.nvidia_gpu import (
    FALLBACK_FIELDS,
    QUERY_FIELDS,
    Gpu,
    NvidiaSmiParseError,
    bf16_supported,
    capability_from_name,
    driver_supports_cuda,
    gather,
    lowest_capability,
    parse_driver_version,
    parse_query_output,
    profile_for_capability,
    ranges_of_table,
)
from verl_pascal import profiles

from conftest import REPO_ROOT  # noqa: E402
DATA = Path(__file__).resolve().parent / "data" / "nvidia-smi"
# The GPU-profile table's rows and capability ranges, as preflight passes them.
ROWS = profiles.rows()
RANGES = ranges_of_table(ROWS)

Response = Tuple[int, str, str]

# nvidia-smi exit codes (nvidia-smi(1)): 2 invalid argument, 6 no devices,
# 9 driver not loaded.
RC_INVALID_ARG = 2
RC_NO_DEVICES = 6
RC_NO_DRIVER = 9


def recorded(name: str) -> str:
    """Text of a recorded nvidia-smi output."""
    return (DATA / name).read_text()


class FakeSmi:
    """Stands in for ``run``: answers the full query and the fallback query."""

    def __init__(self, full: Response, fallback: Optional[Response] = None) -> None:
        self.full = full
        self.fallback = fallback
        self.calls: List[List[str]] = []

    def __call__(self, argv: List[str]) -> Response:
        self.calls.append(list(argv))
        if "compute_cap" in argv[1]:
            return self.full
        assert self.fallback is not None, f"unexpected fallback query: {argv}"
        return self.fallback


def old_driver_smi() -> FakeSmi:
    """An R470 box with a P40: compute_cap rejected, fallback works."""
    return FakeSmi(
        full=(RC_INVALID_ARG, recorded("old-driver-470.compute_cap-error.txt"), ""),
        fallback=(0, recorded("old-driver-470.csv"), ""),
    )


# --------------------------------------------------------------------------
# gather() on recorded outputs
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "count", "min_cap", "profile", "bf16", "driver"),
    [
        ("p40.csv", 1, "6.1", "pascal", False, "535.183.01"),
        ("p40x4.csv", 4, "6.1", "pascal", False, "535.183.01"),
        ("p100.csv", 1, "6.0", "pascal", False, "535.183.01"),
        ("v100.csv", 1, "7.0", "volta_turing", False, "535.161.08"),
        ("t4.csv", 1, "7.5", "volta_turing", False, "535.104.05"),
        ("a100.csv", 1, "8.0", "native", True, "550.54.15"),
        ("h200.csv", 1, "9.0", "native", True, "570.124.06"),
        ("mixed-p40-t4.csv", 2, "6.1", "pascal", False, "535.183.01"),
    ],
)
def test_gather_recorded(
    case: str, count: int, min_cap: str, profile: str, bf16: bool, driver: str
) -> None:
    smi = FakeSmi(full=(0, recorded(case), ""))
    facts = gather(smi, "/usr/bin/nvidia-smi")

    assert facts.driver_found is True
    assert facts.error is None
    assert facts.gpu_count == count
    assert facts.min_compute_cap == min_cap
    assert facts.profile(RANGES) == profile
    assert facts.bf16 is bf16
    assert facts.driver_version == driver
    assert facts.compute_cap_source == "nvidia-smi"
    assert [gpu.index for gpu in facts.gpus] == list(range(count))
    # One query, no fallback, with the exact command line.
    assert smi.calls == [
        [
            "/usr/bin/nvidia-smi",
            "--query-gpu=name,compute_cap,driver_version,memory.total,memory.free",
            "--format=csv,noheader,nounits",
        ]
    ]


def test_gather_p40x4_keeps_order_and_memory() -> None:
    facts = gather(FakeSmi(full=(0, recorded("p40x4.csv"), "")), "nvidia-smi")
    assert [g.memory_free_mib for g in facts.gpus] == [24438, 24438, 1203, 24438]
    assert {g.memory_total_mib for g in facts.gpus} == {24576}
    assert {g.name for g in facts.gpus} == {"Tesla P40"}


def test_gather_mixed_reports_each_gpu() -> None:
    facts = gather(FakeSmi(full=(0, recorded("mixed-p40-t4.csv"), "")), "nvidia-smi")
    assert [(g.name, g.compute_cap) for g in facts.gpus] == [
        ("Tesla P40", "6.1"),
        ("Tesla T4", "7.5"),
    ]


def test_gather_old_driver_falls_back_to_name_table() -> None:
    smi = old_driver_smi()
    facts = gather(smi, "nvidia-smi")

    assert len(smi.calls) == 2
    assert "compute_cap" in smi.calls[0][1]
    assert smi.calls[1][1] == "--query-gpu=name,driver_version,memory.total,memory.free"
    assert facts.compute_cap_source == "name_table"
    assert facts.driver_found is True
    assert facts.gpus == (Gpu(0, "Tesla P40", "6.1", "470.256.02", 24451, 24306),)
    assert facts.profile(RANGES) == "pascal"
    assert facts.warnings == ()

    check = driver_supports_cuda(facts.driver_version, "11.8")
    assert (check.ok, check.mode) == (True, "minor_version_compat")
    assert check.required_full == "520.61.05"


def test_gather_old_driver_unknown_name_warns() -> None:
    smi = FakeSmi(
        full=(RC_INVALID_ARG, recorded("old-driver-470.compute_cap-error.txt"), ""),
        fallback=(0, "NVIDIA Fictional X1, 470.256.02, 8192, 8000\n", ""),
    )
    facts = gather(smi, "nvidia-smi")

    assert facts.gpus[0].compute_cap is None
    assert facts.min_compute_cap is None
    assert facts.profile(RANGES) == "unknown"
    assert facts.bf16 is False
    assert len(facts.warnings) == 1
    assert "NVIDIA Fictional X1" in facts.warnings[0]


def test_gather_na_capability_filled_from_table() -> None:
    facts = gather(FakeSmi(full=(0, recorded("p40-na.csv"), "")), "nvidia-smi")
    assert facts.gpus == (Gpu(0, "Tesla P40", "6.1", "535.183.01", None, None),)
    assert facts.compute_cap_source == "name_table"


def test_gather_no_driver() -> None:
    facts = gather(
        FakeSmi(full=(RC_NO_DRIVER, recorded("no-driver.txt"), "")), "nvidia-smi"
    )

    assert facts.driver_found is False
    assert facts.gpu_count == 0
    assert facts.driver_version is None
    assert facts.profile(RANGES) == "none"
    assert facts.compute_cap_source is None
    assert facts.error is not None
    assert "couldn't communicate with the NVIDIA driver" in facts.error
    assert "rc=9" in facts.error


def test_gather_no_devices() -> None:
    facts = gather(
        FakeSmi(full=(RC_NO_DEVICES, recorded("no-devices.txt"), "")), "nvidia-smi"
    )
    assert facts.driver_found is True
    assert facts.gpu_count == 0
    assert facts.profile(RANGES) == "none"
    assert facts.error == "No devices were found"


def test_gather_missing_binary() -> None:
    def run(argv: List[str]) -> Response:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    facts = gather(run, "/nonexistent/nvidia-smi")
    assert facts.driver_found is False
    assert facts.error is not None and "/nonexistent/nvidia-smi" in facts.error


def test_gather_fallback_also_fails() -> None:
    smi = FakeSmi(
        full=(RC_INVALID_ARG, recorded("old-driver-470.compute_cap-error.txt"), ""),
        fallback=(RC_NO_DRIVER, recorded("no-driver.txt"), ""),
    )
    facts = gather(smi, "nvidia-smi")
    assert facts.driver_found is False
    assert facts.error is not None and "couldn't communicate" in facts.error


def test_gather_garbage_raises_with_line() -> None:
    text = recorded("garbage.txt")
    with pytest.raises(NvidiaSmiParseError) as info:
        gather(FakeSmi(full=(0, text, "")), "nvidia-smi")
    assert info.value.line == text.strip()


def test_to_facts_names_and_types() -> None:
    facts = gather(FakeSmi(full=(0, recorded("mixed-p40-t4.csv"), "")), "nvidia-smi")
    result = facts.to_facts(RANGES)

    assert json.loads(json.dumps(result)) == result  # plain JSON types only
    assert set(result) == {
        "nvidia_gpus",
        "nvidia_gpu_count",
        "nvidia_driver_version",
        "nvidia_driver_found",
        "nvidia_min_compute_cap",
        "nvidia_gpu_profile",
        "nvidia_bf16_supported",
        "nvidia_compute_cap_source",
        "nvidia_smi_error",
    }
    assert result["nvidia_gpus"][1] == {
        "index": 1,
        "name": "Tesla T4",
        "compute_cap": "7.5",
        "driver_version": "535.183.01",
        "memory_total_mib": 15360,
        "memory_free_mib": 14930,
    }
    assert result["nvidia_gpu_count"] == 2
    assert result["nvidia_min_compute_cap"] == "6.1"
    assert result["nvidia_gpu_profile"] == "pascal"
    assert result["nvidia_bf16_supported"] is False


# --------------------------------------------------------------------------
# parse_query_output
# --------------------------------------------------------------------------


def test_parse_tolerates_whitespace_and_blank_lines() -> None:
    text = "\n  Tesla P40 ,  6.1 ,535.183.01,   24576 , 24438  \n\n   \nTesla T4,7.5,535.183.01,15360,1\n"
    gpus = parse_query_output(text, QUERY_FIELDS)
    assert gpus == [
        Gpu(0, "Tesla P40", "6.1", "535.183.01", 24576, 24438),
        Gpu(1, "Tesla T4", "7.5", "535.183.01", 15360, 1),
    ]


def test_parse_not_available_values() -> None:
    gpus = parse_query_output(recorded("p40-na.csv"), QUERY_FIELDS)
    assert gpus == [Gpu(0, "Tesla P40", None, "535.183.01", None, None)]


def test_parse_fallback_fields() -> None:
    gpus = parse_query_output(recorded("old-driver-470.csv"), FALLBACK_FIELDS)
    assert gpus == [Gpu(0, "Tesla P40", None, "470.256.02", 24451, 24306)]


def test_parse_empty_output_is_no_gpu() -> None:
    assert parse_query_output("\n  \n", QUERY_FIELDS) == []


@pytest.mark.parametrize(
    "line",
    [
        "Tesla P40, 6.1, 535.183.01, 24576",  # a field short
        "Tesla P40, 6.1, 535.183.01, 24576, 24438, 1",  # a field over
        "Tesla P40, 6.1, 535.183.01, lots, 24438",  # memory not a number
        "Tesla P40, six, 535.183.01, 24576, 24438",  # capability not MAJOR.MINOR
        "Tesla P40, 6.1, latest, 24576, 24438",  # driver not a version
        "[N/A], 6.1, 535.183.01, 24576, 24438",  # no name
        "Segmentation fault (core dumped)",
    ],
)
def test_parse_garbage_raises_typed_error(line: str) -> None:
    text = f"Tesla P40, 6.1, 535.183.01, 24576, 24438\n{line}\n"
    with pytest.raises(NvidiaSmiParseError) as info:
        parse_query_output(text, QUERY_FIELDS)
    assert info.value.line == line
    assert line in str(info.value)


def test_parse_requires_name_and_driver_fields() -> None:
    with pytest.raises(ValueError):
        parse_query_output("Tesla P40, 6.1\n", ["name", "compute_cap"])


# --------------------------------------------------------------------------
# capability_from_name
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cap"),
    [
        ("Tesla P4", "6.1"),
        ("Tesla P40", "6.1"),
        ("Tesla P100-PCIE-16GB", "6.0"),
        ("Tesla P100-PCIE-12GB", "6.0"),
        ("Tesla P100-SXM2-16GB", "6.0"),
        ("GeForce GTX 1060 6GB", "6.1"),
        ("GeForce GTX 1070", "6.1"),
        ("NVIDIA GeForce GTX 1080", "6.1"),
        ("GeForce GTX 1080 Ti", "6.1"),
        ("TITAN Xp", "6.1"),
        ("NVIDIA TITAN X (Pascal)", "6.1"),
        ("GeForce GTX TITAN X", "5.2"),  # more specific than "TITAN X"
        ("NVIDIA TITAN X", "6.1"),
        ("Quadro P4000", "6.1"),
        ("Quadro P5000", "6.1"),
        ("Quadro P6000", "6.1"),
        ("Tesla K80", "3.7"),
        ("Tesla M40", "5.2"),
        ("Tesla M40 24GB", "5.2"),
        ("Tesla V100-SXM2-32GB", "7.0"),
        ("Tesla V100-PCIE-16GB", "7.0"),
        ("Tesla V100S-PCIE-32GB", "7.0"),
        ("Tesla T4", "7.5"),
        ("GeForce RTX 2080 Ti", "7.5"),
        ("Quadro RTX 6000", "7.5"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),  # more specific than "RTX 6000"
        ("NVIDIA A100-SXM4-40GB", "8.0"),
        ("A100-PCIE-40GB", "8.0"),
        ("NVIDIA A100 80GB PCIe", "8.0"),
        ("NVIDIA A10", "8.6"),
        ("NVIDIA A10G", "8.6"),
        ("NVIDIA GeForce RTX 3090", "8.6"),
        ("NVIDIA L4", "8.9"),
        ("NVIDIA L40S", "8.9"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("NVIDIA H100 PCIe", "9.0"),
        ("NVIDIA H200", "9.0"),
        ("nvidia h200", "9.0"),  # case does not matter
        ("  Tesla   P40  ", "6.1"),
    ],
)
def test_capability_from_name(name: str, cap: str) -> None:
    assert capability_from_name(name) == cap


@pytest.mark.parametrize(
    "name",
    [
        "Tesla P40X",  # P40 must not match as a substring
        "Quadro P4001",  # nor P4 / P40 / P400 / P4000
        "NVIDIA A1001",  # nor A10 / A100
        "NVIDIA Fictional X1",
        "Matrox G200eW",
        "",
    ],
)
def test_capability_from_name_unknown(name: str) -> None:
    assert capability_from_name(name) is None


# --------------------------------------------------------------------------
# Capabilities, profiles, bf16
# --------------------------------------------------------------------------


def _gpus(*caps: Optional[str]) -> List[Gpu]:
    return [Gpu(i, "GPU", cap, "535.183.01", None, None) for i, cap in enumerate(caps)]


@pytest.mark.parametrize(
    ("caps", "lowest"),
    [
        (("9.0", "10.0"), "9.0"),  # numeric, not string, comparison
        (("10.0", "6.1"), "6.1"),
        (("12.0", "10.0"), "10.0"),
        (("7.5", "7.0", "8.0"), "7.0"),
        (("6.1",), "6.1"),
        ((), None),
        (("6.1", None), None),  # one unknown GPU: the lowest is unknown
    ],
)
def test_lowest_capability(
    caps: Tuple[Optional[str], ...], lowest: Optional[str]
) -> None:
    assert lowest_capability(_gpus(*caps)) == lowest


def test_profile_rejects_bad_capability() -> None:
    with pytest.raises(ValueError):
        profile_for_capability("sm_61", RANGES)


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        (None, False),
        ("6.1", False),
        ("7.0", False),
        ("7.5", False),
        ("8.0", True),
        ("8.9", True),
        ("9.0", True),
        ("10.0", True),
    ],
)
def test_bf16_supported(cap: Optional[str], expected: bool) -> None:
    assert bf16_supported(cap) is expected


# --------------------------------------------------------------------------
# Driver versus CUDA
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("535.183.01", (535, 183, 1)),
        ("570.26", (570, 26)),
        (" 470.256.02\n", (470, 256, 2)),
    ],
)
def test_parse_driver_version(text: str, parsed: Tuple[int, ...]) -> None:
    assert parse_driver_version(text) == parsed


@pytest.mark.parametrize("text", ["", "latest", "535.x.01", "535..1", "[N/A]"])
def test_parse_driver_version_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_driver_version(text)


def test_driver_versions_compare_numerically() -> None:
    # As strings "535.183.01" < "535.54.03"; as versions it is newer.
    assert parse_driver_version("535.183.01") > parse_driver_version("535.54.03")


@pytest.mark.parametrize(
    ("driver", "cuda", "ok", "mode"),
    [
        ("535.183.01", "11.8", True, "full"),
        ("520.61.05", "11.8", True, "full"),  # exactly the minimum
        ("520.56.06", "11.8", True, "minor_version_compat"),
        ("470.256.02", "11.8", True, "minor_version_compat"),
        ("450.80.02", "11.8", True, "minor_version_compat"),  # exactly the floor
        ("450.57", "11.8", False, "too_old"),
        ("418.226.00", "11.8", False, "too_old"),
        ("470.256.02", "11.8.0", True, "minor_version_compat"),  # patch level ignored
        ("525.60.13", "12.0", True, "full"),
        ("535.183.01", "12.4", True, "minor_version_compat"),
        ("550.54.14", "12.4", True, "full"),
        ("470.256.02", "12.4", False, "too_old"),
        ("550.54.15", "12.6", True, "minor_version_compat"),
        ("560.28.03", "12.6", True, "full"),
        ("580.65.06", "12.6", True, "full"),
        (None, "11.8", False, "no_driver"),
    ],
)
def test_driver_supports_cuda(
    driver: Optional[str], cuda: str, ok: bool, mode: str
) -> None:
    check = driver_supports_cuda(driver, cuda)
    assert (check.ok, check.mode) == (ok, mode)


@pytest.mark.parametrize(
    ("cuda", "full", "minor"),
    [
        ("11.8", "520.61.05", "450.80.02"),
        ("12.0", "525.60.13", "525.60.13"),
        ("12.4", "550.54.14", "525.60.13"),
        ("12.6", "560.28.03", "525.60.13"),
    ],
)
def test_driver_requirements_table(cuda: str, full: str, minor: str) -> None:
    check = driver_supports_cuda("535.183.01", cuda)
    assert (check.required_full, check.required_minor_compat) == (full, minor)
    assert check.cuda_version == cuda


def test_too_old_message_tells_what_to_install() -> None:
    check = driver_supports_cuda("418.226.00", "11.8")
    assert "418.226.00" in check.message
    assert "R520" in check.message and "520.61.05" in check.message
    assert "R580" in check.message  # last branch for Pascal


def test_minor_compat_message_names_the_limits() -> None:
    check = driver_supports_cuda("470.256.02", "11.8")
    assert "minor-version compatibility" in check.message
    assert "520.61.05" in check.message


def test_check_to_dict() -> None:
    data = driver_supports_cuda("535.183.01", "11.8").to_dict()
    assert data["ok"] is True
    assert {"ok", "mode", "message", "required_full", "required_minor_compat"} <= set(
        data
    )


@pytest.mark.parametrize("cuda", ["13.0", "10.2", "11", "abc", ""])
def test_unknown_cuda_version(cuda: str) -> None:
    with pytest.raises(ValueError):
        driver_supports_cuda("535.183.01", cuda)


def test_bad_driver_version_raises() -> None:
    with pytest.raises(ValueError):
        driver_supports_cuda("latest", "11.8")


def test_module_utils_is_stdlib_only() -> None:
    """The file is shipped to hosts on its own: no third-party or ansible imports."""
    source = Path(nvidia_gpu.__file__).read_text()
    assert "import ansible" not in source and "from ansible" not in source


# --------------------------------------------------------------------------
# The real module, through `ansible`, against fake nvidia-smi scripts
# --------------------------------------------------------------------------


from conftest import ANSIBLE, ansible_tool, run_ansible_module  # noqa: E402

needs_ansible = pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")


def _fake_smi(tmp_path: Path, full: Tuple[int, str], fallback: Tuple[int, str]) -> Path:
    """A shell script that prints recorded outputs like nvidia-smi would."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *compute_cap*) cat '{DATA / full[1]}'; exit {full[0]} ;;\n"
        f"  *) cat '{DATA / fallback[1]}'; exit {fallback[0]} ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return script


def _run_module(tmp_path: Path, args: str) -> Dict[str, Any]:
    """Run nvidia_gpu_facts on localhost; return the host's result dict."""
    table = json.dumps(ROWS)
    return run_ansible_module(tmp_path, "nvidia_gpu_facts", f"{args} profiles='{table}'", timeout=120)


@needs_ansible
@pytest.mark.parametrize(
    ("full", "fallback", "expected"),
    [
        (
            (0, "p40.csv"),
            (1, "garbage.txt"),
            {
                "nvidia_gpu_profile": "pascal",
                "nvidia_gpu_count": 1,
                "nvidia_compute_cap_source": "nvidia-smi",
                "nvidia_driver_found": True,
                "mode": "full",
            },
        ),
        (
            (RC_INVALID_ARG, "old-driver-470.compute_cap-error.txt"),
            (0, "old-driver-470.csv"),
            {
                "nvidia_gpu_profile": "pascal",
                "nvidia_gpu_count": 1,
                "nvidia_compute_cap_source": "name_table",
                "nvidia_driver_found": True,
                "mode": "minor_version_compat",
            },
        ),
        (
            (RC_NO_DRIVER, "no-driver.txt"),
            (RC_NO_DRIVER, "no-driver.txt"),
            {
                "nvidia_gpu_profile": "none",
                "nvidia_gpu_count": 0,
                "nvidia_compute_cap_source": None,
                "nvidia_driver_found": False,
                "mode": "no_driver",
            },
        ),
    ],
    ids=["p40", "old-driver-470", "no-driver"],
)
def test_module_facts(
    tmp_path: Path,
    full: Tuple[int, str],
    fallback: Tuple[int, str],
    expected: Dict[str, Any],
) -> None:
    smi = _fake_smi(tmp_path, full, fallback)
    result = _run_module(tmp_path, f"nvidia_smi={smi}")

    assert not result.get("failed"), result
    assert result["changed"] is False
    facts = result["ansible_facts"]
    check = facts["nvidia_driver_cuda_check"]
    for key, value in expected.items():
        actual = check[key] if key == "mode" else facts[key]
        assert actual == value, (key, facts)
    if not facts["nvidia_driver_found"]:
        assert "couldn't communicate" in facts["nvidia_smi_error"]


@needs_ansible
def test_module_missing_binary_is_not_a_failure(tmp_path: Path) -> None:
    result = _run_module(tmp_path, f"nvidia_smi={tmp_path / 'absent' / 'nvidia-smi'}")
    assert not result.get("failed"), result
    facts = result["ansible_facts"]
    assert facts["nvidia_driver_found"] is False
    assert facts["nvidia_gpu_profile"] == "none"
    assert "not found" in facts["nvidia_smi_error"]


@needs_ansible
def test_module_fails_on_garbage(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, (0, "garbage.txt"), (0, "garbage.txt"))
    result = _run_module(tmp_path, f"nvidia_smi={smi}")
    assert result.get("failed") is True
    assert "Cannot parse nvidia-smi output" in result["msg"]
    assert "<html>" in result["msg"]


@needs_ansible
def test_module_rejects_unknown_cuda_version(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, (0, "p40.csv"), (0, "p40.csv"))
    result = _run_module(tmp_path, f"nvidia_smi={smi} cuda_version=13.0")
    assert result.get("failed") is True
    assert "unknown CUDA version" in result["msg"]


@needs_ansible
def test_module_documentation_renders() -> None:
    doc = ansible_tool("ansible-doc")
    if doc is None:
        pytest.skip("ansible-doc is not installed")
    proc = subprocess.run(
        [doc, "-M", str(REPO_ROOT / "library"), "--json", "nvidia_gpu_facts"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    parsed = json.loads(proc.stdout)["nvidia_gpu_facts"]
    assert set(parsed["doc"]["options"]) == {"nvidia_smi", "cuda_version", "timeout", "profiles"}
    assert parsed["doc"]["options"]["profiles"]["required"] is True
    assert parsed["doc"]["options"]["timeout"]["default"] == 30
    assert "nvidia_gpu_profile" in parsed["return"]["ansible_facts"]["contains"]


# --------------------------------------------------------------------------
# A hung nvidia-smi: a timeout, and a message saying what to check
# --------------------------------------------------------------------------


def _hung_smi(tmp_path: Path, seconds: int = 60) -> Path:
    """An nvidia-smi that hangs (as one does on a hung driver or GPU)."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nexec sleep {seconds}\n")
    script.chmod(0o755)
    return script


def _assert_says_what_to_check(message: str) -> None:
    for hint in ("did not answer within", "`nvidia-smi` by hand", "dmesg", "Xid", "fallen off the bus", "reboot"):
        assert hint in message, (hint, message)


def test_a_hung_nvidia_smi_times_out_and_says_what_to_check(tmp_path: Path) -> None:
    smi = _hung_smi(tmp_path)
    started = time.monotonic()
    with pytest.raises(nvidia_gpu.NvidiaSmiTimeout) as info:
        gather(nvidia_gpu.runner(0.5), str(smi))
    assert time.monotonic() - started < 10
    assert str(info.value).startswith(f"{smi} did not answer within 0.5 s")
    _assert_says_what_to_check(str(info.value))


def test_the_timed_runner_returns_what_nvidia_smi_printed(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat '{DATA / 'p40.csv'}'\necho warning >&2\nexit 0\n")
    smi.chmod(0o755)
    rc, out, err = nvidia_gpu.run_with_timeout([str(smi)], 30)
    assert (rc, out, err.strip()) == (0, recorded("p40.csv"), "warning")
    assert gather(nvidia_gpu.runner(30), str(smi)).profile(RANGES) == "pascal"


def test_the_timed_runner_reports_a_missing_binary_as_no_driver(tmp_path: Path) -> None:
    facts = gather(nvidia_gpu.runner(5), str(tmp_path / "absent" / "nvidia-smi"))
    assert facts.driver_found is False and facts.error is not None


@pytest.mark.parametrize("timeout", [0, -1])
def test_a_timeout_of_zero_or_less_is_refused(timeout: int) -> None:
    with pytest.raises(ValueError, match="more than 0 seconds"):
        nvidia_gpu.runner(timeout)


@needs_ansible
def test_module_fails_on_a_hung_nvidia_smi_with_what_to_check(tmp_path: Path) -> None:
    smi = _hung_smi(tmp_path)
    started = time.monotonic()
    result = _run_module(tmp_path, f"nvidia_smi={smi} timeout=1")
    assert time.monotonic() - started < 60
    assert result.get("failed") is True, result
    assert result["msg"].startswith(f"{smi} did not answer within 1 s")
    _assert_says_what_to_check(result["msg"])


@needs_ansible
def test_module_refuses_a_timeout_below_one_second(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, (0, "p40.csv"), (0, "p40.csv"))
    result = _run_module(tmp_path, f"nvidia_smi={smi} timeout=0")
    assert result.get("failed") is True and "timeout must be 1 second or more" in result["msg"], result
