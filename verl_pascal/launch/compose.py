"""A run's configuration, composed once: what verl is started with on a box.

Everything a run's command line holds is decided here, from the GPU profile's
row (verl_pascal/gpu_profiles.yml), the installed release's folder
(verl_pascal/releases/verl-X/release.yml), the cluster (preflight's plan),
the batch-size preset for the weakest GPU and the user's knobs (the launch
role's ``launch_*`` variables). Three callers, one function each:

- the launch role sizes the run (``launch_preset``, roles/launch/tasks/preset.yml,
  which preflight runs too) and composes it (``launch_run``); the launch
  template (templates/verl-ppo.sh.j2) only writes the composed words into bash
  arrays;
- the verl role's check before a release goes active composes the part a
  profile and a release decide (``fitted_overrides``) against the new tree;
- the renderer outside Ansible (render.py: benchmarks, tests) calls the same.

Ansible reaches these through filter_plugins/run_config.py.
"""

from __future__ import annotations

import shlex
import textwrap
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Union, overload

# ---------------------------------------------------------------- the preset

#: The batch sizes a knob of 0 takes from the preset.
SIZES = ("train_batch_size", "ppo_mini_batch_size", "micro_batch_size")
#: The offloads a knob of "" takes from the preset.
OFFLOADS = ("param_offload", "actor_param_offload", "optimizer_offload")
#: GRPO's sizes in responses -> the PPO size a row without them gives.
GRPO_SIZES = {"grpo_train_responses": "train_batch_size", "grpo_mini_responses": "ppo_mini_batch_size"}

# What Ansible's bool filter takes for true (ansible.module_utils.parsing.convert_bool).
_TRUE = ("y", "yes", "on", "1", "true", "t", "1.0")


def ansible_bool(value: object) -> bool:
    """``value`` as Ansible's ``bool`` filter reads it."""
    return str(value).strip().lower() in _TRUE


def preset_row(presets: Sequence[Mapping[str, Any]], memory_mib: object) -> Dict[str, Any]:
    """The first row whose ``min_memory_mib`` a GPU of ``memory_mib`` reaches; ValueError if none does."""
    memory = int(memory_mib)
    for row in presets:
        if int(row["min_memory_mib"]) <= memory:
            return dict(row)
    raise ValueError(f"launch_memory_presets has no row for a GPU of {memory} MiB: "
                     "give its last row min_memory_mib 0")


def launch_preset(presets: Sequence[Mapping[str, Any]], memory_mib: object,
                  knobs: Mapping[str, Any]) -> Dict[str, Any]:
    """A run's batch sizes and offloads (``SIZES``, ``OFFLOADS``, ``GRPO_SIZES`` and ``gpu_memory_mib``)
    for its weakest GPU's memory.

    The preset is the first row of ``presets`` (largest GPU first) whose ``min_memory_mib`` the GPU
    reaches. Each of the user's ``knobs`` (by preset key) wins over the row, except 0 for a size and ""
    for an offload, which mean "from the preset"; an offload is read as Ansible's ``bool`` reads it.
    GRPO's sizes in responses are the row's, or, for a row without them, the PPO sizes the run ends up
    with."""
    row = preset_row(presets, memory_mib)
    out: Dict[str, Any] = {}
    for key in SIZES:
        out[key] = int(knobs.get(key) or 0) or int(row[key])
    for key in OFFLOADS:
        wanted = knobs.get(key, "")
        out[key] = bool(row[key]) if str(wanted) == "" else ansible_bool(wanted)
    for key, ppo in GRPO_SIZES.items():
        out[key] = int(row.get(key, out[ppo]))
    out["gpu_memory_mib"] = int(memory_mib)
    return out


# ------------------------------------------------------ a release's spelling

# Hydra's prefixes: + adds a key, ++ adds or sets it, ~ deletes it.
_SIGNS = ("++", "+", "~")


def release_key(override: str, renames: Mapping[str, str]) -> str:
    """One override (``[sign]key=value``) with its key under the release's name (the first matching
    prefix of its folder's ``key_renames``; a value or a key that merely contains a prefix is kept)."""
    sign = next((s for s in _SIGNS if override.startswith(s)), "")
    rest = override[len(sign):]
    key, eq, value = rest.partition("=")
    for old, new in renames.items():
        if key.startswith(old):
            key = new + key[len(old):]
            break
    return sign + key + eq + value


@overload
def release_keys(overrides: str, release: Mapping[str, Any] | None) -> str: ...


@overload
def release_keys(overrides: Iterable[str], release: Mapping[str, Any] | None) -> List[str]: ...


def release_keys(overrides: Union[str, Iterable[str]], release: Mapping[str, Any] | None) -> Union[str, List[str]]:
    """``overrides`` (one, or a list) as ``release`` spells their keys: the project writes them once,
    for verl 0.5.0; a release that moved a key says so in its folder's ``key_renames``
    (``{old prefix: new prefix}``)."""
    if isinstance(overrides, str):
        return release_key(overrides, dict((release or {}).get("key_renames") or {}))
    return _release_keys(overrides, release or {})


def _release_keys(overrides: Iterable[str], release: Mapping[str, Any]) -> List[str]:
    """``release_keys`` of a list, as a list."""
    renames: Dict[str, str] = dict(release.get("key_renames") or {})
    return [release_key(str(o), renames) for o in overrides]


#: How many of each helper process a run needs, by what it serves: one per GPU (each GPU has its own
#: rollout server, which an agent-loop worker feeds), one per node, or none (the trainer loads a
#: step's prompts itself: tokenizing them takes milliseconds beside a step of seconds to minutes).
HOST_PROCESS_COUNTS = {
    "agent_loop_workers": "gpu",
    "reward_workers": "node",
    "transfer_queue_units": "node",
    "dataloader_workers": "none",
}


def host_process_count(process: str, cluster: Mapping[str, Any]) -> int:
    """How many ``process`` a run on ``cluster`` (nnodes, n_gpus_per_node) needs."""
    per = HOST_PROCESS_COUNTS[process]
    nodes = int(cluster.get("nnodes", 1))
    return {"gpu": nodes * int(cluster.get("n_gpus_per_node", 1)), "node": nodes, "none": 0}[per]


def host_processes(release: Mapping[str, Any] | None, cluster: Mapping[str, Any]) -> List[str]:
    """The Hydra overrides that size ``release``'s helper processes for ``cluster``, in the folder's order.

    ``++`` sets a key the release has and adds one it reads with a default but does not list (0.4.x's
    ``data.dataloader_num_workers``)."""
    wanted = dict((release or {}).get("host_processes") or {})
    unknown = sorted(set(wanted) - set(HOST_PROCESS_COUNTS))
    if unknown:
        raise ValueError(f"host_processes names {', '.join(unknown)}: known are {', '.join(HOST_PROCESS_COUNTS)}")
    return [f"++{key}={host_process_count(process, cluster)}" for process, key in wanted.items()]


# ------------------------------------------------------------ the composition

class Shell(str):
    """A word written into the script as it is: it expands a variable of the script
    (``trainer.nnodes="$cluster_nnodes"``) or quotes a path with the script's ``hydra_path``."""


class Comment(str):
    """A line of explanation in the script, above the words it explains."""


#: How wide a comment of the script runs before it wraps.
COMMENT_WIDTH = 100

#: An item of a composed list: an override (quoted for bash when written), a Shell word or a Comment.
Item = Union[str, Shell, Comment]

#: The user's knobs ``launch_run`` reads (the launch role's ``launch_<knob>``), besides the preset's.
KNOBS = ("rollout", "max_prompt_length", "max_response_length", "project_name", "total_epochs",
         "test_freq", "max_ckpt_to_keep", "save_freq", "grpo_save_freq", "grpo_rollout_n",
         "grpo_kl_loss_coef", "grpo_train_batch_size", "grpo_ppo_mini_batch_size")


def path_word(key: str, path: str) -> Shell:
    """``key=PATH`` where PATH is a bash expression, quoted for Hydra by the script when it runs."""
    return Shell(f'{key}="$(hydra_path "{path}")"')


def used_rollout(profile: Mapping[str, Any], wanted: str | None = None) -> str:
    """The rollout a run uses: ``wanted`` where the profile offers it, else the profile's first."""
    rollouts = list(profile["rollouts"])
    return wanted if wanted in rollouts else rollouts[0]


def _sections(profile: Mapping[str, Any], release: Mapping[str, Any] | None,
               cluster: Mapping[str, Any], rollout: str | None) -> List[Item]:
    """The part of a run a GPU profile and a release decide, with a line saying where each comes from."""
    release = release or {}
    items: List[Item] = [Comment("The GPU profile's rollout and overrides (verl_pascal/gpu_profiles.yml)."),
                         f"actor_rollout_ref.rollout.name={used_rollout(profile, rollout)}",
                         *_release_keys(profile.get("overrides") or [], release)]
    helpers = host_processes(release, cluster)
    if helpers:
        items += [Comment("verl's helper processes sized for this cluster, not a large server "
                          "(its release folder's host_processes)."), *helpers]
    own = list(release.get("hydra_overrides") or []) + list(
        (release.get("profile_overrides") or {}).get(profile["patch"]) or [])
    if own:
        items += [Comment("The installed verl's own keys (its release folder, verl_pascal/releases/)."), *own]
    return items


def overrides(items: Iterable[Item]) -> List[str]:
    """The overrides of ``items``, without their comments (for a caller that is not a script)."""
    return [str(item) for item in items if not isinstance(item, Comment)]


def fitted_overrides(profile: Mapping[str, Any], release: Mapping[str, Any] | None,
                     cluster: Mapping[str, Any], rollout: str | None = None) -> List[str]:
    """What a GPU profile and a release add to every run (they win over the algorithm's): the rollout
    (``rollout`` where the profile offers it, else the profile's first), the profile's overrides under
    the keys the release reads, the release's helper-process sizes for ``cluster``, and the release's
    own keys, on every profile and on the profile's patch kind."""
    return overrides(_sections(profile, release, cluster, rollout))


def _check_knobs(knobs: Mapping[str, Any]) -> None:
    missing = [k for k in KNOBS if k not in knobs]
    unknown = sorted(set(knobs) - set(KNOBS))
    if missing or unknown:
        raise ValueError("launch_run's knobs: " + "; ".join(
            part for part in (f"missing {', '.join(missing)}" if missing else "",
                              f"unknown {', '.join(unknown)}" if unknown else "") if part))


def grpo_prompts(knobs: Mapping[str, Any], preset: Mapping[str, Any]) -> Dict[str, int]:
    """GRPO's batch sizes in prompts: the knob, or the preset's responses (measured at 4 responses a
    prompt) divided by the responses a prompt gets, at least 1."""
    n = int(knobs["grpo_rollout_n"])
    return {"train": int(knobs["grpo_train_batch_size"] or 0) or max(1, int(preset["grpo_train_responses"]) // n),
            "mini": int(knobs["grpo_ppo_mini_batch_size"] or 0) or max(1, int(preset["grpo_mini_responses"]) // n)}


def _common(preset: Mapping[str, Any], release: Mapping[str, Any], knobs: Mapping[str, Any],
            rollout: str) -> List[Item]:
    micro = preset["micro_batch_size"]
    items: List[Item] = [
        path_word("data.train_files", "$data_dir/train.parquet"),
        path_word("data.val_files", "$data_dir/test.parquet"),
        f"data.max_prompt_length={knobs['max_prompt_length']}",
        f"data.max_response_length={knobs['max_response_length']}",
        "data.filter_overlong_prompts=True",
        path_word("actor_rollout_ref.model.path", "$model_dir"),
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
    ]
    if rollout == "hf" and release.get("hf_rollout", "verl") == "verl":
        items += [Comment("verl's own HF rollout (up to 0.5.x) generates without loading offloaded actor "
                          "parameters back (\"Expects tensor to be on the compute device\"): keep the "
                          "actor's on the GPU; its optimizer, the critic and the reference still offload."),
                  "actor_rollout_ref.actor.fsdp_config.param_offload=False"]
    else:
        items.append(f"actor_rollout_ref.actor.fsdp_config.param_offload={bool(preset['actor_param_offload'])}")
    items += [
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={bool(preset['optimizer_offload'])}",
        f"actor_rollout_ref.ref.fsdp_config.param_offload={bool(preset['param_offload'])}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        Comment("The cluster's nodes and the GPUs verl uses on each (launch_gpus; verl's pool is "
                "[per node] * nodes)."),
        Shell('trainer.n_gpus_per_node="$cluster_gpus_per_node"'),
        Shell('trainer.nnodes="$cluster_nnodes"'),
        Comment("The console log (train.log, read by --report) and TensorBoard ($TENSORBOARD_DIR, the "
                "run's tensorboard/)."),
        "trainer.logger=[console,tensorboard]",
        f"trainer.project_name={knobs['project_name']}",
        f"trainer.total_epochs={knobs['total_epochs']}",
        Comment("A checkpoint every save_freq steps (the algorithm's, below), the last "
                "launch_max_ckpt_to_keep kept: verl deletes the oldest before it writes the next, so "
                "with 2 or more a failed save leaves the one before it whole."),
        f"trainer.max_actor_ckpt_to_keep={knobs['max_ckpt_to_keep']}",
        f"trainer.max_critic_ckpt_to_keep={knobs['max_ckpt_to_keep']}",
        f"trainer.test_freq={knobs['test_freq']}",
    ]
    return items


def _ppo(preset: Mapping[str, Any], release: Mapping[str, Any], knobs: Mapping[str, Any]) -> List[Item]:
    return [
        f"data.train_batch_size={preset['train_batch_size']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={preset['ppo_mini_batch_size']}",
        path_word("critic.model.path", "$model_dir"),
        "critic.model.enable_gradient_checkpointing=True",
        f"critic.ppo_micro_batch_size_per_gpu={preset['micro_batch_size']}",
        *_release_keys([f"critic.model.fsdp_config.param_offload={bool(preset['param_offload'])}",
                       f"critic.model.fsdp_config.optimizer_offload={bool(preset['optimizer_offload'])}"],
                      release),
        Comment("Without a KL term verl 0.5.0 builds no reference model at all."),
        "algorithm.use_kl_in_reward=True",
        f"trainer.save_freq={knobs['save_freq']}",
    ]


def _grpo(prompts: Mapping[str, int], knobs: Mapping[str, Any]) -> List[Item]:
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_batch_size={prompts['train']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts['mini']}",
        f"actor_rollout_ref.rollout.n={knobs['grpo_rollout_n']}",
        "actor_rollout_ref.actor.use_kl_loss=True",
        f"actor_rollout_ref.actor.kl_loss_coef={knobs['grpo_kl_loss_coef']}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "algorithm.use_kl_in_reward=False",
        Comment(f"Its steps are about twice PPO's: a checkpoint every {knobs['grpo_save_freq']} steps."),
        f"trainer.save_freq={knobs['grpo_save_freq']}",
    ]


def _sft(preset: Mapping[str, Any], release: Mapping[str, Any], profile: Mapping[str, Any],
         knobs: Mapping[str, Any]) -> List[Item]:
    sft = release.get("sft") or {}
    if not sft:
        return []
    return [
        path_word("data.train_files", "$data_dir/sft/train.parquet"),
        path_word("data.val_files", "$data_dir/sft/test.parquet"),
        path_word(str(sft["model_key"]), "$model_dir"),
        f"data.max_length={int(knobs['max_prompt_length']) + int(knobs['max_response_length'])}",
        f"data.train_batch_size={preset['train_batch_size']}",
        f"data.micro_batch_size_per_gpu={preset['micro_batch_size']}",
        f"trainer.total_epochs={knobs['total_epochs']}",
        f"trainer.project_name={knobs['project_name']}-sft",
        "trainer.logger=[console,tensorboard]",
        f"trainer.max_ckpt_to_keep={knobs['max_ckpt_to_keep']}",
        *(sft.get("overrides") or []),
        *((sft.get("profile_overrides") or {}).get(profile["patch"]) or []),
    ]


def launch_run(preset: Mapping[str, Any], profile: Mapping[str, Any], release: Mapping[str, Any] | None,
               cluster: Mapping[str, Any], knobs: Mapping[str, Any]) -> Dict[str, Any]:
    """A run's configuration for the launch script: ``preset`` (``launch_preset``'s result), the GPU
    profile's row, the release's folder (``{}`` for a release without one), the cluster (nnodes,
    n_gpus_per_node) and the user's ``knobs`` (``KNOBS``).

    Returns GRPO's sizes in prompts, the SFT trainer's module, and the script's arrays as bash lines
    (``common``, ``ppo``, ``grpo``, ``fitted``, ``sft``; ``script_lines``)."""
    _check_knobs(knobs)
    release = release or {}
    rollout = used_rollout(profile, knobs["rollout"])
    prompts = grpo_prompts(knobs, preset)
    arrays: Dict[str, List[Item]] = {
        "common": _common(preset, release, knobs, rollout),
        "ppo": _ppo(preset, release, knobs),
        "grpo": _grpo(prompts, knobs),
        "fitted": _sections(profile, release, cluster, rollout),
        "sft": _sft(preset, release, profile, knobs),
    }
    return {
        "grpo_prompts": prompts,
        "sft_module": str((release.get("sft") or {}).get("module", "")),
        "lines": {name: script_lines(items) for name, items in arrays.items()},
    }


def script_lines(items: Iterable[Item]) -> List[str]:
    """``items`` as lines of a bash array: a comment as ``# ...`` lines, a Shell word as it is, an
    override quoted for bash (a quoted word never starts with ``#``: one that would is in quotes)."""
    lines: List[str] = []
    for item in items:
        if isinstance(item, Comment):
            lines += [f"# {line}" for line in textwrap.wrap(str(item), width=COMMENT_WIDTH)]
        else:
            lines.append(str(item) if isinstance(item, Shell) else shlex.quote(str(item)))
    return lines
