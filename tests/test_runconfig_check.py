"""verl_pascal.runconfig.check: what the launch script judges in a composed configuration.

The rollout rule and the order of the judgements run here on hand-written
configurations; verl's own validation is injected (this venv has no verl). The
real validation against installed releases runs in the Molecule upgrade
scenario (verl 0.9.1), with a key the release does not have as its negative
control.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional

import pytest

from verl_pascal.runconfig import check


def composed(tmp_path: Path, rollout: str = "hf", model: Optional[Path] = None, extra: str = "") -> str:
    path = tmp_path / "config.yaml"
    model_path = model or tmp_path / "no-model"
    path.write_text(
        f"actor_rollout_ref:\n  rollout:\n    name: {rollout}\n  model:\n    path: {model_path}\n"
        f"critic:\n  model:\n    path: {model_path}\n{extra}"
    )
    return str(path)


def staged_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def recording(calls: List[Any], error: Optional[Exception] = None) -> Callable[[], Callable[[Any], None]]:
    def validate(cfg: Any) -> None:
        calls.append(cfg)
        if error is not None:
            raise error

    return lambda: validate


@pytest.mark.parametrize("spelling", ["vllm", "sglang", '"vllm"'])
def test_a_server_rollout_is_refused_below_compute_capability_7(tmp_path: Path, spelling: str,
                                                                capsys: pytest.CaptureFixture) -> None:
    calls: List[Any] = []
    rc = check.judge(composed(tmp_path, spelling), "6.1", validator=recording(calls))
    err = capsys.readouterr().err
    assert rc == 2 and "needs compute capability 7.0 or newer; this box's lowest is 6.1" in err
    assert "actor_rollout_ref.rollout.name=hf" in err
    assert calls == []  # refused before verl is asked


@pytest.mark.parametrize("rollout,cc", [("hf", "6.1"), ("hf", "9.0"), ("vllm", "8.0"), ("vllm", "7.0")])
def test_what_the_gpu_can_run_passes(tmp_path: Path, rollout: str, cc: str) -> None:
    assert check.judge(composed(tmp_path, rollout), cc, validator=lambda: None) == 0


def test_an_interpolation_that_does_not_resolve_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = check.judge(composed(tmp_path, "${oc.select:nowhere.name}x${missing}"), "6.1", validator=lambda: None)
    assert rc == 1 and "cannot read actor_rollout_ref.rollout.name" in capsys.readouterr().err


def test_verl_validates_the_configuration_once_the_model_is_staged(tmp_path: Path) -> None:
    calls: List[Any] = []
    model = staged_model(tmp_path)
    assert check.judge(composed(tmp_path, model=model), "6.1", validator=recording(calls)) == 0
    assert len(calls) == 1 and calls[0].actor_rollout_ref.model.path == str(model)


def test_a_configuration_verl_rejects_fails_with_verls_message(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    error = TypeError("HFModelConfig.__init__() got an unexpected keyword argument 'fsdp_config'")
    rc = check.judge(composed(tmp_path, model=staged_model(tmp_path)), "6.1", validator=recording([], error))
    err = capsys.readouterr().err
    assert rc == 1
    assert "verl-ppo: verl rejects the configuration: TypeError: HFModelConfig.__init__() got an unexpected" in err


def test_without_the_model_the_validation_is_skipped_saying_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    calls: List[Any] = []
    rc = check.judge(composed(tmp_path), "6.1", validator=recording(calls, RuntimeError("would fail")))
    assert rc == 0 and calls == []
    assert f"not at {tmp_path / 'no-model'} yet: skipped" in capsys.readouterr().err


def test_a_release_without_verls_validation_is_judged_on_the_rollout_alone(tmp_path: Path) -> None:
    assert check.judge(composed(tmp_path, model=staged_model(tmp_path)), "6.1", validator=lambda: None) == 0


def test_this_environment_has_no_verl_so_there_is_no_validator() -> None:
    """The default validator looks for verl's validate_config and gives None without it (verl 0.5.0)."""
    pytest.importorskip("omegaconf")
    try:
        import verl  # noqa: F401
    except ImportError:
        assert check.verl_validator() is None
    else:
        pytest.skip("verl is installed here")


def test_the_command_line_passes_the_file_and_the_capability(tmp_path: Path) -> None:
    assert check.main([composed(tmp_path, "vllm"), "--min-compute-capability", "6.1"]) == 2
    assert check.main([composed(tmp_path, "vllm"), "--min-compute-capability", "8.6"]) == 0


@pytest.mark.parametrize("bad", ["", "six", "6.x", "-1"])
def test_a_malformed_capability_is_a_usage_error_not_a_traceback(tmp_path: Path, bad: str,
                                                                 capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        check.main([composed(tmp_path, "vllm"), "--min-compute-capability", bad])
    assert exit_info.value.code == 2
    assert "expected a compute capability such as 6.1" in capsys.readouterr().err


@pytest.mark.parametrize("extra, critic", [("", True), ("algorithm:\n  adv_estimator: gae\n", True),
                                           ("algorithm:\n  adv_estimator: grpo\n", False)])
def test_grpo_is_validated_without_a_critic_model(tmp_path: Path, extra: str, critic: bool) -> None:
    """GRPO builds no critic: its default model path (never staged) must not skip verl's validation."""
    model = staged_model(tmp_path)
    path = Path(composed(tmp_path, model=model, extra=extra))
    path.write_text(path.read_text().replace(f"critic:\n  model:\n    path: {model}", "critic:\n  model:\n    path: /nowhere"))
    calls: List[Any] = []
    assert check.judge(str(path), "6.1", validator=recording(calls)) == 0
    assert len(calls) == (0 if critic else 1)


def test_critic_enable_wins_over_the_estimator(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    assert check.critic_in_use(OmegaConf.create({"critic": {"enable": True}, "algorithm": {"adv_estimator": "grpo"}}))
    assert not check.critic_in_use(OmegaConf.create({"critic": {"enable": False}, "algorithm": {"adv_estimator": "gae"}}))
    assert check.critic_in_use(OmegaConf.create({"critic": {"enable": None}}))


# --------------------------------------------------------------------------
# Every rollout of the run, as the job will resolve it (verl_pascal.runconfig.rollouts)
# --------------------------------------------------------------------------


def written_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def judged(path: str, cc: str = "6.1") -> int:
    return check.judge(path, cc, validator=lambda: None)


@pytest.mark.parametrize("name, here", [("${oc.env:X,hf}", "hf"), ("${oc.env:X}", "hf"), ("h${oc.env:X,f}", "f"),
                                        ("${now:hf}", "hf")])
def test_a_rollout_name_read_where_the_job_runs_is_refused_even_if_it_reads_hf_here(
        tmp_path: Path, name: str, here: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """hydra.job.env_set and Ray's runtime_env set X only where the job runs: what it is here proves nothing."""
    monkeypatch.setenv("X", here)
    assert judged(composed(tmp_path, f"'{name}'")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"actor_rollout_ref.rollout.name is '{name}'" in err
    assert "write the rollout name literally (actor_rollout_ref.rollout.name=hf)" in err


@pytest.mark.parametrize("extra, key", [
    ("reward:\n  reward_model:\n    enable: false\n    rollout:\n      name: vllm\n",
     "reward.reward_model.rollout.name"),
    ("reward_model:\n  enable: true\n  rollout:\n    name: sglang\n", "reward_model.rollout.name"),
    ("distillation:\n  teacher_models:\n    teacher_model:\n      inference:\n"
     "        _target_: verl.workers.config.RolloutConfig\n        name: vllm\n",
     "distillation.teacher_models.teacher_model.inference.name"),
    ("a_later_release:\n  judge_model:\n    rollout:\n      name: trtllm\n",
     "a_later_release.judge_model.rollout.name"),
])
def test_every_rollout_of_the_configuration_is_judged_not_only_the_actors(
        tmp_path: Path, extra: str, key: str, capsys: pytest.CaptureFixture) -> None:
    """The reward model's (even disabled: its switch may be an interpolation, and the legacy one turns it on),
    the legacy section's, a teacher's, and one a later release adds."""
    assert judged(composed(tmp_path, extra=extra)) == 2
    err = capsys.readouterr().err
    assert f"at {key}, which needs compute capability 7.0 or newer; this box's lowest is 6.1" in err
    assert f"({key}=hf)" in err


def test_a_rollout_that_refers_to_another_is_judged_by_what_it_selects(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """verl's own teacher default is the actor's name (${oc.select:...}): with vLLM both are refused."""
    teacher = ("distillation:\n  teacher_models:\n    teacher_model:\n      inference:\n"
               "        _target_: verl.workers.config.RolloutConfig\n"
               "        name: ${oc.select:actor_rollout_ref.rollout.name}\n")
    section = "my_rollout:\n  name: vllm\nreward:\n  reward_model:\n    rollout: ${my_rollout}\n"
    assert judged(composed(tmp_path, "vllm", extra=teacher)) == 2
    assert "at distillation.teacher_models.teacher_model.inference.name, which needs" in capsys.readouterr().err
    assert judged(composed(tmp_path, extra=section)) == 2
    assert "the rollout 'vllm' at reward.reward_model.rollout.name, which needs" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [
    "reward:\n  reward_model:\n    enable: false\n    rollout:\n      name: ???\n",
    "reward_model:\n  rollout:\n    name: null\n",
    "distillation:\n  teacher_models:\n    teacher_model:\n      inference:\n"
    "        _target_: verl.workers.config.RolloutConfig\n"
    "        name: ${oc.select:actor_rollout_ref.rollout.name}\n",
    "reward:\n  reward_model:\n    enable: true\n    rollout:\n      name: hf\n",
    "trainer:\n  default_local_dir: ${oc.env:HOME}/checkpoints\n  experiment_name: run-${now:%Y%m%d}\n",
])
def test_what_selects_no_server_rollout_passes_on_pascal(tmp_path: Path, extra: str,
                                                         capsys: pytest.CaptureFixture) -> None:
    """A name left unset, the teacher's default, hf, and what the job reads where it runs for other keys."""
    assert judged(composed(tmp_path, extra=extra)) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("text, key", [
    ("actor_rollout_ref:\n  rollout: ${oc.decode:${oc.env:R}}\n", "actor_rollout_ref.rollout"),
    ("actor_rollout_ref:\n  rollout:\n    name: hf\ndistillation:\n  teacher_models:\n"
     "    teacher_model2: ${oc.create:${oc.env:T}}\n", "distillation.teacher_models.teacher_model2"),
    ("actor_rollout_ref:\n  rollout:\n    name: ${oc.select:${oc.env:K},hf}\n", "actor_rollout_ref.rollout.name"),
    ("actor_rollout_ref:\n  rollout:\n    name: ${names.${oc.env:K}}\nnames:\n  hf: hf\n",
     "actor_rollout_ref.rollout.name"),
])
def test_a_section_built_from_what_only_the_job_knows_is_refused(
        tmp_path: Path, text: str, key: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Here R, T and K give hf; where the job runs they may give {name: vllm}, a teacher on vLLM, a key to it."""
    monkeypatch.setenv("R", "{name: hf}")
    monkeypatch.setenv("T", "{inference: {_target_: verl.workers.config.RolloutConfig, name: hf}}")
    monkeypatch.setenv("K", "hf")
    assert judged(written_config(tmp_path, text)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"verl-ppo: {key} is '" in err and "write it literally" in err


def test_a_resolver_the_check_cannot_follow_is_refused_on_pascal(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """User code may register a resolver in the job that builds a teacher on vLLM: it cannot be judged here."""
    from omegaconf import OmegaConf

    teacher = {"inference": {"_target_": "verl.workers.config.RolloutConfig", "name": "hf"}}
    OmegaConf.register_new_resolver("test_pick_teacher", lambda: teacher, replace=True)
    try:
        path = composed(tmp_path, extra="distillation:\n  teacher_models:\n    teacher_model2: ${test_pick_teacher:}\n")
        assert judged(path) == 2
        err = capsys.readouterr().err
        assert "distillation.teacher_models.teacher_model2 is '${test_pick_teacher:}', which calls the resolver " \
               "'test_pick_teacher', which this check cannot follow" in err
        assert OmegaConf.create({"t": "${test_pick_teacher:}"}).t == teacher  # left registered
    finally:
        OmegaConf.clear_resolver("test_pick_teacher")


def test_the_judgement_leaves_omegaconfs_resolvers_as_they_were(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """verl's validation runs next in the same process: oc.env must read the environment again."""
    from omegaconf import OmegaConf

    monkeypatch.setenv("X", "from-the-environment")
    assert judged(composed(tmp_path, "'${oc.env:X}'")) == 2
    assert judged(composed(tmp_path)) == 0
    assert OmegaConf.create({"x": "${oc.env:X}", "y": "${oc.select:x}"}).y == "from-the-environment"


@pytest.mark.parametrize("rollout", ["'${oc.env:X,hf}'", "vllm"])
def test_from_compute_capability_7_any_rollout_runs_however_it_is_read(tmp_path: Path, rollout: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X", "vllm")
    extra = "reward:\n  reward_model:\n    rollout:\n      name: ${oc.env:X}\n"
    assert judged(composed(tmp_path, rollout, extra=extra), "7.0") == 0


# The releases' own configuration trees (their sdists), with the launch script's overrides.

ROLLOUT_SECTIONS = ["reward.reward_model.rollout.name", "reward_model.rollout.name",
                    "distillation.teacher_models.teacher_model.inference.name"]


def release_config(tmp_path: Path, version: str, extracted: Callable[[str], Path], *extra: str) -> str:
    from omegaconf import OmegaConf
    from test_release_configs import composed as compose_release, launch_overrides

    cfg = compose_release(extracted(version), launch_overrides(tmp_path, version, "pascal") + list(extra))
    return written_config(tmp_path, OmegaConf.to_yaml(cfg))


def has_key(cfg: Any, key: str) -> bool:
    """Whether ``cfg`` has ``key``, set or not (``???``)."""
    from omegaconf import OmegaConf

    section, _, last = key.rpartition(".")
    return last in (OmegaConf.select(cfg, section) or {}).keys()


def releases() -> List[str]:
    from verl_pascal import verl_releases

    return sorted(verl_releases.sdists())


@pytest.mark.parametrize("version", releases())
def test_the_launch_scripts_configuration_of_every_release_runs_on_pascal(
        version: str, extracted: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("hydra")
    assert judged(release_config(tmp_path, version, extracted)) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("version", releases())
def test_every_rollout_a_release_builds_is_refused_on_pascal_unless_hf(
        version: str, extracted: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The reward model's (0.7 on, and its legacy section) and the distillation teacher's (0.8 on)."""
    pytest.importorskip("hydra")
    from omegaconf import OmegaConf

    defaults = OmegaConf.load(release_config(tmp_path, version, extracted))
    present = [key for key in ROLLOUT_SECTIONS if has_key(defaults, key)]
    release = tuple(int(n) for n in version.split(".")[:2])
    assert len(present) == (3 if release >= (0, 8) else 2 if release >= (0, 7) else 0), present
    for key in present:
        assert judged(release_config(tmp_path, version, extracted, f"{key}=vllm")) == 2, key
        assert f"at {key}, which needs compute capability 7.0" in capsys.readouterr().err
