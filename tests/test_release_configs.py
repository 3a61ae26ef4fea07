"""The launch script's overrides against each supported release's own configuration files.

For every release the verl role installs (a folder with a lock) and every GPU
profile, the rendered launch script's Hydra overrides are composed with Hydra
itself against the ``verl/trainer/config`` of the release's real sdist, the
way ``python -m verl.trainer.main_ppo --cfg job`` composes them, but without
verl's dependencies: a key the release does not have (without ``++``) stops
the composition, and every override must land at its key with its value. A
key that composes only because ``++`` added it, which verl's dataclasses then
refuse, is what the box-side validation catches (tests/test_runconfig_check.py
and the Molecule upgrade scenario, against installed releases).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

pytest.importorskip("hydra")
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from verl_pascal import profiles, verl_releases  # noqa: E402
from verl_pascal.launch import render  # noqa: E402

LOCKED = sorted(verl_releases.sdists())
PROFILES = list(profiles.rows())


def launch_overrides(tmp_path: Path, version: str, profile: str, **extra: Any) -> List[str]:
    """The Hydra overrides the launch script rendered for ``version`` passes to main_ppo (its --dry-run)."""
    script = render.write(str(tmp_path / "verl-ppo"), {
        "verl_version": version, "preflight_gpu_profile": profile, "launch_data_dir": "/opt/verl-pascal/data",
        "launch_model_dir": "/opt/verl-pascal/models/m", **extra})
    out = subprocess.run([script, "--dry-run"], capture_output=True, text=True, check=True, timeout=60).stdout
    return shlex.split(out)[3:]  # after python -m verl.trainer.main_ppo


def composed(tree: Path, overrides: List[str]) -> Any:
    with initialize_config_dir(config_dir=str(tree / "verl" / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def misplaced(cfg: Any, overrides: List[str]) -> Dict[str, Any]:
    """Each override whose key does not hold its value in the composed configuration: {override: found}."""
    parser = OverridesParser.create()
    wrong = {}
    for override, parsed in zip(overrides, parser.parse_overrides(overrides)):
        found = OmegaConf.select(cfg, parsed.key_or_group)
        if OmegaConf.is_config(found):
            found = OmegaConf.to_container(found)
        if found != parsed.value():
            wrong[override] = found
    return wrong


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("version", LOCKED)
def test_every_override_of_the_launch_script_lands_in_the_releases_own_config(
        version: str, profile: str, extracted: Callable[[str], Path], tmp_path: Path) -> None:
    overrides = launch_overrides(tmp_path, version, profile)
    cfg = composed(extracted(version), overrides)
    assert misplaced(cfg, overrides) == {}
    assert OmegaConf.select(cfg, "actor_rollout_ref.rollout.name") == profiles.rows()[profile]["rollouts"][0]


@pytest.mark.parametrize("version", [v for v in LOCKED if verl_releases.read(v).get("key_renames")])
def test_a_release_that_moved_keys_refuses_them_spelled_the_old_way(
        version: str, extracted: Callable[[str], Path], tmp_path: Path) -> None:
    """The negative control of the renames: the launch script rendered as if the release had moved
    nothing passes keys the release does not have, and the composition stops at the first."""
    release = {k: v for k, v in verl_releases.read(version).items() if k != "key_renames"}
    overrides = launch_overrides(tmp_path, version, "pascal",
                                 verl_releases={**{v: verl_releases.read(v) for v in LOCKED}, version: release})
    old = next(iter(verl_releases.read(version)["key_renames"]))
    assert [o for o in overrides if o.startswith(old)]
    with pytest.raises(ConfigCompositionException, match="Could not override '" + old.replace(".", r"\.")):
        composed(extracted(version), overrides)


def test_the_pascal_settings_land_where_each_release_reads_them(extracted: Callable[[str], Path],
                                                                tmp_path: Path) -> None:
    """What P40 rules need, read back from the composed configuration of each release: no padding
    removal (flash-attn varlen), no torch.compile in the actor, fp32 FSDP params for the critic under
    the key the release reads, and the HF rollout; on the server releases, fp32 for the rollout too."""
    for version in LOCKED:
        release = verl_releases.read(version)
        cfg = composed(extracted(version), launch_overrides(tmp_path, version, "pascal"))
        critic = "critic.fsdp" if release.get("key_renames") else "critic.model.fsdp_config"
        assert OmegaConf.select(cfg, "actor_rollout_ref.model.use_remove_padding") is False, version
        assert OmegaConf.select(cfg, "critic.model.use_remove_padding") is False, version
        assert OmegaConf.select(cfg, "actor_rollout_ref.actor.use_torch_compile") is False, version
        assert OmegaConf.select(cfg, f"{critic}.mixed_precision.param_dtype") == "fp32", version
        assert OmegaConf.select(cfg, "actor_rollout_ref.rollout.name") == "hf", version
        if release.get("rollout_mode") == "async":
            assert OmegaConf.select(cfg, "actor_rollout_ref.rollout.dtype") == "fp32", version
            assert OmegaConf.select(cfg, "actor_rollout_ref.rollout.mode") == "async", version
            assert OmegaConf.select(cfg, "actor_rollout_ref.actor.fsdp_config.use_torch_compile") is False, version


@pytest.mark.parametrize("version", [v for v in LOCKED if verl_releases.read(v).get("host_processes")])
def test_every_helper_process_key_is_one_the_release_reads(version: str, extracted: Callable[[str], Path]) -> None:
    """The launch script sets a release's helper-process counts with ``++`` (0.4.x reads
    data.dataloader_num_workers with a default and does not list it), which would also add a key that
    nothing reads: each key must be in the release's own configuration, or read by name in its trainer."""
    tree = extracted(version)
    defaults = composed(tree, [])
    trainer = "\n".join(p.read_text(errors="replace") for p in (tree / "verl" / "trainer").rglob("*.py"))
    for process, key in verl_releases.read(version)["host_processes"].items():
        listed = OmegaConf.select(defaults, key) is not None
        read = f'"{key.rsplit(".", 1)[-1]}"' in trainer
        assert listed or read, f"{version}: {process} -> {key} is neither in its config nor read by its trainer"


# --- verl-ppo --sft: the SFT trainer's configuration ---------------------------------------------------------

SFT_LOCKED = [v for v in LOCKED if verl_releases.read(v).get("sft")]
#: Switches that would bring Triton (torch.compile's Inductor, Liger's and verl's fused kernels) or
#: flash-attn's varlen kernels (padding removal) into a run: wherever the SFT configuration has one, it is off.
P40_SWITCHES = ("use_torch_compile", "use_liger", "use_fused_kernels", "use_remove_padding")


def sft_overrides(tmp_path: Path, version: str, profile: str) -> List[str]:
    """The Hydra overrides the launch script rendered for ``version`` passes to the SFT trainer (its --sft --dry-run)."""
    script = render.write(str(tmp_path / "verl-ppo"), {
        "verl_version": version, "preflight_gpu_profile": profile, "launch_data_dir": "/opt/verl-pascal/data",
        "launch_model_dir": "/opt/verl-pascal/models/m"})
    out = subprocess.run([script, "--sft", "--dry-run"], capture_output=True, text=True, check=True, timeout=60).stdout
    argv = shlex.split(out)
    return argv[argv.index(verl_releases.read(version)["sft"]["module"]) + 1:]


def composed_sft(tree: Path, version: str, overrides: List[str]) -> Any:
    with initialize_config_dir(config_dir=str(tree / "verl" / "trainer" / "config"), version_base=None):
        return compose(config_name=verl_releases.read(version)["sft"]["config"], overrides=overrides)


def switches(node: Any, at: str = "") -> Dict[str, Any]:
    """Every key of the configuration named one of P40_SWITCHES, with its value: {dotted key: value}."""
    found: Dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{at}.{key}" if at else str(key)
            if key in P40_SWITCHES:
                found[where] = value
            found.update(switches(value, where))
    return found


@pytest.mark.parametrize("version", SFT_LOCKED)
def test_the_sft_table_names_the_trainer_and_the_configuration_it_composes(
        version: str, extracted: Callable[[str], Path]) -> None:
    """The module verl-ppo --sft starts is in the sdist and composes the configuration the table names."""
    sft = verl_releases.read(version)["sft"]
    module = extracted(version).joinpath(*sft["module"].split(".")).with_suffix(".py")
    assert f'@hydra.main(config_path="config", config_name="{sft["config"]}"' in module.read_text()


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("version", SFT_LOCKED)
def test_every_sft_override_lands_in_the_releases_own_sft_config(
        version: str, profile: str, extracted: Callable[[str], Path], tmp_path: Path) -> None:
    overrides = sft_overrides(tmp_path, version, profile)
    cfg = composed_sft(extracted(version), version, overrides)
    assert misplaced(cfg, overrides) == {}


@pytest.mark.parametrize("version", SFT_LOCKED)
def test_the_sft_trainer_reads_the_converters_columns_and_runs_under_p40_rules(
        version: str, extracted: Callable[[str], Path], tmp_path: Path) -> None:
    """Read back from the composed SFT configuration: the columns gsm8k-to-verl --sft writes, fp32 weights
    and FSDP parameters, every Triton or flash-attn switch the configuration has turned off, and each
    checkpoint saved with its Hugging Face model."""
    from verl_pascal.data import gsm8k

    cfg = composed_sft(extracted(version), version, sft_overrides(tmp_path, version, "pascal"))
    if OmegaConf.select(cfg, "data.messages_key") is not None:  # from 0.7: the conversation
        assert OmegaConf.select(cfg, "data.messages_key") == gsm8k.SFT_MESSAGES
    else:
        assert OmegaConf.select(cfg, "data.prompt_key") == gsm8k.SFT_PROMPT
        assert OmegaConf.select(cfg, "data.response_key") == gsm8k.SFT_RESPONSE
    tree = OmegaConf.to_container(cfg, resolve=False)
    found = switches(tree)
    assert any(k.endswith("use_liger") for k in found) and any(k.endswith("use_remove_padding") for k in found)
    assert {k: v for k, v in found.items() if v is not False} == {}
    engine = OmegaConf.select(cfg, "engine")
    if engine is not None:  # the FSDP engine (0.7 on): fp32 parameters, fp32 weights
        assert OmegaConf.select(cfg, "engine.mixed_precision") == {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                                                   "buffer_dtype": "fp32"}
        assert OmegaConf.select(cfg, "engine.model_dtype") == "fp32"
    else:  # fsdp_sft_trainer: its policies' bf16 is the patcher's (mixed_precision_bf16)
        assert OmegaConf.select(cfg, "model.fsdp_config.model_dtype") == "fp32"
    contents = OmegaConf.select(cfg, "checkpoint.save_contents") or OmegaConf.select(cfg, "trainer.checkpoint.save_contents")
    assert "hf_model" in contents and "model" in contents
