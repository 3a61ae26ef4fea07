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
