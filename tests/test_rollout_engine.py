"""The rollout's engine on the CPU: a model built around the actor's weights, used, then dropped.

The weights come from a tiny random Qwen2 (the "actor"); what the engine
generates from them must be what the actor itself generates, greedy and
sampled with a seed, and it must hold those very tensors, not copies.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the rollout needs transformers (requirements-dev)")
pytest.importorskip("accelerate", reason="the rollout needs accelerate (requirements-dev)")

from test_rollout_generate import EOS, PAD, PROMPTS, left_padded, tiny_model  # noqa: E402

from verl_pascal.rollout import engine as eng  # noqa: E402
from verl_pascal.rollout import generate as gen  # noqa: E402

CPU = torch.device("cpu")


def actor_weights(actor):
    """What verl's worker hands the rollout: the full state dict, detached."""
    return {name: tensor.detach().clone() for name, tensor in actor.state_dict().items()}


def loaded(actor, **kw) -> eng.HFEngine:
    engine = eng.HFEngine(hf_config=actor.config, device=CPU, **kw)
    engine.load(actor_weights(actor).items())
    return engine


def generate(engine_or_model, prompts, sampling):
    ids, mask, positions = left_padded(prompts)
    if isinstance(engine_or_model, eng.HFEngine):
        return engine_or_model.generate(ids, mask, positions, sampling, EOS, PAD)
    return gen.generate(engine_or_model, ids, mask, positions, sampling, EOS, PAD)


def test_greedy_output_is_the_actors() -> None:
    actor = tiny_model()
    s = gen.Sampling(do_sample=False, response_length=12)
    got, want = generate(loaded(actor), PROMPTS, s), generate(actor, PROMPTS, s)
    for key in want:
        assert torch.equal(got[key], want[key]), key


def test_n_samples_per_prompt_with_a_seed_are_the_actors() -> None:
    actor = tiny_model()
    s = gen.Sampling(temperature=0.9, top_k=16, top_p=0.95, response_length=10)
    repeated = [p for p in PROMPTS for _ in range(3)]  # verl repeats each prompt n times first
    engine = loaded(actor)
    torch.manual_seed(11)
    got = generate(engine, repeated, s)["responses"]
    torch.manual_seed(11)
    assert torch.equal(got, generate(actor, repeated, s)["responses"])
    assert len({tuple(r.tolist()) for r in got[:3]}) > 1, "samples of one prompt should differ"


def test_the_model_holds_the_given_tensors_not_copies() -> None:
    actor = tiny_model()
    weights = actor_weights(actor)
    pointers = {name: t.data_ptr() for name, t in weights.items()}
    engine = eng.HFEngine(hf_config=actor.config, device=CPU)
    engine.load(weights.items())
    params = dict(engine.model.named_parameters(remove_duplicate=False))
    untied = [name for name in pointers if name in params and name != "lm_head.weight"]
    assert untied and {name: params[name].data_ptr() for name in untied} == {name: pointers[name] for name in untied}
    # The tied head is the embedding itself: the head's own copy is not kept.
    assert params["lm_head.weight"].data_ptr() == pointers["model.embed_tokens.weight"]
    # Buffers that are no weights (the rotary frequencies) are real, not left on the meta device.
    assert not any(b.is_meta for b in engine.model.buffers())


def test_a_tied_head_comes_from_the_embedding() -> None:
    actor = tiny_model()
    weights = actor_weights(actor)
    weights.pop("lm_head.weight", None)  # a tied checkpoint may list only the embedding
    engine = eng.HFEngine(hf_config=actor.config, device=CPU)
    engine.load(weights.items())
    assert engine.model.lm_head.weight.data_ptr() == weights["model.embed_tokens.weight"].data_ptr()


def test_release_drops_the_model_and_generation_then_asks_for_weights() -> None:
    engine = loaded(tiny_model())
    engine.release()
    assert engine.model is None
    with pytest.raises(eng.RolloutError, match="update_weights"):
        generate(engine, PROMPTS, gen.Sampling(do_sample=False, response_length=2))


def test_weights_that_do_not_fit_are_refused_by_name() -> None:
    actor = tiny_model()
    weights = actor_weights(actor)
    del weights["model.norm.weight"]
    weights["model.extra.weight"] = torch.zeros(2)
    engine = eng.HFEngine(hf_config=actor.config, device=CPU)
    with pytest.raises(eng.RolloutError, match=r"missing \['model.norm.weight'\].*unexpected \['model.extra.weight'\]"):
        engine.load(weights.items())
    assert engine.model is None


def test_the_configured_dtype_is_applied() -> None:
    engine = loaded(tiny_model(), dtype=torch.bfloat16)
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}


def test_three_dimensional_positions_are_refused() -> None:
    engine = loaded(tiny_model())
    ids, mask, positions = left_padded(PROMPTS)
    with pytest.raises(eng.RolloutError, match="text only"):
        engine.generate(ids, mask, positions[:, None, :].expand(-1, 3, -1), gen.Sampling(), EOS, PAD)


@pytest.mark.parametrize("name, dtype", [("float32", torch.float32), ("fp32", torch.float32), ("bf16", torch.bfloat16),
                                         ("BFloat16", torch.bfloat16), ("fp16", torch.float16)])
def test_dtype_names(name: str, dtype: torch.dtype) -> None:
    assert eng.dtype_of(name) is dtype


def test_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(eng.RolloutError, match="rollout.dtype='int8'"):
        eng.dtype_of("int8")


def test_settings_it_cannot_honour_are_named() -> None:
    fine = {"mode": "sync", "calculate_log_probs": False, "ignore_eos": False, "free_cache_engine": True,
            "multi_turn": {"enable": False}}
    assert eng.unsupported(fine) == []
    bad = {"mode": "async", "calculate_log_probs": True, "ignore_eos": True, "free_cache_engine": False,
           "multi_turn": {"enable": True}}
    found = "\n".join(eng.unsupported(bad))
    for key in ("rollout.mode", "calculate_log_probs", "ignore_eos", "free_cache_engine", "multi_turn.enable"):
        assert key in found


def test_settings_the_server_cannot_honour_are_named() -> None:
    """The rollout server (verl 0.7 on) refuses, naming each setting, what it would otherwise get wrong
    silently: several GPUs per replica, weights kept through training, log-probs at another
    temperature, a repetition penalty, and weights sent by a checkpoint engine it never receives."""
    fine = {"tensor_model_parallel_size": 1, "data_parallel_size": 1, "pipeline_model_parallel_size": 1,
            "free_cache_engine": True, "calculate_log_probs": True, "temperature": 1.0, "repetition_penalty": 1.0,
            "checkpoint_engine": {"backend": "naive"}}
    assert eng.server_unsupported(fine) == []
    assert eng.server_unsupported({}) == []  # verl's defaults for what is not set
    bad = {"tensor_model_parallel_size": 2, "data_parallel_size": 2, "pipeline_model_parallel_size": 2,
           "free_cache_engine": False, "calculate_log_probs": True, "temperature": 0.7, "repetition_penalty": 1.1,
           "checkpoint_engine": {"backend": "nccl"}}
    found = eng.server_unsupported(bad)
    assert len(found) == 7
    text = "\n".join(found)
    for key in ("tensor_model_parallel_size=2", "data_parallel_size=2", "pipeline_model_parallel_size=2",
                "free_cache_engine=False", "temperature != 1", "repetition_penalty", "checkpoint_engine.backend=nccl"):
        assert key in text


def test_log_probs_at_any_temperature_need_verls_processed_mode() -> None:
    """From verl 0.7 the rollout config's logprobs_mode is processed_logprobs: the server then returns the
    log-probs of the distribution it sampled from, and any temperature is fine. Raw log-probs at another
    temperature than 1 would differ from the actor's; a mode the server has not is refused by name."""
    asked = {"calculate_log_probs": True, "temperature": 0.7}
    assert eng.server_unsupported({**asked, "logprobs_mode": "processed_logprobs"}) == []
    assert "logprobs_mode=processed_logprobs" in "\n".join(eng.server_unsupported({**asked, "logprobs_mode": "raw_logprobs"}))
    assert eng.server_unsupported({**asked, "calculate_log_probs": False, "logprobs_mode": "raw_logprobs"}) == []
    assert "logprobs_mode=processed_logits" in "\n".join(eng.server_unsupported({"logprobs_mode": "processed_logits"}))


class _Tokenizer:
    eos_token_id = 7
    pad_token_id = None


class _ModelConfig:
    def __init__(self, generation_eos: object = None, tokenizer: object = None) -> None:
        self.generation_config = type("G", (), {"eos_token_id": generation_eos})()
        self.tokenizer = tokenizer
        self.local_path = "/models/m"


def test_the_stop_ids_come_from_the_generation_config_then_the_tokenizer() -> None:
    assert eng.token_ids(_ModelConfig([2, 3], _Tokenizer())) == ([2, 3], 2)  # no pad id: the first EOS pads
    assert eng.token_ids(_ModelConfig(None, _Tokenizer())) == ([7], 7)
    tokenizer = _Tokenizer()
    tokenizer.pad_token_id = 0
    assert eng.token_ids(_ModelConfig(5, tokenizer)) == ([5], 0)
    with pytest.raises(eng.RolloutError, match="/models/m names no EOS token"):
        eng.token_ids(_ModelConfig(None, None))
