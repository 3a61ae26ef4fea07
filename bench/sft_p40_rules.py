#!/usr/bin/env python3
"""Supervised fine-tuning under P40 rules: `verl-ppo --sft` on any CUDA host, and its negative control.

Everything comes from the project, as in bench/ppo_p40_rules.py: verl's sdist
patched by verl-patch (profile pascal), the learning task of
verl_pascal/data/arithmetic.py turned into SFT rows by the converter
(`gsm8k-to-verl --sft`, from the RL files), a random-weight tiny Qwen2 made by
verl_pascal/models/make_model.py, and the launch script rendered from
templates/verl-ppo.sh.j2, run as a user runs it (`verl-ppo --sft`), with the
P40-rules guard in every process (22 GiB allocator cap, TF32 off, any
bf16/fp16 result or flash/cuDNN attention kernel or Triton kernel on the GPU
fails the run).

The run fine-tunes the random model on the task's training split and ends by
scoring the model it saved (its Hugging Face directory, the one RL would
start from) on the held-out problems with verl's GSM8K rule: greedy and at
temperature 1. A model that learned nothing scores 0.

--control puts bf16 back after patching (the negative control): the release's
FSDP mixed-precision sites and autocasts the patcher changed (verl 0.5.0 and
0.6.1's fsdp_sft_trainer.py), and the engine's parameter dtype through the
configuration (0.7.1 and newer train through the FSDP engine). The guard
must stop that run; the exit status is 0 only when it did.

Prints one JSON line: the steps, the training loss at the first and the last
step, the validation loss, seconds, the held-out scores of the saved model,
peak GPU memory per process, violations, and the error if the run failed.

    python3 -m bench.sft_p40_rules --verl-sdist verl-0.5.0.tar.gz --steps 250
    python3 -m bench.sft_p40_rules --verl-sdist verl-0.9.1.tar.gz --steps 5 --control
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from bench import host_memory, ppo_p40_rules, procs

#: The sites --control puts back: every bf16 the patcher removed from what the SFT trainers run.
CONTROL_KINDS = ("autocast_bf16", "mixed_precision_bf16")
#: Where the launch script names the model the run saved.
MODEL_LINE = re.compile(r"verl-ppo: the SFT model, in Hugging Face format: (?P<path>\S+)")
#: The launch script's lines that say what it did, not what went wrong.
INFO_LINES = ("verl-ppo: SFT run directory", "verl-ppo: the SFT model", "verl-ppo: RL from it")


def sft_table(version: str) -> Dict[str, Any]:
    """The release folder's ``sft`` table; SystemExit when the release has none (verl-ppo --sft refuses it)."""
    from verl_pascal import verl_releases

    table = verl_releases.read(version).get("sft") or {}
    if not table:
        raise SystemExit(f"verl {version}: its release folder has no sft table; verl-ppo --sft does not run it")
    return dict(table)


def control_overrides(version: str) -> List[str]:
    """The control's configuration part: each fp32 parameter dtype the release's sft table sets on the fp32
    profile (the FSDP engine's, 0.7.1 on), set to bf16 after it. None where the dtype is in the code
    (0.5.0, 0.6.1): there the control puts the patched sites back."""
    fp32 = (sft_table(version).get("profile_overrides") or {}).get("fp32") or []
    return [o.replace("=fp32", "=bf16") for o in fp32 if re.search(r"mixed_precision\.param_dtype=fp32$", o)]


def prepare_data(work: str, train: int, held_out: int) -> "tuple[str, list]":
    """The task's RL files in work/data and its SFT rows in work/data/sft (as a user writes them, with the
    converter); the held-out problems as verl rows, to score the saved model on."""
    from verl_pascal.data import arithmetic, cli, gsm8k

    data = os.path.join(work, "data")
    task = arithmetic.split(train, held_out, seed=0)
    arithmetic.write(data, task)
    with contextlib.redirect_stdout(sys.stderr):  # its report line is not this bench's
        rc = cli.main(["--sft", "--train-file", os.path.join(data, "train.parquet"),
                       "--test-file", os.path.join(data, "test.parquet"), "--out", os.path.join(data, "sft")])
    if rc != 0:
        raise SystemExit(f"gsm8k-to-verl --sft failed with exit status {rc}")
    return data, gsm8k.convert(task.held_out, "test")


def launch_args(args: argparse.Namespace) -> argparse.Namespace:
    """bench/ppo_p40_rules.py's arguments for rendering the launch script with this run's sizes."""
    return ppo_p40_rules.parser().parse_args([
        "--verl-sdist", args.verl_sdist, "--train-batch", str(args.batch), "--micro-batch", str(args.micro_batch),
        "--prompt-length", str(args.prompt_length), "--response-length", str(args.response_length)])


def run_overrides(args: argparse.Namespace) -> List[str]:
    """The SFT run's Hydra overrides after the launch script's own: one epoch cut at --steps, the learning rate."""
    extra = ["trainer.total_epochs=1", f"trainer.total_training_steps={args.steps}", f"optim.lr={args.lr}",
             "optim.weight_decay=0.0", f"trainer.experiment_name=sft-{'control' if args.control else 'fp32'}"]
    if args.control:
        extra += control_overrides(ppo_p40_rules.sdist_version(args.verl_sdist))
    return extra + args.override


def saved_model(log: str) -> Optional[str]:
    """The Hugging Face directory the launch script said the run saved, or None."""
    found = MODEL_LINE.findall(log)
    return found[-1] if found else None


def losses(log: str) -> Dict[str, Any]:
    """The training loss at the first and the last step, and the last validation loss, from verl's step lines.

    Read line by line: the SFT trainer logs the validation at the last step on a line of its own with the
    same step number, which a reader keeping one record a step would let replace the training loss."""
    from verl_pascal.report import log as verl_log

    records = [r for r in map(verl_log.parse_line, log.splitlines()) if r is not None]
    train = {int(r["step"]): r["train/loss"] for r in records if "train/loss" in r}
    val = [r["val/loss"] for r in records if "val/loss" in r]
    first, last = (train[min(train)], train[max(train)]) if train else (None, None)
    return {"steps_done": len(train), "loss_first": None if first is None else round(first, 4),
            "loss_last": None if last is None else round(last, 4), "val_loss": round(val[-1], 4) if val else None}


def score(model_dir: str, held_out_rows: Sequence[Dict[str, Any]], seed: int = 0) -> Dict[str, float]:
    """The saved model's held-out score (verl's GSM8K rule), greedy and at temperature 1, in fp32 on the GPU."""
    from transformers import AutoTokenizer

    from verl_pascal.models import warm_start

    warm_start.fp32_rules()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = warm_start.load(model_dir, "cuda")
    examples = warm_start.encode(tokenizer, held_out_rows)
    return {"held_out_greedy": round(warm_start.held_out_score(model, tokenizer, examples, 0.0, seed), 4),
            "held_out_temperature_1": round(warm_start.held_out_score(model, tokenizer, examples, 1.0, seed), 4)}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    with procs.reaped(os.path.abspath(args.work)) as leftovers:
        result = measured(args)
    result["killed_leftovers"] = leftovers
    return result


def measured(args: argparse.Namespace) -> Dict[str, Any]:
    version = ppo_p40_rules.sdist_version(args.verl_sdist)
    trainer = sft_table(version)["module"]
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    src = ppo_p40_rules.prepare_verl(args.verl_sdist, work, "sdpa", control=False)
    restored = ppo_p40_rules.restore_sites(src, CONTROL_KINDS) if args.control else 0
    data, held_out_rows = prepare_data(work, args.train_problems, args.held_out_problems)
    model = ppo_p40_rules.prepare_model(work, "tiny")
    script = ppo_p40_rules.render_launch(work, data, model, launch_args(args))
    env = ppo_p40_rules.p40_env(work, src, args.memory_gib, True, args.pythonpath)
    log_path = os.path.join(work, "last-run.log")
    start = time.time()
    with ppo_p40_rules.SmiSampler(work) as smi, host_memory.HostSampler(work) as host:
        returncode = ppo_p40_rules.run_script([script, "--sft", *run_overrides(args)], env, log_path, args.timeout)
    wall = time.time() - start
    log = open(log_path, errors="replace").read()
    found = losses(log)
    saved = saved_model(log)
    result: Dict[str, Any] = {
        "verl": version, "trainer": trainer, "control": args.control, "restored_sites": restored,
        "guard": True, "memory_cap_gib": args.memory_gib, "steps_asked": args.steps, **found,
        "wall_s": round(wall, 1), "lr": args.lr, "batch": args.batch, "micro_batch": args.micro_batch,
        "model": saved, "nvidia_smi_peak_mib": smi.peaks, "other_gpu_processes_mib": smi.others,
        "host_memory": host.report(), "returncode": returncode, "log": log_path,
        **ppo_p40_rules.summaries(ppo_p40_rules.report_dir(work)),
    }
    result["error"] = error_of(result, returncode, log, args)
    if saved and not result["error"] and not args.no_score:
        result.update(score(saved, held_out_rows))
    return result


def error_of(result: Dict[str, Any], returncode: int, log: str, args: argparse.Namespace) -> Optional[str]:
    """Why the run did not do what was asked: a timeout, a failure (its last error line), too few steps."""
    if returncode == -1:
        return f"timed out after {args.timeout} s"
    if returncode != 0 or result["steps_done"] < args.steps or not result["model"]:
        tail = [line for line in log.splitlines() if re.search(r"\w+(Error|Exception)\b:|P40 rule|verl-ppo: ", line)
                and not line.startswith(INFO_LINES)]
        return (tail[-1] if tail else f"exit status {returncode}, {result['steps_done']} of {args.steps} steps")[:400]
    return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verl-sdist", required=True)
    p.add_argument("--work", default="/tmp/verl-pascal-sft")
    p.add_argument("--steps", type=int, default=250, help="trainer.total_training_steps (one epoch at most)")
    p.add_argument("--batch", type=int, default=32, help="rows a step (data.train_batch_size)")
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--prompt-length", type=int, default=128)
    p.add_argument("--response-length", type=int, default=64)
    p.add_argument("--train-problems", type=int, default=8192)
    p.add_argument("--held-out-problems", type=int, default=256)
    p.add_argument("--memory-gib", type=float, default=22.0)
    p.add_argument("--pythonpath", default="", help="the run's packages instead of the inherited PYTHONPATH")
    p.add_argument("--control", action="store_true", help="put bf16 back: the guard must stop the run")
    p.add_argument("--no-score", action="store_true", help="do not score the saved model")
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--override", action="append", default=[], help="extra Hydra override (last, so it wins)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.steps < 1 or args.steps * args.batch > args.train_problems:
        print(f"sft_p40_rules: --steps {args.steps} x --batch {args.batch} must be 1 to --train-problems "
              f"({args.train_problems}): the run is one epoch at most", file=sys.stderr)
        return 2
    result = run(args)
    print(json.dumps(result))
    if args.control:  # counts only when the guard stopped it, not when it failed for another reason
        return 0 if result["violations"] > 0 else 1
    return 0 if result["error"] is None and result["violations"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
