"""How much host memory a training run needs at its peak, and whether a box has it (standard library only).

A run's host memory has two parts:

- **Processes**: verl's and Ray's, and the host side of the CUDA contexts,
  measured per release at the reference shape (its folder's
  ``host_memory_gib``; docs/benchmarks.md, "Host memory").
- **Offloaded model copies**: the launch presets keep parameters and Adam's
  two optimizer states in host memory between uses. Each copy is the model's
  parameters in fp32, pinned for fast transfers, and PyTorch's caching host
  allocator rounds every pinned block up to a power of two: with FSDP's one
  flat parameter per decoder layer, a copy of Qwen2.5-0.5B takes 2.50 GiB for
  its 1.84 GiB of parameters (PINNED_OVERHEAD).

Which copies a run offloads follows from the preset and the algorithm: PPO
has an actor, a critic and a reference; GRPO no critic. The reference's
parameters are always offloaded where ``param_offload`` is on (verl keeps
them on the CPU between its log-prob passes); the actor's only where the
rollout lets it (verl's own HF rollout needs them on the GPU).

A box fits a run when the peak, with the system's own share, stays under the
95 % of its memory at which Ray's memory monitor starts killing workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

GIB = 1024 ** 3
MIB = 1024 ** 2

#: Bytes per parameter of one offloaded copy (fp32).
FP32 = 4
#: Pinned size over exact size of an offloaded fp32 copy: Qwen2.5-0.5B under FSDP's flat parameters,
#: a 545 MB root unit (embedding, final norm) rounded to 1 GiB and 24 layers of 59.6 MB rounded to 64 MiB.
PINNED_OVERHEAD = 2.50 / 1.84
#: Ray's memory monitor kills workers once the node's memory in use passes this share of its total
#: (Ray's memory_usage_threshold default).
RAY_MEMORY_THRESHOLD = 0.95
#: What the system itself holds while a run goes (the kernel, sshd, journald, page tables), GiB.
SYSTEM_GIB = 1.0
ALGOS = ("ppo", "grpo")


@dataclass(frozen=True)
class Offload:
    """What a run keeps in host memory: the launch preset's switches, as the launch script applies them."""

    param_offload: bool  # the critic's and the reference's parameters
    actor_param_offload: bool  # the actor's parameters (false under verl's own HF rollout)
    optimizer_offload: bool  # the actor's and the critic's Adam states

    def copies(self, algo: str) -> int:
        """Model-sized fp32 copies in host memory for ``algo``: parameters, and Adam's two states per optimizer."""
        if algo not in ALGOS:
            raise ValueError(f"algo {algo!r}: choose one of {', '.join(ALGOS)}")
        trained = ["actor", "critic"] if algo == "ppo" else ["actor"]
        offloaded_params = (["reference"] + trained[1:]) if self.param_offload else []
        if self.actor_param_offload:
            offloaded_params.append("actor")
        optimizer_states = 2 * len(trained) if self.optimizer_offload else 0
        return len(offloaded_params) + optimizer_states


def need_gib(processes_gib: float, model_parameters: int, offload: Offload, algo: str) -> float:
    """Host memory a run needs at its peak, GiB: the release's processes and the offloaded copies."""
    copy_gib = model_parameters * FP32 * PINNED_OVERHEAD / GIB
    return processes_gib + offload.copies(algo) * copy_gib


def limit_gib(total_gib: float) -> float:
    """What a run may take on a box of ``total_gib``: under Ray's threshold, less the system's share."""
    return total_gib * RAY_MEMORY_THRESHOLD - SYSTEM_GIB


def box_needs_gib(need: float) -> float:
    """The memory a box must have for a run that needs ``need`` GiB (limit_gib's inverse)."""
    return (need + SYSTEM_GIB) / RAY_MEMORY_THRESHOLD


def meminfo_kib(text: str) -> Dict[str, int]:
    """/proc/meminfo's ``Name: N kB`` lines, in KiB."""
    out: Dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name.strip()] = int(parts[0])
    return out


def measured_releases(folders: Mapping[str, object]) -> Dict[str, Optional[float]]:
    """Version -> its folder's ``host_memory_gib`` (None where not measured); a bad value names its release."""
    out: Dict[str, Optional[float]] = {}
    for version, folder in folders.items():
        value = folder.get("host_memory_gib") if isinstance(folder, Mapping) else None
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ValueError(f"verl {version}: host_memory_gib must be a positive number of GiB, not {value!r}")
        out[str(version)] = None if value is None else float(value)
    return out


def fitting_releases(releases: Mapping[str, Optional[float]], model_parameters: int, offload: Offload, algo: str,
                     total_gib: float) -> List[Tuple[str, float]]:
    """The releases with a measured need that fit a box of ``total_gib``, newest first, with their need."""
    def key(version: str) -> Tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else 0 for p in version.replace("post", ".").split("."))

    fits = []
    for version in sorted(releases, key=key, reverse=True):
        processes = releases[version]
        if processes is None:
            continue
        need = need_gib(float(processes), model_parameters, offload, algo)
        if need <= limit_gib(total_gib):
            fits.append((version, need))
    return fits


def shortfall(host: str, version: str, releases: Mapping[str, Optional[float]], model_parameters: int,
              offload: Offload, algo: str, total_gib: float) -> Optional[str]:
    """Why a box of ``total_gib`` cannot hold ``version``'s run, with what to do; None when it can (or unmeasured)."""
    processes = releases.get(version)
    if processes is None:
        return None
    need = need_gib(float(processes), model_parameters, offload, algo)
    if need <= limit_gib(total_gib):
        return None
    what = (f"verl {version} ({algo.upper()}, a model of {model_parameters / 1e9:.2f} B parameters, "
            f"{offload.copies(algo)} copies of it offloaded to host memory)")
    options = []
    older = [f"verl_version: {v} (needs {box_needs_gib(n):.1f} GiB)" for v, n in
             fitting_releases(releases, model_parameters, offload, algo, total_gib)]
    if older:
        options.append("the newest release that fits this box, " + older[0])
    if algo == "ppo":
        grpo = need_gib(float(processes), model_parameters, offload, "grpo")
        if grpo <= limit_gib(total_gib):
            options.append(f"launch_algo: grpo (no critic; needs {box_needs_gib(grpo):.1f} GiB)")
    options.append(f"{box_needs_gib(need):.0f} GiB of memory or more in the box")
    return (f"{host} has {total_gib:.1f} GiB of memory; {what} needs about {need:.1f} GiB at its peak, plus "
            f"{SYSTEM_GIB:.0f} GiB for the system, under the {RAY_MEMORY_THRESHOLD:.0%} at which Ray's memory "
            f"monitor kills workers: a box of {box_needs_gib(need):.1f} GiB. Choose one: " + "; ".join(options)
            + ". Or set preflight_host_memory_check: false to try anyway (the kernel's OOM killer or Ray's "
            "memory monitor may end the run).")
