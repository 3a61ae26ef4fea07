"""NVIDIA GPU facts: parse ``nvidia-smi`` output and judge the driver.

All the logic behind the ``nvidia_gpu_facts`` module lives here, as pure
functions over plain data, so it is unit-tested without Ansible. Standard
library only: the module ships this file to the managed host.

The flow:

* :func:`gather` runs ``nvidia-smi --query-gpu=...`` through a ``run``
  callable (the module passes :func:`runner`, which gives up on an
  nvidia-smi that hangs, raising :class:`NvidiaSmiTimeout`; tests pass a fake).
  Older drivers (R470 and before) reject the ``compute_cap`` field and fail the whole
  query; the query is then re-run without it and the compute capability is
  taken from a name table (:func:`capability_from_name`).
* :func:`profile_for_capability` maps the lowest compute capability of the
  host to the build profile the roles use, by the capability ranges of the
  GPU-profile table (verl_pascal/gpu_profiles.yml), which the module is given.
* :func:`driver_supports_cuda` tells whether the installed driver runs a given
  CUDA toolkit, fully or under CUDA minor-version compatibility.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "BF16_MIN_CAPABILITY",
    "CUDA_DRIVER_REQUIREMENTS",
    "DriverCheck",
    "FALLBACK_FIELDS",
    "Gpu",
    "GpuFacts",
    "NvidiaSmiParseError",
    "NvidiaSmiTimeout",
    "QUERY_FIELDS",
    "RunFn",
    "build_query",
    "bf16_supported",
    "capability_from_name",
    "driver_supports_cuda",
    "gather",
    "gather_p2p",
    "P2pFacts",
    "parse_p2p_matrix",
    "lowest_capability",
    "no_driver_facts",
    "parse_capability",
    "parse_driver_version",
    "parse_query_output",
    "check_profile_ranges",
    "ranges_of_table",
    "profile_for_capability",
    "run_with_timeout",
    "runner",
]

#: ``run(argv) -> (rc, stdout, stderr)``, the shape of ``AnsibleModule.run_command``.
#: (typing.List/Tuple: this alias is evaluated at import on the managed host,
#: which may run Python 3.8.)
RunFn = Callable[[List[str]], Tuple[int, str, str]]
#: The GPU-profile table's capability column: name -> [lowest, highest or None].
ProfileRanges = Mapping[str, Sequence[Optional[str]]]

#: Fields of the main query, in order.
QUERY_FIELDS: tuple[str, ...] = (
    "name",
    "compute_cap",
    "driver_version",
    "memory.total",
    "memory.free",
)
#: Fields of the fallback query for drivers that reject ``compute_cap``.
FALLBACK_FIELDS: tuple[str, ...] = tuple(f for f in QUERY_FIELDS if f != "compute_cap")

#: Values nvidia-smi prints for a field it cannot report.
_NA_VALUES = frozenset({"[n/a]", "n/a", "[not supported]", "[unknown error]", ""})

_CAPABILITY_RE = re.compile(r"^(\d+)\.(\d+)$")
_DRIVER_RE = re.compile(r"^\d+(?:\.\d+)*$")
_MEMORY_RE = re.compile(r"^(\d+)(?:\s*MiB)?$", re.IGNORECASE)

#: bf16 needs real hardware support: Ampere (8.0) and newer.
BF16_MIN_CAPABILITY: tuple[int, int] = (8, 0)


class NvidiaSmiParseError(ValueError):
    """nvidia-smi printed something that is not the expected CSV.

    ``line`` holds the offending line (or the whole text when no single line
    is to blame), so the module can show it to the user.
    """

    def __init__(self, message: str, line: str) -> None:
        super().__init__(f"{message}: {line!r}")
        self.line = line


class NvidiaSmiTimeout(Exception):
    """nvidia-smi did not finish in time: a hung driver or GPU. The message
    says what to check."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        super().__init__(
            f"{argv[0]} did not answer within {timeout:g} s, so the NVIDIA driver or a GPU is "
            "probably hung. Run `nvidia-smi` by hand: if it hangs too, check `dmesg` (or "
            "`journalctl -k`) for NVRM Xid errors (Xid 79: a GPU has fallen off the bus; "
            "also check the card's seating, power and cooling), then reboot the box, power-cycle "
            "it if the GPU stays missing, and run again. If nvidia-smi is only slow (many GPUs, "
            "persistence mode off), raise the timeout (the nvidia_gpu_facts module's timeout; "
            "preflight_nvidia_smi_timeout in the preflight role)."
        )
        self.argv = list(argv)
        self.timeout = timeout


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it. ``index`` is the line order."""

    index: int
    name: str
    compute_cap: str | None
    driver_version: str
    memory_total_mib: int | None
    memory_free_mib: int | None


@dataclass(frozen=True)
class DriverCheck:
    """Verdict on whether a driver runs a CUDA toolkit version.

    ``mode`` is ``full`` (driver new enough for that toolkit),
    ``minor_version_compat`` (runs under CUDA minor-version compatibility:
    ``ok`` is True, but PTX JIT and some newer APIs are unavailable),
    ``too_old`` or ``no_driver`` (``ok`` False for both).
    """

    ok: bool
    mode: str
    cuda_version: str
    driver_version: str | None
    required_full: str
    required_minor_compat: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for Ansible facts."""
        return asdict(self)


@dataclass(frozen=True)
class GpuFacts:
    """Everything :func:`gather` learned about the host's GPUs."""

    gpus: tuple[Gpu, ...]
    driver_found: bool
    compute_cap_source: str | None
    error: str | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def gpu_count(self) -> int:
        """Number of GPUs nvidia-smi listed."""
        return len(self.gpus)

    @property
    def driver_version(self) -> str | None:
        """Driver version of the first GPU, None without GPUs."""
        return self.gpus[0].driver_version if self.gpus else None

    @property
    def min_compute_cap(self) -> str | None:
        """Lowest compute capability over all GPUs (see :func:`lowest_capability`)."""
        return lowest_capability(self.gpus)

    def profile(self, ranges: ProfileRanges) -> str:
        """Build profile for the host (see :func:`profile_for_capability`).

        ``unknown`` when there are GPUs but the capability of one of them
        could not be determined.
        """
        cap = self.min_compute_cap
        if cap is None and self.gpus:
            return "unknown"
        return profile_for_capability(cap, ranges)

    @property
    def bf16(self) -> bool:
        """True when every GPU has native bf16 (see :func:`bf16_supported`)."""
        return bf16_supported(self.min_compute_cap)

    def to_facts(self, ranges: ProfileRanges) -> dict[str, Any]:
        """The ``ansible_facts`` dict the module returns (plain types only).

        ``ranges``: the GPU-profile table's capability ranges (see
        :func:`profile_for_capability`).
        """
        return {
            "nvidia_gpus": [asdict(gpu) for gpu in self.gpus],
            "nvidia_gpu_count": self.gpu_count,
            "nvidia_driver_version": self.driver_version,
            "nvidia_driver_found": self.driver_found,
            "nvidia_min_compute_cap": self.min_compute_cap,
            "nvidia_gpu_profile": self.profile(ranges),
            "nvidia_bf16_supported": self.bf16,
            "nvidia_compute_cap_source": self.compute_cap_source,
            "nvidia_smi_error": self.error,
        }


# --------------------------------------------------------------------------
# Compute capability by product name
# --------------------------------------------------------------------------

#: (name tokens, compute capability). A pattern matches when its tokens appear
#: consecutively in the normalised name, so ``P4`` never matches ``P40`` or
#: ``P4000``; the pattern with the most tokens (then characters) wins.
#: Sources: NVIDIA's CUDA GPUs list (developer.nvidia.com/cuda-gpus).
_NAME_TABLE: tuple[tuple[tuple[str, ...], str], ...] = (
    # Kepler / Maxwell (below the project's floor, listed to say so clearly)
    (("K80",), "3.7"),
    (("K40M",), "3.5"),
    (("K40C",), "3.5"),
    (("M4",), "5.2"),
    (("M40",), "5.2"),
    (("M60",), "5.2"),
    (("GTX", "TITAN", "X"), "5.2"),
    (("GTX", "980"), "5.2"),
    (("GTX", "980", "TI"), "5.2"),
    # Pascal
    (("P100",), "6.0"),
    (("GP100",), "6.0"),
    (("P4",), "6.1"),
    (("P6",), "6.1"),
    (("P40",), "6.1"),
    (("P400",), "6.1"),
    (("P600",), "6.1"),
    (("P620",), "6.1"),
    (("P1000",), "6.1"),
    (("P2000",), "6.1"),
    (("P2200",), "6.1"),
    (("P4000",), "6.1"),
    (("P5000",), "6.1"),
    (("P6000",), "6.1"),
    (("GTX", "1050"), "6.1"),
    (("GTX", "1050", "TI"), "6.1"),
    (("GTX", "1060"), "6.1"),
    (("GTX", "1070"), "6.1"),
    (("GTX", "1070", "TI"), "6.1"),
    (("GTX", "1080"), "6.1"),
    (("GTX", "1080", "TI"), "6.1"),
    (("TITAN", "XP"), "6.1"),
    (("TITAN", "X"), "6.1"),  # "TITAN X (Pascal)"; "GTX TITAN X" is Maxwell
    (("TITAN", "X", "PASCAL"), "6.1"),
    # Volta / Turing
    (("V100",), "7.0"),
    (("V100S",), "7.0"),
    (("TITAN", "V"), "7.0"),
    (("T4",), "7.5"),
    (("T4G",), "7.5"),
    (("TITAN", "RTX"), "7.5"),
    (("RTX", "6000"), "7.5"),  # Quadro RTX 6000; the Ada one is below
    (("RTX", "8000"), "7.5"),
    (("GTX", "1650"), "7.5"),
    (("GTX", "1660"), "7.5"),
    (("GTX", "1660", "TI"), "7.5"),
    (("RTX", "2060"), "7.5"),
    (("RTX", "2070"), "7.5"),
    (("RTX", "2080"), "7.5"),
    (("RTX", "2080", "TI"), "7.5"),
    # Ampere
    (("A100",), "8.0"),
    (("A30",), "8.0"),
    (("A800",), "8.0"),
    (("A10",), "8.6"),
    (("A10G",), "8.6"),
    (("A16",), "8.6"),
    (("A40",), "8.6"),
    (("A2",), "8.6"),
    (("RTX", "A4000"), "8.6"),
    (("RTX", "A5000"), "8.6"),
    (("RTX", "A6000"), "8.6"),
    (("RTX", "3060"), "8.6"),
    (("RTX", "3070"), "8.6"),
    (("RTX", "3080"), "8.6"),
    (("RTX", "3090"), "8.6"),
    (("RTX", "3090", "TI"), "8.6"),
    # Ada
    (("L4",), "8.9"),
    (("L40",), "8.9"),
    (("L40S",), "8.9"),
    (("RTX", "4090"), "8.9"),
    (("RTX", "6000", "ADA"), "8.9"),
    # Hopper
    (("H100",), "9.0"),
    (("H800",), "9.0"),
    (("H200",), "9.0"),
    (("GH200",), "9.0"),
)

_VENDOR_TOKENS = frozenset({"NVIDIA", "TESLA", "GEFORCE"})


def _name_tokens(name: str) -> tuple[str, ...]:
    """Upper-case alphanumeric tokens of a product name, vendor words dropped.

    ``"NVIDIA GeForce GTX 1080 Ti"`` -> ``("GTX", "1080", "TI")``;
    ``"Tesla P100-PCIE-16GB"`` -> ``("P100", "PCIE", "16GB")``.
    """
    tokens = re.split(r"[^A-Z0-9]+", name.upper())
    return tuple(t for t in tokens if t and t not in _VENDOR_TOKENS)


def _contains_run(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    """True when ``needle`` appears as a consecutive run inside ``haystack``."""
    width = len(needle)
    return any(
        tuple(haystack[i : i + width]) == tuple(needle)
        for i in range(len(haystack) - width + 1)
    )


def capability_from_name(name: str) -> str | None:
    """Compute capability (``"6.1"``) of a GPU from its nvidia-smi name.

    Vendor prefixes (``Tesla``, ``NVIDIA``, ``GeForce``) and separators do not
    matter; the most specific matching pattern wins. None when the name is not
    in the table.
    """
    tokens = _name_tokens(name)
    best: tuple[int, int] | None = None
    best_cap: str | None = None
    for pattern, cap in _NAME_TABLE:
        if not _contains_run(tokens, pattern):
            continue
        rank = (len(pattern), sum(len(t) for t in pattern))
        if best is None or rank > best:
            best, best_cap = rank, cap
    return best_cap


# --------------------------------------------------------------------------
# Parsing nvidia-smi's CSV
# --------------------------------------------------------------------------


def _na_to_none(value: str) -> str | None:
    """None for nvidia-smi's "no value" markers, else the stripped value."""
    value = value.strip()
    return None if value.lower() in _NA_VALUES else value


def _parse_memory(value: str | None, line: str) -> int | None:
    """MiB as int (``nounits`` output; a trailing ``MiB`` is tolerated)."""
    if value is None:
        return None
    match = _MEMORY_RE.match(value)
    if match is None:
        raise NvidiaSmiParseError(f"memory value {value!r} is not a number", line)
    return int(match.group(1))


def _parse_cap_value(value: str | None, line: str) -> str | None:
    """Validate a ``compute_cap`` value such as ``"6.1"``."""
    if value is None:
        return None
    if _CAPABILITY_RE.match(value) is None:
        raise NvidiaSmiParseError(
            f"compute capability {value!r} is not MAJOR.MINOR", line
        )
    return value


def _parse_line(index: int, line: str, fields: Sequence[str]) -> Gpu:
    """Parse one CSV line into a :class:`Gpu`."""
    parts = line.split(",")
    if len(parts) != len(fields):
        raise NvidiaSmiParseError(
            f"expected {len(fields)} comma-separated fields ({', '.join(fields)}), "
            f"got {len(parts)}",
            line,
        )
    values = {f: _na_to_none(v) for f, v in zip(fields, parts)}
    name = values.get("name")
    driver = values.get("driver_version")
    if name is None:
        raise NvidiaSmiParseError("GPU name is missing", line)
    if driver is None or _DRIVER_RE.match(driver) is None:
        raise NvidiaSmiParseError(f"driver version {driver!r} is not a version", line)
    return Gpu(
        index=index,
        name=name,
        compute_cap=_parse_cap_value(values.get("compute_cap"), line),
        driver_version=driver,
        memory_total_mib=_parse_memory(values.get("memory.total"), line),
        memory_free_mib=_parse_memory(values.get("memory.free"), line),
    )


def parse_query_output(text: str, fields: Sequence[str]) -> list[Gpu]:
    """Parse ``--query-gpu=FIELDS --format=csv,noheader,nounits`` output.

    One GPU per non-blank line, ``index`` is the line order. ``fields`` must
    include ``name`` and ``driver_version``; ``compute_cap``, ``memory.total``
    and ``memory.free`` are optional. ``[N/A]`` / ``[Not Supported]`` become
    None. Raises :class:`NvidiaSmiParseError` on anything else.
    """
    missing = {"name", "driver_version"} - set(fields)
    if missing:
        raise ValueError(f"fields must include {sorted(missing)}")
    lines = [line.strip() for line in text.splitlines()]
    return [
        _parse_line(index, line, fields)
        for index, line in enumerate(line for line in lines if line)
    ]


# --------------------------------------------------------------------------
# Capabilities and profiles
# --------------------------------------------------------------------------


def parse_capability(cc: str) -> tuple[int, int]:
    """``"6.1"`` -> ``(6, 1)``; ValueError on anything else."""
    match = _CAPABILITY_RE.match(cc.strip())
    if match is None:
        raise ValueError(f"not a compute capability: {cc!r}")
    return int(match.group(1)), int(match.group(2))


def lowest_capability(gpus: Iterable[Gpu]) -> str | None:
    """Lowest compute capability over ``gpus``, compared numerically.

    None when there are no GPUs, or when the capability of any GPU is unknown:
    the lowest one cannot be known then, and guessing would pick the wrong
    build profile.
    """
    caps = [gpu.compute_cap for gpu in gpus]
    if not caps or any(cap is None for cap in caps):
        return None
    return min((cap for cap in caps if cap is not None), key=parse_capability)


def ranges_of_table(rows: Mapping[str, Any]) -> ProfileRanges:
    """The capability ranges of the GPU-profile table's rows, checked.

    ``rows`` maps each profile name to its row (a dict with at least
    ``capability``); raises ValueError naming what is wrong.
    """
    ranges: Dict[str, Sequence[Optional[str]]] = {}
    for name, row in rows.items():
        if not isinstance(row, Mapping) or "capability" not in row:
            raise ValueError(f"profile {name}: a row needs a capability, got {row!r}")
        ranges[name] = row["capability"]
    check_profile_ranges(ranges)
    return ranges


def check_profile_ranges(ranges: ProfileRanges) -> None:
    """Raise ValueError unless ``ranges`` is a valid capability table.

    ``ranges`` maps a profile name to ``[lowest, highest]`` compute capability,
    both inclusive; ``highest`` None means "and newer". Rows must not overlap.
    """
    if not ranges:
        raise ValueError("the GPU-profile table has no profiles")
    bounds = []
    for name, row in ranges.items():
        if not isinstance(row, (list, tuple)) or len(row) != 2 or row[0] is None:
            raise ValueError(f"profile {name}: capability must be [lowest, highest or null], not {row!r}")
        low = parse_capability(str(row[0]))
        high = None if row[1] is None else parse_capability(str(row[1]))
        if high is not None and high < low:
            raise ValueError(f"profile {name}: capability {row[0]} is above {row[1]}")
        bounds.append((low, high, name))
    bounds.sort()
    for (low_a, high_a, name_a), (low_b, _high_b, name_b) in zip(bounds, bounds[1:]):
        if high_a is None or high_a >= low_b:
            raise ValueError(f"profiles {name_a} and {name_b} overlap")


def profile_for_capability(cc: str | None, ranges: ProfileRanges) -> str:
    """Build profile for the lowest compute capability of a host.

    ``ranges`` is the capability column of the GPU-profile table
    (verl_pascal/gpu_profiles.yml): profile name -> ``[lowest, highest]``,
    inclusive, ``highest`` None for "and newer". Besides its names:

    * ``none``: no GPU (``cc`` is None);
    * ``unsupported``: no row covers ``cc`` (below Pascal: Kepler, Maxwell).
    """
    if cc is None:
        return "none"
    cap = parse_capability(cc)
    for name, (low, high) in ranges.items():
        if parse_capability(str(low)) <= cap and (high is None or cap <= parse_capability(str(high))):
            return name
    return "unsupported"


def bf16_supported(cc: str | None) -> bool:
    """True only when the hardware does bf16 natively (compute capability >= 8.0).

    Do not trust ``torch.cuda.is_bf16_supported()``: on Pascal and Volta it
    reports True because bf16 is emulated, slowly and with fp32 accumulation
    quirks.
    """
    return cc is not None and parse_capability(cc) >= BF16_MIN_CAPABILITY


# --------------------------------------------------------------------------
# Driver versus CUDA toolkit
# --------------------------------------------------------------------------

#: CUDA major.minor -> (minimum driver for full support, minimum driver under
#: minor-version compatibility). Linux x86_64, from the CUDA Toolkit release
#: notes, table "CUDA Toolkit and Corresponding Driver Versions" (GA releases).
CUDA_DRIVER_REQUIREMENTS: Mapping[str, tuple[str, str]] = {
    "11.0": ("450.36.06", "450.36.06"),
    "11.1": ("455.23", "450.80.02"),
    "11.2": ("460.27.03", "450.80.02"),
    "11.3": ("465.19.01", "450.80.02"),
    "11.4": ("470.42.01", "450.80.02"),
    "11.5": ("495.29.05", "450.80.02"),
    "11.6": ("510.39.01", "450.80.02"),
    "11.7": ("515.43.04", "450.80.02"),
    "11.8": ("520.61.05", "450.80.02"),
    "12.0": ("525.60.13", "525.60.13"),
    "12.1": ("530.30.02", "525.60.13"),
    "12.2": ("535.54.03", "525.60.13"),
    "12.3": ("545.23.06", "525.60.13"),
    "12.4": ("550.54.14", "525.60.13"),
    "12.5": ("555.42.02", "525.60.13"),
    "12.6": ("560.28.03", "525.60.13"),
    "12.8": ("570.26", "525.60.13"),
    "12.9": ("575.51.03", "525.60.13"),
}

_PASCAL_NOTE = (
    "R580 is the last driver branch that supports Pascal GPUs (Tesla P40/P100)."
)


def parse_driver_version(version: str) -> tuple[int, ...]:
    """``"535.183.01"`` -> ``(535, 183, 1)``; ValueError on anything else."""
    text = version.strip()
    if _DRIVER_RE.match(text) is None:
        raise ValueError(f"not a driver version: {version!r}")
    return tuple(int(part) for part in text.split("."))


def _cuda_key(cuda_version: str) -> str:
    """``"11.8.0"`` -> ``"11.8"``; ValueError when not in the table."""
    parts = cuda_version.strip().split(".")
    key = ".".join(parts[:2])
    if len(parts) < 2 or key not in CUDA_DRIVER_REQUIREMENTS:
        known = ", ".join(CUDA_DRIVER_REQUIREMENTS)
        raise ValueError(f"unknown CUDA version {cuda_version!r} (known: {known})")
    return key


def _branch(version: str) -> str:
    """Driver branch name: ``"520.61.05"`` -> ``"R520"``."""
    return f"R{version.split('.', 1)[0]}"


def driver_supports_cuda(driver: str | None, cuda_version: str) -> DriverCheck:
    """Whether driver ``driver`` runs CUDA ``cuda_version`` (``"11.8"`` or ``"11.8.0"``).

    ``driver`` None means no driver was found. Raises ValueError for a CUDA
    version missing from :data:`CUDA_DRIVER_REQUIREMENTS` or a malformed
    driver version.
    """
    key = _cuda_key(cuda_version)
    full, minor = CUDA_DRIVER_REQUIREMENTS[key]
    install = f"install an {_branch(full)}+ driver (>= {full}). {_PASCAL_NOTE}"

    def verdict(ok: bool, mode: str, message: str) -> DriverCheck:
        return DriverCheck(ok, mode, key, driver, full, minor, message)

    if driver is None:
        return verdict(
            False,
            "no_driver",
            "No NVIDIA driver version known (no driver, or no GPU visible): " + install,
        )
    have = parse_driver_version(driver)
    if have >= parse_driver_version(full):
        return verdict(
            True, "full", f"Driver {driver} fully supports CUDA {key} (>= {full})."
        )
    if have >= parse_driver_version(minor):
        return verdict(
            True,
            "minor_version_compat",
            f"Driver {driver} runs CUDA {key} only under minor-version compatibility "
            f"(>= {minor}; full support needs >= {full}): no PTX JIT, some newer "
            f"APIs fail. For full support {install}",
        )
    return verdict(
        False,
        "too_old",
        f"Driver {driver} is too old for CUDA {key} (needs >= {full}, or >= {minor} "
        f"under minor-version compatibility): {install}",
    )


# --------------------------------------------------------------------------
# Running nvidia-smi
# --------------------------------------------------------------------------


#: Seconds to wait for a hung nvidia-smi to die after it was killed: one stuck
#: in the kernel (a hung driver) cannot die, and is then left behind.
_REAP_SECONDS = 5.0


def run_with_timeout(
    argv: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None
) -> Tuple[int, str, str]:
    """Run argv; ``(rc, stdout, stderr)``, or :class:`NvidiaSmiTimeout` after
    ``timeout`` seconds (the process is killed, and never waited for forever).
    OSError when argv[0] cannot be run."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=_REAP_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        raise NvidiaSmiTimeout(argv, timeout) from None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def runner(timeout: float, env: Optional[Dict[str, str]] = None) -> RunFn:
    """A ``run`` for :func:`gather` that allows each nvidia-smi call ``timeout`` seconds."""
    if timeout <= 0:
        raise ValueError(f"timeout must be more than 0 seconds, not {timeout:g}")

    def run(argv: List[str]) -> Tuple[int, str, str]:
        return run_with_timeout(argv, timeout, env)

    return run


def build_query(nvidia_smi: str, fields: Sequence[str]) -> list[str]:
    """argv of ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``."""
    return [
        nvidia_smi,
        f"--query-gpu={','.join(fields)}",
        "--format=csv,noheader,nounits",
    ]


def no_driver_facts(error: str) -> GpuFacts:
    """Facts for a host without a usable driver (or without nvidia-smi)."""
    return GpuFacts(gpus=(), driver_found=False, compute_cap_source=None, error=error)


def _message(stdout: str, stderr: str) -> str:
    """nvidia-smi's error message: it writes most of them to stdout."""
    return " ".join(f"{stdout}\n{stderr}".split())


def _rejects_compute_cap(rc: int, stdout: str, stderr: str) -> bool:
    """True when an old driver refused the ``compute_cap`` field."""
    text = f"{stdout}\n{stderr}"
    return rc != 0 and "compute_cap" in text and "not a valid field" in text


def _fill_from_table(gpus: Sequence[Gpu]) -> tuple[list[Gpu], list[str], bool]:
    """Fill unknown compute capabilities from the name table.

    Returns the GPUs, warnings for names the table does not know, and whether
    the table was used.
    """
    result: list[Gpu] = []
    warnings: list[str] = []
    used = False
    for gpu in gpus:
        if gpu.compute_cap is not None:
            result.append(gpu)
            continue
        used = True
        cap = capability_from_name(gpu.name)
        if cap is None:
            warnings.append(
                f"GPU {gpu.index} ({gpu.name!r}): compute capability unknown. The "
                f"driver ({gpu.driver_version}) cannot report it and the name is not "
                "in the table; upgrade the driver (newer drivers report compute_cap)."
            )
        result.append(
            Gpu(
                gpu.index,
                gpu.name,
                cap,
                gpu.driver_version,
                gpu.memory_total_mib,
                gpu.memory_free_mib,
            )
        )
    return result, warnings, used


def gather(run: RunFn, nvidia_smi: str) -> GpuFacts:
    """Query the GPUs through ``nvidia_smi`` and return :class:`GpuFacts`.

    ``run(argv)`` returns ``(rc, stdout, stderr)``; an OSError from it (binary
    missing) means no driver. When the driver rejects ``compute_cap`` the
    query is re-run without it and capabilities come from the name table
    (``compute_cap_source == "name_table"``). Any other failure of nvidia-smi
    (driver not loaded, NVML mismatch) gives ``driver_found`` False and its
    message in ``error``; "No devices were found" gives ``driver_found`` True
    and no GPUs. Raises :class:`NvidiaSmiParseError` on unparseable output,
    and lets :class:`NvidiaSmiTimeout` from ``run`` through (a hung driver is
    not "no driver": it needs a person to look).
    """
    fields: Sequence[str] = QUERY_FIELDS
    try:
        rc, stdout, stderr = run(build_query(nvidia_smi, fields))
        if _rejects_compute_cap(rc, stdout, stderr):
            fields = FALLBACK_FIELDS
            rc, stdout, stderr = run(build_query(nvidia_smi, fields))
    except OSError as exc:
        return no_driver_facts(f"cannot run {nvidia_smi}: {exc}")
    if "No devices were found" in f"{stdout}\n{stderr}":
        return GpuFacts(
            gpus=(),
            driver_found=True,
            compute_cap_source=None,
            error=_message(stdout, stderr),
        )
    if rc != 0:
        detail = _message(stdout, stderr) or "no output"
        return no_driver_facts(f"{nvidia_smi} failed (rc={rc}): {detail}")
    gpus, warnings, used_table = _fill_from_table(parse_query_output(stdout, fields))
    source = "name_table" if used_table else "nvidia-smi"
    return GpuFacts(
        gpus=tuple(gpus),
        driver_found=True,
        compute_cap_source=source if gpus else None,
        warnings=tuple(warnings),
    )


# --------------------------------------------------------------------------
# Peer-to-peer access between the GPUs of a box (NCCL's P2P transport)
# --------------------------------------------------------------------------

#: ``nvidia-smi topo -p2p r``: can each GPU read from each other one directly.
P2P_QUERY: tuple[str, ...] = ("topo", "-p2p", "r")
_P2P_ROW_RE = re.compile(r"^\s*GPU(\d+)\s+(.*)$")


@dataclass(frozen=True)
class P2pFacts:
    """Whether every pair of GPUs on the box reaches each other directly.

    ``ok`` is False when any pair is not ``OK`` (PCIe through different root
    complexes, chipsets that refuse it) or when nvidia-smi could not tell:
    NCCL's P2P transport is then turned off, which costs speed, never
    correctness. ``pairs`` lists the pairs that are not ``OK`` as
    ``"GPU0-GPU1: NS"``; ``error`` what went wrong when the matrix could not
    be read.
    """

    ok: bool
    pairs: tuple[str, ...] = field(default=())
    error: str | None = None

    def to_facts(self) -> dict[str, Any]:
        return {"nvidia_p2p_ok": self.ok, "nvidia_p2p_blocked": list(self.pairs), "nvidia_p2p_error": self.error}


def parse_p2p_matrix(text: str) -> dict[tuple[int, int], str]:
    """``(row GPU, column GPU) -> status`` from ``nvidia-smi topo -p2p r``.

    The matrix's rows start with ``GPUn`` and hold one status per column (``X``
    on the diagonal); the legend after it is ignored. Raises
    :class:`NvidiaSmiParseError` when no row is found or a row is not square.
    """
    rows: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = _P2P_ROW_RE.match(line)
        if match:
            rows[int(match.group(1))] = match.group(2).split()
    if not rows:
        raise NvidiaSmiParseError("no GPU rows in the P2P matrix", text.strip())
    matrix: dict[tuple[int, int], str] = {}
    for row, cells in sorted(rows.items()):
        if len(cells) != len(rows):
            raise NvidiaSmiParseError(f"row GPU{row} has {len(cells)} columns for {len(rows)} GPUs", " ".join(cells))
        for column, status in enumerate(cells):
            if column != row:
                matrix[(row, column)] = status
    return matrix


def gather_p2p(run: RunFn, nvidia_smi: str, gpu_count: int) -> P2pFacts:
    """Ask nvidia-smi whether the box's GPUs reach each other peer to peer.

    One GPU (or none) has no pair: ``ok``. Otherwise every pair must read
    ``OK``; an nvidia-smi that fails or prints something else gives ``ok``
    False with the reason in ``error``.
    """
    if gpu_count < 2:
        return P2pFacts(ok=True)
    try:
        rc, stdout, stderr = run([nvidia_smi, *P2P_QUERY])
    except OSError as exc:
        return P2pFacts(ok=False, error=f"cannot run {nvidia_smi}: {exc}")
    if rc != 0:
        return P2pFacts(ok=False, error=f"{nvidia_smi} {' '.join(P2P_QUERY)} failed (rc={rc}): {_message(stdout, stderr)}")
    try:
        matrix = parse_p2p_matrix(stdout)
    except NvidiaSmiParseError as exc:
        return P2pFacts(ok=False, error=str(exc))
    blocked = tuple(
        f"GPU{a}-GPU{b}: {_pair_status(matrix[(a, b)], matrix.get((b, a), '?'))}"
        for (a, b) in sorted(matrix)
        if a < b and not matrix[(a, b)] == matrix.get((b, a)) == "OK"
    )
    return P2pFacts(ok=not blocked, pairs=blocked)


def _pair_status(forward: str, backward: str) -> str:
    """One status for a pair, both when the two directions differ."""
    return forward if forward == backward else f"{forward}/{backward}"
