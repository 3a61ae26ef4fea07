"""bench/sft_p40_rules.py without a GPU: its control puts bf16 back where each release's SFT trainer reads it,
its overrides land in the release's own SFT configuration, and it reads what the run wrote.

The run itself needs a GPU (docs/sft.md, "What is proven"); the parts that decide whether the proof means
anything are checked here against the real sdists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, List

import pytest

from bench import ppo_p40_rules, sft_p40_rules

pytest.importorskip("hydra")
from omegaconf import OmegaConf  # noqa: E402
from test_release_configs import SFT_LOCKED, composed_sft, misplaced, sft_overrides  # noqa: E402

from verl_pascal import verl_releases  # noqa: E402


def bench_args(*extra: str) -> Any:
    return sft_p40_rules.parser().parse_args(["--verl-sdist", "verl-0.9.1.tar.gz", *extra])


@pytest.mark.parametrize("control", [False, True], ids=["fp32", "control"])
@pytest.mark.parametrize("version", SFT_LOCKED)
def test_the_runs_overrides_land_and_the_control_asks_for_bf16_where_the_trainer_reads_it(
        version: str, control: bool, extracted: Callable[[str], Path], tmp_path: Path) -> None:
    """After the launch script's own (they win): one epoch cut at --steps, the learning rate; the control's
    bf16 FSDP parameters on the trainers of the FSDP engine. On the others the control is the patched sites
    put back (the next test)."""
    args = sft_p40_rules.parser().parse_args(["--verl-sdist", f"verl-{version}.tar.gz", "--steps", "7", "--lr", "0.002"]
                                             + (["--control"] if control else []))
    ours = sft_p40_rules.run_overrides(args)
    cfg = composed_sft(extracted(version), version, sft_overrides(tmp_path, version, "pascal") + ours)
    assert misplaced(cfg, ours) == {}
    assert (OmegaConf.select(cfg, "trainer.total_training_steps"), OmegaConf.select(cfg, "optim.lr")) == (7, 0.002)
    engine = verl_releases.read(version)["sft"]["config"] != "sft_trainer"
    if engine:
        assert OmegaConf.select(cfg, "engine.mixed_precision.param_dtype") == ("bf16" if control else "fp32")
    else:
        assert not any("mixed_precision" in o for o in ours)


def test_the_control_puts_back_the_bf16_policies_of_the_sft_trainer_the_patcher_removed(sdist: Callable[[str], Path],
                                                                                     tmp_path: Path) -> None:
    path = sdist("0.5.0")
    src = ppo_p40_rules.prepare_verl(str(path), str(tmp_path), "sdpa", control=False)
    trainer = Path(src, "verl", "trainer", "fsdp_sft_trainer.py")
    patched = trainer.read_text()
    assert "param_dtype=torch.bfloat16" not in patched
    restored = ppo_p40_rules.restore_sites(src, sft_p40_rules.CONTROL_KINDS)
    back = trainer.read_text()
    assert back.count("param_dtype=torch.bfloat16") == 2  # FSDP1's policy and FSDP2's
    assert restored >= 2 and back != patched
    assert ppo_p40_rules.restore_sites(src, sft_p40_rules.CONTROL_KINDS) == 0  # nothing left to put back


def test_a_release_without_an_sft_table_is_refused_before_anything_runs() -> None:
    without = [v for v in verl_releases.versions() if not verl_releases.read(v).get("sft")]
    assert without, "every release has an sft table: pick another refusal to test"
    with pytest.raises(SystemExit, match="no sft table"):
        sft_p40_rules.sft_table(without[0])


def test_it_reads_the_steps_the_losses_and_the_model_the_launch_script_named() -> None:
    log = "\n".join([
        "verl-ppo: SFT run directory /w/runs/sft/20261207-120000",
        "step:1 - train/loss:8.41 - train/lr(1e-3):0.04",
        "step:2 - train/loss:6.20 - train/lr(1e-3):0.08",
        "step:3 - train/loss:2.05 - train/lr(1e-3):0.1",
        "step:3 - val/loss:2.31",
        "verl-ppo: the SFT model, in Hugging Face format: /w/runs/sft/20261207-120000/checkpoints/global_step_3/huggingface",
    ])
    assert sft_p40_rules.losses(log) == {"steps_done": 3, "loss_first": 8.41, "loss_last": 2.05, "val_loss": 2.31}
    assert sft_p40_rules.saved_model(log) == "/w/runs/sft/20261207-120000/checkpoints/global_step_3/huggingface"
    assert sft_p40_rules.saved_model("verl-ppo: verl's SFT trainer wrote no Hugging Face model into /x") is None


DATA = Path(__file__).parent / "data" / "report"


@pytest.mark.parametrize("version, first, last, val", [("0.5.0", 8.4339, 0.2796, 0.2836),
                                                        ("0.9.1", 8.4413, 0.2158, 0.2192)])
def test_it_reads_the_step_lines_the_sft_trainers_print_after_their_progress_bar(version: str, first: float, last: float,
                                                                                 val: float) -> None:
    """Recorded on the GPU (2026-12-07, verl-ppo --sft, 250 steps; steps 1 to 5 and 246 to 250 kept): each step
    line follows tqdm's bar on the same line, which a reader of lines that start with the step missed."""
    log = (DATA / f"verl-{version}-sft.train.log").read_text()
    assert "]step:2 - " in log
    assert sft_p40_rules.losses(log) == {"steps_done": 10, "loss_first": first, "loss_last": last, "val_loss": val}
    assert [s["step"] for s in ppo_p40_rules.parse_steps(log)] == [1, 2, 3, 4, 5, 246, 247, 248, 249, 250]


def test_a_failed_run_reports_the_launch_scripts_own_line_not_the_model_line() -> None:
    args = bench_args("--steps", "3")
    log = "step:1 - train/loss:8.4\nverl-ppo: verl's SFT trainer wrote no Hugging Face model into /w/x/huggingface\n"
    result = {"steps_done": 1, "model": None}
    assert sft_p40_rules.error_of(result, 1, log, args) == "verl-ppo: verl's SFT trainer wrote no Hugging Face model into /w/x/huggingface"
    assert sft_p40_rules.error_of({"steps_done": 3, "model": "/m"}, 0, log, args) is None
    assert sft_p40_rules.error_of(result, -1, log, args) == f"timed out after {args.timeout} s"
    done = "verl-ppo: the SFT model, in Hugging Face format: /m\nverl-ppo: RL from it: verl-ppo actor_rollout_ref.model.path=/m\n"
    assert sft_p40_rules.error_of({"steps_done": 2, "model": "/m"}, 0, done, args) == "exit status 0, 2 of 3 steps"


def test_more_steps_than_one_epoch_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert sft_p40_rules.main(["--verl-sdist", "verl-0.9.1.tar.gz", "--steps", "300", "--train-problems", "8192"]) == 2
    assert "one epoch at most" in capsys.readouterr().err


def test_the_data_is_the_converters_sft_rows_of_the_tasks_rl_files(tmp_path: Path) -> None:
    """As a user makes them: gsm8k-to-verl --sft from the RL files; the held-out rows score the saved model."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from verl_pascal.data import gsm8k

    data, held_out = sft_p40_rules.prepare_data(str(tmp_path), 64, 16)
    sft_rows: List[dict] = pq.read_table(os.path.join(data, "sft", "train.parquet")).to_pylist()
    assert len(sft_rows) == 64 and len(held_out) == 16
    row = sft_rows[0]
    assert row[gsm8k.SFT_RESPONSE].rstrip().split("#### ")[-1].isdigit()
    assert row[gsm8k.SFT_MESSAGES][0]["content"] == row[gsm8k.SFT_PROMPT]
    test_rows = pq.read_table(os.path.join(data, "sft", "test.parquet")).to_pylist()
    assert [r[gsm8k.SFT_PROMPT] for r in test_rows] == [r["prompt"][0]["content"] for r in held_out]


# --- the PPO bench's negative control (bench/ppo_p40_rules.py --control) --------------------------------------

from test_release_configs import LOCKED, composed, launch_overrides  # noqa: E402


@pytest.mark.parametrize("version", LOCKED)
def test_the_rl_control_asks_bf16_of_the_actor_too_so_that_grpo_which_has_no_critic_is_caught(
        version: str, extracted: Callable[[str], Path], tmp_path: Path) -> None:
    """With the critic's bf16 alone, 0.9.1's GRPO control trained its steps untouched on a GPU (2026-12-07):
    the control must reach a model every algorithm trains. After the launch script's fp32 (the control's
    overrides come last), both the actor's and the critic's FSDP parameters are bf16 where the release reads them."""
    ours = ppo_p40_rules.control_overrides(version)
    cfg = composed(extracted(version), launch_overrides(tmp_path, version, "pascal") + ours)
    assert misplaced(cfg, ours) == {}
    actor = OmegaConf.select(cfg, "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype")
    critic = [OmegaConf.select(cfg, key) for key in ("critic.model.fsdp_config.mixed_precision.param_dtype",
                                                      "critic.fsdp.mixed_precision.param_dtype")]
    assert actor == "bf16" and "bf16" in critic
