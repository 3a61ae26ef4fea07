#!/usr/bin/env python3
"""Does training under P40 rules learn? PPO and GRPO from a warm-started model, judged on held-out problems.

Every other GPU proof trains a random-weight model whose reward stays 0: it
shows the pipeline runs, not that it learns. Here the model starts above 0:

1. the task (verl_pascal/data/arithmetic.py): GSM8K-format arithmetic, its
   held-out problems' numbers never in the training split;
2. the warm start (verl_pascal/models/warm_start.py): the tiny Qwen2 of
   make_model.py after a short fp32 next-token loop on the training split,
   scoring above 0 and well below 1 on the held-out problems;
3. the runs, each through bench/ppo_p40_rules.py (the patched sdist, the
   launch script rendered from the template, the P40-rules guard on, a
   22 GiB allocator cap, a Ray cluster of its own) with the learning
   overrides of verl_pascal/report/learning.py: verl validates on the held-out
   problems before the first step and every few steps. On the first
   --verl-sdist: PPO and GRPO with seeds 1 and 2, and PPO with the actor's
   learning rate 0 (the control); on each further one: PPO and GRPO with
   seed 1. --short: the first release's PPO seed 1 and its control (and each
   further release's PPO seed 1). --only RUN keeps the runs named so
   (VERSION-ALGO-seedN[-control], as the lines name them), e.g. one release's
   seed 1 and control, to judge against another release's logs later.
   --parallel runs share the GPU (tiny models: seven fit an H200 under their caps).
   --pythonpath VERSION=DIRS gives a release's runs their own packages.

Prints the warm start's JSON line, one JSON line per run as it ends (its
per-step held-out score, training score, response length, KL, entropy and
rollout-against-actor probability gap, or "missing" where the release logs
none), then the verdict (verl_pascal/report/learning.py: rises, flat control,
seeds agree, releases agree). Exit status 1 when the verdict fails, 2 on bad
arguments.

    python3 -m bench.learning --verl-sdist verl-0.5.0.tar.gz --verl-sdist verl-0.9.1.tar.gz --parallel 7 \\
        --pythonpath 0.5.0=SITE_050 --pythonpath 0.9.1=SITE_091
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench import ppo_p40_rules, procs
from verl_pascal.report import learning

Planned = Tuple[str, learning.RunSpec]  # (verl sdist, run)


def plan(sdists: Sequence[str], short: bool) -> List[Planned]:
    """The runs, the first release's first: its seeds and control, then each other release's seed 1."""
    first, others = sdists[0], sdists[1:]
    if short:  # PPO and its control; beside them, each other release's PPO
        return ([(first, learning.RunSpec("ppo", 1)), (first, learning.RunSpec("ppo", 1, control=True))]
                + [(sdist, learning.RunSpec("ppo", 1)) for sdist in others])
    runs = [(first, learning.RunSpec(algo, seed)) for algo in learning.ALGOS for seed in (1, 2)]
    runs.append((first, learning.RunSpec("ppo", 1, control=True)))
    return runs + [(sdist, learning.RunSpec(algo, 1)) for sdist in others for algo in learning.ALGOS]


def run_name(sdist: str, spec: learning.RunSpec) -> str:
    return f"{ppo_p40_rules.sdist_version(sdist)}-{spec.name}"


def only(planned: Sequence[Planned], names: Sequence[str]) -> List[Planned]:
    """The planned runs ``names`` names (all of them when it is empty); ValueError naming one not planned."""
    if not names:
        return list(planned)
    known = [run_name(*item) for item in planned]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"--only {unknown[0]}: not a planned run; one of {', '.join(known)}")
    return [item for item in planned if run_name(*item) in names]


def required_checks(planned: Sequence[Planned]) -> List[str]:
    """The checks the planned runs can pass: rises with an RL run, flat_control with a control, seeds_agree with
    two seeds of one (release, algorithm), releases_agree with one (algorithm, seed) on two releases."""
    plain = [(ppo_p40_rules.sdist_version(s), spec) for s, spec in planned if not spec.control]
    by_group: Dict[Tuple[str, str], int] = {}
    by_seed: Dict[Tuple[str, int], set] = {}
    for verl, spec in plain:
        by_group[(verl, spec.algo)] = by_group.get((verl, spec.algo), 0) + 1
        by_seed.setdefault((spec.algo, spec.seed), set()).add(verl)
    wanted = {"rises": bool(plain), "flat_control": any(spec.control for _, spec in planned),
              "seeds_agree": any(n >= 2 for n in by_group.values()),
              "releases_agree": any(len(v) >= 2 for v in by_seed.values())}
    return [name for name in learning.CHECKS if wanted[name]]


def warm(work: str, device: str) -> Tuple[str, str, Dict[str, Any]]:
    """(model, data) of the warm start, made in ``work`` (seconds on a GPU); its summary."""
    from verl_pascal.models import warm_start

    model, data = os.path.join(work, "warm-model"), os.path.join(work, "task-data")
    return model, data, warm_start.warm_start(model, data, seed=0, device=device)


def sft_args(work: str, sdist: str, pythonpath: str) -> argparse.Namespace:
    """bench/sft_p40_rules.py's arguments for the SFT start: its own defaults on the warm start's task split
    (the same problem counts and seed, so the held-out problems the runs validate on are the ones the SFT
    model is scored on, and never trained on) and its tiny model."""
    from bench import sft_p40_rules
    from verl_pascal.models import warm_start

    return sft_p40_rules.parser().parse_args([
        "--verl-sdist", sdist, "--work", os.path.join(work, "sft-start"), "--pythonpath", pythonpath,
        "--train-problems", str(warm_start.TRAIN_PROBLEMS), "--held-out-problems", str(warm_start.HELD_OUT_PROBLEMS)])


def sft_start(work: str, sdist: str, pythonpath: str) -> Tuple[str, str, Dict[str, Any]]:
    """(model, data) of a start made by verl's own SFT trainer (`verl-ppo --sft` under P40 rules, through
    bench/sft_p40_rules.py): RL from an SFT model, as a user runs it. Its summary: the SFT run's line (its
    losses and the saved model's held-out scores). SystemExit with the SFT run's error when it failed."""
    from bench import sft_p40_rules
    from verl_pascal.data import arithmetic
    from verl_pascal.models import warm_start

    result = sft_p40_rules.run(sft_args(work, sdist, pythonpath))
    if result.get("error") or not result.get("model"):
        raise SystemExit(f"learning: the SFT start failed: {result.get('error')} (its log: {result.get('log')})")
    data = os.path.join(work, "task-data")
    arithmetic.write(data, arithmetic.split(warm_start.TRAIN_PROBLEMS, warm_start.HELD_OUT_PROBLEMS, seed=0))
    return str(result["model"]), data, {"start": "sft", **result}


def settings_of(pairs: Sequence[str]) -> learning.Settings:
    """learning.SETTINGS with each NAME=VALUE of --set; ValueError naming a bad one."""
    fields = {f.name: f for f in dataclasses.fields(learning.Settings)}
    changes: Dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in fields:
            raise ValueError(f"--set {pair}: expected NAME=VALUE, NAME one of {', '.join(fields)}")
        kind = type(getattr(learning.SETTINGS, name))
        try:
            changes[name] = kind(text)
        except ValueError:
            raise ValueError(f"--set {pair}: {name} is a {kind.__name__}") from None
    return dataclasses.replace(learning.SETTINGS, **changes)


def run_args(sdist: str, spec: learning.RunSpec, args: argparse.Namespace, model: str, data: str) -> argparse.Namespace:
    """bench/ppo_p40_rules.py's arguments for one run: the launch script rendered for the run's sizes,
    the warm-started model, the learning overrides (they win over the script's)."""
    s = args.settings
    grpo = spec.algo == "grpo"
    argv = ["--verl-sdist", sdist, "--work", os.path.join(args.work, run_name(sdist, spec)), "--shape", "tiny",
            "--steps", str(s.steps), "--algo", spec.algo, "--rollout-n", str(s.grpo_n),
            "--train-batch", str(s.grpo_prompts if grpo else s.ppo_train_batch),
            "--mini-batch", str(s.grpo_mini_batch if grpo else s.ppo_mini_batch),
            "--micro-batch", str(s.micro_batch), "--prompt-length", str(s.prompt_length),
            "--response-length", str(s.response_length), "--memory-gib", str(args.memory_gib),
            "--timeout", str(args.timeout), "--model-dir", model,
            "--pythonpath", args.pythonpath.get(ppo_p40_rules.sdist_version(sdist), "")]
    for override in learning.overrides(spec, data, model, s):
        argv += ["--override", override]
    return ppo_p40_rules.parser().parse_args(argv)


def steps_done(steps: Sequence[Dict[str, float]]) -> int:
    """The training steps a log has (the validation before training is step 0)."""
    return len([record for record in steps if record["step"] >= 1])


def error_of(result: Dict[str, Any], done: int, asked: int) -> Optional[str]:
    """Why a run does not count: its error, a P40-rule violation, or a run that stopped short."""
    if result.get("error"):
        return str(result["error"])
    if result.get("violations"):
        return f"{result['violations']} P40-rule violations, the first: {result.get('first_violation')}"
    if done < asked:
        return f"stopped after {done} of {asked} steps"
    return None


def one(sdist: str, spec: learning.RunSpec, args: argparse.Namespace, model: str, data: str) -> Dict[str, Any]:
    """Run one and read its log: the JSON line of the run."""
    started = time.time()
    try:
        result = ppo_p40_rules.run(run_args(sdist, spec, args, model, data))
    except Exception as exc:  # a run that cannot even start is a failed run, not the end of the benchmark
        result = {"error": f"{type(exc).__name__}: {exc}"}
    log_path = result.get("log")
    steps = ppo_p40_rules.parse_steps(open(log_path, errors="replace").read()) if log_path and os.path.isfile(log_path) else []
    found = learning.curves(steps)
    return {
        "run": run_name(sdist, spec), "verl": ppo_p40_rules.sdist_version(sdist), "algo": spec.algo, "seed": spec.seed,
        "control": spec.control, "error": error_of(result, steps_done(steps), args.settings.steps),
        "steps_done": steps_done(steps), "wall_s": round(time.time() - started, 1),
        "violations": result.get("violations"), "log": log_path,
        "metrics": {name: curve if curve is not None else "missing" for name, curve in found.items()},
        "missing": learning.missing(found),
    }


def as_run(line: Dict[str, Any]) -> learning.Run:
    held = line["metrics"]["held_out"]
    return learning.Run(line["run"], line["verl"], line["algo"], line["seed"], line["control"],
                        [] if held == "missing" else [(int(s), float(v)) for s, v in held], line["error"])


def run_all(planned: Sequence[Planned], args: argparse.Namespace, model: str, data: str) -> List[Dict[str, Any]]:
    """Every run, --parallel at a time, each start --stagger-s after the one before; a line each as it ends."""
    lock = threading.Lock()
    lines: List[Dict[str, Any]] = []

    def start(index: int, item: Planned) -> Dict[str, Any]:
        time.sleep(args.stagger_s * (index % max(1, args.parallel)))  # model loading is CPU-bound: spread it
        line = one(*item, args, model, data)
        with lock:
            print(json.dumps(line), flush=True)
            lines.append(line)
        return line

    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        ordered = list(pool.map(lambda pair: start(*pair), enumerate(planned)))
    return ordered


def pythonpaths(pairs: Sequence[str], versions: Sequence[str], p: argparse.ArgumentParser) -> Dict[str, str]:
    """{release: PYTHONPATH} of --pythonpath VERSION=DIRS, each VERSION one of the --verl-sdist releases."""
    out: Dict[str, str] = {}
    for pair in pairs:
        version, sep, dirs = pair.partition("=")
        if not sep or not dirs or version not in versions:
            p.error(f"--pythonpath {pair}: expected VERSION=DIRS, VERSION one of {', '.join(versions)}")
        out[version] = dirs
    return out


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verl-sdist", action="append", required=True,
                   help="verl-X.Y.Z.tar.gz; give it twice to compare releases (the first runs the seeds and the control)")
    p.add_argument("--work", default="verl-pascal-learning", help="where the warm start and the runs go")
    p.add_argument("--short", action="store_true", help="the first release's PPO seed 1 and its control (and each further release's PPO seed 1) only")
    p.add_argument("--parallel", type=int, default=1, help="runs side by side on the GPU")
    p.add_argument("--stagger-s", type=float, default=10.0)
    p.add_argument("--memory-gib", type=float, default=22.0)
    p.add_argument("--timeout", type=int, default=1500, help="seconds a run may take")
    p.add_argument("--device", default="cuda", help="where the warm start trains (cuda or cpu)")
    p.add_argument("--start", default="warm", choices=["warm", "sft"],
                   help="the runs' model: the warm start's own fp32 loop (warm), or verl's SFT trainer run by "
                        "`verl-ppo --sft` under P40 rules with the first release (sft: RL from an SFT model)")
    p.add_argument("--pythonpath", action="append", default=[], metavar="VERSION=DIRS",
                   help="a release's packages instead of the inherited PYTHONPATH (where two releases need "
                        "different ones), e.g. 0.9.1=/tmp/site-091")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="change one of the runs' settings (verl_pascal/report/learning.py, Settings), e.g. actor_lr=1e-4")
    p.add_argument("--only", action="append", default=[], metavar="RUN",
                   help="run only this planned run (VERSION-ALGO-seedN[-control], e.g. 0.9.1-grpo-seed1); repeatable")
    args = p.parse_args(argv)
    try:
        args.settings = settings_of(args.set)
    except ValueError as exc:
        p.error(str(exc))
    for sdist in args.verl_sdist:
        try:
            ppo_p40_rules.sdist_version(sdist)
        except SystemExit as exc:  # its one line, as a usage error
            p.error(str(exc))
        if not os.path.isfile(sdist):
            p.error(f"--verl-sdist {sdist}: no such file")
    if args.parallel < 1:
        p.error("--parallel must be 1 or more")
    args.pythonpath = pythonpaths(args.pythonpath, [ppo_p40_rules.sdist_version(s) for s in args.verl_sdist], p)
    try:
        args.planned = only(plan(args.verl_sdist, args.short), args.only)
    except ValueError as exc:
        p.error(str(exc))
    args.work = os.path.abspath(args.work)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    # Every run is marked with its directory under --work: none outlives the benchmark.
    with procs.reaped(args.work):
        if args.start == "sft":
            first = args.verl_sdist[0]
            model, data, summary = sft_start(args.work, first,
                                             args.pythonpath.get(ppo_p40_rules.sdist_version(first), ""))
        else:
            model, data, summary = warm(args.work, args.device)
        print(json.dumps({"warm_start": summary}), flush=True)
        lines = run_all(args.planned, args, model, data)
    verdict = learning.judge([as_run(line) for line in lines], required=required_checks(args.planned))
    print(json.dumps({"verdict": verdict}))
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
