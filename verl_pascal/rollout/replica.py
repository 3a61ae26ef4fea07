"""The Pascal rollout as verl's async rollout server (verl 0.7 and newer; hybrid mode).

From verl 0.7 on every rollout is a server: verl's agent loop sends each
prompt's token ids with its sampling settings to a server actor and awaits the
response's token ids and log-probs, many prompts at once. verl ships vLLM,
SGLang and TensorRT-LLM servers, none of which runs below compute capability
7.0. Importing this module registers the project's server under the rollout
name ``hf``, in both of verl's registries:

- ``RolloutReplicaRegistry`` (``verl/workers/rollout/replica.py``) gets
  :class:`PascalReplica`: one replica per training worker (tensor, data and
  pipeline parallel sizes of 1), colocated with it on its GPU (verl's hybrid
  engine).
- the worker-side registry gets :class:`PascalAsyncRollout` as ``("hf",
  "async")``: the object verl's FSDP engine worker builds in its own process.

How a step goes:

1. ``update_weights``: the worker gathers the actor's full weights and hands
   them over as ``(name, tensor)`` pairs; the rollout builds the Hugging Face
   model around those very tensors (no second copy).
2. Generation: the agent loop calls :meth:`PascalServer.generate` on the
   replica's server actor (no GPU of its own). The server batches the requests
   that are in flight (:class:`~verl_pascal.rollout.server.GenerationServer`)
   and runs each batch in the worker's process, through Ray's ``__ray_call__``
   on the worker actor, where the model is: one process, one CUDA context, one
   copy of the weights. The KV cache lives only while a batch runs.
3. ``sleep``: the server has the worker drop the model, so that training gets
   the memory back.

verl 0.7.1 to 0.9.1 import every module named in ``VERL_USE_EXTERNAL_MODULES``
whenever verl is imported, in every process (Ray's workers too); the launch
script sets it to this module for the releases whose folder says so. No verl
file is changed for it.
"""

from __future__ import annotations

from typing import Any, Dict, Generator, List, Optional, Sequence, Set, Tuple

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from verl.utils.device import get_torch_device
from verl.workers.rollout import base
from verl.workers.rollout import replica as verl_replica

from verl_pascal.rollout.engine import (HFEngine, RolloutError, attention, dtype_of, refuse, rollout_device,
                                       server_unsupported, token_ids)
from verl_pascal.rollout.generate import setting
from verl_pascal.rollout.server import (PROCESSED_LOG_PROBS, RAW_LOG_PROBS, GenerationServer, Limits, SamplingParams,
                                       TokenResult, decode, for_request, vocab_size_of)

NAME = "hf"
MODE = "async"


# --------------------------------------------------------------------------
# Worker side: in verl's FSDP engine worker, on its GPU
# --------------------------------------------------------------------------

#: The rollout of this process (a training worker holds one); the server's batches reach it here.
_LOCAL: Optional["PascalAsyncRollout"] = None


def local_rollout() -> "PascalAsyncRollout":
    if _LOCAL is None:
        raise RolloutError("this process has no Pascal rollout: is actor_rollout_ref.rollout.name=hf and "
                           f"{__name__} in VERL_USE_EXTERNAL_MODULES?")
    return _LOCAL


class PascalAsyncRollout(base.BaseRollout):
    """The model for the replica's batches, built around the actor's weights, in the worker's process."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1,
                 **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        refuse(server_unsupported(self.config))
        self.engine = HFEngine(hf_config=self.model_config.hf_config, device=rollout_device(),
                               dtype=dtype_of(self.config.dtype), attn_implementation=attention(self.model_config))
        self.eos_token_ids, self.pad_token_id = token_ids(self.model_config)
        self.global_steps: Optional[int] = None
        global _LOCAL
        _LOCAL = self

    async def resume(self, tags: List[str]) -> None:
        """Nothing to bring back: the weights arrive with ``update_weights``, the KV cache lives per batch."""

    async def update_weights(self, weights: Generator[Tuple[str, torch.Tensor], None, None],
                             global_steps: Optional[int] = None, wire_format: str = "named_tensors",
                             **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise RolloutError(f"weights sent as {wire_format!r}: the Pascal rollout takes named tensors (use "
                               "actor_rollout_ref.rollout.checkpoint_engine.backend=naive)")
        if kwargs.get("peft_config") is not None:
            raise RolloutError("LoRA without merging is not supported by the Pascal rollout: set "
                               "actor_rollout_ref.model.lora.merge=True or leave LoRA off")
        self.engine.load(weights)
        self.global_steps = global_steps

    async def release(self) -> None:
        self.drop()

    def drop(self) -> None:
        """Let go of the model (and so of the actor's gathered weights) and give the cache back."""
        self.engine.release()
        if self.engine.device.type != "cpu":
            get_torch_device().empty_cache()

    def run(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams], eos_token_ids: Set[int],
            pad_token_id: int) -> Tuple[List[TokenResult], Optional[int]]:
        """One batch from the server, and the training step its weights come from."""
        if self.engine.model is None:
            raise RolloutError("the rollout has no weights: verl must call update_weights before generating")
        return decode(self.engine.model, prompts, params, eos_token_ids, pad_token_id), self.global_steps


# What the server runs in the worker (Ray's __ray_call__ passes the worker actor first).

def _node_id(actor: Any) -> str:
    return ray.get_runtime_context().get_node_id()


def _token_ids(actor: Any) -> Tuple[List[int], int]:
    rollout = local_rollout()
    return rollout.eos_token_ids, rollout.pad_token_id


def _vocab_size(actor: Any) -> Optional[int]:
    return vocab_size_of(local_rollout().engine.hf_config)


def _run(actor: Any, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams], eos: Set[int],
         pad: int) -> Tuple[List[TokenResult], Optional[int]]:
    return local_rollout().run(prompts, params, eos, pad)


def _drop(actor: Any) -> None:
    local_rollout().drop()


# --------------------------------------------------------------------------
# The server actor: what verl's agent loop talks to
# --------------------------------------------------------------------------


class PascalServer:
    """verl's rollout server interface for one replica; its batches run in the replica's worker."""

    def __init__(self, worker: Any, config: Any, replica_rank: int) -> None:
        self.worker = worker
        self.calculate_log_probs = bool(setting(config, "calculate_log_probs", False))
        seed = setting(config, "seed", 0) if setting(config, "full_determinism", False) else None
        self.ignore_eos = bool(setting(config, "ignore_eos", False))
        self.limits = Limits(response_length=int(setting(config, "response_length", 512)),
                             prompt_length=int(setting(config, "prompt_length", 512)),
                             max_model_len=setting(config, "max_model_len", None),
                             seed=None if seed is None else replica_rank + int(seed), ignore_eos=self.ignore_eos,
                             processed_log_probs=setting(config, "logprobs_mode", RAW_LOG_PROBS) == PROCESSED_LOG_PROBS)
        self.max_batch_size = int(setting(config, "max_num_seqs", 64))
        self.generation: Optional[GenerationServer] = None
        self.global_steps: Optional[int] = None

    async def start(self) -> None:
        eos, pad = await self.worker.__ray_call__.remote(_token_ids)
        vocab_size = await self.worker.__ray_call__.remote(_vocab_size)
        self.generation = GenerationServer(self.worker, [] if self.ignore_eos else eos, pad,
                                           max_batch_size=self.max_batch_size, run=self._run_in_worker,
                                           vocab_size=vocab_size)

    async def _run_in_worker(self, worker: Any, prompts: List[List[int]], params: List[SamplingParams],
                             eos: Set[int], pad: int) -> List[TokenResult]:
        results, steps = await worker.__ray_call__.remote(_run, prompts, params, eos, pad)
        self.global_steps = steps if steps is not None else self.global_steps
        return results

    async def generate(self, prompt_ids: List[int], sampling_params: Dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> Any:
        """One request, answered with its tokens. A request the server cannot serve as sent raises
        :class:`~verl_pascal.rollout.server.RequestRefused` (its message names the setting or token and
        what is allowed) before it is queued; the agent loop gets it through Ray, and the requests
        batched beside it are served."""
        if image_data is not None or video_data is not None or kwargs.get("audio_data") is not None:
            raise RolloutError("the Pascal rollout generates text only: the request carries images, video or audio")
        if self.generation is None:
            raise RolloutError("the Pascal rollout server was not started")
        params = for_request(sampling_params, len(prompt_ids), self.limits)
        result = await self.generation.generate(list(prompt_ids), params)
        want_log_probs = bool(sampling_params.get("logprobs", self.calculate_log_probs))
        return verl_replica.TokenOutput(token_ids=result.token_ids,
                                        log_probs=result.log_probs if want_log_probs else None,
                                        stop_reason="aborted" if result.stop_reason == "aborted" else "completed",
                                        extra_fields={"global_steps": self.global_steps})

    async def sleep(self) -> None:
        """Training takes the GPU: the worker drops the model and the cache."""
        await self.worker.__ray_call__.remote(_drop)

    async def wake_up(self, tags: Optional[List[str]] = None) -> None:
        """The weights come back with the worker's next ``update_weights``."""

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> Dict[str, Any]:
        return {"aborted": self.generation.abort() if self.generation else 0}

    async def resume_generation(self) -> None:
        """Nothing is held back after an abort: new requests are served."""

    async def clear_kv_cache(self) -> None:
        """No KV cache outlives its batch."""

    async def release_kv_cache(self) -> None:
        """No KV cache outlives its batch."""

    async def resume_kv_cache(self) -> None:
        """No KV cache outlives its batch."""

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def start_profile(self, **kwargs: Any) -> None:
        """No profiler of its own: profile the worker (verl's actor_rollout_ref.actor.profiler)."""

    async def stop_profile(self) -> None:
        """No profiler of its own."""


class PascalReplica(verl_replica.RolloutReplica):
    """One replica per training worker, its server on the worker's node (hybrid mode only)."""

    def get_ray_class_with_init_args(self) -> Any:
        raise RolloutError("the Pascal rollout runs only colocated with training (verl's hybrid engine): set "
                           "actor_rollout_ref.hybrid_engine=True and leave rollout.nnodes at 0")

    async def launch_servers(self) -> None:
        refuse(server_unsupported(self.config))
        if self.rollout_mode != verl_replica.RolloutMode.HYBRID:
            self.get_ray_class_with_init_args()
        if len(self.workers) != 1:
            raise RolloutError(f"a Pascal replica serves one worker, not {len(self.workers)}")
        worker = self.workers[0]
        node_id = await worker.__ray_call__.remote(_node_id)
        server = ray.remote(PascalServer).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            num_cpus=0, max_concurrency=self.max_concurrency,
        ).remote(worker, self.config, self.replica_rank)
        await server.start.remote()
        self.servers = [server]
        self._server_handle = server
        # verl's router keys its servers by address; this server speaks Ray only (no HTTP endpoint).
        self._server_address = f"pascal-rollout-replica-{self.replica_rank}"


def register() -> None:
    """Make ``actor_rollout_ref.rollout.name=hf`` build this server (and its worker side)."""
    base._ROLLOUT_REGISTRY[(NAME, MODE)] = f"{__name__}.{PascalAsyncRollout.__name__}"
    verl_replica.RolloutReplicaRegistry.register(NAME, lambda: PascalReplica)


register()
