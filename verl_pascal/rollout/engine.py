"""The rollout's model: built from the FSDP actor's weights for one generation, dropped after it.

A 24 GB card has no room for a second copy of the policy. So the rollout keeps
no weights of its own between steps: for each generation verl hands it the
actor's current weights as ``(name, tensor)`` pairs, and the engine builds the
Hugging Face model around those very tensors (a skeleton whose parameters are
on the ``meta`` device, filled with ``load_state_dict(assign=True)``: no copy
when the dtype and device already match). ``release`` drops the model, so the
memory goes back to training as soon as verl lets go of its own references.

Only torch and transformers (and accelerate, for the skeleton) are used here;
the verl side is :mod:`verl_pascal.rollout.verl_adapter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import torch

from verl_pascal.rollout import generate as gen
from verl_pascal.rollout.generate import setting
from verl_pascal.rollout.server import LOG_PROBS_MODES, PROCESSED_LOG_PROBS, RAW_LOG_PROBS

#: Names a rollout config may give its dtype, and the dtype each means.
DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32, "32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16, "16": torch.float16,
}


DEFAULT_ATTENTION = "sdpa"


class RolloutError(RuntimeError):
    """The rollout cannot do what it was asked; the message says what to change."""


def dtype_of(name: Any) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[str(name).lower()]
    except KeyError:
        raise RolloutError(f"actor_rollout_ref.rollout.dtype={name!r} is not one of {sorted(DTYPES)}") from None


def attention(model_config: Any) -> str:
    """The model config's attention override, else the one the patched verl tree records, else sdpa."""
    override = (getattr(model_config, "override_config", None) or {}).get("attn_implementation")
    if override:
        return str(override)
    try:
        from verl._pascal_compat import ATTN  # written by verl-patch into the tree it patched
    except ImportError:
        return DEFAULT_ATTENTION
    return str(ATTN)


def rollout_device() -> torch.device:
    """This process's accelerator as verl names it (its platform plugin), or the CPU where torch has none."""
    from verl.utils.device import get_device_id, get_device_name

    name = get_device_name()
    if name == "cpu" or (name == "cuda" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device(name, get_device_id())


def refuse(problems: List[str]) -> None:
    """Fail with every problem at once, each naming the setting to change."""
    if problems:
        raise RolloutError("the Pascal rollout cannot run this configuration:\n  " + "\n  ".join(problems))


def unsupported(config: Any) -> List[str]:
    """What this rollout cannot do that the rollout config asks for, each with the setting to change."""
    found = []
    if str(setting(config, "mode", "sync")) != "sync":
        found.append("actor_rollout_ref.rollout.mode must be sync: the Pascal rollout generates inside the worker")
    if setting(config, "calculate_log_probs", False):
        found.append("actor_rollout_ref.rollout.calculate_log_probs=True: the Pascal rollout does not return "
                     "rollout log-probs; verl recomputes them with the actor")
    if setting(config, "ignore_eos", False):
        found.append("actor_rollout_ref.rollout.ignore_eos=True: the Pascal rollout always stops at EOS")
    if setting(setting(config, "multi_turn", {}) or {}, "enable", False):
        found.append("actor_rollout_ref.rollout.multi_turn.enable=True: multi-turn needs an async (server) rollout")
    if not setting(config, "free_cache_engine", True):
        found.append("actor_rollout_ref.rollout.free_cache_engine=False would keep a full copy of the weights on "
                     "the GPU through training: set it True")
    return found


def server_unsupported(config: Any) -> List[str]:
    """What the Pascal rollout server (verl 0.7 on) cannot do that the rollout config asks for, each with
    the setting to change."""
    found = []
    for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"):
        if int(setting(config, key, 1) or 1) != 1:
            found.append(f"actor_rollout_ref.rollout.{key}={setting(config, key, 1)}: the Pascal rollout runs one "
                         "replica per GPU; set it to 1")
    if not setting(config, "free_cache_engine", True):
        found.append("actor_rollout_ref.rollout.free_cache_engine=False would keep a full copy of the weights on "
                     "the GPU through training: set it True")
    mode = setting(config, "logprobs_mode", RAW_LOG_PROBS)
    if mode not in LOG_PROBS_MODES:
        found.append(f"actor_rollout_ref.rollout.logprobs_mode={mode}: the Pascal rollout returns log-probs, "
                     f"{' or '.join(LOG_PROBS_MODES)}")
    elif (setting(config, "calculate_log_probs", False) and mode == RAW_LOG_PROBS
          and float(setting(config, "temperature", 1.0)) != 1.0):
        found.append("actor_rollout_ref.rollout.calculate_log_probs=True with temperature != 1 and "
                     f"logprobs_mode={RAW_LOG_PROBS}: the rollout's log-probs would be the model's at temperature 1, "
                     f"the actor's at the rollout's temperature; set logprobs_mode={PROCESSED_LOG_PROBS} (verl's "
                     "default), temperature=1.0, or leave the log-probs off")
    if float(setting(config, "repetition_penalty", 1.0) or 1.0) != 1.0:
        found.append("actor_rollout_ref.rollout.repetition_penalty: the Pascal rollout samples without one (use 1.0)")
    backend = setting(setting(config, "checkpoint_engine", {}) or {}, "backend", "naive")
    if str(backend) != "naive":
        found.append(f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend}: the Pascal rollout takes the "
                     "actor's weights in the training worker's own process; use naive")
    return found


def token_ids(model_config: Any) -> Tuple[List[int], int]:
    """The ids that end a response (the generation config's, else the tokenizer's) and the pad id."""
    eos: Any = getattr(getattr(model_config, "generation_config", None), "eos_token_id", None)
    tokenizer = getattr(model_config, "tokenizer", None)
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise RolloutError(f"the model at {getattr(model_config, 'local_path', '?')} names no EOS token")
    ids = [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]
    pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
    return ids, int(pad if pad is not None else ids[0])


def empty_model(hf_config: Any, attn_implementation: str) -> torch.nn.Module:
    """The causal LM for ``hf_config`` with every parameter on the meta device (no memory), buffers real."""
    import transformers
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        return transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation=attn_implementation)


@dataclass
class HFEngine:
    """The rollout model for one device: ``load`` per generation, ``release`` after it."""

    hf_config: Any
    device: torch.device
    dtype: torch.dtype = torch.float32
    attn_implementation: str = "sdpa"
    model: Optional[torch.nn.Module] = None

    def load(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Build the model around ``weights`` (moved or cast only where their device or dtype differ)."""
        self.release()
        model = empty_model(self.hf_config, self.attn_implementation)
        state = {name: tensor.to(device=self.device, dtype=self.dtype) for name, tensor in weights}
        result = model.load_state_dict(state, strict=False, assign=True)
        del state
        model.tie_weights()  # lm_head shares the embedding where the config ties them
        missing = sorted(name for name, param in model.named_parameters() if param.is_meta)
        if missing or result.unexpected_keys:
            raise RolloutError(
                "the actor's weights do not fit the model config: "
                f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
                f"unexpected {sorted(result.unexpected_keys)[:5]}")
        model.to(self.device)  # the buffers (rotary frequencies); the parameters are there already
        model.requires_grad_(False)
        self.model = model.eval()

    def release(self) -> None:
        self.model = None

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 sampling: gen.Sampling, eos_token_id: gen.EosIds, pad_token_id: int) -> Dict[str, torch.Tensor]:
        if self.model is None:
            raise RolloutError("the rollout has no weights: verl must call update_weights before generating")
        if position_ids.dim() != 2:
            raise RolloutError("the Pascal rollout generates text only (position_ids of shape (batch, length))")
        device = self.device
        return gen.generate(self.model, input_ids.to(device), attention_mask.to(device), position_ids.to(device),
                            sampling, eos_token_id, pad_token_id)
