#!/usr/bin/env python3
"""PPO on GSM8K under P40 rules, on any CUDA host (a real P40 included).

Everything comes from the project: verl's sdist patched by verl-patch,
GSM8K-format problems turned into verl parquet by the project's converter, a
random-weight Qwen2 made by verl_pascal/models, and the launch script
rendered from templates/verl-ppo.sh.j2. The run goes through
`python -m verl.trainer.main_ppo` (actor, critic, reference, HF rollout, GAE,
GSM8K rule reward) with the P40-rules guard active in every process
(allocator cap, TF32 off, any bf16/fp16 result or flash/cuDNN attention
kernel on the GPU fails the run).

--control puts bf16 back after patching (the negative control): verl's
literal bf16 autocasts where the patcher disabled them, and the critic's and
the actor's FSDP param dtype through the configuration, where verl 0.8 and
newer autocast (the keys as the release spells them; the actor's is what
reaches GRPO, which has no critic). The guard must fail that run.

Prints one JSON line per run: steps completed, seconds per step, generated
tokens per second, peak GPU memory per process, violations, and the error if
the run failed. Times are the host GPU's; memory carries over to a P40.

    python3 -m bench.ppo_p40_rules --verl-sdist verl-0.5.0.tar.gz --shape tiny --steps 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from bench import host_memory, procs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def sh(cmd: Sequence[str], **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), text=True, **kw)


def prepare_verl(sdist: str, work: str, attn: str, control: bool) -> str:
    src = os.path.join(work, "verl-src")
    if os.path.isdir(src):
        shutil.rmtree(src)
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    top = os.path.join(work, os.path.basename(sdist)[: -len(".tar.gz")])
    os.rename(top, src)
    proc = sh([sys.executable, os.path.join(REPO, "bin", "verl-patch"), "--source", src, "--profile", "pascal",
               "--attn", attn, "--json"], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"verl-patch failed: {proc.stderr}")
    if control:
        restore_sites(src)
    return src


def restore_sites(src: str, kinds: Sequence[str] = ("autocast_bf16",)) -> int:
    """Negative control: put back the original text of every patched site of ``kinds`` in the tree ``src``
    (by default verl's bf16 autocasts the patcher disabled); how many."""
    manifest = json.load(open(os.path.join(src, "verl", ".verl_pascal_patch.json")))
    restored = 0
    for site in manifest["sites"]:
        if site["kind"] not in kinds:
            continue
        path = os.path.join(src, site["file"])
        text = open(path).read()
        if site["after"] in text:
            open(path, "w").write(text.replace(site["after"], site["before"], 1))
            restored += 1
    return restored


#: The negative control's bf16 parameters, as 0.5.0 spells the keys (renamed for the release): the critic's
#: (PPO) and the actor's (PPO and GRPO). GRPO has no critic: with the critic's alone, verl 0.9.1's GRPO
#: control ran its steps untouched (2026-12-07), its autocast sites being in the HF rollout it does not use.
CONTROL_OVERRIDES = ("++critic.model.fsdp_config.mixed_precision.param_dtype=bf16",
                     "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16")


def control_overrides(version: str) -> List[str]:
    """The negative control's configuration part, with the keys as ``version`` spells them."""
    from verl_pascal import verl_releases
    from verl_pascal.launch import compose

    release = verl_releases.read(version)
    return [compose.release_keys(override, release) for override in CONTROL_OVERRIDES]


def prepare_data(work: str, count: int) -> str:
    from verl_pascal.data import generate, gsm8k

    out = os.path.join(work, "data")
    for split, seed in (("train", 0), ("test", 1)):
        rows = gsm8k.convert(generate.problems(count, seed=seed), split)
        gsm8k.write_if_changed(os.path.join(out, f"{split}.parquet"), gsm8k.parquet_bytes(rows))
    return out


def prepare_model(work: str, shape: str) -> str:
    from verl_pascal.models import make_model

    out = os.path.join(work, f"model-{shape}")
    if not os.path.isfile(os.path.join(out, "verl-pascal-model.json")):
        make_model.make(shape, out)
    return out


def sdist_version(sdist: str) -> str:
    """verl-0.6.1.tar.gz -> 0.6.1: the release folder the launch script is rendered for."""
    name = os.path.basename(sdist)
    if not (name.startswith("verl-") and name.endswith(".tar.gz")):
        raise SystemExit(f"--verl-sdist {sdist}: expected verl-<version>.tar.gz")
    return name[len("verl-"):-len(".tar.gz")]


def render_launch(work: str, data: str, model: str, args: argparse.Namespace) -> str:
    from verl_pascal.launch import render

    return render.write(os.path.join(work, "verl-ppo"), {
        "verl_version": sdist_version(args.verl_sdist),
        "conda_env_prefix": os.path.dirname(os.path.dirname(sys.executable)),
        "launch_script_path": os.path.join(work, "verl-ppo"),
        "launch_runs_dir": os.path.join(work, "runs"),
        "launch_data_dir": data,
        "launch_model_dir": model,
        "launch_train_batch_size": args.train_batch,
        "launch_ppo_mini_batch_size": args.mini_batch or args.train_batch,
        "launch_micro_batch_size": args.micro_batch,
        "launch_param_offload": args.offload,
        "launch_actor_param_offload": args.actor_offload,
        "launch_optimizer_offload": args.offload,
        "launch_max_prompt_length": args.prompt_length,
        "launch_max_response_length": args.response_length,
        # GRPO (--algo grpo): the batch sizes count prompts, rollout_n responses each.
        "launch_grpo_rollout_n": args.rollout_n,
        "launch_grpo_train_batch_size": args.train_batch,
        "launch_grpo_ppo_mini_batch_size": args.mini_batch or args.train_batch,
        # A timing run saves nothing unless asked (a 0.5B checkpoint is GBs and seconds).
        "launch_save_freq": args.save_freq,
        "launch_grpo_save_freq": args.save_freq,
    })


def responses_per_step(args: argparse.Namespace) -> int:
    """The sequences a step generates: a prompt each for PPO, rollout_n per prompt for GRPO."""
    return args.train_batch * (args.rollout_n if args.algo == "grpo" else 1)


def parse_steps(log: str) -> List[Dict[str, float]]:
    """verl's step lines, as verl-pascal-report reads them (verl_pascal.report.log)."""
    from verl_pascal.report import log as verl_log

    return verl_log.parse_lines(log.splitlines())


def summaries(report: str) -> Dict[str, Any]:
    from verl_pascal.p40_rules.guard import summaries_in, violations_in

    procs = [{k: round(s[k], 2) if isinstance(s[k], float) else s[k] for k in ("pid", "max_allocated_gib", "max_reserved_gib", "pinned_allocated_gib", "pinned_reserved_gib", "pinned_active_gib") if k in s}
             for s in summaries_in(report) if s.get("max_allocated_gib") is not None]
    violations = list(violations_in(report))
    return {"gpu_processes": procs, "violations": len(violations),
            "first_violation": violations[0] if violations else None}


class SmiSampler:
    """Peak GPU memory per process as nvidia-smi sees it (CUDA context included).

    ``peaks``: the processes of the run in ``work``; ``others``: any other process
    on the GPU meanwhile (then the run did not have the GPU to itself)."""

    def __init__(self, work: str, every_s: float = 2.0) -> None:
        import threading

        self.work = work
        self.peaks: Dict[str, int] = {}
        self.others: Dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every_s,), daemon=True)

    def _loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            out = sh(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                     capture_output=True).stdout
            self.record(out)

    def record(self, out: str) -> None:
        """One nvidia-smi sample (``pid, MiB`` lines); a pid is judged ours or not when first seen."""
        for line in out.splitlines():
            pid, _, mib = (part.strip() for part in line.partition(","))
            if not (pid.isdigit() and mib.isdigit()):
                continue
            if pid not in self.peaks and pid not in self.others:
                (self.peaks if procs.is_marked(int(pid), self.work) else self.others)[pid] = 0
            into = self.peaks if pid in self.peaks else self.others
            into[pid] = max(into[pid], int(mib))

    def __enter__(self) -> "SmiSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def report_dir(work: str) -> str:
    """Where the P40 rules of a run in ``work`` write their summaries and violations."""
    return os.path.join(work, "p40-rules")


def p40_env(work: str, src: str, memory_gib: float, guard: bool, pythonpath: str = "") -> Dict[str, str]:
    """The environment of a run in ``work`` under P40 rules: the guard's sitecustomize first, the patched verl tree,
    then ``pythonpath`` (the release's own packages) or, when it is empty, the inherited PYTHONPATH."""
    report = report_dir(work)
    shutil.rmtree(report, ignore_errors=True)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "verl_pascal", "p40_rules", "site"), REPO, src,
                                       pythonpath or os.environ.get("PYTHONPATH", "")]),
        "P40_RULES": "1",
        "P40_RULES_MEMORY_GIB": str(memory_gib),
        "P40_RULES_REPORT_DIR": report,
        "P40_RULES_GUARD": "1" if guard else "0",
        "RAY_DEDUP_LOGS": "0",
        # Every process of the run carries it (bench/procs.py): none outlives the bench.
        procs.MARK: work,
        # A Ray cluster of its own (runs may share a host); short: socket paths are limited.
        "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp"),
    }


def prepare(args: argparse.Namespace) -> "tuple[str, str, str]":
    """(work, patched verl tree, rendered launch script) for ``args``."""
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    src = prepare_verl(args.verl_sdist, work, args.attn, args.control)
    model = args.model_dir or prepare_model(work, args.shape)
    return work, src, render_launch(work, prepare_data(work, args.problems), model, args)


def run_overrides(args: argparse.Namespace) -> List[str]:
    extra = [f"trainer.total_training_steps={args.steps}", "trainer.val_before_train=False",
             f"trainer.experiment_name={args.shape}-b{args.train_batch}-{args.attn}"] + args.override
    if args.control:
        extra += control_overrides(sdist_version(args.verl_sdist))
    return extra


def run(args: argparse.Namespace) -> Dict[str, Any]:
    # No process of an earlier run in this work directory trains beside this one, and none of this
    # one outlives the bench, whatever stops it (bench/procs.py).
    with procs.reaped(os.path.abspath(args.work)) as leftovers:
        result = measured(args)
    result["killed_leftovers"] = leftovers
    if result["other_gpu_processes_mib"]:
        print(f"bench: the GPU was not this run's alone: other processes on it (pid: MiB) "
              f"{result['other_gpu_processes_mib']}", file=sys.stderr)
    return result


def run_script(argv: Sequence[str], env: Dict[str, str], log_path: str, timeout: int) -> int:
    """Run the launch script (``argv``: the script, then its options) as root, its output into a new
    ``log_path``, in a process group of its own; its exit status, or -1 when it ran past ``timeout``
    seconds (then the whole group is killed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(log_path)  # a new file: nothing else can still be writing into it
    with open(log_path, "w") as log_file:
        # The GPU host's only user is root; the script refuses root without --allow-root.
        proc = subprocess.Popen([argv[0], "--allow-root", *argv[1:]], env=env, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return -1


def measured(args: argparse.Namespace) -> Dict[str, Any]:
    work, src, script = prepare(args)
    report = report_dir(work)
    env = p40_env(work, src, args.memory_gib, not args.no_guard, args.pythonpath)
    extra = run_overrides(args)
    start = time.time()
    log_path = os.path.join(work, "last-run.log")
    with SmiSampler(work) as smi, host_memory.HostSampler(work) as host:
        returncode = run_script([script, "--algo", args.algo, *extra], env, log_path, args.timeout)
    with open(log_path, errors="replace") as f:
        log = f.read()
    steps = parse_steps(log)
    error: Optional[str] = None
    if returncode == -1:
        error = f"timed out after {args.timeout} s"
    elif returncode != 0 or len(steps) < args.steps:
        tail = [l for l in log.splitlines() if re.search(r"\w+(Error|Exception)\b:|P40 rule|Killed|timed out", l)]
        error = (tail[-1] if tail else f"exit status {returncode}: " + (log.splitlines()[-1] if log else "no output"))[:400]
    step_s = [s["timing_s/step"] for s in steps if "timing_s/step" in s]
    gen_tokens = [s.get("response_length/mean", 0) * responses_per_step(args) / s["timing_s/gen"]
                  for s in steps if s.get("timing_s/gen")]
    return {
        "verl": sdist_version(args.verl_sdist), "algo": args.algo, "rollout_n": args.rollout_n if args.algo == "grpo" else 1,
        "shape": args.shape, "train_batch": args.train_batch, "micro_batch": args.micro_batch,
        "attn": args.attn, "offload": args.offload, "actor_offload": args.actor_offload or "preset", "control": args.control, "guard": not args.no_guard, "memory_cap_gib": args.memory_gib,
        "steps_done": len(steps), "steps_asked": args.steps, "wall_s": round(time.time() - start, 1),
        "s_per_step": [round(x, 2) for x in step_s],
        "gen_tokens_per_s": [round(x, 1) for x in gen_tokens],
        "critic_score_mean": [round(s.get("critic/score/mean", float("nan")), 3) for s in steps],
        "max_allocated_gb_per_step": [s.get("perf/max_memory_allocated_gb") for s in steps],
        "max_reserved_gb_per_step": [s.get("perf/max_memory_reserved_gb") for s in steps],
        "host_memory": host.report(),
        "nvidia_smi_peak_mib": smi.peaks, "other_gpu_processes_mib": smi.others, "error": error, "returncode": returncode,
        "log": log_path, **summaries(report),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verl-sdist", required=True)
    p.add_argument("--work", default="/tmp/verl-pascal-ppo")
    p.add_argument("--shape", default="tiny", choices=["tiny", "qwen2.5-0.5b"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--algo", default="ppo", choices=["ppo", "grpo"], help="the launch script's --algo")
    p.add_argument("--rollout-n", type=int, default=4, help="GRPO: responses per prompt")
    p.add_argument("--save-freq", type=int, default=-1, help="trainer.save_freq (-1: no checkpoints)")
    p.add_argument("--train-batch", type=int, default=8, help="prompts per step (PPO: one response each)")
    p.add_argument("--mini-batch", type=int, default=0)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--offload", action="store_true", help="offload the critic, the reference and the optimizers")
    p.add_argument("--actor-offload", default="", choices=["", "true", "false"],
                   help="offload the actor's parameters (default: the launch preset's choice)")
    p.add_argument("--prompt-length", type=int, default=256)
    p.add_argument("--response-length", type=int, default=256)
    p.add_argument("--problems", type=int, default=512)
    p.add_argument("--memory-gib", type=float, default=22.0)
    p.add_argument("--pythonpath", default="",
                   help="the run's packages instead of the inherited PYTHONPATH (where two releases need different ones)")
    p.add_argument("--no-guard", action="store_true", help="memory cap and TF32 off only, no op guard (to measure its cost)")
    p.add_argument("--control", action="store_true",
                   help="put bf16 back (verl's autocasts, the critic's param dtype): the guard must fail the run")
    p.add_argument("--timeout", type=int, default=3000)
    p.add_argument("--override", action="append", default=[], help="extra Hydra override")
    p.add_argument("--model-dir", default="", help="a model made by verl_pascal/models (default: make one)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    result = run(args)
    print(json.dumps(result))
    if args.control:
        # The control counts only when the guard stopped it: a run that failed for another reason
        # (a missing package, a timeout) proves nothing about the guard.
        return 0 if result["violations"] > 0 else 1
    return 0 if result["error"] is None and result["violations"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
