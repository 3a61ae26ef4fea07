"""Generate responses for a left-padded batch of prompts, the way verl's trainer reads them.

Input, as verl hands a rollout its prompts: ``input_ids`` and
``attention_mask`` of shape (batch, prompt length), padded on the left, and
``position_ids`` counting from each prompt's first real token. Output: the
prompts, the responses padded to the configured response length, and the
concatenated ``input_ids``, ``attention_mask`` and ``position_ids``. The
response part of the mask is 1 up to and including the first EOS token and 0
after it.

Everything runs in the model's dtype (fp32 on Pascal) with Hugging Face's
``generate`` and its KV cache. The trainer repeats each prompt ``n`` times
before the rollout sees the batch, so each row is one sample: with sampling
on, rows of the same prompt get different responses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Sequence, Union

import torch

EosIds = Union[int, Sequence[int]]


@dataclass(frozen=True)
class Sampling:
    """How to pick each next token (verl's rollout settings)."""

    do_sample: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: no top-k (vLLM's and verl's convention)
    response_length: int = 512

    @classmethod
    def for_batch(cls, config: Any, meta: Mapping[str, Any]) -> "Sampling":
        """verl's rules: the batch's meta_info overrides the rollout config; a validation batch that
        samples uses ``config.val_kwargs`` (one sample per prompt); ``do_sample`` False is greedy."""
        do_sample = bool(meta.get("do_sample", setting(config, "do_sample", True)))
        length = int(meta.get("response_length", setting(config, "response_length", 512)))
        if do_sample and meta.get("validate", False):
            val = setting(config, "val_kwargs", {})
            return cls(True, float(setting(val, "temperature", 1.0)), float(setting(val, "top_p", 1.0)),
                       int(setting(val, "top_k", -1)), length)
        return cls(do_sample, float(meta.get("temperature", setting(config, "temperature", 1.0))),
                   float(meta.get("top_p", setting(config, "top_p", 1.0))),
                   int(meta.get("top_k", setting(config, "top_k", -1))), length)

    def generation_config(self, eos_token_id: EosIds, pad_token_id: int) -> Any:
        """A complete ``GenerationConfig``: one sequence per row, no beams, and nothing taken from the
        model's own generation config (a checkpoint's repetition penalty or top-k would otherwise apply)."""
        from transformers import GenerationConfig

        common = {"num_beams": 1, "num_return_sequences": 1, "max_new_tokens": self.response_length,
                  "eos_token_id": eos_token_id, "pad_token_id": pad_token_id, "use_cache": True}
        if not self.do_sample:
            return GenerationConfig(do_sample=False, temperature=None, top_p=None, top_k=None, **common)
        return GenerationConfig(do_sample=True, temperature=self.temperature, top_p=self.top_p,
                                top_k=max(self.top_k, 0), **common)


def setting(config: Any, key: str, default: Any) -> Any:
    """``config[key]`` for a mapping, ``config.key`` for verl's config dataclasses; ``default`` when absent."""
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def response_mask(responses: torch.Tensor, eos: EosIds, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """1 for each response token up to and including the first EOS, 0 after it."""
    ids = torch.tensor([eos] if isinstance(eos, int) else list(eos), device=responses.device)
    is_eos = torch.isin(responses, ids).to(torch.int64)
    return ((is_eos.cumsum(dim=1) - is_eos) == 0).to(dtype)


def pad_right(tokens: torch.Tensor, length: int, pad_token_id: int) -> torch.Tensor:
    """Responses shorter than ``length`` (generation stopped at EOS everywhere) padded with pad."""
    missing = length - tokens.size(1)
    if missing <= 0:
        return tokens[:, :length]
    return torch.cat([tokens, tokens.new_full((tokens.size(0), missing), pad_token_id)], dim=1)


@torch.no_grad()
def generate(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
             sampling: Sampling, eos_token_id: EosIds, pad_token_id: int) -> Dict[str, torch.Tensor]:
    """Responses for one left-padded batch, as the five tensors verl's trainer reads."""
    config = sampling.generation_config(eos_token_id, pad_token_id)
    # generate() fills the settings a passed config leaves at their defaults from the model's own
    # generation config (a checkpoint's repetition penalty, say): make ours the model's for the call.
    was_training, saved = model.training, model.generation_config
    model.eval()
    model.generation_config = config
    try:
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    finally:
        model.generation_config = saved
        model.train(was_training)
    prompt_length = input_ids.size(1)
    responses = pad_right(output[:, prompt_length:], sampling.response_length, pad_token_id)
    steps = torch.arange(1, responses.size(1) + 1, device=position_ids.device)
    response_positions = position_ids[:, -1:] + steps.unsqueeze(0)
    return {
        "prompts": input_ids,
        "responses": responses,
        "input_ids": torch.cat([input_ids, responses], dim=1),
        "attention_mask": torch.cat([attention_mask, response_mask(responses, eos_token_id, attention_mask.dtype)], dim=1),
        "position_ids": torch.cat([position_ids, response_positions], dim=1),
    }
