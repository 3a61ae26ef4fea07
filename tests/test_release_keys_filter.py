"""verl_pascal/launch/compose.py, release_keys: overrides as a release spells its keys (its folder's key_renames)."""

from __future__ import annotations

from verl_pascal.launch.compose import release_keys
MOVED = {"key_renames": {"critic.model.fsdp_config.": "critic.fsdp."}}


def test_a_moved_prefix_is_renamed_with_its_hydra_sign_kept() -> None:
    assert release_keys(["critic.model.fsdp_config.param_offload=True", "++critic.model.fsdp_config.x.y=fp32",
                         "+critic.model.fsdp_config.z=1", "~critic.model.fsdp_config.w"], MOVED) == [
        "critic.fsdp.param_offload=True", "++critic.fsdp.x.y=fp32", "+critic.fsdp.z=1", "~critic.fsdp.w"]


def test_only_the_key_is_renamed_never_a_value_or_a_key_that_merely_contains_the_prefix() -> None:
    assert release_keys("data.path=critic.model.fsdp_config.", MOVED) == "data.path=critic.model.fsdp_config."
    assert release_keys("x.critic.model.fsdp_config.a=1", MOVED) == "x.critic.model.fsdp_config.a=1"


def test_a_release_without_renames_keeps_every_override() -> None:
    overrides = ["critic.model.fsdp_config.param_offload=True", "actor_rollout_ref.rollout.name=hf"]
    assert release_keys(overrides, {}) == overrides
    assert release_keys(overrides, {"key_renames": None}) == overrides
    assert release_keys(overrides, None) == overrides


def test_the_first_matching_prefix_wins_and_the_result_is_a_list_for_a_list() -> None:
    release = {"key_renames": {"a.b.": "n.", "a.": "m."}}
    assert release_keys(["a.b.c=1", "a.x=2"], release) == ["n.c=1", "m.x=2"]
