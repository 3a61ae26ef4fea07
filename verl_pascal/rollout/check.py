"""Check, on a box, that the installed verl builds the Pascal rollout and that it generates right.

    VERL_USE_EXTERNAL_MODULES=verl_pascal.rollout.verl_adapter \\
        python -m verl_pascal.rollout.check [--model DIR] [--device cpu|cuda]

It goes through verl's own interfaces, as a PPO step does: verl's rollout
registry gives the class for ``("hf", "sync")``, verl's config dataclasses
configure it, ``update_weights`` hands it a model's weights, and
``generate_sequences`` takes a left-padded ``DataProto``. The responses must
equal those of the same model generating directly (greedy), and ``release``
must leave no weights behind. Without ``--model`` it makes a tiny random
Qwen2 with its own tokenizer (``verl_pascal.models``). Prints one JSON line;
exits 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from typing import Any, Dict, List, Optional, Sequence

PROMPTS = ["Natalia sold clips to 48 of her friends.", "How many", "What is 7 times 6? Think step by step."]


def left_padded(tokenizer: Any, texts: Sequence[str], torch: Any) -> Dict[str, Any]:
    rows: List[List[int]] = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(dim=1) - 1).clamp(min=0)}


def run(model_dir: str, device: str, response_length: int) -> Dict[str, Any]:
    import torch
    import transformers
    from tensordict import TensorDict

    import verl
    from verl import DataProto
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.base import get_rollout_class

    from verl_pascal.rollout import generate as gen

    cls = get_rollout_class("hf", "sync")  # fails unless VERL_USE_EXTERNAL_MODULES registered ours
    config = RolloutConfig(name="hf", mode="sync", dtype="fp32", response_length=response_length,
                           prompt_length=64, do_sample=False)
    model_config = HFModelConfig(path=model_dir)
    rollout = cls(config=config, model_config=model_config, device_mesh=None)
    actor = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(device)
    tokenizer = model_config.tokenizer
    batch = {k: v.to(device) for k, v in left_padded(tokenizer, PROMPTS, torch).items()}
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    want = gen.generate(actor, batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                        gen.Sampling(do_sample=False, response_length=response_length), eos, pad)

    asyncio.run(rollout.update_weights((n, t.detach().clone()) for n, t in actor.state_dict().items()))
    prompts = DataProto(batch=TensorDict(batch, batch_size=len(PROMPTS)),
                        meta_info={"eos_token_id": eos, "pad_token_id": pad, "do_sample": False})
    got = rollout.generate_sequences(prompts).batch
    asyncio.run(rollout.release())
    same = {key: bool(torch.equal(got[key].to(device), want[key])) for key in want}
    return {
        "verl": verl.__version__, "rollout": f"{cls.__module__}.{cls.__name__}", "device": device,
        "same_as_the_model": same, "released": rollout.engine.model is None,
        "responses": list(got["responses"].shape), "ok": all(same.values()) and rollout.engine.model is None,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="", help="a Hugging Face model directory (default: make a tiny random one)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--response-length", type=int, default=16)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="verl-pascal-rollout-check-") as work:
        model_dir = args.model
        if not model_dir:
            from verl_pascal.models import make_model

            make_model.make("tiny", work)
            model_dir = work
        result = run(model_dir, args.device, args.response_length)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
