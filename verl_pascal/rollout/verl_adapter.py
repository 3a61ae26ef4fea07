"""The Pascal rollout behind verl's rollout interface (verl 0.6.x, sync mode).

Importing this module registers :class:`PascalHFRollout` in verl's rollout
registry as ``("hf", "sync")``, the name verl's FSDP workers already treat as
the in-process Hugging Face rollout (one data-parallel rank per GPU). verl
0.6.1 imports every module named in ``VERL_USE_EXTERNAL_MODULES`` when it is
imported, in every process, Ray's workers included; the launch script sets
that variable for the releases whose folder says so. No verl file is changed.

How a PPO step uses it (verl's ``ActorRolloutRefWorker``):

1. ``rollout_mode``: the worker gathers the FSDP actor's full weights and calls
   ``update_weights``; the engine builds the model around those tensors.
2. ``generate_sequences``: one left-padded batch (verl has already repeated
   each prompt ``n`` times), sampled with the rollout settings.
3. ``trainer_mode``: ``release`` drops the model and empties the CUDA cache,
   so training gets the memory back.
"""

from __future__ import annotations

from typing import Any, Generator, Optional, Tuple

import torch
from tensordict import TensorDict

from verl import DataProto
from verl.utils.device import get_torch_device
from verl.workers.rollout import base

from verl_pascal.rollout.engine import HFEngine, RolloutError, attention, dtype_of, refuse, rollout_device, unsupported
from verl_pascal.rollout.generate import Sampling

NAME = "hf"
MODE = "sync"


class PascalHFRollout(base.BaseRollout):
    """Hugging Face ``generate`` in the model's dtype (fp32 on Pascal), on the actor's own GPU."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        refuse(unsupported(self.config))
        self.engine = HFEngine(hf_config=self.model_config.hf_config, device=rollout_device(),
                               dtype=dtype_of(self.config.dtype), attn_implementation=attention(self.model_config))

    async def resume(self, tags: list[str]) -> None:
        """Nothing to bring back: the weights arrive with ``update_weights``, the KV cache lives per call."""

    async def update_weights(self, weights: Generator[Tuple[str, torch.Tensor], None, None], **kwargs: Any) -> None:
        if kwargs.get("peft_config") is not None:
            raise RolloutError("LoRA (actor_rollout_ref.model.lora_rank > 0) is not supported by the Pascal rollout")
        self.engine.load(weights)

    async def release(self) -> None:
        self.engine.release()
        if self.engine.device.type != "cpu":
            get_torch_device().empty_cache()

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        meta = prompts.meta_info
        batch = prompts.batch
        out = self.engine.generate(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                                   Sampling.for_batch(self.config, meta), meta["eos_token_id"],
                                   _pad_id(meta.get("pad_token_id"), meta["eos_token_id"]))
        return DataProto(batch=TensorDict(out, batch_size=batch["input_ids"].size(0)))


def _pad_id(pad: Optional[int], eos: Any) -> int:
    if pad is not None:
        return int(pad)
    return int(eos if isinstance(eos, int) else list(eos)[0])


def register() -> None:
    """Make ``actor_rollout_ref.rollout.name=hf`` (sync) build this rollout."""
    base._ROLLOUT_REGISTRY[(NAME, MODE)] = f"{__name__}.{PascalHFRollout.__name__}"


register()
