"""The generation server core for verl's async rollouts (verl_pascal/rollout/server.py), on the CPU.

A tiny random Qwen2 in fp32 answers requests. References here: the model's
own greedy ``generate`` for greedy requests, and a full forward over prompt
and response for the log-probs. Concurrency: requests in flight together,
batched by the server, must get exactly what each gets alone with its seed.
"""

from __future__ import annotations

import asyncio
import re
from typing import List

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the rollout needs transformers (requirements-dev)")

from verl_pascal.rollout import server as srv  # noqa: E402

PAD, EOS, VOCAB = 0, 5, 48
PROMPTS: List[List[int]] = [[7, 8, 9, 10, 11], [12, 13], [14, 15, 16], [20], [21, 22, 23, 24, 25, 26, 27], [30, 31]]


def tiny_model(seed: int = 0) -> "transformers.PreTrainedModel":
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True, attn_implementation="sdpa")
    return transformers.Qwen2ForCausalLM(config).to(torch.float32).eval()


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def alone(model, prompt: List[int], params: srv.SamplingParams) -> srv.TokenResult:
    return srv.decode(model, [prompt], [params], {EOS}, PAD)[0]


def test_greedy_requests_match_the_models_own_generate(model) -> None:
    params = srv.SamplingParams(max_tokens=12, temperature=0)
    results = srv.decode(model, PROMPTS, [params] * len(PROMPTS), {EOS}, PAD)
    for prompt, result in zip(PROMPTS, results):
        with torch.no_grad():
            ids = torch.tensor([prompt])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                                 eos_token_id=EOS, pad_token_id=PAD, temperature=None, top_p=None, top_k=None)
        expected = out[0, len(prompt):].tolist()
        if EOS in expected:
            expected = expected[: expected.index(EOS) + 1]
        assert result.token_ids == expected


def response_logits(model, prompt: List[int], result: srv.TokenResult) -> "torch.Tensor":
    """The logits that chose each of ``result``'s tokens, from one forward pass of prompt and response."""
    ids = torch.tensor([prompt + result.token_ids])
    with torch.no_grad():
        return model(input_ids=ids).logits[0, len(prompt) - 1: -1].float()


def of_tokens(log_probs: "torch.Tensor", result: srv.TokenResult) -> "torch.Tensor":
    return log_probs.gather(1, torch.tensor(result.token_ids)[:, None]).squeeze(1)


def test_log_probs_are_the_models_for_each_response_token(model) -> None:
    params = srv.SamplingParams(max_tokens=10, temperature=0.8, top_k=20, top_p=0.9, seed=3)
    for prompt, result in zip(PROMPTS, srv.decode(model, PROMPTS, [params] * len(PROMPTS), {EOS}, PAD)):
        expected = of_tokens(torch.log_softmax(response_logits(model, prompt, result), dim=-1), result)
        assert torch.allclose(torch.tensor(result.log_probs), expected, atol=1e-5)


def test_processed_log_probs_are_those_of_the_distribution_each_token_was_drawn_from(model) -> None:
    """verl's default logprobs_mode (processed_logprobs, from 0.7): the log-prob under the temperature,
    top-k and top-p the token was sampled with. Without top-k and top-p that is what verl's actor
    computes at the rollout's temperature, so the rollout-actor gap is rounding at any temperature;
    the raw log-probs (the negative control) are not."""
    warped = srv.SamplingParams(max_tokens=10, temperature=0.7, top_k=20, top_p=0.9, seed=3, processed_log_probs=True)
    plain = srv.SamplingParams(max_tokens=10, temperature=0.7, seed=3, processed_log_probs=True)
    raw = srv.SamplingParams(max_tokens=10, temperature=0.7, seed=3)
    for prompt, (w, p, r) in zip(PROMPTS, zip(*(srv.decode(model, PROMPTS, [s] * len(PROMPTS), {EOS}, PAD)
                                               for s in (warped, plain, raw)))):
        assert p.token_ids == r.token_ids  # the mode changes the log-probs, never the tokens
        expected = of_tokens(torch.log_softmax(srv.warp(response_logits(model, prompt, w), warped), dim=-1), w)
        assert torch.allclose(torch.tensor(w.log_probs), expected, atol=1e-5)
        actor = of_tokens(torch.log_softmax(response_logits(model, prompt, p) / 0.7, dim=-1), p)
        assert (torch.tensor(p.log_probs) - actor).abs().max() < 1e-5
        assert (torch.tensor(r.log_probs) - actor).abs().max() > 1e-2
    # greedy requests keep the model's log-probs in either mode
    greedy = [srv.decode(model, PROMPTS[:1], [srv.SamplingParams(max_tokens=6, temperature=0, processed_log_probs=m)],
                         {EOS}, PAD)[0].log_probs for m in (False, True)]
    assert greedy[0] == greedy[1]


def test_a_seeded_request_gets_the_same_tokens_alone_and_in_any_batch(model) -> None:
    params = [srv.SamplingParams(max_tokens=10, temperature=1.0, top_p=0.95, seed=100 + i) for i in range(len(PROMPTS))]
    batched = srv.decode(model, PROMPTS, params, {EOS}, PAD)
    reversed_batch = srv.decode(model, PROMPTS[::-1], params[::-1], {EOS}, PAD)[::-1]
    for i, prompt in enumerate(PROMPTS):
        single = alone(model, prompt, params[i])
        assert batched[i].token_ids == single.token_ids == reversed_batch[i].token_ids
    assert len({tuple(r.token_ids) for r in batched}) > 1


def test_different_seeds_sample_different_responses(model) -> None:
    runs = {tuple(alone(model, PROMPTS[0], srv.SamplingParams(max_tokens=8, temperature=1.0, seed=s)).token_ids)
            for s in range(6)}
    assert len(runs) > 1


def test_a_request_stops_at_eos_or_its_own_length(model) -> None:
    long = srv.SamplingParams(max_tokens=40, temperature=0)
    short = srv.SamplingParams(max_tokens=3, temperature=0)
    results = srv.decode(model, [PROMPTS[0], PROMPTS[0]], [long, short], {EOS}, PAD)
    assert results[1].token_ids == results[0].token_ids[:3] and results[1].stop_reason == "length"
    assert results[0].stop_reason == ("completed" if results[0].token_ids[-1] == EOS else "length")
    eos_now = srv.decode(model, [PROMPTS[0]], [long], {alone(model, PROMPTS[0], short).token_ids[0]}, PAD)[0]
    assert eos_now.token_ids == results[1].token_ids[:1] and eos_now.stop_reason == "completed"


def test_top_k_one_is_greedy_whatever_the_seed(model) -> None:
    greedy = alone(model, PROMPTS[2], srv.SamplingParams(max_tokens=8, temperature=0)).token_ids
    for seed in range(3):
        assert alone(model, PROMPTS[2], srv.SamplingParams(max_tokens=8, temperature=1.3, top_k=1, seed=seed)).token_ids == greedy


def test_settings_from_verls_agent_loop() -> None:
    limits = srv.Limits(response_length=64, prompt_length=32)
    params = srv.for_request({"temperature": 0.7, "top_p": 0.8, "top_k": 5, "seed": 9, "repetition_penalty": 1.0,
                              "logprobs": True}, prompt_len=10, limits=limits)
    assert params == srv.SamplingParams(max_tokens=64, temperature=0.7, top_p=0.8, top_k=5, seed=9)
    assert srv.for_request({"max_tokens": 7}, 10, limits).max_tokens == 7
    assert srv.for_request({"max_new_tokens": 9}, 10, limits).max_tokens == 9
    # a long prompt (multi-turn) gets what is left of prompt + response, never past the context
    assert srv.for_request({}, 60, limits).max_tokens == 36
    assert srv.for_request({"max_tokens": 500}, 60, limits).max_tokens == 36
    assert srv.for_request({}, 10, srv.Limits(64, 32, max_model_len=40)).max_tokens == 30
    # verl's full_determinism seeds every request of a replica; a request's own seed wins
    assert srv.for_request({}, 10, srv.Limits(64, 32, seed=3)).seed == 3
    assert srv.for_request({"seed": 4}, 10, srv.Limits(64, 32, seed=3)).seed == 4
    assert srv.for_request({}, 10, limits).seed is None
    # the replica's logprobs_mode reaches every request
    assert srv.for_request({}, 10, srv.Limits(64, 32, processed_log_probs=True)).processed_log_probs
    assert not srv.for_request({}, 10, limits).processed_log_probs
    with pytest.raises(ValueError, match="no room to generate"):
        srv.for_request({}, 96, limits)
    with pytest.raises(ValueError, match="repetition_penalty"):
        srv.for_request({"repetition_penalty": 1.1}, 10, limits)
    with pytest.raises(ValueError, match="max_tokens"):
        srv.SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        srv.SamplingParams(max_tokens=4, top_p=0)


# --------------------------------------------------------------------------
# The server: concurrency, weights, release
# --------------------------------------------------------------------------


def requests() -> List[srv.SamplingParams]:
    return [srv.SamplingParams(max_tokens=8, temperature=1.0 if i % 3 else 0, top_k=10 if i % 2 else -1, seed=i)
            for i in range(16)]


def test_many_requests_in_flight_get_what_each_gets_alone_and_are_batched(model) -> None:
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(16)]
    one_at_a_time = [alone(model, p, s) for p, s in zip(prompts, requests())]
    server = srv.GenerationServer(model, [EOS], PAD, max_batch_size=6)

    async def all_at_once():
        return await asyncio.gather(*(server.generate(p, s) for p, s in zip(prompts, requests())))

    results = asyncio.run(all_at_once())
    assert [r.token_ids for r in results] == [r.token_ids for r in one_at_a_time]
    for got, want in zip(results, one_at_a_time):
        assert got.log_probs == pytest.approx(want.log_probs, abs=1e-5) and got.stop_reason == want.stop_reason
    assert server.batch_sizes == [6, 6, 4]


async def send_spread(server: srv.GenerationServer, prompts: List[List[int]], params: srv.SamplingParams,
                      every_s: float) -> List[srv.TokenResult]:
    """The requests one after another, ``every_s`` apart (as verl's agent-loop workers send them)."""
    futures = []
    for prompt in prompts:
        futures.append(asyncio.ensure_future(server.generate(prompt, params)))
        await asyncio.sleep(every_s)
    return await asyncio.gather(*futures)


def test_requests_spread_over_less_than_the_gather_time_make_one_batch(model) -> None:
    """One step's prompts come from several processes, milliseconds apart: they must not be split
    into a small first batch and a second one that waits for it (which doubles a step's generation)."""
    server = srv.GenerationServer(model, [EOS], PAD, max_batch_size=32, gather_s=0.1)
    params = srv.SamplingParams(max_tokens=6, temperature=0)
    results = asyncio.run(send_spread(server, PROMPTS, params, every_s=0.02))
    assert server.batch_sizes == [len(PROMPTS)]
    assert [r.token_ids for r in results] == [alone(model, p, params).token_ids for p in PROMPTS]


def test_without_a_gather_time_spread_requests_are_split(model) -> None:
    """The negative control of the test above: with no waiting, the same spread makes several batches."""
    server = srv.GenerationServer(model, [EOS], PAD, max_batch_size=32, gather_s=0)
    params = srv.SamplingParams(max_tokens=6, temperature=0)
    asyncio.run(send_spread(server, PROMPTS, params, every_s=0.02))
    assert len(server.batch_sizes) > 1 and sum(server.batch_sizes) == len(PROMPTS)


def test_gathering_stops_at_a_full_batch_or_the_longest_wait(model) -> None:
    params = srv.SamplingParams(max_tokens=4, temperature=0)
    full = srv.GenerationServer(model, [EOS], PAD, max_batch_size=2, gather_s=5.0, max_gather_s=10.0)

    async def timed(server, every_s):
        start = asyncio.get_running_loop().time()
        await send_spread(server, PROMPTS[:4], params, every_s)
        return asyncio.get_running_loop().time() - start

    assert asyncio.run(timed(full, 0)) < 2.0 and full.batch_sizes == [2, 2]
    # a steady trickle, each request within gather_s of the last, is cut at max_gather_s
    trickle = srv.GenerationServer(model, [EOS], PAD, max_batch_size=32, gather_s=0.2, max_gather_s=0.25)
    asyncio.run(timed(trickle, 0.1))
    assert len(trickle.batch_sizes) > 1 and sum(trickle.batch_sizes) == 4
    with pytest.raises(ValueError, match="gather_s"):
        srv.GenerationServer(model, [EOS], PAD, gather_s=2.0, max_gather_s=1.0)


def test_requests_that_arrive_while_a_batch_runs_make_the_next_batch(model) -> None:
    started = []

    async def slow(handle, prompts, params, eos, pad):
        started.append(len(prompts))
        await asyncio.sleep(0.3)
        return srv.decode(handle, prompts, params, eos, pad)

    server = srv.GenerationServer(model, [EOS], PAD, max_batch_size=32, run=slow, gather_s=0.02)
    params = srv.SamplingParams(max_tokens=6, temperature=0)

    async def staggered():
        first = [asyncio.ensure_future(server.generate(p, params)) for p in PROMPTS[:3]]
        await asyncio.sleep(0.15)  # the first batch has started
        later = [asyncio.ensure_future(server.generate(p, params)) for p in PROMPTS[3:]]
        return await asyncio.gather(*first, *later)

    results = asyncio.run(staggered())
    assert started == [3, len(PROMPTS) - 3]
    assert [r.token_ids for r in results] == [alone(model, p, params).token_ids for p in PROMPTS]


def test_a_batch_that_fails_once_is_run_again_in_halves_and_every_request_is_answered(model) -> None:
    """A batch that fails for the batch's sake (memory, say) must not fail its requests: its halves
    are run, and each request gets what it gets alone."""
    calls = []

    def run(*args):
        calls.append(len(args[1]))
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory (stand-in)")
        return srv.decode(*args)

    server = srv.GenerationServer(model, [EOS], PAD, max_batch_size=4, run=run)
    params = srv.SamplingParams(max_tokens=4, temperature=0)

    async def all_four():
        return await asyncio.gather(*(server.generate(p, params) for p in PROMPTS[:4]), return_exceptions=True)

    results = asyncio.run(all_four())
    assert [r.token_ids for r in results] == [alone(model, p, params).token_ids for p in PROMPTS[:4]]
    assert calls == [4, 2, 2] and server.batch_sizes == [4]


def test_a_request_that_fails_alone_gets_the_error_and_the_rest_of_its_batch_is_served(model) -> None:
    """A failure that no check foresaw, in one request: that request gets the error, every other
    request of its batch its tokens, and the server keeps serving."""
    poison = PROMPTS[3]

    def run(handle, prompts, params, eos, pad):
        if poison in prompts:
            raise RuntimeError("stand-in for a failure only this prompt causes")
        return srv.decode(handle, prompts, params, eos, pad)

    server = srv.GenerationServer(model, [EOS], PAD, max_batch_size=32, run=run)
    params = srv.SamplingParams(max_tokens=4, temperature=0)

    async def batch():
        return await asyncio.gather(*(server.generate(p, params) for p in PROMPTS), return_exceptions=True)

    results = asyncio.run(batch())
    assert isinstance(results[3], RuntimeError) and "only this prompt" in str(results[3])
    good = [i for i in range(len(PROMPTS)) if i != 3]
    assert [results[i].token_ids for i in good] == [alone(model, PROMPTS[i], params).token_ids for i in good]
    assert asyncio.run(server.generate(PROMPTS[0], params)).token_ids == results[0].token_ids


def test_a_runner_that_answers_too_few_requests_fails_them_instead_of_leaving_them_waiting(model) -> None:
    server = srv.GenerationServer(model, [EOS], PAD, run=lambda handle, prompts, *rest: [])
    params = srv.SamplingParams(max_tokens=2, temperature=0)

    async def guarded():  # the timeout only keeps a regression from hanging the suite
        return await asyncio.wait_for(asyncio.gather(*(server.generate(p, params) for p in PROMPTS[:2]),
                                                     return_exceptions=True), timeout=30)

    results = asyncio.run(guarded())
    assert all(isinstance(r, RuntimeError) and "answered 0 of 1" in str(r) for r in results)


# --------------------------------------------------------------------------
# One bad request is refused alone, before it is queued
# --------------------------------------------------------------------------

LIMITS = srv.Limits(response_length=16, prompt_length=16)
GOOD = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False, "seed": 1}


def recording_server(model, seen: List[List[int]]) -> srv.GenerationServer:
    """A server whose runner records every prompt it is given (what would reach the GPU)."""
    def run(handle, prompts, params, eos, pad):
        seen.extend(prompts)
        return srv.decode(handle, prompts, params, eos, pad)

    return srv.GenerationServer(model, [EOS], PAD, max_batch_size=32, run=run)


async def request(server: srv.GenerationServer, prompt, settings) -> srv.TokenResult:
    """What verl's replica does with a request: its settings read, then queued."""
    return await server.generate(prompt, srv.for_request(settings, len(prompt), LIMITS))


@pytest.mark.parametrize("prompt, settings, match", [
    ([], GOOD, "the prompt has no tokens"),
    ([7, VOCAB], GOOD, rf"prompt token 1 is {VOCAB}: token ids are integers from 0 below {VOCAB}"),
    ([7, -1], GOOD, "prompt token 1 is -1"),
    ([7, 8.0], GOOD, "prompt token 1 is 8.0"),
    ([7, True], GOOD, "prompt token 1 is True"),
    ([7, 8], {**GOOD, "temperature": float("nan")}, "temperature=nan"),
    ([7, 8], {**GOOD, "temperature": 1e-40}, "temperature=1e-40: use 0 .greedy. or a finite value from 1e-05 up"),
    ([7, 8], {**GOOD, "temperature": float("inf")}, "temperature=inf"),
    ([7, 8], {**GOOD, "temperature": -0.5}, "temperature=-0.5"),
    ([7, 8], {**GOOD, "top_p": float("nan")}, "top_p=nan"),
    ([7, 8], {**GOOD, "top_k": -2}, "top_k=-2"),
    ([7, 8], {**GOOD, "top_k": 2.5}, "top_k=2.5: must be an integer"),
    ([7, 8], {**GOOD, "seed": 2 ** 64}, "seed=18446744073709551616: must be an integer from 0 to 2..64 - 1"),
    ([7, 8], {**GOOD, "seed": -1}, "seed=-1"),
    ([7, 8], {**GOOD, "seed": 1.5}, "seed=1.5: must be an integer"),
    ([7, 8], {**GOOD, "max_tokens": 0}, "max_tokens=0: must be 1 or more"),
    ([7, 8], {**GOOD, "max_tokens": -3}, "max_tokens=-3: must be 1 or more"),
    ([7, 8], {**GOOD, "max_new_tokens": 0}, "max_new_tokens=0: must be 1 or more"),
    ([7, 8], {**GOOD, "max_tokens": 2.5}, "max_tokens=2.5: must be an integer"),
    ([7, 8], {**GOOD, "stop_token_ids": [-1]}, "stop_token_ids"),
    ([7, 8], {**GOOD, "stop_token_ids": "x"}, "stop_token_ids='x': must be a list of token ids"),
])
def test_one_bad_request_among_many_is_refused_alone_and_never_reaches_the_model(model, prompt, settings,
                                                                                  match) -> None:
    """In verl a batch is a step's prompts: a bad one must not take the others down with it, nor
    reach the GPU (an out-of-range id there is a device-side assert that ends the CUDA context)."""
    seen: List[List[int]] = []
    server = recording_server(model, seen)
    good = [PROMPTS[0], PROMPTS[1], PROMPTS[2]]

    async def crowd():
        sent = [request(server, p, GOOD) for p in good[:2]] + [request(server, prompt, settings),
                                                                 request(server, good[2], GOOD)]
        return await asyncio.gather(*sent, return_exceptions=True)

    results = asyncio.run(crowd())
    refused = results[2]
    assert isinstance(refused, srv.RequestRefused), refused
    assert "\n" not in str(refused) and re.search(match, str(refused)), str(refused)
    served = [results[0], results[1], results[3]]
    one = srv.for_request(GOOD, 5, LIMITS)
    assert [r.token_ids for r in served] == [alone(model, p, one).token_ids for p in good]
    assert sorted(seen) == sorted(good) and server.batch_sizes == [3]


@pytest.mark.parametrize("key, value", [
    ("presence_penalty", 0.5), ("frequency_penalty", -0.2), ("min_p", 0.1), ("stop", ["\n"]), ("stop", "Answer:"),
    ("logit_bias", {5: 10.0}), ("n", 0), ("n", 2), ("best_of", 3), ("min_tokens", 4), ("prompt_logprobs", 1),
    ("repetition_penalty", 1.1), ("presence_penalty", float("nan")), ("n", True), ("ignore_eos", True),
])
def test_a_setting_the_server_cannot_honour_is_refused_by_name(key, value) -> None:
    with pytest.raises(srv.RequestRefused, match=f"^{key}="):
        srv.for_request({**GOOD, key: value}, 5, LIMITS)


def test_the_requests_verl_sends_with_neutral_values_are_accepted() -> None:
    """verl 0.9.1's agent loop sends temperature, top_p, top_k, repetition_penalty=1.0 and logprobs
    (greedy for validation), its tool agent loop stop_token_ids; vLLM's other settings at the values
    that ask for nothing must pass too."""
    verl_default = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    greedy = {**verl_default, "temperature": 0, "top_p": 1.0, "top_k": -1}
    neutral = {"presence_penalty": 0.0, "frequency_penalty": 0, "min_p": 0.0, "stop": None, "logit_bias": None,
               "n": 1, "best_of": None, "min_tokens": 0, "prompt_logprobs": None, "ignore_eos": False,
               "stop_token_ids": None, "max_tokens": 8}
    assert srv.for_request(verl_default, 5, LIMITS) == srv.SamplingParams(max_tokens=16)
    assert srv.for_request(greedy, 5, LIMITS).greedy
    assert srv.for_request({**verl_default, **neutral}, 5, LIMITS) == srv.SamplingParams(max_tokens=8)
    empty = {"stop": [], "logit_bias": {}, "bad_words": [], "stop_token_ids": [], "presence_penalty": 0}
    assert srv.for_request({**verl_default, **empty}, 5, LIMITS) == srv.SamplingParams(max_tokens=16)
    assert srv.for_request({"ignore_eos": True}, 5, srv.Limits(16, 16, ignore_eos=True)).max_tokens == 16
    assert srv.for_request({"temperature": srv.MIN_TEMPERATURE, "seed": 2 ** 64 - 1}, 5, LIMITS).seed == 2 ** 64 - 1


def test_the_smallest_temperature_allowed_samples(model) -> None:
    params = srv.SamplingParams(max_tokens=6, temperature=srv.MIN_TEMPERATURE, top_p=0.9, seed=2 ** 64 - 1)
    result = alone(model, PROMPTS[0], params)
    assert len(result.token_ids) == 6 or result.stop_reason == "completed"
    assert all(lp == lp and lp <= 0 for lp in result.log_probs)


def test_stop_token_ids_end_a_response_like_eos(model) -> None:
    """verl's tool agent loop sends the tool parser's stop tokens; a response ends at the first one."""
    params = srv.SamplingParams(max_tokens=12, temperature=1.0, seed=5)
    full = alone(model, PROMPTS[0], params).token_ids
    stop = next(t for i, t in enumerate(full) if i > 0 and t not in full[:i] and t != EOS)
    sent = srv.for_request({"temperature": 1.0, "seed": 5, "stop_token_ids": [stop], "max_tokens": 12},
                           len(PROMPTS[0]), LIMITS)
    result = alone(model, PROMPTS[0], sent)
    assert result.token_ids == full[: full.index(stop) + 1] and result.stop_reason == "completed"
    assert len(result.token_ids) > 1


def test_the_vocabulary_comes_from_the_config_or_its_text_config(model) -> None:
    assert srv.vocab_size_of(model.config) == VOCAB
    nested = type("VL", (), {"text_config": type("T", (), {"vocab_size": 99})()})()
    assert srv.vocab_size_of(nested) == 99 and srv.vocab_size_of(None) is None
    assert srv.GenerationServer(model, [EOS], PAD).vocabulary() == VOCAB
    assert srv.GenerationServer(object(), [EOS], PAD, vocab_size=7).vocabulary() == 7


def test_new_weights_are_taken_without_a_copy_and_change_the_answers() -> None:
    model = tiny_model(0)
    server = srv.GenerationServer(model, [EOS], PAD)
    params = srv.SamplingParams(max_tokens=8, temperature=0)
    before = asyncio.run(server.generate(PROMPTS[0], params))
    trained = tiny_model(1).state_dict()
    server.load_weights(trained)
    assert model.model.layers[0].mlp.up_proj.weight.data_ptr() == trained["model.layers.0.mlp.up_proj.weight"].data_ptr()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    after = asyncio.run(server.generate(PROMPTS[0], params))
    reference = alone(tiny_model(1), PROMPTS[0], params)
    assert after.token_ids == reference.token_ids and after.log_probs == pytest.approx(reference.log_probs, abs=1e-5)
    assert after.log_probs != pytest.approx(before.log_probs, abs=1e-3)


def test_a_released_server_holds_no_model_and_refuses_until_it_has_one_again(model) -> None:
    server = srv.GenerationServer(model, [EOS], PAD)
    server.release()
    assert server.model is None
    params = srv.SamplingParams(max_tokens=3, temperature=0)
    with pytest.raises(srv.ServerReleased):
        asyncio.run(server.generate(PROMPTS[0], params))
    server.load(model)
    assert asyncio.run(server.generate(PROMPTS[0], params)).token_ids == alone(model, PROMPTS[0], params).token_ids


def test_a_runner_elsewhere_gets_the_batches_and_abort_answers_what_has_not_started(model) -> None:
    """verl's replica runs each batch in the training worker (a coroutine runner); an abort answers the
    queued requests at once, the running batch finishes."""
    started = []

    async def elsewhere(handle, prompts, params, eos, pad):
        started.append(len(prompts))
        await asyncio.sleep(0.05)
        return srv.decode(handle, prompts, params, eos, pad)

    server = srv.GenerationServer(model, [EOS], PAD, max_batch_size=2, run=elsewhere)
    params = srv.SamplingParams(max_tokens=5, temperature=0)

    async def abort_while_running():
        futures = [asyncio.ensure_future(server.generate(p, params)) for p in PROMPTS[:5]]
        await asyncio.sleep(0.01)
        dropped = server.abort()
        return dropped, await asyncio.gather(*futures)

    dropped, results = asyncio.run(abort_while_running())
    assert started == [2] and dropped == 3
    assert [r.token_ids for r in results[:2]] == [alone(model, p, params).token_ids for p in PROMPTS[:2]]
    assert [(r.token_ids, r.stop_reason) for r in results[2:]] == [([], "aborted")] * 3
