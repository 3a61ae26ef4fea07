"""Check, on a box, that the installed verl builds the Pascal rollout and that it generates right.

    VERL_USE_EXTERNAL_MODULES=<the release's rollout module> \\
        python -m verl_pascal.rollout.check [--model DIR] [--device cpu|cuda] [--mode auto|sync|async]

It goes through verl's own interfaces, as a PPO step does, for the release's
mode (``playbooks/verify.yml`` passes the release folder's ``rollout_mode``;
``auto``, for a run by hand: async from verl 0.7 on, by the installed verl's version):

- sync (0.6): verl's rollout registry gives the class for ``("hf", "sync")``,
  verl's config dataclasses configure it, ``update_weights`` hands it a
  model's weights, and ``generate_sequences`` takes a left-padded
  ``DataProto``.
- async (0.7 on): in a local Ray cluster, a stand-in training worker (a Ray
  actor) builds the worker side from verl's registry for ``("hf", "async")``
  and takes the weights with ``update_weights``; verl's
  ``RolloutReplicaRegistry`` gives the replica, which launches its server the
  way verl's hybrid engine does. All requests go to the server at once, as
  verl's agent loop sends them.

The greedy responses must equal those of the same model generating directly;
in async mode a seeded sampled request must get the same tokens in a crowd as
alone; ``release`` (async: the server's ``sleep``) must leave no weights
behind. Without ``--model`` it makes a tiny random Qwen2 with its own tokenizer
(``verl_pascal.models``). Prints one JSON line; exits 0 when every check
holds, 1 otherwise.
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


class _Worker:
    """A stand-in for verl's training worker: it builds the rollout's worker side and gives it weights."""

    def __init__(self, config: Any, model_dir: str, device: str) -> None:
        from verl.workers.config import HFModelConfig
        from verl.workers.rollout.base import get_rollout_class

        self.model_dir, self.device = model_dir, device
        self.rollout = get_rollout_class("hf", "async")(config=config, model_config=HFModelConfig(path=model_dir),
                                                         device_mesh=None)

    async def update_weights(self) -> None:
        import torch
        import transformers

        actor = transformers.AutoModelForCausalLM.from_pretrained(self.model_dir, torch_dtype=torch.float32)
        await self.rollout.update_weights(((n, t.detach().to(self.device)) for n, t in actor.state_dict().items()),
                                          global_steps=1)

    def holds_weights(self) -> bool:
        return self.rollout.engine.model is not None


def greedy_reference(model_dir: str, prompts: List[List[int]], response_length: int, eos: int, pad: int) -> List[List[int]]:
    """What the model itself generates for each prompt alone (greedy), cut after its first EOS."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            full = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=response_length, eos_token_id=eos, pad_token_id=pad)
        tokens = full[0, len(prompt):].tolist()
        out.append(tokens[: tokens.index(eos) + 1] if eos in tokens else tokens)
    return out


def run_async(model_dir: str, device: str, response_length: int) -> Dict[str, Any]:
    import types

    import ray
    import transformers

    import verl
    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    config = RolloutConfig(name="hf", dtype="fp32", response_length=response_length, prompt_length=64,
                           calculate_log_probs=True, max_num_seqs=4, tensor_model_parallel_size=1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in PROMPTS]
    want = greedy_reference(model_dir, prompts, response_length, tokenizer.eos_token_id, tokenizer.pad_token_id)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        worker = ray.remote(_Worker).remote(config, model_dir, device)
        ray.get(worker.update_weights.remote())
        replica_cls = RolloutReplicaRegistry.get("hf")  # fails unless VERL_USE_EXTERNAL_MODULES registered ours
        replica = replica_cls(replica_rank=0, config=config, model_config=None, gpus_per_node=1)
        asyncio.run(replica.init_hybrid(types.SimpleNamespace(workers=[worker])))
        server = replica.server_handle
        greedy = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
        seeded = {"temperature": 1.0, "top_p": 0.9, "top_k": 20, "seed": 11, "logprobs": True}
        crowd = [server.generate.remote(prompt_ids=p, sampling_params=dict(greedy), request_id=f"g{i}")
                 for i, p in enumerate(prompts)]
        crowd += [server.generate.remote(prompt_ids=prompts[0], sampling_params=dict(seeded), request_id="s0")]
        answers = ray.get(crowd)
        alone = ray.get(server.generate.remote(prompt_ids=prompts[0], sampling_params=dict(seeded), request_id="s1"))
        ray.get(server.sleep.remote())
        released = not ray.get(worker.holds_weights.remote())
    finally:
        ray.shutdown()
    same = [a.token_ids == w for a, w in zip(answers, want)]
    log_probs = all(a.log_probs is not None and len(a.log_probs) == len(a.token_ids) for a in answers)
    seeded_same = answers[-1].token_ids == alone.token_ids
    return {
        "verl": verl.__version__, "replica": f"{replica_cls.__module__}.{replica_cls.__name__}", "device": device,
        "greedy_same_as_the_model": same, "seeded_same_alone_and_in_a_crowd": seeded_same,
        "log_probs": log_probs, "global_steps": answers[0].extra_fields.get("global_steps"), "released": released,
        "ok": all(same) and seeded_same and log_probs and released,
    }


def async_release() -> bool:
    """True where verl's rollouts are servers (verl 0.7 on), read from verl's version.

    Not from whether ``RolloutReplicaRegistry`` imports: verl 0.6.1 has it too,
    in a module that needs pydantic, which 0.6.1's lock leaves out but a
    downgrade from 0.9.1 leaves installed; 0.6.1 registers only ``("hf", "sync")``.
    """
    import verl
    from packaging.version import Version

    return Version(verl.__version__).release[:2] >= (0, 7)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="", help="a Hugging Face model directory (default: make a tiny random one)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--response-length", type=int, default=16)
    p.add_argument("--mode", choices=["auto", "sync", "async"], default="auto")
    args = p.parse_args(argv)
    mode = args.mode if args.mode != "auto" else ("async" if async_release() else "sync")
    with tempfile.TemporaryDirectory(prefix="verl-pascal-rollout-check-") as work:
        model_dir = args.model
        if not model_dir:
            from verl_pascal.models import make_model

            make_model.make("tiny", work)
            model_dir = work
        check = run_async if mode == "async" else run
        result = check(model_dir, args.device, args.response_length)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
