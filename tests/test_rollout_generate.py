"""The Pascal rollout's generation core on the CPU, against references written here.

A tiny random Qwen2 (fp32, sdpa) generates for a left-padded batch with its KV
cache; the references run the model one full forward per token, without a
cache, and pick tokens with the rules written out below (greedy, or
temperature, top-k and top-p, then one multinomial draw per step, the RNG
used as Hugging Face's sampler uses it).
"""

from __future__ import annotations

from typing import List

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the rollout needs transformers (requirements-dev)")

from verl_pascal.rollout import generate as gen  # noqa: E402

PAD, EOS, VOCAB = 0, 5, 48
PROMPTS: List[List[int]] = [[7, 8, 9, 10, 11], [12, 13], [14, 15, 16]]


def tiny_model() -> "transformers.PreTrainedModel":
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True, attn_implementation="sdpa")
    model = transformers.Qwen2ForCausalLM(config).to(torch.float32)
    # A checkpoint's own generation settings must not leak into the rollout's.
    model.generation_config.repetition_penalty = 1.5
    model.generation_config.top_k = 3
    return model.eval()


def left_padded(prompts: List[List[int]]):
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return ids, mask, positions


def reference_scores(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits[:, -1, :]


def warp(scores: torch.Tensor, s: gen.Sampling) -> torch.Tensor:
    """Temperature, then top-k, then top-p (keep the smallest set whose mass reaches top_p, at least one)."""
    scores = scores / s.temperature
    if s.top_k > 0:
        kth = torch.topk(scores, s.top_k).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if s.top_p < 1.0:
        ascending, order = torch.sort(scores, descending=False)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= (1 - s.top_p)
        drop[:, -1] = False
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return scores


def reference(model, prompts: List[List[int]], s: gen.Sampling) -> torch.Tensor:
    """One full forward per step over the whole padded batch; finished rows continue with PAD."""
    ids, mask, _ = left_padded(prompts)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    out = []
    for _ in range(s.response_length):
        scores = reference_scores(model, ids, mask)
        if s.do_sample:
            token = torch.multinomial(warp(scores, s).softmax(dim=-1), num_samples=1).squeeze(1)
        else:
            token = scores.argmax(dim=-1)
        token = torch.where(done, torch.full_like(token, PAD), token)
        out.append(token)
        done |= token == EOS
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones_like(token)[:, None]], dim=1)
        if done.all():
            break
    responses = torch.stack(out, dim=1)
    return gen.pad_right(responses, s.response_length, PAD)


def run(model, prompts: List[List[int]], s: gen.Sampling):
    ids, mask, positions = left_padded(prompts)
    return gen.generate(model, ids, mask, positions, s, EOS, PAD)


def test_greedy_matches_the_uncached_reference_on_a_left_padded_batch() -> None:
    model = tiny_model()
    s = gen.Sampling(do_sample=False, response_length=12)
    out = run(model, PROMPTS, s)
    assert torch.equal(out["responses"], reference(model, PROMPTS, s))
    # Each row alone (no padding) gives the same response: padding changes nothing.
    for row, prompt in enumerate(PROMPTS):
        assert torch.equal(run(model, [prompt], s)["responses"][0], out["responses"][row])


@pytest.mark.parametrize("s", [
    gen.Sampling(temperature=1.0, response_length=10),
    gen.Sampling(temperature=0.7, top_k=8, top_p=0.9, response_length=10),
], ids=["plain", "temperature-topk-topp"])
def test_sampling_with_a_seed_matches_the_reference(s: gen.Sampling) -> None:
    model = tiny_model()
    torch.manual_seed(1234)
    got = run(model, PROMPTS, s)["responses"]
    torch.manual_seed(1234)
    assert torch.equal(got, reference(model, PROMPTS, s))


def test_n_samples_per_prompt_differ_and_repeat_with_the_seed() -> None:
    """The trainer repeats each prompt n times (interleaved): each row is a sample of its own."""
    model = tiny_model()
    n, s = 4, gen.Sampling(temperature=1.0, response_length=8)
    repeated = [p for p in PROMPTS for _ in range(n)]
    torch.manual_seed(7)
    first = run(model, repeated, s)["responses"]
    torch.manual_seed(7)
    assert torch.equal(run(model, repeated, s)["responses"], first)
    for group in first.view(len(PROMPTS), n, -1):
        assert len({tuple(row.tolist()) for row in group}) > 1


def test_the_batch_layout_verl_reads() -> None:
    model = tiny_model()
    s = gen.Sampling(do_sample=False, response_length=6)
    ids, mask, positions = left_padded(PROMPTS)
    out = gen.generate(model, ids, mask, positions, s, EOS, PAD)
    assert torch.equal(out["prompts"], ids)
    assert out["responses"].shape == (3, 6) and out["input_ids"].shape == (3, ids.size(1) + 6)
    assert torch.equal(out["input_ids"], torch.cat([ids, out["responses"]], dim=1))
    assert torch.equal(out["attention_mask"][:, : ids.size(1)], mask)
    assert torch.equal(out["position_ids"][:, ids.size(1):], positions[:, -1:] + torch.arange(1, 7))
    # The model is left as found: eval mode, its own generation config.
    assert model.training is False and model.generation_config.repetition_penalty == 1.5


def test_response_mask_keeps_the_first_eos_and_drops_what_follows() -> None:
    responses = torch.tensor([[20, 10, 34, 1, 0, 0], [78, 2, 76, 1, 1, 0], [23, 98, 9, 9, 9, 9]])
    assert gen.response_mask(responses, 1).tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0], [1] * 6]
    assert gen.response_mask(responses, [1, 2]).tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1] * 6]


def test_pad_right_fills_to_the_response_length() -> None:
    assert gen.pad_right(torch.tensor([[4, 5]]), 4, 0).tolist() == [[4, 5, 0, 0]]
    assert gen.pad_right(torch.tensor([[4, 5, 6]]), 2, 0).tolist() == [[4, 5]]


def test_sampling_settings_follow_verls_rules() -> None:
    config = {"do_sample": True, "temperature": 0.8, "top_p": 0.95, "top_k": -1, "response_length": 64,
              "val_kwargs": {"temperature": 0.1, "top_p": 0.5, "top_k": 4}}
    assert gen.Sampling.for_batch(config, {}) == gen.Sampling(True, 0.8, 0.95, -1, 64)
    assert gen.Sampling.for_batch(config, {"temperature": 1.2, "response_length": 8}) == gen.Sampling(True, 1.2, 0.95, -1, 8)
    assert gen.Sampling.for_batch(config, {"validate": True}) == gen.Sampling(True, 0.1, 0.5, 4, 64)
    greedy = gen.Sampling.for_batch(config, {"do_sample": False})
    assert not greedy.do_sample and not greedy.generation_config(EOS, PAD).do_sample
    assert gen.Sampling.for_batch(config, {}).generation_config(EOS, PAD).top_k == 0  # -1 means off
