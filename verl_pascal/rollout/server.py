"""A generation server for verl's async rollouts, on torch and transformers alone (fp32 on Pascal).

From verl 0.7 on, rollouts are servers: verl's agent loop sends each prompt's
token ids with its sampling settings and awaits the response's token ids and
their log-probs, many prompts at a time. vLLM and SGLang, the servers verl
ships, need compute capability 7.0 or newer. This module is the project's
server core; an adapter for verl's replica interface builds on it.

- :func:`decode` generates for a batch of prompts with the model's KV cache.
  Each request samples with its own random generator, seeded from its
  settings, so its tokens do not depend on which other requests share the
  batch. It returns, per request, the token ids, the log-prob of each, and
  why it stopped. The log-probs are vLLM's, in the mode verl's rollout config
  names (``logprobs_mode``): ``raw_logprobs``, the log-softmax of the model's
  logits, or ``processed_logprobs`` (verl's default from 0.7), of the
  distribution the token was drawn from (after temperature, top-k and top-p),
  which is what verl's actor computes at the same temperature.
- :class:`GenerationServer` queues concurrent requests and runs them in
  batches of up to ``max_batch_size``. verl's agent loop sends a step's
  prompts from several worker processes, so they arrive spread over some
  milliseconds: before a batch starts, the server waits while requests keep
  coming (until ``gather_s`` passes with none new, at most ``max_gather_s``),
  so that one step's prompts make one batch rather than a small first batch
  and a second one that waits for it. Requests that arrive while a batch runs
  make the next one. :meth:`GenerationServer.load` takes the trainer's
  new weights without a copy (``load_state_dict(assign=True)`` into the
  model), and :meth:`GenerationServer.release` drops the model, its KV cache
  and activations so that training gets the memory back.
- One bad request fails alone. :func:`for_request` (verl's settings) and
  :meth:`GenerationServer.generate` (the prompt's token ids) refuse, before
  the request is queued, what would break its batch or what the server cannot
  honour, with :class:`RequestRefused` naming the setting and what is
  allowed. A batch that still fails is run again in halves, down to single
  requests, so that only the requests that fail alone get the error.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

import torch


class RequestRefused(ValueError):
    """One request cannot be served as sent; the message names the setting or token and what is allowed.
    Only that request fails: the others queued with it are served."""


#: The smallest temperature above 0 (greedy), well clear of those that overflow the scaled float32
#: logits to inf and the sampling to NaN (1e-40 does).
MIN_TEMPERATURE = 1e-5
#: Seeds a torch generator takes: 0 to 2**64 - 1.
SEED_LIMIT = 2 ** 64
#: verl's ``rollout.logprobs_mode`` values (vLLM's) that this server honours: the model's raw log-probs,
#: or those of the distribution each token was drawn from.
RAW_LOG_PROBS = "raw_logprobs"
PROCESSED_LOG_PROBS = "processed_logprobs"
LOG_PROBS_MODES = (RAW_LOG_PROBS, PROCESSED_LOG_PROBS)


@dataclass(frozen=True)
class SamplingParams:
    """One request's settings, in vLLM's (and so verl's) convention: temperature 0 is greedy,
    top_k -1 or 0 and top_p 1 are off; a token of ``stop_token_ids`` ends the response like EOS.
    Settings it cannot use raise :class:`RequestRefused`."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: Optional[int] = None
    stop_token_ids: FrozenSet[int] = frozenset()
    processed_log_probs: bool = False  # log-probs of the warped distribution (vLLM's processed_logprobs)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise RequestRefused(f"max_tokens={self.max_tokens}: must be 1 or more")
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature < math.inf):
            raise RequestRefused(f"temperature={self.temperature}: use 0 (greedy) or a finite value from "
                                 f"{MIN_TEMPERATURE} up")
        if not 0 < self.top_p <= 1:
            raise RequestRefused(f"top_p={self.top_p}: must be in (0, 1] (1 is off)")
        if self.top_k < -1:
            raise RequestRefused(f"top_k={self.top_k}: must be -1 or 0 (off), or 1 or more")
        if self.seed is not None and not 0 <= self.seed < SEED_LIMIT:
            raise RequestRefused(f"seed={self.seed}: must be an integer from 0 to 2**64 - 1, or None")
        if any(token < 0 for token in self.stop_token_ids):
            raise RequestRefused(f"stop_token_ids={sorted(self.stop_token_ids)}: token ids are 0 or more")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Limits:
    """What the rollout config allows a request: its response length, the context, the seed verl's
    ``full_determinism`` gives every request of a replica (None: each request draws its own), whether
    the replica ignores EOS, and whether its log-probs are processed (``logprobs_mode``)."""

    response_length: int
    prompt_length: int
    max_model_len: Optional[int] = None
    seed: Optional[int] = None
    ignore_eos: bool = False
    processed_log_probs: bool = False

    @property
    def context(self) -> int:
        return self.max_model_len or self.prompt_length + self.response_length


#: Settings of vLLM's (verl sends vLLM's names) that this server cannot honour, each with the values
#: that ask for nothing: a request may carry those (verl sends ``repetition_penalty=1.0`` always).
NEUTRAL: Mapping[str, Tuple[Any, ...]] = {
    "repetition_penalty": (1.0,),
    "presence_penalty": (0.0,),
    "frequency_penalty": (0.0,),
    "min_p": (0.0,),
    "min_tokens": (0,),
    "n": (1,),
    "best_of": (None, 1),
    "stop": (None, "", [], ()),
    "logit_bias": (None, {}),
    "bad_words": (None, [], ()),
    "allowed_token_ids": (None,),
    "prompt_logprobs": (None,),
}


def _is_neutral(value: Any, neutral: Tuple[Any, ...]) -> bool:
    """Whether ``value`` is one of ``neutral`` (0 and 0.0 alike; a bool is never neutral: True == 1)."""
    return not isinstance(value, bool) and any(value == allowed for allowed in neutral)


def refuse_unsupported(params: Mapping[str, Any], limits: Limits) -> None:
    """Refuse, naming the key, a setting this server would otherwise ignore."""
    for key, neutral in NEUTRAL.items():
        if key in params and not _is_neutral(params[key], neutral):
            shown = " or ".join(repr(v) for v in neutral)
            raise RequestRefused(f"{key}={params[key]!r}: the Pascal rollout server cannot honour it; send {shown} "
                                 "or leave it out")
    if "ignore_eos" in params and not (isinstance(params["ignore_eos"], bool)
                                       and params["ignore_eos"] == limits.ignore_eos):
        raise RequestRefused(f"ignore_eos={params['ignore_eos']!r}: the replica's setting "
                             f"(actor_rollout_ref.rollout.ignore_eos={limits.ignore_eos}) applies to every "
                             "request; leave it out of the request")


def integer(key: str, value: Any) -> int:
    """``value`` as an int, or :class:`RequestRefused` naming ``key`` (a float or a bool is no integer)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise RequestRefused(f"{key}={value!r}: must be an integer")
    return int(value)


def real(key: str, value: Any) -> float:
    """``value`` as a float, or :class:`RequestRefused` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RequestRefused(f"{key}={value!r}: must be a number")
    return float(value)


def stop_ids(value: Any) -> FrozenSet[int]:
    """``stop_token_ids`` (None or a list of token ids) as a set of ints."""
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise RequestRefused(f"stop_token_ids={value!r}: must be a list of token ids")
    return frozenset(integer("stop_token_ids", token) for token in value)


def wanted_tokens(params: Mapping[str, Any], prompt_len: int, limits: Limits) -> int:
    """``max_tokens`` (or SGLang's ``max_new_tokens``) if sent, else the response length left in
    prompt plus response."""
    for key in ("max_tokens", "max_new_tokens"):
        if key in params:
            wanted = integer(key, params[key])
            if wanted < 1:
                raise RequestRefused(f"{key}={wanted}: must be 1 or more")
            return wanted
    return min(limits.response_length, limits.prompt_length + limits.response_length - prompt_len)


def for_request(params: Mapping[str, Any], prompt_len: int, limits: Limits) -> SamplingParams:
    """A request's settings the way verl's vLLM server reads them: ``max_tokens`` (or SGLang's
    ``max_new_tokens``) if sent, else the response length left in prompt plus response; never past
    the context. Settings this server cannot honour, and values that would break a batch, are
    refused by name (:class:`RequestRefused`)."""
    room = limits.context - prompt_len
    if room < 1:
        raise RequestRefused(f"the prompt has {prompt_len} tokens: no room to generate within the context of "
                             f"{limits.context} (actor_rollout_ref.rollout.max_model_len, or prompt_length + "
                             "response_length)")
    refuse_unsupported(params, limits)
    seed = params.get("seed", limits.seed)
    return SamplingParams(max_tokens=min(wanted_tokens(params, prompt_len, limits), room),
                          temperature=real("temperature", params.get("temperature", 1.0)),
                          top_p=real("top_p", params.get("top_p", 1.0)),
                          top_k=integer("top_k", params.get("top_k", -1)),
                          seed=None if seed is None else integer("seed", seed),
                          stop_token_ids=stop_ids(params.get("stop_token_ids")),
                          processed_log_probs=limits.processed_log_probs)


def vocab_size_of(hf_config: Any) -> Optional[int]:
    """How many token ids the model embeds (its config's ``vocab_size``, or its text config's); None
    when the config does not say."""
    for config in (hf_config, getattr(hf_config, "text_config", None)):
        size = getattr(config, "vocab_size", None)
        if isinstance(size, int) and size > 0:
            return size
    return None


def checked_prompt(prompt_ids: Any, vocab_size: Optional[int]) -> List[int]:
    """The prompt's token ids as ints, or :class:`RequestRefused` naming the first one the model cannot
    embed (an out-of-range id on a GPU is a device-side assert that ends the worker's CUDA context)."""
    ids = prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else list(prompt_ids)
    if not ids:
        raise RequestRefused("the prompt has no tokens: send at least one token id")
    top = "" if vocab_size is None else f" below {vocab_size} (the model's vocabulary)"
    for position, token in enumerate(ids):
        if (isinstance(token, bool) or not isinstance(token, numbers.Integral) or token < 0
                or (vocab_size is not None and token >= vocab_size)):
            raise RequestRefused(f"prompt token {position} is {token!r}: token ids are integers from 0{top}")
    return [int(token) for token in ids]


@dataclass
class TokenResult:
    """A request's response: token ids, their log-probs, and ``completed`` (EOS or a stop token), ``length`` or
    ``aborted`` (dropped from the queue before it ran)."""

    token_ids: List[int] = field(default_factory=list)
    log_probs: List[float] = field(default_factory=list)
    stop_reason: Optional[str] = None


def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits (one row, or rows that share ``params``) after temperature, then top-k, then top-p
    (always at least one token per row)."""
    scores = logits / params.temperature
    if params.top_k > 0 and params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        ascending, order = torch.sort(scores, dim=-1)
        drop = ascending.softmax(dim=-1).cumsum(dim=-1) <= (1 - params.top_p)
        drop[..., -1] = False
        scores = scores.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return scores


def _groups(params: Sequence[SamplingParams], rows: Sequence[int]) -> Dict[Tuple[float, float, int], List[int]]:
    """The sampled rows among ``rows``, grouped by the settings that shape their distribution."""
    groups: Dict[Tuple[float, float, int], List[int]] = {}
    for row in rows:
        if not params[row].greedy:
            groups.setdefault((params[row].temperature, params[row].top_p, params[row].top_k), []).append(row)
    return groups


def pick_rows(logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[Optional[torch.Generator]],
              rows: Optional[Sequence[int]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The next token of each of ``rows`` (default: all) and its log-prob, as tensors on the logits'
    device: argmax for the greedy rows, and for the others one draw each, with its own generator,
    from its warped distribution. The log-prob is the raw logits' (log-softmax), or for a sampled
    row that asks for processed log-probs the warped distribution's it was drawn from. The rows that
    share settings are warped together, and nothing waits for the device (no transfer to the host),
    so a batch costs a few kernels, not a few per row."""
    rows = list(range(logits.shape[0])) if rows is None else list(rows)
    index = torch.tensor(rows, device=logits.device)
    selected = logits.index_select(0, index)
    tokens = selected.argmax(dim=-1)
    log_probs = torch.log_softmax(selected, dim=-1)
    where = {row: i for i, row in enumerate(rows)}
    for members in _groups(params, rows).values():
        warped = torch.log_softmax(warp(logits.index_select(0, torch.tensor(members, device=logits.device)),
                                        params[members[0]]), dim=-1)
        probs = warped.exp()
        draws = [torch.multinomial(probs[i], num_samples=1, generator=generators[row]) for i, row in enumerate(members)]
        at = torch.tensor([where[row] for row in members], device=logits.device)
        tokens[at] = torch.cat(draws)
        processed = [i for i, row in enumerate(members) if params[row].processed_log_probs]
        if processed:
            log_probs[at[processed]] = warped[processed]
    return tokens, log_probs.gather(1, tokens[:, None]).squeeze(1)


def generator_for(params: SamplingParams, device: torch.device) -> Optional[torch.Generator]:
    """A request's own random generator (None when greedy); unseeded requests get a random seed."""
    if params.greedy:
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(params.seed))
    return generator


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int, device: torch.device
             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask and position_ids of the prompts, padded on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return ids, mask, (mask.cumsum(dim=1) - 1).clamp(min=0)


@torch.no_grad()
def decode(model: Any, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams], eos_token_ids: Set[int],
           pad_token_id: int) -> List[TokenResult]:
    """Generate for each prompt with its settings, as one batch with the model's KV cache. Each step
    picks every running row's token on the device and brings the tokens and their log-probs to the
    host in one transfer."""
    if not prompts or len(prompts) != len(params):
        raise ValueError(f"{len(prompts)} prompts for {len(params)} settings")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("a prompt has no tokens")
    device = next(model.parameters()).device
    generators = [generator_for(p, device) for p in params]
    results = [TokenResult() for _ in prompts]
    ids, mask, positions = left_pad(prompts, pad_token_id, device)
    past = None
    while True:
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[:, -1, :].float()
        running = [row for row, result in enumerate(results) if result.stop_reason is None]
        picked, chosen = pick_rows(logits, params, generators, running)
        tokens = [pad_token_id] * len(results)
        for row, token, log_prob in zip(running, picked.tolist(), chosen.tolist()):
            result = results[row]
            result.token_ids.append(token)
            result.log_probs.append(log_prob)
            if token in eos_token_ids or token in params[row].stop_token_ids:
                result.stop_reason = "completed"
            elif len(result.token_ids) >= params[row].max_tokens:
                result.stop_reason = "length"
            tokens[row] = token
        if all(r.stop_reason is not None for r in results):
            return results
        ids = torch.tensor(tokens, device=device)[:, None]
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        positions = positions[:, -1:] + 1


#: (prompt ids, settings) -> the future its result goes to.
_Pending = Tuple[List[int], SamplingParams, "asyncio.Future[TokenResult]"]


class ServerReleased(RuntimeError):
    """A request came while the server had released its model (training holds the GPU)."""


class GenerationServer:
    """Concurrent requests in, batched generation, results out (one per request).

    ``run(model, prompts, settings, eos_token_ids, pad_token_id)`` generates one batch: by default
    :func:`decode` in a thread. It may be a coroutine function instead, for a batch that runs
    elsewhere (verl's replica runs it in the training worker that holds the weights); ``model`` is
    then whatever that runner needs, and ``vocab_size`` the model's vocabulary (a torch model's own
    config says it otherwise), against which each prompt's token ids are checked before it is queued.
    A batch that fails is run again in halves, down to single requests: a request gets an error
    only if it fails alone.
    """

    def __init__(self, model: Any, eos_token_ids: Sequence[int], pad_token_id: int, max_batch_size: int = 32,
                 run: Optional[Callable[..., List[TokenResult]]] = None, gather_s: float = 0.05,
                 max_gather_s: float = 1.0, vocab_size: Optional[int] = None) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be 1 or more, not {max_batch_size}")
        if gather_s < 0 or max_gather_s < gather_s:
            raise ValueError(f"need 0 <= gather_s <= max_gather_s, not {gather_s} and {max_gather_s}")
        self.gather_s = gather_s
        self.max_gather_s = max_gather_s
        self.model: Any = model
        self.eos_token_ids = set(int(t) for t in eos_token_ids)
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = max_batch_size
        self.vocab_size = vocab_size
        self.batch_sizes: List[int] = []  # one entry per batch gathered (not its reruns): what concurrency gave
        self._run = run or decode
        self._pending: List[_Pending] = []
        self._worker: Optional["asyncio.Task[None]"] = None

    def vocabulary(self) -> Optional[int]:
        """The vocabulary size prompts are checked against: the one given, else a torch model's own."""
        if self.vocab_size is not None or not isinstance(self.model, torch.nn.Module):
            return self.vocab_size
        return vocab_size_of(getattr(self.model, "config", None))

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> TokenResult:
        """Queue one request and wait for its result; a prompt the model cannot take is refused
        (:class:`RequestRefused`) before it is queued."""
        if self.model is None:
            raise ServerReleased("the server released its model; resume it (load) before generating")
        prompt = checked_prompt(prompt_ids, self.vocabulary())
        future: "asyncio.Future[TokenResult]" = asyncio.get_running_loop().create_future()
        self._pending.append((prompt, params, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._drain())
        return await future

    async def _gather(self) -> None:
        """Wait while requests keep arriving: until the batch is full, ``gather_s`` passes with none
        new, or ``max_gather_s`` has passed."""
        await asyncio.sleep(0)  # the requests sent together
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_gather_s
        seen = len(self._pending)
        while 0 < seen < self.max_batch_size and self.gather_s > 0:
            await asyncio.sleep(max(0.0, min(self.gather_s, deadline - loop.time())))
            if len(self._pending) == seen or loop.time() >= deadline:
                return
            seen = len(self._pending)

    async def _drain(self) -> None:
        """Run the queued requests in batches until none is left."""
        while True:
            await self._gather()
            if not self._pending:
                return
            batch, self._pending = self._pending[: self.max_batch_size], self._pending[self.max_batch_size:]
            self.batch_sizes.append(len(batch))
            await self._serve(batch)

    async def _serve(self, batch: List[_Pending]) -> None:
        """Run ``batch`` and answer each request. If it fails, each half is served alone in turn, down
        to single requests, so that only a request that fails by itself gets the error (and a batch
        too big for the memory left may fit in halves)."""
        batch = [pending for pending in batch if not pending[2].done()]  # callers that gave up cost nothing
        if not batch:
            return
        try:
            results = await self._run_batch(batch)
        except Exception as exc:  # the server keeps serving
            if len(batch) == 1 or self.model is None:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                return
            half = len(batch) // 2
            await self._serve(batch[:half])
            await self._serve(batch[half:])
            return
        for (_, _, future), result in zip(batch, results):
            if not future.done():
                future.set_result(result)

    async def _run_batch(self, batch: List[_Pending]) -> List[TokenResult]:
        """One result per request of ``batch``, from the runner."""
        args = (self.model, [b[0] for b in batch], [b[1] for b in batch], self.eos_token_ids, self.pad_token_id)
        if inspect.iscoroutinefunction(self._run):
            results = await self._run(*args)
        else:
            results = await asyncio.to_thread(self._run, *args)
        if len(results) != len(batch):
            raise RuntimeError(f"the runner answered {len(results)} of {len(batch)} requests")
        return list(results)

    def load(self, model: Any) -> None:
        """Serve with ``model`` from now on (the trainer's weights of this step)."""
        self.model = model

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Take the trainer's new weights into the served model without copying them."""
        if self.model is None:
            raise ServerReleased("the server released its model: load a model before its weights")
        self.model.load_state_dict(dict(weights), assign=True, strict=False)
        if hasattr(self.model, "tie_weights"):
            self.model.tie_weights()

    def abort(self) -> int:
        """Answer every queued request that has not started with ``aborted`` and no tokens (the batch
        that runs finishes); how many were dropped."""
        dropped, self._pending = self._pending, []
        for _, _, future in dropped:
            if not future.done():
                future.set_result(TokenResult(stop_reason="aborted"))
        return len(dropped)

    def release(self) -> None:
        """Drop the model; the KV cache and activations live only while a batch runs. What was queued
        must be done first."""
        if self._pending:
            raise RuntimeError(f"{len(self._pending)} request(s) still queued: wait for them before releasing")
        self.model = None
