"""verl_pascal.runconfig.compose: the launch script's composition and judging, in one process.

verl is not in this venv; Hydra is. A stand-in trainer module, decorated with
``@hydra.main`` as verl's ``main_ppo`` is, composes a small configuration with
the real Hydra, so what is proven here is that running it in-process gives
what ``python -m ... --cfg job`` prints, byte for byte, and that the overrides
the Molecule default scenario passes (every spelling of a server rollout, a
misspelled key) end as the launch script promises. The same, with the real
verl, runs in the Molecule default scenario.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from verl_pascal.runconfig import compose

hydra = pytest.importorskip("hydra")

TRAINER = '''import sys
import hydra
print("a warning the trainer prints on import", file=sys.stderr)


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def main(config):
    raise AssertionError("--cfg job never runs the task")


if __name__ == "__main__":
    main()
'''

CONFIG = """actor_rollout_ref:
  rollout:
    name: hf
    n: 1
  actor:
    ppo_micro_batch_size_per_gpu: 4
  model:
    path: /nowhere
critic:
  model:
    path: /nowhere
data:
  train_batch_size: 32
"""

#: How a user may select a server rollout on the command line (the Molecule default scenario's list).
SERVER_SPELLINGS = [
    "actor_rollout_ref.rollout.name=vllm",
    "++actor_rollout_ref.rollout.name=vllm",
    'actor_rollout_ref.rollout.name="vllm"',
    "actor_rollout_ref.rollout.name='sglang'",
    "actor_rollout_ref.rollout.name=vllm ",
    "actor_rollout_ref.rollout={name:vllm}",
]
REJECTED = "verl-ppo: the installed verl rejects the configuration above."


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, str]:
    """A package holding a ``main_ppo`` as verl's: the folder to put on the path and the module's name."""
    top = tmp_path_factory.mktemp("trainer")
    package = f"standin_verl_{uuid.uuid4().hex[:8]}"
    (top / package / "config").mkdir(parents=True)
    (top / package / "__init__.py").write_text("")
    (top / package / "main_ppo.py").write_text(TRAINER)
    (top / package / "config" / "ppo_trainer.yaml").write_text(CONFIG)
    (top / package / "broken.py").write_text("import a_dependency_that_is_not_installed\n")
    return top, f"{package}.main_ppo"


@pytest.fixture
def module(trainer: Tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The stand-in trainer, importable, in a process whose Hydra is fresh (as each launch's is)."""
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.syspath_prepend(str(trainer[0]))
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # as the launch script exports it
    yield trainer[1]
    GlobalHydra.instance().clear()


def cfg_job(trainer: Tuple[Path, str], overrides: List[str], full_error: str = "1",
            module: str = "") -> subprocess.CompletedProcess:
    """What ``python -m MODULE --cfg job OVERRIDE...`` prints: the launch script's composition until now."""
    env = {**os.environ, "PYTHONPATH": str(trainer[0]), "HYDRA_FULL_ERROR": full_error}
    return subprocess.run([sys.executable, "-m", module or trainer[1], "--cfg", "job", *overrides],
                          capture_output=True, text=True, env=env, timeout=60)


#: A frame of ``python -m`` itself in a traceback (3.11: ``<frozen runpy>``; 3.10: runpy.py, with its source line).
RUNPY_FRAME = re.compile(r'  File "(<frozen runpy>|[^"]*/runpy\.py)", line \d+, in \w+\n(    .*\n)*')


def shown(separate: subprocess.CompletedProcess) -> str:
    """What the launch script showed when that process failed: its stderr (less the frames of ``python -m``
    itself, which a composition in-process does not have), then the script's line."""
    return RUNPY_FRAME.sub("", separate.stderr) + REJECTED + "\n"


@pytest.mark.parametrize("overrides", [[], ["data.train_batch_size=8", "++trainer.new_key=[1,2]"],
                                       SERVER_SPELLINGS[-1:], ["actor_rollout_ref.rollout.n=${data.train_batch_size}"]])
def test_the_composed_file_is_what_cfg_job_prints_in_a_process_of_its_own(
        module: str, trainer: Tuple[Path, str], tmp_path: Path, overrides: List[str]) -> None:
    composed = tmp_path / "config.yaml"
    assert compose.compose(str(composed), overrides, module)
    separate = cfg_job(trainer, overrides)
    assert separate.returncode == 0, separate.stderr
    assert composed.read_text() == separate.stdout


@pytest.mark.parametrize("spelling", SERVER_SPELLINGS)
def test_every_spelling_of_a_server_rollout_is_refused_on_pascal(module: str, tmp_path: Path, spelling: str,
                                                                 capfd: pytest.CaptureFixture) -> None:
    composed = tmp_path / "config.yaml"
    rc = compose.main([str(composed), "--min-compute-capability", "6.1", "--", spelling], module)
    err = capfd.readouterr().err
    assert rc == 2, err
    assert "needs compute capability 7.0 or newer; this box's lowest is 6.1" in err
    assert REJECTED not in err


@pytest.mark.parametrize("spelling", SERVER_SPELLINGS)
def test_every_spelling_of_a_server_rollout_runs_from_compute_capability_7(module: str, tmp_path: Path,
                                                                           spelling: str) -> None:
    assert compose.main([str(tmp_path / "config.yaml"), "--min-compute-capability", "7.0", "--", spelling], module) == 0


def test_a_configuration_that_composes_and_passes_prints_nothing_of_the_composition(
        module: str, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """What verl prints while composing (its import-time warnings) is shown only when the composition fails."""
    rc = compose.main([str(tmp_path / "config.yaml"), "--min-compute-capability", "6.1", "--"], module)
    out, err = capfd.readouterr()
    assert rc == 0 and out == "" and err == ""


@pytest.mark.parametrize("full_error", ["1", ""])
def test_a_misspelled_key_is_rejected_with_verls_message(module: str, trainer: Tuple[Path, str], tmp_path: Path,
                                                         capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
                                                         full_error: str) -> None:
    """Hydra's own words, as the separate process printed them (with HYDRA_FULL_ERROR, its traceback), then
    the script's line; exit 1, nothing judged; the file is emptied as the shell's `>` did."""
    monkeypatch.setenv("HYDRA_FULL_ERROR", full_error)
    composed = tmp_path / "config.yaml"
    composed.write_text("what an earlier composition left\n")
    misspelled = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpuu=4"
    rc = compose.main([str(composed), "--min-compute-capability", "6.1", "--", misspelled], module)
    err = capfd.readouterr().err
    separate = cfg_job(trainer, [misspelled], full_error)
    assert rc == 1 and separate.returncode == 1
    assert "ppo_micro_batch_size_per_gpuu" in err and ("Traceback" in err) == bool(full_error)
    assert err == shown(separate)
    assert composed.read_text() == ""


@pytest.mark.parametrize("which", ["no verl", "no such module", "a dependency missing"])
def test_a_trainer_that_does_not_import_is_rejected_as_its_own_process_showed_it(
        module: str, trainer: Tuple[Path, str], tmp_path: Path, capfd: pytest.CaptureFixture, which: str) -> None:
    """A broken install: python -m's own line where the module is not there, the traceback where it fails."""
    package = module.rsplit(".", 1)[0]
    name = {"no verl": "verl_is_not_installed.trainer.main_ppo", "no such module": f"{package}.main_ppo_of_another",
            "a dependency missing": f"{package}.broken"}[which]
    rc = compose.main([str(tmp_path / "config.yaml"), "--min-compute-capability", "6.1", "--"], name)
    separate = cfg_job(trainer, [], module=name)
    assert rc == 1 and separate.returncode == 1
    assert capfd.readouterr().err == shown(separate)


def test_the_judges_output_reaches_the_user_after_the_composition(module: str, tmp_path: Path,
                                                                  capfd: pytest.CaptureFixture) -> None:
    """Standard output is the user's again once composed (verl's validation prints there)."""
    composed = tmp_path / "config.yaml"
    assert compose.compose(str(composed), [], module)
    print("after the composition")
    os.write(2, b"and on stderr\n")
    out, err = capfd.readouterr()
    assert out == "after the composition\n" and err == "and on stderr\n"
    assert "after" not in composed.read_text()


def test_the_launch_scripts_argv_keeps_overrides_that_look_like_options() -> None:
    argv = ["c.yaml", "--min-compute-capability", "6.1", "--", "--cfg", "~trainer.logger", "--", "a=1"]
    assert compose.split_argv(argv) == (["c.yaml", "--min-compute-capability", "6.1"],
                                        ["--cfg", "~trainer.logger", "--", "a=1"])
    assert compose.split_argv(["c.yaml", "--min-compute-capability", "6.1"])[1] == []


@pytest.mark.parametrize("code, status, printed",
                         [(None, 0, ""), (0, 0, ""), (3, 3, ""), ("a message", 1, "a message\n")])
def test_a_trainer_that_exits_ends_as_its_own_process_would(code: object, status: int, printed: str,
                                                            capsys: pytest.CaptureFixture) -> None:
    assert compose.exit_status(code) == status
    assert capsys.readouterr().err == printed


#: What only the job sees: a variable set where it runs, by Hydra (env_set) or by Ray (verl merges
#: ray_kwargs.ray_init.runtime_env into ray.init), read by the rollout's name or by its whole section.
READ_WHERE_THE_JOB_RUNS = {
    "hydra env_set": ["actor_rollout_ref.rollout.name=${oc.env:X,hf}", "++hydra.job.env_set.X=vllm"],
    "ray runtime_env": ["actor_rollout_ref.rollout.name=${oc.env:X,hf}",
                        "++ray_kwargs.ray_init.runtime_env.env_vars.X=vllm"],
    "a section": ['actor_rollout_ref.rollout="${oc.decode:${oc.env:X}}"',
                  "++ray_kwargs.ray_init.runtime_env.env_vars.X='{name: vllm}'"],
}


@pytest.mark.parametrize("overrides", READ_WHERE_THE_JOB_RUNS.values(), ids=list(READ_WHERE_THE_JOB_RUNS))
def test_a_rollout_the_job_reads_from_its_environment_is_refused_on_pascal(
        module: str, tmp_path: Path, overrides: List[str], monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture) -> None:
    """--check-config cannot know X; here it is unset (hf), where the job runs it is vllm."""
    monkeypatch.delenv("X", raising=False)
    composed = tmp_path / "config.yaml"
    rc = compose.main([str(composed), "--min-compute-capability", "6.1", "--", *overrides], module)
    err = capfd.readouterr().err
    key, _, value = overrides[0].partition("=")
    assert rc == 2, err
    assert f"verl-ppo: {key} is '{value.strip(chr(34))}'" in err and "literally" in err
    assert err.count("\n") == 1 and REJECTED not in err


def test_a_reward_models_rollout_is_refused_on_pascal_even_disabled(module: str, tmp_path: Path,
                                                                    capfd: pytest.CaptureFixture) -> None:
    overrides = ["++reward.reward_model.enable=False", "++reward.reward_model.rollout.name=vllm"]
    rc = compose.main([str(tmp_path / "config.yaml"), "--min-compute-capability", "6.1", "--", *overrides], module)
    err = capfd.readouterr().err
    assert rc == 2, err
    assert "the rollout 'vllm' at reward.reward_model.rollout.name, which needs compute capability 7.0" in err


#: How a user may keep the HF rollout, and what reads the job's environment without choosing a rollout.
HF_SPELLINGS = [
    "actor_rollout_ref.rollout.name=hf",
    "++actor_rollout_ref.rollout.name=hf",
    'actor_rollout_ref.rollout.name="hf"',
    "actor_rollout_ref.rollout.name='hf'",
    "actor_rollout_ref.rollout.name=hf ",
    "actor_rollout_ref.rollout={name:hf}",
    "++reward.reward_model.rollout.name=hf",
    "++distillation.teacher_models.teacher_model.inference.name=${oc.select:actor_rollout_ref.rollout.name}",
    "++trainer.default_local_dir=${oc.env:HOME}/checkpoints",
]


@pytest.mark.parametrize("spelling", HF_SPELLINGS)
def test_every_spelling_of_the_hf_rollout_runs_on_pascal(module: str, tmp_path: Path, spelling: str,
                                                         capfd: pytest.CaptureFixture) -> None:
    rc = compose.main([str(tmp_path / "config.yaml"), "--min-compute-capability", "6.1", "--", spelling], module)
    assert (rc, capfd.readouterr().err) == (0, "")
