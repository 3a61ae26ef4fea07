#!/usr/bin/env python3
"""Crash and resume under P40 rules, on any CUDA host: the launch script's
--resume and --export against the real verl.

One run of the project's launch script (verl's sdist patched by verl-patch,
GSM8K-format problems, a random-weight model), with a checkpoint every
--save-freq steps, is killed with SIGKILL (its whole process group, as a
crash or a reboot) once it has logged --kill-after steps; then
``verl-ppo --resume RUN_DIR`` runs it to --steps. Prints one JSON line: the
steps before and after with their metrics (the step counter and the data
order go on from the checkpoint), the size and write time of each
checkpoint, and, with --export, the Hugging Face directory verl's merger
made, reloaded with transformers and asked to generate.

--runs-tmpfs-mib N puts the run directories on a tmpfs of N MiB (needs
root): the second checkpoint finds the disk full, and the proof is that the
first stays whole and named by verl's tracker, and that --resume continues
from it once the disk is larger.

    python3 -m bench.resume_proof --verl-sdist verl-0.5.0.tar.gz --shape tiny --steps 6 --save-freq 2 --kill-after 3 --export
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import time
from typing import Any, Dict, List, Optional, Sequence

from bench import ppo_p40_rules as base
from bench import procs

TRACKER = os.path.join("checkpoints", "latest_checkpointed_iteration.txt")
SHOWN = ("critic/score/mean", "actor/pg_loss", "actor/entropy", "timing_s/step", "timing_s/save_checkpoint",
         "training/global_step", "perf/max_memory_allocated_gb")


def run_dirs(runs: str) -> List[str]:
    return sorted(d for d in glob.glob(os.path.join(runs, "*")) if os.path.isdir(d))


def start(script: str, args: Sequence[str], env: Dict[str, str], log: str) -> subprocess.Popen:
    with open(log, "a") as out:
        return subprocess.Popen([script, "--allow-root", *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def kill_after(proc: subprocess.Popen, runs: str, steps: int, timeout: float) -> Optional[str]:
    """SIGKILL the run's process group once its train.log has ``steps`` steps; the run directory."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        for run in run_dirs(runs):
            log = os.path.join(run, "train.log")
            if os.path.isfile(log) and len(base.parse_steps(open(log, errors="replace").read())) >= steps:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return run
        time.sleep(1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    dirs = run_dirs(runs)
    return dirs[-1] if dirs else None


def du_mib(path: str) -> float:
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if not os.path.islink(os.path.join(root, f)))
    return round(total / 2**20, 1)


def checkpoints(run: str) -> Dict[str, Any]:
    tracker = os.path.join(run, TRACKER)
    return {
        "tracker": open(tracker).read().strip() if os.path.isfile(tracker) else None,
        "dirs": {os.path.basename(d): du_mib(d) for d in sorted(glob.glob(os.path.join(run, "checkpoints", "global_step_*")))},
    }


def shown(steps: List[Dict[str, float]]) -> List[Dict[str, float]]:
    return [{k: round(v, 4) for k, v in s.items() if k in SHOWN or k == "step"} for s in steps]


def exported(script: str, run: str, env: Dict[str, str]) -> Dict[str, Any]:
    proc = subprocess.run([script, "--allow-root", "--export", run], env=env, capture_output=True, text=True)
    out: Dict[str, Any] = {"returncode": proc.returncode, "stdout": proc.stdout[-300:], "stderr": proc.stderr[-600:]}
    models = sorted(glob.glob(os.path.join(run, "hf", "global_step_*")))
    if proc.returncode == 0 and models:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(models[-1], dtype=torch.float32).cuda()
        ids = torch.tensor([[1, 2, 3, 4]], device="cuda")
        generated = model.generate(ids, max_new_tokens=8, do_sample=False)
        out.update(model_dir=models[-1], parameters=sum(p.numel() for p in model.parameters()),
                   generated=generated[0].tolist())
    return out


def mount_tmpfs(path: str, mib: int) -> None:
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", path], check=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = base.parser()
    p.description = __doc__
    p.add_argument("--kill-after", type=int, default=3, help="SIGKILL the run once it has logged this many steps")
    p.add_argument("--export", action="store_true", help="export the last checkpoint and generate with it")
    p.add_argument("--runs-tmpfs-mib", type=int, default=0, help="run directories on a tmpfs this size (root)")
    p.set_defaults(save_freq=2, steps=6)
    args = p.parse_args(argv)
    # No run of an earlier bench in this work directory beside this one; none of this one after it.
    with procs.reaped(os.path.abspath(args.work)):
        return proof(args)


def proof(args: argparse.Namespace) -> int:
    work, src, script = base.prepare(args)
    runs = os.path.join(work, "runs")
    if args.runs_tmpfs_mib:
        mount_tmpfs(runs, args.runs_tmpfs_mib)
    env = base.p40_env(work, src, args.memory_gib, not args.no_guard, args.pythonpath)
    log = os.path.join(work, "resume-proof.log")
    first = start(script, ["--algo", args.algo, *base.run_overrides(args)], env, log)
    # With a small disk the run dies on its own (the save fails); else it is killed after --kill-after steps.
    run = kill_after(first, runs, args.kill_after if not args.runs_tmpfs_mib else 10**9, args.timeout)
    result: Dict[str, Any] = {"verl": base.sdist_version(args.verl_sdist), "algo": args.algo, "shape": args.shape,
                              "save_freq": args.save_freq, "kill_after": args.kill_after, "run": run}
    if run is None:
        result["error"] = "no run directory"
        print(json.dumps(result))
        return 1
    before = base.parse_steps(open(os.path.join(run, "train.log"), errors="replace").read())
    result["before"] = {"steps": shown(before), "checkpoints": checkpoints(run), "returncode": first.returncode}
    if args.runs_tmpfs_mib:
        subprocess.run(["mount", "-o", f"remount,size={args.runs_tmpfs_mib * 4}m", runs], check=True)
    resume_start = time.time()
    second = start(script, ["--resume", run], env, log)
    try:
        second.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
    all_steps = base.parse_steps(open(os.path.join(run, "train.log"), errors="replace").read())
    resumed_from = int(result["before"]["checkpoints"]["tracker"] or 0)
    result["after"] = {"returncode": second.returncode, "wall_s": round(time.time() - resume_start, 1),
                       "resumed_from_step": resumed_from,
                       "steps": shown([s for s in all_steps if s["step"] > resumed_from]),
                       "checkpoints": checkpoints(run)}
    if args.export:
        result["export"] = exported(script, run, env)
    print(json.dumps(result))
    done = [int(s["step"]) for s in all_steps]
    return 0 if second.returncode == 0 and done and done[-1] == args.steps else 1


if __name__ == "__main__":
    raise SystemExit(main())
