"""bench/learning.py without a GPU: its plan, each run's arguments, its lines and its verdict.

The runs themselves need a GPU (tests/gpu/test_gpu_learning.py); here
bench/ppo_p40_rules.py's ``run`` is replaced by a stand-in that writes a log
of verl's step lines, rising or flat as the test says, and the warm start by
a stand-in summary.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

from bench import learning as bench, ppo_p40_rules
from verl_pascal.report import charts, learning

HELD = charts.VAL_PREFIX + str(learning.SETTINGS.val_n)


def sdists(tmp_path: Path, *versions: str) -> List[str]:
    paths = []
    for version in versions:
        path = tmp_path / f"verl-{version}.tar.gz"
        path.write_bytes(b"")
        paths.append(str(path))
    return paths


def test_the_plan_runs_seeds_and_the_control_on_the_first_release_and_seed_1_on_the_others() -> None:
    plan = [(ppo_p40_rules.sdist_version(s), spec.name) for s, spec in bench.plan(["verl-0.5.0.tar.gz", "verl-0.9.1.tar.gz"], False)]
    assert plan == [("0.5.0", "ppo-seed1"), ("0.5.0", "ppo-seed2"), ("0.5.0", "grpo-seed1"), ("0.5.0", "grpo-seed2"),
                    ("0.5.0", "ppo-seed1-control"), ("0.9.1", "ppo-seed1"), ("0.9.1", "grpo-seed1")]
    short = [spec.name for _, spec in bench.plan(["verl-0.5.0.tar.gz", "verl-0.9.1.tar.gz"], True)]
    assert short == ["ppo-seed1", "ppo-seed1-control", "ppo-seed1"]  # the last on 0.9.1
    assert [spec.name for _, spec in bench.plan(["verl-0.9.1.tar.gz"], True)] == ["ppo-seed1", "ppo-seed1-control"]


def test_a_run_is_the_ppo_bench_with_the_runs_sizes_and_the_learning_overrides_last(tmp_path: Path) -> None:
    args = bench.parse_args(["--verl-sdist", sdists(tmp_path, "0.9.1")[0], "--work", str(tmp_path / "w"),
                             "--set", "actor_lr=1e-4", "--set", "steps=12"])
    spec = learning.RunSpec("grpo", 2)
    ns = bench.run_args(args.verl_sdist[0], spec, args, "/m", "/d")
    s = args.settings
    assert (ns.algo, ns.steps, ns.train_batch, ns.mini_batch, ns.rollout_n, ns.model_dir) == (
        "grpo", 12, s.grpo_prompts, s.grpo_mini_batch, s.grpo_n, "/m")
    assert ns.work == str(tmp_path / "w" / "0.9.1-grpo-seed2") and not ns.no_guard and not ns.control
    assert ns.override == learning.overrides(spec, "/d", "/m", s)
    assert "actor_rollout_ref.actor.optim.lr=0.0001" in ns.override
    # after the PPO bench's own (trainer.val_before_train=False), so they win
    assert ppo_p40_rules.run_overrides(ns)[-len(ns.override):] == ns.override


def test_each_release_runs_with_its_own_packages_and_the_others_with_the_inherited_ones(tmp_path: Path, monkeypatch) -> None:
    """0.5.0 and 0.9.1 need different transformers: one benchmark process gives each run its release's PYTHONPATH."""
    both = sdists(tmp_path, "0.5.0", "0.9.1")
    args = bench.parse_args(["--verl-sdist", both[0], "--verl-sdist", both[1], "--work", str(tmp_path / "w"),
                             "--pythonpath", "0.9.1=/site-091"])
    newest = bench.run_args(both[1], learning.RunSpec("ppo", 1), args, "/m", "/d")
    oldest = bench.run_args(both[0], learning.RunSpec("ppo", 1), args, "/m", "/d")
    assert (newest.pythonpath, oldest.pythonpath) == ("/site-091", "")
    monkeypatch.setenv("PYTHONPATH", "/site-050")
    work = str(tmp_path / "w")
    assert ppo_p40_rules.p40_env(work, "/src", 22.0, True, "/site-091")["PYTHONPATH"].split(":")[2:] == ["/src", "/site-091"]
    assert ppo_p40_rules.p40_env(work, "/src", 22.0, True)["PYTHONPATH"].split(":")[2:] == ["/src", "/site-050"]


class StandIn:
    """ppo_p40_rules.run: writes a log of 10 steps whose held-out score rises (or not, for a control or a
    name in ``flat``), or of 7 steps for a name in ``short``."""

    def __init__(self, flat: tuple = (), fail: tuple = (), short: tuple = ()) -> None:
        self.flat, self.fail, self.short = flat, fail, short
        self.threads: set = set()

    def __call__(self, ns: Any) -> Dict[str, Any]:
        self.threads.add(threading.get_ident())
        name = Path(ns.work).name
        lr = next(o for o in ns.override if o.startswith("actor_rollout_ref.actor.optim.lr=")).split("=")[1]
        rising = float(lr) > 0 and name not in self.flat
        lines = [f"(TaskRunner pid=9) step:0 - {HELD}:np.float64(0.25)"]
        for step in range(1, 8 if name in self.short else 11):
            held = f" - {HELD}:np.float64({0.25 + (0.04 * step if rising else 0.0)})" if step % 5 == 0 else ""
            lines.append(f"(TaskRunner pid=9) step:{step} - critic/score/mean:0.3 - actor/entropy:1.2 - "
                         f"response_length/mean:45.0 - actor/reward_kl_penalty:0.001{held}")
        Path(ns.work).mkdir(parents=True, exist_ok=True)
        log = Path(ns.work) / "last-run.log"
        log.write_text("\n".join(lines) + "\n")
        return {"error": "exit status 1: boom" if name in self.fail else None, "violations": 0, "log": str(log)}


def run_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stand_in: StandIn,
             *extra: str) -> "tuple[int, List[Dict[str, Any]]]":
    monkeypatch.setattr(ppo_p40_rules, "run", stand_in)
    monkeypatch.setattr(bench, "warm", lambda work, device: ("/m", "/d", {"held_out_temperature_1": 0.23}))
    rc = bench.main(["--verl-sdist", *sdists(tmp_path, "0.5.0", "0.9.1")[:1], "--work", str(tmp_path / "w"),
                     "--stagger-s", "0", "--set", "steps=10", *extra])
    return rc, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_rising_runs_beside_a_flat_control_pass_and_print_a_line_each(tmp_path, monkeypatch, capsys) -> None:
    stand_in = StandIn()
    rc, lines = run_main(tmp_path, monkeypatch, capsys, stand_in, "--parallel", "3")
    assert lines[0] == {"warm_start": {"held_out_temperature_1": 0.23}}
    runs = {line["run"]: line for line in lines[1:-1]}
    assert sorted(runs) == ["0.5.0-grpo-seed1", "0.5.0-grpo-seed2", "0.5.0-ppo-seed1", "0.5.0-ppo-seed1-control",
                            "0.5.0-ppo-seed2"]
    line = runs["0.5.0-ppo-seed1"]
    assert line["metrics"]["held_out"] == [[0, 0.25], [5, 0.45], [10, 0.65]]
    assert line["metrics"]["entropy"][0] == [1, 1.2] and line["metrics"]["kl"][0] == [1, 0.001]
    assert line["metrics"]["rollout_probs_diff_mean"] == "missing"
    assert line["missing"] == ["rollout_probs_diff_mean", "rollout_probs_diff_max"]
    verdict = lines[-1]["verdict"]
    assert (rc, verdict["passed"], verdict["required"]) == (0, True, ["rises", "flat_control", "seeds_agree"])
    assert len(stand_in.threads) > 1  # side by side


def test_a_run_that_does_not_rise_fails_the_benchmark(tmp_path, monkeypatch, capsys) -> None:
    rc, lines = run_main(tmp_path, monkeypatch, capsys, StandIn(flat=("0.5.0-grpo-seed2",)))
    assert rc == 1 and lines[-1]["verdict"]["checks"]["rises"]["passed"] is False


def test_a_failed_run_fails_the_benchmark_with_its_error(tmp_path, monkeypatch, capsys) -> None:
    rc, lines = run_main(tmp_path, monkeypatch, capsys, StandIn(fail=("0.5.0-ppo-seed1-control",)), "--short")
    assert rc == 1
    assert [line["error"] for line in lines[1:-1]] == [None, "exit status 1: boom"]
    assert "boom" in " ".join(lines[-1]["verdict"]["checks"]["flat_control"]["details"])


def test_a_run_that_stops_short_of_its_steps_fails_the_benchmark(tmp_path, monkeypatch, capsys) -> None:
    """verl ends a run at the end of its epochs whatever total_training_steps says: such a run is a failure."""
    rc, lines = run_main(tmp_path, monkeypatch, capsys, StandIn(short=("0.5.0-ppo-seed1",)), "--short")
    assert rc == 1
    assert [(line["steps_done"], line["error"]) for line in lines[1:-1]] == [(7, "stopped after 7 of 10 steps"),
                                                                             (10, None)]


@pytest.mark.parametrize("argv, message", [
    (["--verl-sdist", "verl.tgz"], "expected verl-<version>.tar.gz"),
    (["--verl-sdist", "verl-0.5.0.tar.gz"], "no such file"),
    (["--set", "speed=2"], "NAME one of steps"),
    (["--set", "steps=many"], "steps is a int"),
    (["--parallel", "0"], "--parallel must be 1 or more"),
    (["--pythonpath", "0.9.1=/site"], "VERSION one of 0.5.0"),
    (["--pythonpath", "/site"], "expected VERSION=DIRS"),
])
def test_bad_arguments_are_one_line_and_status_2(argv: List[str], message: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    if "--verl-sdist" not in argv:
        argv = ["--verl-sdist", sdists(tmp_path, "0.5.0")[0], *argv]
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err.strip().splitlines()[-1]


def test_the_cpu_loop_trains_a_step_and_scores_the_held_out_problems(tmp_path: Path, capsys) -> None:
    """bench/learning_cpu.py on a tiny random model standing in for the warm start (a step of 2 x 2)."""
    pytest.importorskip("transformers")
    from bench import learning_cpu
    from verl_pascal.models import make_model

    make_model.make("tiny", str(tmp_path / "warm-model"))
    before = (tmp_path / "warm-model" / "model.safetensors").read_bytes()
    assert learning_cpu.main(["--work", str(tmp_path), "--steps", "1", "--prompts", "2", "--n", "2",
                              "--eval-every", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [sorted(line) for line in lines] == [["held_out_temperature_1", "step"], ["s", "step", "train_score"],
                                                ["held_out_temperature_1", "step"]]
    assert all(0.0 <= line.get("train_score", line.get("held_out_temperature_1")) <= 1.0 for line in lines)
    assert (tmp_path / "warm-model" / "model.safetensors").read_bytes() == before  # the warm start is only read


@pytest.mark.parametrize("argv", [["--n", "1"], ["--steps", "0"], ["--lr", "0"]])
def test_the_cpu_loops_bad_arguments_are_status_2(argv: List[str], capsys) -> None:
    from bench import learning_cpu

    with pytest.raises(SystemExit) as exc:
        learning_cpu.main(argv)
    assert exc.value.code == 2 and "must be" in capsys.readouterr().err


def test_only_runs_the_runs_it_names_and_judges_what_they_can_show(tmp_path, monkeypatch, capsys) -> None:
    """One release's seed 1 and control (to judge against another release's logs later): the seeds cannot
    agree with one seed, so the verdict asks what the runs can show and no more."""
    stand_in = StandIn()
    rc, lines = run_main(tmp_path, monkeypatch, capsys, stand_in, "--only", "0.5.0-grpo-seed1",
                         "--only", "0.5.0-ppo-seed1-control")
    assert sorted(line["run"] for line in lines[1:-1]) == ["0.5.0-grpo-seed1", "0.5.0-ppo-seed1-control"]
    assert (rc, lines[-1]["verdict"]["required"]) == (0, ["rises", "flat_control"])
    both = ["verl-0.5.0.tar.gz", "verl-0.9.1.tar.gz"]
    assert bench.required_checks(bench.plan(both, False)) == list(learning.CHECKS)
    assert bench.required_checks(bench.plan(both, True)) == ["rises", "flat_control", "releases_agree"]


def test_only_refuses_a_run_the_plan_does_not_have(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--verl-sdist", sdists(tmp_path, "0.9.1")[0], "--only", "0.5.0-ppo-seed1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--only 0.5.0-ppo-seed1: not a planned run" in err and "0.9.1-grpo-seed1" in err


# ---------------------------------------------------------------- RL from an SFT model (--start sft)

def test_the_sft_start_is_scored_on_the_problems_the_runs_validate_on_and_never_trained_on(tmp_path: Path) -> None:
    """With --start sft, verl's SFT trainer makes the runs' model: its training rows must be the warm start's
    training split and its held-out rows the runs' validation set, or the RL curve's step 0 would score a
    model on problems it was fine-tuned on."""
    from bench import sft_p40_rules
    from verl_pascal.data import arithmetic, gsm8k
    from verl_pascal.models import warm_start

    args = bench.sft_args(str(tmp_path), sdists(tmp_path, "0.9.1")[0], "/site-091")
    assert (args.work, args.pythonpath, args.control) == (str(tmp_path / "sft-start"), "/site-091", False)
    _, held_out_rows = sft_p40_rules.prepare_data(str(tmp_path / "sft"), args.train_problems, args.held_out_problems)
    task = arithmetic.split(warm_start.TRAIN_PROBLEMS, warm_start.HELD_OUT_PROBLEMS, seed=0)
    assert held_out_rows == gsm8k.convert(task.held_out, "test")
    trained = {row["extra_info"]["answer"] for row in gsm8k.convert(task.train, "train")}
    assert not trained & {row["extra_info"]["answer"] for row in held_out_rows}


def test_runs_start_from_the_model_the_sft_run_saved(tmp_path, monkeypatch, capsys) -> None:
    from bench import sft_p40_rules

    asked: List[Any] = []

    def sft_run(ns: Any) -> Dict[str, Any]:  # STAND-IN for bench/sft_p40_rules.py's GPU run
        asked.append(ns)
        return {"error": None, "model": "/sft/huggingface", "held_out_greedy": 0.5, "log": "/sft/last-run.log"}

    monkeypatch.setattr(sft_p40_rules, "run", sft_run)
    monkeypatch.setattr(bench, "warm", lambda work, device: pytest.fail("--start sft must not run the warm start"))
    stand_in = StandIn()
    seen: List[str] = []
    monkeypatch.setattr(ppo_p40_rules, "run", lambda ns: seen.append(ns.model_dir) or stand_in(ns))
    rc = bench.main(["--verl-sdist", sdists(tmp_path, "0.9.1")[0], "--work", str(tmp_path / "w"), "--stagger-s", "0",
                     "--set", "steps=10", "--short", "--start", "sft", "--pythonpath", "0.9.1=/site-091"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and [ns.pythonpath for ns in asked] == ["/site-091"]
    assert lines[0]["warm_start"]["start"] == "sft" and lines[0]["warm_start"]["held_out_greedy"] == 0.5
    assert seen == ["/sft/huggingface", "/sft/huggingface"]
    assert (tmp_path / "w" / "task-data" / "test.parquet").is_file()


def test_a_failed_sft_start_stops_the_benchmark_with_its_error(tmp_path, monkeypatch) -> None:
    from bench import sft_p40_rules

    monkeypatch.setattr(sft_p40_rules, "run", lambda ns: {"error": "P40 rule: bf16", "model": None, "log": "/l"})
    monkeypatch.setattr(ppo_p40_rules, "run", lambda ns: pytest.fail("no run may start without its model"))
    with pytest.raises(SystemExit, match="the SFT start failed: P40 rule: bf16"):
        bench.main(["--verl-sdist", sdists(tmp_path, "0.9.1")[0], "--work", str(tmp_path / "w"), "--start", "sft"])
