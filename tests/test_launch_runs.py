"""The launch script's algorithms and its run directories: --algo grpo, the
checkpoint settings, --resume, --export, --report and --tensorboard.

verl and the GPU are not here: a STAND-IN for the env's python plays verl's
trainer as far as the script relies on it. It prints verl's step lines, saves
a checkpoint as verl lays them out (checkpoints/global_step_N/, then the
tracker latest_checkpointed_iteration.txt) every trainer.save_freq steps,
starts from trainer.resume_from_path's step when asked to, can be killed
after a step (SIGKILL, as a crash or a reboot), and writes a model directory
for verl's model merger. The real trainer's resume is proven on a GPU
(docs/benchmarks.md); these tests prove what the script does around it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_launch_template import box, dry_run_args, render, run, run_as_user  # noqa: F401 (box is a fixture)

# The stand-in runs as the test user (nobody, under root), who may not reach this venv's interpreter.
SYSTEM_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

STANDIN = """#!{python}
# STAND-IN for the training env's python (see the module docstring).
import json, os, signal, sys
env = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0])))
args = sys.argv[1:]
with open(os.path.join(env, "seen.jsonl"), "a") as seen:
    seen.write(json.dumps({{"argv": args, "TENSORBOARD_DIR": os.environ.get("TENSORBOARD_DIR")}}) + "\\n")
module = args[1] if args[:1] == ["-m"] else ""
def hydra(value):  # an override's value as Hydra reads it: a quoted one without its quotes and escapes
    if len(value) < 2 or value[0] not in "'\\"" or value[-1] != value[0]:
        return value
    out, slashes = "", ""
    for c in value[1:-1]:
        if c == "\\\\":
            slashes += c
            continue
        out += (slashes[:len(slashes) // 2] if c == value[0] else slashes) + c
        slashes = ""
    return out + slashes[:len(slashes) // 2]
if module == "verl_pascal.runconfig.compose":
    with open(args[2], "w") as composed:
        composed.write("actor_rollout_ref:\\n  rollout:\\n    name: hf\\n")
elif module == "verl.trainer.main_ppo":
    ov = dict(a.split("=", 1) for a in args[2:] if "=" in a)
    ckpts, freq = hydra(ov["trainer.default_local_dir"]), int(ov["trainer.save_freq"])
    start = 0
    if ov.get("trainer.resume_mode") == "resume_path":
        start = int(hydra(ov["trainer.resume_from_path"]).rsplit("global_step_", 1)[1])
    for step in range(start + 1, int(os.environ.get("STANDIN_STEPS", "6")) + 1):
        print("(TaskRunner pid=%d) step:%d - critic/score/mean:%s - timing_s/step:1.5" % (os.getpid(), step, step / 10),
              flush=True)
        if step % freq == 0:
            os.makedirs(os.path.join(ckpts, "global_step_%d" % step, "actor"))
            with open(os.path.join(ckpts, "latest_checkpointed_iteration.txt"), "w") as tracker:
                tracker.write(str(step))
        if step == int(os.environ.get("STANDIN_KILL_AFTER", "0")):
            os.kill(os.getpid(), signal.SIGKILL)
elif module == "verl.model_merger":
    target = args[args.index("--target_dir") + 1]
    os.makedirs(target)
    with open(os.path.join(target, "config.json"), "w") as config:
        json.dump({{"from": args[args.index("--local_dir") + 1]}}, config)
"""


@pytest.fixture
def env(box: Path) -> Path:  # noqa: F811 (box is the fixture)
    env = box / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.write_text(STANDIN.format(python=SYSTEM_PYTHON))
    python.chmod(0o755)
    env.chmod(0o777)
    return env


def script_in(box: Path, env: Path, **overrides: object) -> Path:  # noqa: F811
    return render(box, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs"), **overrides)


def seen(env: Path) -> list[dict]:
    return [json.loads(line) for line in (env / "seen.jsonl").read_text().splitlines()]


def trainings(env: Path) -> list[list[str]]:
    """The argv of every training the stand-in ran (not the composition)."""
    return [s["argv"] for s in seen(env) if s["argv"][1] == "verl.trainer.main_ppo"]


def run_with(script: Path, extra_env: dict, *args: str) -> subprocess.CompletedProcess:
    from test_launch_template import USER_KW

    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60, cwd="/",
                          env={**os.environ, **extra_env}, **USER_KW)


def held_by_another(lock: Path) -> bool:
    with open(lock, "a") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def steps_logged(log: Path) -> list[int]:
    return [int(line.split("step:")[1].split(" ")[0]) for line in log.read_text().splitlines() if " step:" in line]


# ---------------------------------------------------------------- algorithms

def test_grpo_drops_the_critic_and_samples_a_group_per_prompt(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path), "--algo", "grpo")
    for expected in ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4",
                     "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.001",
                     "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "algorithm.use_kl_in_reward=False",
                     # the 24 GB row's measured GRPO step: 128 responses, 32 prompts x 4, mini-batch 16 x 4
                     "data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                     # the Pascal profile still applies
                     "actor_rollout_ref.rollout.name=hf", "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"]:
        assert expected in argv, expected
    assert not any(a.startswith(("critic.model.path=", "critic.ppo_micro")) for a in argv)


def test_grpo_keeps_the_presets_responses_for_any_n_and_a_row_without_grpo_sizes_gives_its_ppo_sizes(
        tmp_path: Path) -> None:
    def sizes(argv: list[str]) -> tuple[str, str]:
        value = dict(a.split("=", 1) for a in argv if "=" in a)
        return value["data.train_batch_size"], value["actor_rollout_ref.actor.ppo_mini_batch_size"]

    assert sizes(dry_run_args(render(tmp_path, launch_grpo_rollout_n=8), "--algo", "grpo")) == ("16", "8")
    # the 16 GB row has no GRPO sizes: its PPO 16 and 8 responses, over n = 4
    assert sizes(dry_run_args(render(tmp_path, gpu_memory_mib=16384), "--algo", "grpo")) == ("4", "2")


def test_ppo_stays_the_default_and_grpo_can_be_the_boxs_default(tmp_path: Path) -> None:
    ppo = dry_run_args(render(tmp_path))
    assert "algorithm.use_kl_in_reward=True" in ppo and "critic.model.path=/opt/verl-pascal/models/Qwen2.5-0.5B-Instruct" in ppo
    assert not any(a.startswith("algorithm.adv_estimator") for a in ppo)
    grpo = dry_run_args(render(tmp_path, launch_algo="grpo", launch_grpo_rollout_n=8))
    assert "algorithm.adv_estimator=grpo" in grpo and "actor_rollout_ref.rollout.n=8" in grpo
    assert "data.train_batch_size=16" in grpo and "actor_rollout_ref.actor.ppo_mini_batch_size=8" in grpo
    assert "algorithm.use_kl_in_reward=True" in dry_run_args(render(tmp_path, launch_algo="grpo"), "--algo=ppo")


def test_grpo_batch_sizes_can_be_set_and_a_release_or_profile_still_wins(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path, launch_grpo_train_batch_size=6, launch_grpo_ppo_mini_batch_size=3), "--algo", "grpo")
    assert "data.train_batch_size=6" in argv and "actor_rollout_ref.actor.ppo_mini_batch_size=3" in argv
    releases = {"0.5.0": {"hydra_overrides": ["algorithm.use_kl_in_reward=True"]}}
    argv = dry_run_args(render(tmp_path, verl_releases=releases, verl_version="0.5.0"), "--algo", "grpo")
    assert argv.index("algorithm.use_kl_in_reward=True") > argv.index("algorithm.use_kl_in_reward=False")


@pytest.mark.parametrize("args, message", [
    (["--algo", "dpo"], "--algo dpo: choose ppo or grpo"),
    (["--algo"], "--algo needs ppo or grpo"),
    (["--resume", "--algo", "grpo"], "a resumed run keeps the algorithm"),
    (["--resume", "--export"], "one of --sft, --resume, --export, --report and --tensorboard at a time"),
    (["--tensorboard", "70000"], "a TCP port, 1 to 65535"),
])
def test_bad_options_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run(render(tmp_path), *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_every_run_checkpoints_keeps_two_and_logs_for_tensorboard(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path))
    for expected in ["trainer.save_freq=8", "trainer.max_actor_ckpt_to_keep=2", "trainer.max_critic_ckpt_to_keep=2",
                     "trainer.logger=[console,tensorboard]"]:
        assert expected in argv, expected
    assert "trainer.save_freq=-1" in dry_run_args(render(tmp_path, launch_save_freq=-1))
    # a GRPO step is about twice a PPO step: it saves twice as often, and once
    grpo = dry_run_args(render(tmp_path), "--algo", "grpo")
    assert [a for a in grpo if a.startswith("trainer.save_freq=")] == ["trainer.save_freq=4"]
    assert "trainer.save_freq=-1" in dry_run_args(render(tmp_path, launch_grpo_save_freq=-1), "--algo", "grpo")


# ---------------------------------------------------------------- runs and resume

def test_a_run_records_what_resume_needs_and_logs_tensorboard_into_its_directory(box: Path, env: Path) -> None:
    proc = run_with(script_in(box, env), {}, "trainer.save_freq=2")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (box / "runs").iterdir()
    saved = (run_dir / "overrides.nul").read_bytes().split(b"\0")[:-1]
    assert [s.decode() for s in saved] == trainings(env)[0][2:]
    assert f"trainer.default_local_dir={run_dir}/checkpoints" in trainings(env)[0]
    assert seen(env)[-1]["TENSORBOARD_DIR"] == f"{run_dir}/tensorboard"
    assert steps_logged(run_dir / "train.log") == [1, 2, 3, 4, 5, 6]
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "6"


def test_a_killed_run_resumes_from_its_last_checkpoint_with_the_same_command(box: Path, env: Path) -> None:
    script = script_in(box, env)
    crashed = run_with(script, {"STANDIN_KILL_AFTER": "3"}, "--algo", "grpo", "trainer.save_freq=2")
    assert crashed.returncode != 0
    (run_dir,) = (box / "runs").iterdir()
    assert steps_logged(run_dir / "train.log") == [1, 2, 3]

    resumed = run_with(script, {}, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    first, again = trainings(env)
    assert again == first + ["trainer.resume_mode=resume_path",
                             f"trainer.resume_from_path={run_dir}/checkpoints/global_step_2"]
    assert "algorithm.adv_estimator=grpo" in again
    log = (run_dir / "train.log").read_text()
    assert f"verl-ppo: resuming {run_dir} from global_step_2" in log
    assert steps_logged(run_dir / "train.log") == [1, 2, 3, 3, 4, 5, 6]
    assert (run_dir / "config.resume-2.yaml").is_file() and (run_dir / "config.yaml").is_file()
    assert seen(env)[-1]["TENSORBOARD_DIR"] == f"{run_dir}/tensorboard"


def test_resume_takes_the_run_named_or_the_one_checkpointed_last(box: Path, env: Path) -> None:
    script = script_in(box, env)
    for _ in range(2):
        assert run_with(script, {"STANDIN_STEPS": "2"}, "trainer.save_freq=1").returncode == 0
    older, newer = sorted((box / "runs").iterdir())
    os.utime(newer / "checkpoints" / "latest_checkpointed_iteration.txt", (1, 1))  # older checkpointed last
    assert run_with(script, {"STANDIN_STEPS": "3"}, "--resume").returncode == 0
    assert trainings(env)[-1][-1] == f"trainer.resume_from_path={older}/checkpoints/global_step_2"
    assert run_with(script, {"STANDIN_STEPS": "3"}, "--resume", newer.name, "trainer.total_epochs=2").returncode == 0
    assert trainings(env)[-1][-2:] == [f"trainer.resume_from_path={newer}/checkpoints/global_step_2",
                                       "trainer.total_epochs=2"]
    proc = run(script, "--dry-run", "--resume", str(newer))  # the resumed run checkpointed step 3 since
    assert shlex.split(proc.stdout)[-1] == f"trainer.resume_from_path={newer}/checkpoints/global_step_3"


def test_a_bare_name_is_the_run_under_the_runs_dir_and_a_path_is_that_directory(box: Path, env: Path) -> None:
    """A directory of the current directory named like a run does not stand in for the run."""
    script = script_in(box, env)
    assert run_with(script, {"STANDIN_STEPS": "2"}, "trainer.save_freq=1").returncode == 0
    (run_dir,) = (box / "runs").iterdir()
    here = box / "here"  # the current directory: a copy of the run under the same name, checkpointed at step 1
    copy = here / run_dir.name
    shutil.copytree(run_dir, copy)
    (copy / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
    shutil.copytree(run_dir, here / "elsewhere")

    def resume(operand: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), "--dry-run", "--resume", operand], capture_output=True, text=True,
                              timeout=60, cwd=cwd)

    def resumed_from(operand: str, cwd: Path) -> str:
        proc = resume(operand, cwd)
        assert proc.returncode == 0, proc.stderr
        return shlex.split(proc.stdout)[-1]

    assert resumed_from(run_dir.name, here) == f"trainer.resume_from_path={run_dir}/checkpoints/global_step_2"
    for operand, cwd in ((f"./{run_dir.name}", here), (f"here/{run_dir.name}", box), (str(copy), Path("/"))):
        assert resumed_from(operand, cwd) == f"trainer.resume_from_path={copy}/checkpoints/global_step_1", operand
    proc = resume("elsewhere", here)  # a bare name is looked for under the runs dir only
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"verl-ppo: no run elsewhere under {box}/runs"
                           " (a run directory elsewhere: give its path, ./elsewhere)\n")


@pytest.mark.parametrize("link", ["runs dir", "run dir"])
def test_runs_are_found_through_a_symlinked_runs_dir_and_symlinked_run_dirs(box: Path, env: Path, link: str) -> None:
    """The runs directory moved to a bigger disk and linked back (or a run moved and linked back):
    --resume, --export and --report without RUN_DIR find its runs as they find real directories."""
    disk = box / "disk"
    disk.mkdir()
    disk.chmod(0o777)
    if link == "runs dir":
        (box / "runs").symlink_to(disk)
    script = script_in(box, env)
    assert run_with(script, {"STANDIN_STEPS": "2"}, "trainer.save_freq=1").returncode == 0
    (run_dir,) = (box / "runs").iterdir()
    if link == "run dir":
        run_dir.rename(disk / run_dir.name)
        run_dir.symlink_to(disk / run_dir.name)
    resumed = run_with(script, {"STANDIN_STEPS": "3"}, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert trainings(env)[-1][-1] == f"trainer.resume_from_path={run_dir}/checkpoints/global_step_2"
    exported = run_with(script, {}, "--export")
    assert exported.returncode == 0, exported.stderr
    assert (disk / run_dir.name / "hf" / "global_step_3" / "config.json").is_file()
    assert run(script, "--report").returncode == 0
    assert seen(env)[-1]["argv"] == ["-m", "verl_pascal.report", str(run_dir)]


# A directory name with each character Hydra's override grammar gives a meaning to (a sweep's `,`,
# quotes, `=`, lists, dicts, escapes, whitespace, a function's parentheses) or does not take unquoted.
HYDRA_HOSTILE = "a,b 'c' \"d\" k=v [e]{f} \\'g\\ (h) $x ü~#"
PATH_KEYS = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path", "critic.model.path",
             "trainer.default_local_dir", "trainer.resume_from_path")


def as_hydra_reads(tmp_path: Path, overrides: list[str]) -> dict:
    """The values the path overrides among ``overrides`` compose to, with Hydra itself, as verl's main_ppo
    composes its command line (a configuration holding just those keys)."""
    hydra = pytest.importorskip("hydra")
    from omegaconf import OmegaConf

    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    OmegaConf.save(OmegaConf.from_dotlist([f"{key}=null" for key in PATH_KEYS]), conf / "ppo_trainer.yaml")
    picked = [o for o in overrides if o.split("=", 1)[0] in PATH_KEYS]
    with hydra.initialize_config_dir(config_dir=str(conf), version_base=None):
        cfg = hydra.compose(config_name="ppo_trainer", overrides=picked)
    return {key: OmegaConf.select(cfg, key) for key in {o.split("=", 1)[0] for o in picked}}


def test_paths_with_hydras_special_characters_reach_verl_intact(box: Path, env: Path, tmp_path: Path) -> None:
    top = box / HYDRA_HOSTILE
    top.mkdir()
    top.chmod(0o777)
    data, model, runs = top / "data", top / "model\\", top / "runs"  # the model's ends in a backslash
    script = render(box, conda_env_prefix=str(env), launch_runs_dir=str(runs), launch_data_dir=str(data),
                    launch_model_dir=str(model))
    assert run_with(script, {"STANDIN_STEPS": "2"}, "trainer.save_freq=1").returncode == 0
    (run_dir,) = runs.iterdir()
    resumed = run_with(script, {"STANDIN_STEPS": "3"}, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert steps_logged(run_dir / "train.log") == [1, 2, 3]  # the stand-in found its checkpoint where Hydra puts it
    assert run_with(script, {}, "--export").returncode == 0
    assert (run_dir / "hf" / "global_step_3" / "config.json").is_file()

    given = {"data.train_files": f"{data}/train.parquet", "data.val_files": f"{data}/test.parquet",
             "actor_rollout_ref.model.path": str(model), "critic.model.path": str(model),
             "trainer.default_local_dir": f"{run_dir}/checkpoints"}
    composes = [s["argv"][s["argv"].index("--") + 1:] for s in seen(env)
                if s["argv"][1] == "verl_pascal.runconfig.compose"]
    first, again = trainings(env)
    assert len(composes) == 2 and composes[0] == first[2:] and composes[1] == again[2:]
    assert as_hydra_reads(tmp_path, first[2:]) == given
    assert as_hydra_reads(tmp_path, again[2:]) == {
        **given, "trainer.resume_from_path": f"{run_dir}/checkpoints/global_step_2"}
    assert as_hydra_reads(tmp_path, dry_run_args(script)[3:]) == {
        k: v for k, v in given.items() if k != "trainer.default_local_dir"}


def test_resume_says_what_is_missing(box: Path, env: Path) -> None:
    script = script_in(box, env)
    assert run_with(script, {"STANDIN_STEPS": "1"}).returncode == 0  # save_freq 8: no checkpoint
    (run_dir,) = (box / "runs").iterdir()
    for args in (["--resume"], ["--resume", str(run_dir)]):
        proc = run_as_user(script, *args)
        assert proc.returncode == 2 and "saved no checkpoint yet (one every 8 PPO or 4 GRPO steps: trainer.save_freq)" in proc.stderr, proc.stderr
    proc = run_as_user(script, "--resume", str(box / "nowhere"))
    assert proc.returncode == 2 and "no run directory" in proc.stderr
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "global_step_8").mkdir()
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("")
    proc = run_as_user(script, "--resume")
    assert proc.returncode == 2 and "does not hold a step number" in proc.stderr and "global_step_8" in proc.stderr
    assert len(trainings(env)) == 1


def test_a_run_still_going_is_not_resumed_twice(box: Path, env: Path) -> None:
    script = script_in(box, env, launch_resume_wait_s=1)
    assert run_with(script, {"STANDIN_STEPS": "2"}, "trainer.save_freq=2").returncode == 0
    (run_dir,) = (box / "runs").iterdir()
    with open(run_dir / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = run_with(script, {}, "--resume")
    assert proc.returncode == 2 and "in use by a run still going after 1s" in proc.stderr
    assert len(trainings(env)) == 1


def test_a_resume_waits_for_the_last_processes_of_a_crashed_run(box: Path, env: Path) -> None:
    """After a crash, Ray's processes end seconds later and hold the lock until then: --resume waits."""
    script = script_in(box, env, launch_resume_wait_s=60)
    assert run_with(script, {"STANDIN_STEPS": "4", "STANDIN_KILL_AFTER": "3"}, "trainer.save_freq=2").returncode != 0
    (run_dir,) = (box / "runs").iterdir()
    # A leftover process of the crashed run: holds the lock, ends 2 s later.
    leftover = subprocess.Popen(["flock", str(run_dir / ".lock"), "sleep", "2"])
    for _ in range(500):  # until the leftover holds the lock (5 s at most)
        if held_by_another(run_dir / ".lock"):
            break
        time.sleep(0.01)
    else:
        pytest.fail("the stand-in leftover process never took the lock")
    try:
        proc = run_with(script, {"STANDIN_STEPS": "4"}, "--resume")
    finally:
        leftover.wait()
    assert proc.returncode == 0, proc.stderr
    assert "waiting up to 60s" in proc.stderr
    assert steps_logged(run_dir / "train.log") == [1, 2, 3, 3, 4]


# ---------------------------------------------------------------- export, report, tensorboard

def test_export_turns_the_last_checkpoint_into_a_model_directory_once(box: Path, env: Path) -> None:
    script = script_in(box, env)
    assert run_with(script, {"STANDIN_STEPS": "4"}, "trainer.save_freq=2").returncode == 0
    (run_dir,) = (box / "runs").iterdir()
    proc = run_as_user(script, "--export")
    assert proc.returncode == 0, proc.stderr
    model = run_dir / "hf" / "global_step_4"
    assert json.loads((model / "config.json").read_text()) == {"from": f"{run_dir}/checkpoints/global_step_4/actor"}
    merges = [s["argv"] for s in seen(env) if s["argv"][1] == "verl.model_merger"]
    assert merges == [["-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                       f"{run_dir}/checkpoints/global_step_4/actor", "--target_dir", f"{model}.partial"]]
    again = run_as_user(script, "--export", str(run_dir))
    assert again.returncode == 0 and "already exported" in again.stdout
    assert len([s for s in seen(env) if s["argv"][1] == "verl.model_merger"]) == 1
    assert not (run_dir / "hf" / "global_step_4.partial").exists()


def test_report_and_tensorboard_use_the_envs_tools_on_the_run(box: Path, env: Path) -> None:
    script = script_in(box, env)
    assert run_with(script, {"STANDIN_STEPS": "1"}).returncode == 0
    (run_dir,) = (box / "runs").iterdir()
    assert run(script, "--report").returncode == 0
    assert seen(env)[-1]["argv"] == ["-m", "verl_pascal.report", str(run_dir)]
    tensorboard = env / "bin" / "tensorboard"
    tensorboard.write_text('#!/bin/sh\necho "$@"\n')
    tensorboard.chmod(0o755)
    proc = run(script, "--tensorboard", "6123")
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1] == f"--logdir {box}/runs --host 127.0.0.1 --port 6123"
    assert "ssh -L 6123:127.0.0.1:6123 verl@" in proc.stdout


@pytest.mark.parametrize("memory_mib", [24576, 16384, 8192])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_grpo_sizes_from_every_preset_fit_verls_batch_rules(tmp_path: Path, memory_mib: int, n: int) -> None:
    """verl's rules for GRPO: the train batch a multiple of the mini-batch (prompts), and a mini-batch's
    responses (mini x n) a multiple of the micro-batch (responses), on one GPU."""
    argv = dry_run_args(render(tmp_path, gpu_memory_mib=memory_mib, launch_grpo_rollout_n=n), "--algo", "grpo")
    value = {a.split("=", 1)[0]: int(a.split("=", 1)[1]) for a in argv
             if a.split("=", 1)[0] in ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size",
                                      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                                      "actor_rollout_ref.rollout.n")}
    train, mini = value["data.train_batch_size"], value["actor_rollout_ref.actor.ppo_mini_batch_size"]
    micro = value["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    assert value["actor_rollout_ref.rollout.n"] == n
    assert train % mini == 0 and (mini * n) % micro == 0, value


# ---------------------------------------------------------------- host memory

HUGE = 10 ** 9  # MiB: no box has a petabyte available


def test_a_run_the_box_has_too_little_memory_for_is_refused_before_anything_starts(box: Path, env: Path) -> None:
    script = script_in(box, env, launch_host_memory_need_mib={"ppo": HUGE, "grpo": 1})
    proc = run_with(script, {})
    assert proc.returncode == 2
    assert "a PPO run needs about" in proc.stderr and "GiB of host memory at its peak" in proc.stderr
    assert "or run --algo grpo" in proc.stderr and "--allow-low-memory starts it anyway" in proc.stderr
    assert not (box / "runs").exists() or not list((box / "runs").iterdir())
    assert not (env / "seen.jsonl").exists() or trainings(env) == []
    # What fits runs: GRPO needs less here; and --allow-low-memory starts PPO all the same.
    assert run_with(script, {}, "--algo", "grpo").returncode == 0
    assert run_with(script, {}, "--allow-low-memory").returncode == 0
    assert len(trainings(env)) == 2


def test_dry_run_and_check_config_do_not_judge_memory(box: Path, env: Path) -> None:
    script = script_in(box, env, launch_host_memory_need_mib={"ppo": HUGE, "grpo": HUGE})
    assert run(script, "--dry-run").returncode == 0
    assert run_with(script, {}, "--check-config").returncode == 0


def test_a_release_not_measured_is_not_judged(box: Path, env: Path) -> None:
    assert run_with(script_in(box, env, launch_host_memory_need_mib={}), {}).returncode == 0


def test_a_resumed_run_is_judged_by_the_algorithm_it_started_with(box: Path, env: Path) -> None:
    fits = script_in(box, env)
    assert run_with(fits, {"STANDIN_KILL_AFTER": "3"}, "--algo", "grpo", "trainer.save_freq=2").returncode != 0
    # The same box now holds a GRPO run but not a PPO one: the GRPO run resumes.
    tight = script_in(box, env, launch_host_memory_need_mib={"ppo": HUGE, "grpo": 1})
    resumed = run_with(tight, {}, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    # And a PPO run is refused on resume as on its start.
    huge = script_in(box, env, launch_host_memory_need_mib={"ppo": HUGE, "grpo": HUGE})
    refused = run_with(huge, {}, "--resume")
    assert refused.returncode == 2 and "a GRPO run needs about" in refused.stderr


def test_the_estimate_reaches_the_script_for_a_measured_release(tmp_path: Path) -> None:
    """Rendered outside Ansible as preflight's module estimates it: 0.9.1 is measured, 0.8.0 is not."""
    from test_launch_template import BASE

    from verl_pascal.launch import render as launch_render

    values = {k: v for k, v in BASE.items() if k != "launch_host_memory_need_mib"}
    measured = launch_render.render({**values, "verl_version": "0.9.1"})
    line = next(l for l in measured.splitlines() if l.startswith("declare -A host_memory_need_mib="))
    needs = dict(part.strip("[").split("]=") for part in line.split("=(", 1)[1].rstrip(")").split())
    assert set(needs) == {"ppo", "grpo"} and int(needs["ppo"]) > int(needs["grpo"]) > 16 * 1024
    unmeasured = launch_render.render({**values, "verl_version": "0.8.0"})
    assert "declare -A host_memory_need_mib=()" in unmeasured
