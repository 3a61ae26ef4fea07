"""The learning benchmark: its runs' settings, what it reads from their logs, and its verdict.

bench/learning.py (on any CUDA host) and playbooks/verify.yml (on a box, with
the box's verl) run RL from the warm-started model (verl_pascal/models/
warm_start.py) on the task of verl_pascal/data/arithmetic.py through the launch
script, with the Hydra overrides of :func:`overrides`: verl validates on the
held-out problems before the first step and every ``test_freq`` steps, ``val_n``
responses a problem sampled at temperature 1, as the rollout samples.

From each run's console log (:mod:`log`, as verl-pascal-report reads it),
per step: the held-out score, the training score, the response length, the
KL to the reference (PPO's penalty in the reward, GRPO's loss), the actor's
entropy, and how far the rollout's token probabilities are from the actor's
(``rollout_probs_diff``, only where the release logs it: missing, never
made up, elsewhere).

The verdict (:func:`judge`), each check on the held-out curves:

- rises: every RL run's held-out score rises by ``min_rise`` or more (its
  last ``tail`` validations' mean against its first validation), and the
  mean rise of a group's seeds is ``rise_over_spread`` times their spread;
- flat control: a run with the actor's learning rate 0 moves ``flat`` at most;
- seeds agree: two seeds of a (release, algorithm) are at most ``seed_spread``
  apart (the mean distance between their curves);
- releases agree: the same seed and settings on two releases are no further
  apart than that algorithm's seeds are (or ``release_floor``, the larger).

A run that failed, logged no validation, or logged a held-out score that is
nan or inf fails every check it is in. A check with no run to judge is "not
run": it fails the verdict when it is required.

    python -m verl_pascal.report.learning overrides --algo ppo --seed 1 --data DIR --model DIR [--control]
    python -m verl_pascal.report.learning judge ppo-seed1=A.log ppo-seed1-control.log [--require ...] [--chart held-out.png]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Dict, List, Optional, Sequence, Tuple

from . import charts, log, summary

# ---------------------------------------------------------------- the runs' settings


@dataclass(frozen=True)
class Settings:
    """What every run of the benchmark runs with (the same on every release)."""

    steps: int = 40
    test_freq: int = 5
    prompt_length: int = 128
    response_length: int = 64  # the task's answers have about 45 tokens
    ppo_train_batch: int = 256  # prompts a step, one response each
    ppo_mini_batch: int = 128
    grpo_prompts: int = 64  # prompts a step, grpo_n responses each
    grpo_mini_batch: int = 32
    grpo_n: int = 8
    micro_batch: int = 64
    # Chosen on the CPU (docs/benchmarks.md): 2e-4 rose steadily, 3e-4 and 4e-4 collapsed.
    actor_lr: float = 2e-4
    critic_lr: float = 5e-4
    val_temperature: float = 1.0
    val_n: int = 4  # responses a held-out problem: the score's noise halves against 1


SETTINGS = Settings()

#: The algorithms a run can use (the launch script's --algo).
ALGOS = ("ppo", "grpo")


@dataclass(frozen=True)
class RunSpec:
    """One run: its algorithm, seed (verl's data order), and whether it is the control (actor lr 0)."""

    algo: str
    seed: int
    control: bool = False

    @property
    def name(self) -> str:
        return f"{self.algo}-seed{self.seed}" + ("-control" if self.control else "")


#: trainer.total_epochs of every run: more than ``steps`` steps need (the launch script's 1 is one
#: pass over the training problems, 32 PPO steps of 256 prompts over 8192 problems).
EPOCHS = 100

_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")


def hydra_path(path: str) -> str:
    """``path`` quoted for a Hydra override's value; ValueError for one Hydra could misread."""
    if not _PLAIN_PATH.match(path):
        raise ValueError(f"{path}: use a path of letters, digits and _./+- only (Hydra reads others as syntax)")
    return f"'{path}'"


def overrides(spec: RunSpec, data_dir: str, model_dir: str, settings: Settings = SETTINGS) -> List[str]:
    """The Hydra overrides of one run, after the launch script's own (they win)."""
    if spec.algo not in ALGOS:
        raise ValueError(f"algo {spec.algo!r}: choose one of {', '.join(ALGOS)}")
    model = hydra_path(os.path.abspath(model_dir))
    data = os.path.abspath(data_dir)
    s = settings
    out = [
        f"data.train_files={hydra_path(os.path.join(data, 'train.parquet'))}",
        f"data.val_files={hydra_path(os.path.join(data, 'test.parquet'))}",
        f"data.max_prompt_length={s.prompt_length}",
        f"data.max_response_length={s.response_length}",
        f"++data.seed={spec.seed}",
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.actor.optim.lr={0.0 if spec.control else s.actor_lr}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={s.micro_batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={s.micro_batch}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={s.micro_batch}",
        # The held-out score as RL sees its own responses: sampled at the rollout's temperature.
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={s.val_temperature}",
        f"actor_rollout_ref.rollout.val_kwargs.n={s.val_n}",
        f"trainer.total_training_steps={s.steps}",
        # verl stops at the end of its last epoch even before total_training_steps: epochs to spare.
        f"trainer.total_epochs={EPOCHS}",
        f"trainer.test_freq={s.test_freq}",
        "trainer.val_before_train=True",
        "trainer.save_freq=-1",
        f"trainer.experiment_name=learning-{spec.name}",
    ]
    if spec.algo == "ppo":
        out += [
            f"data.train_batch_size={s.ppo_train_batch}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={s.ppo_mini_batch}",
            f"critic.model.path={model}",
            f"critic.optim.lr={s.critic_lr}",
            f"critic.ppo_micro_batch_size_per_gpu={s.micro_batch}",
        ]
    else:
        out += [
            f"data.train_batch_size={s.grpo_prompts}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={s.grpo_mini_batch}",
            f"actor_rollout_ref.rollout.n={s.grpo_n}",
        ]
    return out


# ---------------------------------------------------------------- what a run's log gives

#: Each metric of a step, by the benchmark's name: verl's keys, the first the log has wins.
METRICS: Dict[str, Tuple[str, ...]] = {
    "held_out": (charts.VAL_PREFIX + "N",),  # N responses a problem: the largest N the log has
    "train_score": (summary.SCORE,),
    "response_length": ("response_length/mean",),
    "kl": ("actor/reward_kl_penalty", "actor/kl_loss"),  # PPO's KL in the reward; GRPO's KL loss
    "entropy": (charts.ENTROPY,),
    "rollout_probs_diff_mean": (charts.PROBS_DIFF_MEAN,),
    "rollout_probs_diff_max": (charts.PROBS_DIFF_MAX,),
}

Curve = List[Tuple[int, float]]


def curves(steps: Sequence[log.Step]) -> Dict[str, Optional[Curve]]:
    """Every metric of METRICS as (step, value) pairs, nan and inf as logged; None where the log has none of its keys."""
    found: Dict[str, Optional[Curve]] = {}
    for name, keys in METRICS.items():
        key: Optional[str]
        if name == "held_out":
            held = charts.val_keys(steps)
            key = held[-1] if held else None
        else:
            key = next((k for k in keys if any(k in record for record in steps)), None)
        found[name] = None if key is None else [(int(x), y) for x, y in zip(*log.values(list(steps), key))]
    return found


def missing(found: Dict[str, Optional[Curve]]) -> List[str]:
    """The metrics a run's log does not have."""
    return [name for name, curve in found.items() if curve is None]


# ---------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class Criteria:
    # A held-out point (256 problems, 4 responses each) has a sampling noise of about 0.013.
    min_rise: float = 0.1
    rise_over_spread: float = 3.0
    flat: float = 0.05
    seed_spread: float = 0.1
    release_floor: float = 0.1
    tail: int = 3


CRITERIA = Criteria()

CHECKS = ("rises", "flat_control", "seeds_agree", "releases_agree")


@dataclass(frozen=True)
class Run:
    """What the verdict needs of one run."""

    name: str
    verl: str
    algo: str
    seed: int
    control: bool
    held_out: Curve
    error: Optional[str] = None


@dataclass
class Check:
    passed: Optional[bool] = None  # None: no run to judge
    details: List[str] = field(default_factory=list)

    def judge(self, ok: bool, detail: str) -> None:
        self.passed = ok and self.passed is not False
        self.details.append(("ok: " if ok else "FAILED: ") + detail)


def fault(run: Run) -> Optional[str]:
    """Why a run's held-out curve cannot be judged, or None."""
    if run.error:
        return f"{run.name} ({run.verl}) failed: {run.error}"
    bad = [step for step, value in run.held_out if not math.isfinite(value)]
    if bad:
        return f"{run.name} ({run.verl}): held-out score not finite at step {bad[0]}"
    if len(run.held_out) < 2:
        return (f"{run.name} ({run.verl}): {len(run.held_out)} validations logged; "
                "needs one before training and one after (trainer.val_before_train, trainer.test_freq)")
    return None


def start(curve: Curve) -> float:
    return curve[0][1]


def end(curve: Curve, tail: int) -> float:
    """The mean of the last ``tail`` validations after the first."""
    return statistics.fmean(value for _, value in curve[1:][-tail:])


def distance(a: Curve, b: Curve) -> Optional[float]:
    """The mean |a - b| over the steps both validated at; None when they share none."""
    other = dict(b)
    shared = [abs(value - other[step]) for step, value in a if step in other]
    return statistics.fmean(shared) if shared else None


def groups(runs: Sequence[Run], control: bool) -> Dict[Tuple[str, str], List[Run]]:
    """The runs by (release, algorithm), controls or not."""
    out: Dict[Tuple[str, str], List[Run]] = {}
    for run in runs:
        if run.control == control:
            out.setdefault((run.verl, run.algo), []).append(run)
    return out


def spread(group: Sequence[Run]) -> Optional[float]:
    """The largest distance between two seeds' curves; None with fewer than two seeds, or none shared."""
    found = [distance(a.held_out, b.held_out) for a, b in combinations(group, 2)]
    return None if not found or None in found else max(d for d in found if d is not None)


def check_rises(runs: Sequence[Run], c: Criteria) -> Check:
    check = Check()
    for (verl, algo), group in groups(runs, control=False).items():
        faults = [f for f in map(fault, group) if f]
        if faults:
            for f in faults:
                check.judge(False, f)
            continue
        rises = [end(r.held_out, c.tail) - start(r.held_out) for r in group]
        for run, rise in zip(group, rises):
            check.judge(rise >= c.min_rise, f"{run.name} ({verl}): held-out {start(run.held_out):.3f} -> "
                        f"{end(run.held_out, c.tail):.3f}, a rise of {rise:+.3f} (needs {c.min_rise:+.3f})")
        width = spread(group)
        if width is not None:
            mean = statistics.fmean(rises)
            check.judge(mean >= c.rise_over_spread * width,
                        f"{algo} ({verl}): mean rise {mean:+.3f} against a seed spread of {width:.3f} "
                        f"(needs {c.rise_over_spread:g} times)")
    return check


def check_flat(runs: Sequence[Run], c: Criteria) -> Check:
    check = Check()
    for group in groups(runs, control=True).values():
        for run in group:
            problem = fault(run)
            if problem:
                check.judge(False, problem)
                continue
            move = end(run.held_out, c.tail) - start(run.held_out)
            check.judge(abs(move) <= c.flat, f"{run.name} ({run.verl}, actor lr 0): held-out "
                        f"{start(run.held_out):.3f} -> {end(run.held_out, c.tail):.3f} ({move:+.3f}, at most ±{c.flat:g})")
    return check


def check_seeds(runs: Sequence[Run], c: Criteria) -> Check:
    check = Check()
    for (verl, algo), group in groups(runs, control=False).items():
        if len(group) < 2:
            continue
        faults = [f for f in map(fault, group) if f]
        width = None if faults else spread(group)
        if width is None:
            check.judge(False, f"{algo} ({verl}): " + ("; ".join(faults) or "the seeds share no validation step"))
            continue
        check.judge(width <= c.seed_spread, f"{algo} ({verl}): seeds {', '.join(str(r.seed) for r in group)} "
                    f"{width:.3f} apart (at most {c.seed_spread:g})")
    return check


def check_releases(runs: Sequence[Run], c: Criteria) -> Check:
    check = Check()
    plain = [r for r in runs if not r.control]
    seeds_of = groups(runs, control=False)
    for a, b in combinations(plain, 2):
        if (a.algo, a.seed) != (b.algo, b.seed) or a.verl == b.verl:
            continue
        faults = [f for f in (fault(a), fault(b)) if f]
        gap = None if faults else distance(a.held_out, b.held_out)
        if gap is None:
            check.judge(False, f"{a.name}: {a.verl} against {b.verl}: "
                        + ("; ".join(faults) or "no validation step in common"))
            continue
        widths = [w for w in (spread(seeds_of[(a.verl, a.algo)]), spread(seeds_of[(b.verl, b.algo)])) if w is not None]
        allowed = max([c.release_floor, *widths])
        check.judge(gap <= allowed, f"{a.name}: {a.verl} and {b.verl} {gap:.3f} apart "
                    f"(at most {allowed:.3f}: the seed spread, or {c.release_floor:g})")
    return check


def judge(runs: Sequence[Run], criteria: Criteria = CRITERIA, required: Sequence[str] = CHECKS) -> Dict[str, object]:
    """Every check's result and details, and whether the verdict passes: each required check passed,
    and none that ran failed."""
    checks = {"rises": check_rises(runs, criteria), "flat_control": check_flat(runs, criteria),
              "seeds_agree": check_seeds(runs, criteria), "releases_agree": check_releases(runs, criteria)}
    passed = all(check.passed is not False for check in checks.values()) and all(
        checks[name].passed is True for name in required)
    return {"passed": passed, "required": list(required), "criteria": asdict(criteria),
            "checks": {name: {"passed": check.passed, "details": check.details} for name, check in checks.items()}}


# ---------------------------------------------------------------- the command


def run_of(name: str, path: str, verl: str, seed: int, algo: str, control: bool) -> Run:
    """A run judged from its log file (no file, or no step in it: a run that failed)."""
    if not os.path.isfile(path):
        return Run(name, verl, algo, seed, control, [], f"no log at {path}")
    held = curves(log.read(path))["held_out"]
    return Run(name, verl, algo, seed, control, held or [], None if held else "no held-out score in its log")


def chart(runs: Sequence[Run], path: str, title: str = "") -> List[str]:
    """One PNG of every run's held-out curve (a control dashed), whole or absent; the legend's labels.

    OSError when it cannot be written."""
    import matplotlib

    matplotlib.use("Agg")  # a box or a CI machine has no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels: List[str] = []
    for run in runs:
        label = f"{run.name} ({run.verl})" + (f": {run.error}"[:60] if run.error else "")
        xs, ys = [s for s, _ in run.held_out], [v for _, v in run.held_out]
        ax.plot(xs, ys, marker=".", linestyle="--" if run.control else "-", label=label)
        labels.append(label)
    ax.set_title("Held-out score (exact final answer), before training and every few steps"
                 + (f"\n{title}" if title else ""), fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel("mean score of the held-out problems")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        charts.save(fig, path)
    finally:
        plt.close(fig)
    return labels


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m verl_pascal.report.learning", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("overrides", help="print one run's Hydra overrides, one a line")
    o.add_argument("--algo", choices=ALGOS, required=True)
    o.add_argument("--seed", type=int, default=1)
    o.add_argument("--control", action="store_true", help="the actor's learning rate 0")
    o.add_argument("--data", required=True, help="the task's data directory (train.parquet, test.parquet)")
    o.add_argument("--model", required=True, help="the warm-started model")
    j = sub.add_parser("judge", help="judge runs from their logs; exit 1 when the verdict fails")
    j.add_argument("runs", nargs="+", metavar="[SPEC=]LOG",
                   help="ALGO-seedN[-control][@VERL]=LOG, or a LOG named SPEC.log: "
                        "ppo-seed1=run1/train.log logs/ppo-seed1-control.log")
    j.add_argument("--require", nargs="+", choices=CHECKS, default=["rises", "flat_control"])
    j.add_argument("--chart", metavar="PNG", help="also draw every run's held-out curve into this PNG")
    j.add_argument("--title", default="", help="the chart's second title line (date, GPU, versions)")
    return p.parse_args(argv)


_SPEC = re.compile(r"^(?P<algo>ppo|grpo)-seed(?P<seed>\d+)(?P<control>-control)?(?:@(?P<verl>[\w.]+))?$")


def spec_run(text: str) -> Run:
    """A run from the command line's ``ALGO-seedN[-control][@VERL]=LOG``, or a LOG named
    ``ALGO-seedN[-control][@VERL].log``; ValueError when malformed."""
    name, sep, path = text.partition("=")
    if not sep:
        path, name = text, os.path.basename(text)[:-len(".log")] if text.endswith(".log") else ""
    match = _SPEC.match(name)
    if not match:
        raise ValueError(f"{text!r}: expected ALGO-seedN[-control][@VERL]=LOG or a log named so, "
                         "e.g. ppo-seed1=train.log or ppo-seed1-control.log")
    return run_of(name.split("@")[0], path, match["verl"] or "installed", int(match["seed"]), match["algo"],
                  bool(match["control"]))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "overrides":
            print("\n".join(overrides(RunSpec(args.algo, args.seed, args.control), args.data, args.model)))
            return 0
        runs = [spec_run(text) for text in args.runs]
    except ValueError as exc:
        print(f"learning: {exc}", file=sys.stderr)
        return 2
    verdict = judge(runs, required=args.require)
    if args.chart:
        try:
            chart(runs, args.chart, args.title)
        except OSError as exc:
            print(f"learning: {args.chart}: cannot write the chart ({exc.strerror or exc})", file=sys.stderr)
            return 2
    print(json.dumps({"verdict": verdict}))
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
