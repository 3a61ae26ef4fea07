"""Tests for module_utils/verl_patch/, verl-patch and library/verl_patch.py.

Two kinds of input:

* the real verl sdists from PyPI, downloaded once per machine into
  ``$VERL_PASCAL_SDIST_CACHE`` (default ``~/.cache/verl-pascal/sdists``) by a
  session fixture; the tests skip, saying why, when PyPI cannot be reached;
* a synthetic tree (tests/data/verl_patch/synthetic) with every site written
  in odd but valid ways, to show that sites are found by syntax, not by text.

The expected sites come from each release's folder: the scan of a real
sdist must find exactly the counts of its ``patch_sites`` and report its
``patch_lines`` where they are. Independently of the scanner, a grep-level
test reads the patched package for any ``flash_attention_2`` literal, bf16
autocast or FSDP policy, or bare ``flash_attn.bert_padding`` import left.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
from conftest import ANSIBLE, needs_ansible, run_ansible_module, run_playbook

from verl_pascal.module_utils import verl_patch
from verl_pascal.module_utils.verl_patch import (
    KIND_ATTN,
    KIND_AUTOCAST,
    KIND_BERT,
    KIND_GENERATE_POSITIONS,
    KIND_LOGSUMEXP,
    KIND_MIXED_PRECISION,
    KIND_REPLAY_POLL,
    KIND_ROLLOUT_LOG_PROBS,
    KIND_ROLLOUT_N,
    PATCHED,
    PENDING,
    RewriteError,
    UnsupportedVersionError,
    UpstreamChangedError,
    VerlPatchError,
    make_plan,
    patch_tree,
)
from verl_pascal.module_utils.verl_patch.finders import autocast

from verl_pascal import verl_releases

from conftest import REPO_ROOT  # noqa: E402
# The patch-site table of every release folder (verl_pascal/releases/verl-X/release.yml).
RELEASES = verl_releases.patch_tables()
# The verl-patch command, as its console script runs it.
CLI = [sys.executable, "-m", "verl_pascal.patch_cli"]
DATA = Path(__file__).resolve().parent / "data" / "verl_patch"
SYNTHETIC = DATA / "synthetic"
EXPECTED = DATA / "expected"

# Per release, from its folder: the sites of each kind the patcher must find
# (patch_sites, summed per kind: a release's scan must find exactly these), and
# a few of them by file and line (patch_lines).
REAL_COUNTS: Dict[str, Dict[str, int]] = {
    version: {kind: sum(kinds.get(kind, 0) for kinds in table.values()) for kind in verl_patch.KINDS}
    for version, table in RELEASES.items()
}
REAL_LINES: Dict[str, List[Tuple[str, int, str]]] = {
    version: verl_releases.patch_lines(verl_releases.read(version)) for version in RELEASES
}
# The releases the verl role installs (a folder with a dependency lock), and every folder.
REQUIRED_VERSIONS = tuple(verl_releases.sdists())
ALL_VERSIONS = tuple(verl_releases.versions())


# --------------------------------------------------------------------------
# Fixtures: sdists from PyPI (once), trees to patch (per test)
# --------------------------------------------------------------------------


@pytest.fixture
def real_tree(request: pytest.FixtureRequest, extracted: Callable[[str], Path], tmp_path: Path) -> Path:
    """A private copy of the unpacked sdist of the version the test is parametrized with."""
    version = request.param
    dest = tmp_path / ("verl-%s" % version)
    shutil.copytree(str(extracted(version)), str(dest))
    return dest


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    dest = tmp_path / "synthetic"
    shutil.copytree(str(SYNTHETIC), str(dest))
    return dest


def snapshot(root: Path) -> Dict[str, Tuple[int, bytes]]:
    """(mtime_ns, bytes) of every file under root."""
    files: Dict[str, Tuple[int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[str(path.relative_to(root))] = (path.stat().st_mtime_ns, path.read_bytes())
    return files


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300)


def by_kind(sites: List[verl_patch.Site], state: Optional[str] = None) -> Dict[str, int]:
    counts = {kind: 0 for kind in verl_patch.KINDS}
    for site in sites:
        if state is None or site.state == state:
            counts[site.kind] += 1
    return counts


def py_files(package: Path) -> Iterator[Path]:
    return (p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts)


real_versions = pytest.mark.parametrize("real_tree", ALL_VERSIONS, indirect=True)


# --------------------------------------------------------------------------
# The real sdists
# --------------------------------------------------------------------------


@real_versions
def test_real_sdist_every_expected_site_is_found_and_patched(real_tree: Path) -> None:
    version = real_tree.name[len("verl-") :]
    pristine = snapshot(real_tree)
    plan = make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert plan.verl_version == version and plan.supported
    assert by_kind(plan.sites, PENDING) == REAL_COUNTS[version]
    assert all(site.state == PENDING for site in plan.sites)
    found = {(s.file, s.line, s.kind) for s in plan.sites}
    for expected in REAL_LINES[version]:
        assert expected in found, "%s:%d %s not found" % expected

    patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)

    after = snapshot(real_tree)
    torch_dtypes = "verl/utils/torch_dtypes.py"
    assert after[torch_dtypes][1] == pristine[torch_dtypes][1]
    outside = [f for f in pristine if not f.startswith("verl/")]
    assert outside and all(after[f] == pristine[f] for f in outside), "a file outside verl/ changed"
    with warnings.catch_warnings():  # verl's own invalid escape sequences
        warnings.simplefilter("ignore")
        for path in py_files(real_tree / "verl"):
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    replan = make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert not replan.changes
    assert by_kind(replan.sites, PATCHED) == REAL_COUNTS[version]
    manifest = json.loads((real_tree / "verl" / ".verl_pascal_patch.json").read_text())
    assert manifest["verl_version"] == version and manifest["profile"] == "pascal" and manifest["attn"] == "sdpa"
    assert len(manifest["sites"]) == sum(REAL_COUNTS[version].values())
    assert {s["kind"] for s in manifest["sites"]} == {k for k, n in REAL_COUNTS[version].items() if n}
    assert all({"file", "line", "kind", "before", "after"} <= set(s) for s in manifest["sites"])


def _sampled_per_copy(tree: Path) -> List[str]:
    """What the HF rollout's sampling branch passes as num_return_sequences (plain text, not the engine)."""
    text = (tree / "verl" / "workers" / "rollout" / "hf_rollout.py").read_text()
    return re.findall(r'"num_return_sequences": ([^,\n]+),', text)


@pytest.mark.parametrize("real_tree", ["0.5.0", "0.4.1"], indirect=True)
def test_grpo_gets_n_responses_a_prompt_from_verls_hf_rollout(real_tree: Path) -> None:
    """0.5.0's trainer repeats each prompt rollout.n times before its HF rollout, which sampled n for each
    copy again (n*n: GRPO failed on the H200). The gated site is patched there to sample one; 0.4.1, which
    repeats after generating, keeps its n."""
    version = real_tree.name[len("verl-") :]
    ray_trainer = (real_tree / "verl" / "trainer" / "ppo" / "ray_trainer.py").read_text()
    repeats_before = "gen_batch = gen_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n" in ray_trainer
    assert repeats_before == (version == "0.5.0")
    assert _sampled_per_copy(real_tree) == ["1", "self.config.n"]  # validation's branch, then sampling's
    patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert _sampled_per_copy(real_tree) == (["1", "1"] if repeats_before else ["1", "self.config.n"])
    # Without the release's table the kind is never touched, even in 0.5.0.
    unlisted = {v: {f: {k: n for k, n in kinds.items() if k != KIND_ROLLOUT_N} for f, kinds in t.items()}
                for v, t in RELEASES.items()}
    assert not [s for s in make_plan(str(real_tree), "pascal", "sdpa", releases=unlisted).sites
                if s.kind == KIND_ROLLOUT_N and s.state == PENDING]


def _hf_rollout(tree: Path) -> ast.Module:
    return ast.parse((tree / "verl" / "workers" / "rollout" / "hf_rollout.py").read_text())


def _generate_node(tree: Path) -> ast.Call:
    calls = [node for node in ast.walk(_hf_rollout(tree))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "generate"]
    assert len(calls) == 1
    return calls[0]


def _generate_call(tree: Path) -> str:
    """The HF rollout's ``self.module.generate(...)`` call, as the tree's file has it (comments dropped)."""
    return ast.unparse(_generate_node(tree))


def _rollout_scope(tree: Path, sample: bool, steps: int, init: float = 0.02, temperature: float = 1.0) -> Dict[str, Any]:
    """The names verl's HF rollout has when it calls generate (a tiny random Qwen2 as ``self.module``,
    left-padded prompts and their position ids), the classes the patch appends to its file (read from the
    tree: verl's imports are not needed), and ``_model``, ``_width`` and ``_mask`` for the caller."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    names: Dict[str, Any] = {"torch": torch}
    for node in _hf_rollout(tree).body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("_VerlPascal"):
            exec(compile(ast.Module(body=[node], type_ignores=[]), "hf_rollout.py", "exec"), names)  # noqa: S102
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                         initializer_range=init, attn_implementation="eager")).eval()
    prompts = [[5, 17, 33, 8, 41, 12, 9], [22, 7, 64, 30], [3, 90, 45, 11, 71, 2, 58, 19, 26]]
    width = max(len(p) for p in prompts)
    idx = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    attention_mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    config = GenerationConfig(do_sample=sample, num_beams=1, **(
        {"temperature": temperature, "top_k": 0, "top_p": 1.0, "num_return_sequences": 1} if sample else {}))
    names.update({"self": type("Rollout", (), {"module": model})(), "idx": idx, "attention_mask": attention_mask,
                  "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "do_sample": sample,
                  "response_length": steps, "eos_token_id": 1, "pad_token_id": 0, "generation_config": config,
                  "_model": model, "_width": width, "_mask": attention_mask})
    return names


def _actor_log_probs(names: Dict[str, Any], seq: Any, response_mask: Any, temperature: float = 1.0) -> Any:
    """The log-probs of ``seq``'s response tokens as verl's actor takes them: one forward pass of the
    whole sequences, positions counted from each prompt's first token, logits divided by the temperature."""
    import torch

    width = names["_width"]
    mask = torch.cat([names["_mask"], response_mask.long()], dim=1)
    logits = names["_model"](input_ids=seq, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    return torch.log_softmax(logits[:, width - 1:-1].float() / temperature, -1)


def _greedy_off_the_model(tree: Path, call: str, steps: int = 12) -> int:
    """How many of the tokens that ``call`` (verl's generate call, run as verl runs it: left-padded prompts,
    their position ids, greedy) generates are not the model's own next token, read off one forward pass
    of the whole sequence with positions counted from each prompt's first token. 0 for a right rollout."""
    import torch

    names = _rollout_scope(tree, sample=False, steps=steps)
    with torch.no_grad():
        seq = eval(call, names).sequences  # noqa: S307 - verl's own call, read from the tree under test
        own = _actor_log_probs(names, seq, torch.ones_like(seq[:, names["_width"]:])).argmax(-1)
    return int((own != seq[:, names["_width"]:]).sum())


@pytest.mark.parametrize("real_tree", ["0.5.0", "0.4.0"], indirect=True)
def test_verls_hf_rollout_generates_from_the_actors_distribution(real_tree: Path) -> None:
    """verl 0.4.0 to 0.5.0's HF rollout passes the prompts' position ids to generate, which then gives every
    new token the last prompt token's position: greedy decoding picks tokens the model itself (the actor,
    with positions counted) would not. A warm-started model scored 0.05 there where it scores 0.23.
    Patched, the rollout's tokens are the model's own; as released (the negative control), they are not."""
    released = _generate_call(real_tree)
    assert "position_ids=position_ids" in released
    assert _greedy_off_the_model(real_tree, released) > 0
    # A tree patched before the kind existed (its table without it, nor the later log-probs): the call is
    # left as released...
    patch_tree(str(real_tree), "pascal", "sdpa", releases=_without(KIND_GENERATE_POSITIONS, KIND_ROLLOUT_LOG_PROBS))
    assert _generate_call(real_tree) == released
    # ... and the next patch with today's table patches it, on a tree whose other sites are done.
    plan = patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert [(s.file, s.state) for s in plan.sites if s.kind == KIND_GENERATE_POSITIONS] == [
        ("verl/workers/rollout/hf_rollout.py", PENDING)]
    assert not [s for s in plan.sites if s.kind not in (KIND_GENERATE_POSITIONS, KIND_ROLLOUT_LOG_PROBS)
                and s.state == PENDING]
    patched = _generate_call(real_tree)
    assert "position_ids=None" in patched
    assert _greedy_off_the_model(real_tree, patched) == 0
    # Idempotent: the patched site is found as patched, and nothing changes again.
    again = patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert not again.changes
    assert [s.state for s in again.sites if s.kind == KIND_GENERATE_POSITIONS] == [PATCHED]

def _without(*kinds: str) -> Dict[str, Any]:
    """Every release's patch-site table without ``kinds``: a table from before they existed."""
    return {v: {f: {k: n for k, n in table.items() if k not in kinds} for f, table in t.items()}
            for v, t in RELEASES.items()}


def _rollout_probs_diff(tree: Path, temperature: float = 0.7, steps: int = 16) -> Optional[float]:
    """training/rollout_probs_diff_mean as verl's trainer computes it (the mean |p_rollout - p_actor| of the
    sampled tokens up to each one's EOS) of a batch the tree's HF rollout samples: its generate call and its
    batch's ``rollout_log_probs`` entry run as verl runs them, sampling at ``temperature``; the actor's
    log-probs as verl's actor takes them. None when the batch has no such entry (the rollout as released)."""
    import torch

    batch = next(n for n in ast.walk(_hf_rollout(tree)) if isinstance(n, ast.Dict)
                 and "responses" in [k.value for k in n.keys if isinstance(k, ast.Constant)])
    entry = [v for k, v in zip(batch.keys, batch.values) if isinstance(k, ast.Constant) and k.value == "rollout_log_probs"]
    if not entry:
        return None
    # Weights ten times the usual init: a random model at 0.02 is near uniform, and a fault barely moves it.
    names = _rollout_scope(tree, sample=True, steps=steps, init=0.2, temperature=temperature)
    with torch.no_grad():
        seq = eval(_generate_call(tree), names).sequences  # noqa: S307 - verl's own call, read from the tree
        seq = torch.cat([seq, torch.zeros(len(seq), names["_width"] + steps - seq.size(1), dtype=seq.dtype)], dim=1)
        names["response"] = response = seq[:, names["_width"]:]
        rollout = eval(ast.unparse(entry[0]), names)  # noqa: S307 - the patch's entry, read from the tree
        eos = (response == 1).long()
        response_mask = (eos.cumsum(-1) - eos) == 0  # up to and including the first EOS, as verl's get_response_mask
        actor = _actor_log_probs(names, seq, response_mask, temperature).gather(-1, response[..., None])[..., 0]
    assert rollout.shape == response.shape and rollout.dtype == torch.float32
    return float((rollout.exp() - actor.exp()).abs()[response_mask].mean())


@pytest.mark.parametrize("real_tree", ["0.5.0", "0.4.1"], indirect=True)
def test_verls_hf_rollout_returns_the_log_probs_it_sampled_with(real_tree: Path) -> None:
    """verl 0.4 to 0.5's trainer logs the rollout-actor gap (training/rollout_probs_diff_*) only when the rollout
    returns log-probs, which verl's HF rollout never does. Patched, it returns the log-prob of each token it
    sampled, and they agree with the actor's for the same tokens to float32 rounding; with the position fault
    left in (the negative control: a table without hf_generate_positions), the same measure shows it."""
    assert _rollout_probs_diff(real_tree) is None  # as released: nothing to compare
    patch_tree(str(real_tree), "pascal", "sdpa", releases=_without(KIND_GENERATE_POSITIONS))
    faulty = _rollout_probs_diff(real_tree)
    assert faulty is not None and faulty > 0.01
    plan = patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert [s.state for s in plan.sites if s.kind == KIND_GENERATE_POSITIONS] == [PENDING]
    gap = _rollout_probs_diff(real_tree)
    assert gap is not None and gap < 1e-5, gap
    again = patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert not again.changes
    assert [s.state for s in again.sites if s.kind == KIND_ROLLOUT_LOG_PROBS] == [PATCHED]
    # A release whose trainer does not log the gap (0.3.0.post1) is not listed: its rollout stays as released.
    assert not [f for v, t in RELEASES.items() if v.startswith("0.3") for f, k in t.items() if KIND_ROLLOUT_LOG_PROBS in k]


def _log_probs_function(tree: Path) -> Callable[..., Any]:
    """verl's own logprobs_from_logits_v2, compiled from the tree's file alone (verl's imports are not needed)."""
    import ast

    import torch
    import torch.nn.functional as F

    text = (tree / "verl" / "utils" / "torch_functional.py").read_text()
    node = next(n for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == "logprobs_from_logits_v2")
    scope: Dict[str, Any] = {"torch": torch, "F": F}
    exec(compile(ast.Module(body=[node], type_ignores=[]), "torch_functional.py", "exec"), scope)
    return scope["logprobs_from_logits_v2"]


def _logsumexp_kernels(fn: Callable[..., Any], logits: Any, labels: Any) -> Tuple[Any, Any, int]:
    """fn's log-probs, the gradient of their sum, and how many logsumexp kernels the forward launched."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten.logsumexp.default:
                Count.calls += 1
            return func(*args, **(kwargs or {}))

    leaf = logits.clone().requires_grad_(True)
    with Count():
        out = fn(leaf, labels)
    out.sum().backward()
    return out.detach(), leaf.grad, Count.calls


@pytest.mark.parametrize("real_tree", ["0.9.1", "0.8.0"], indirect=True)
def test_engine_log_probs_take_rows_in_chunks_with_the_same_values(real_tree: Path, tmp_path: Path) -> None:
    """The engine workers pass (tokens, vocab) to verl's fp32 log-probs, which reduced one token per kernel
    (0.9.1 trained slower than 0.5.0). Patched: one kernel per 512 rows, the same log-probs and gradients,
    for the engine's 2-D input and the legacy workers' 3-D one."""
    import torch

    pristine = tmp_path / "pristine"
    shutil.copytree(str(real_tree), str(pristine))
    patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    before, after = _log_probs_function(pristine), _log_probs_function(real_tree)
    gen = torch.Generator().manual_seed(0)
    tokens, vocab, chunk = 1100, 257, verl_patch.LOGSUMEXP_CHUNK
    for shape in [(tokens,), (4, tokens // 4)]:
        logits = torch.randn(*shape, vocab, generator=gen) * 4
        labels = torch.randint(0, vocab, shape, generator=gen)
        want, want_grad, per_row = _logsumexp_kernels(before, logits, labels)
        got, got_grad, chunked = _logsumexp_kernels(after, logits, labels)
        assert got.shape == want.shape == shape
        assert torch.allclose(got, want, rtol=0, atol=1e-5) and torch.allclose(got_grad, want_grad, atol=1e-6)
        assert per_row == shape[0] and chunked == -(-tokens // chunk)
    # Not listed for a release, the site is left as released.
    unlisted = {v: {f: {k: n for k, n in kinds.items() if k != KIND_LOGSUMEXP} for f, kinds in t.items()}
                for v, t in RELEASES.items()}
    assert not [s for s in make_plan(str(pristine), "pascal", "sdpa", releases=unlisted).sites
                if s.kind == KIND_LOGSUMEXP]


_ONE_LINE_STACK = re.compile(
    r"(?P<indent>[ ]*)(?P<target>\w+) = torch\.stack\((?P<rows>\[torch\.logsumexp\((?P<v>\w+), dim=-1\) "
    r"for (?P=v) in (?P<x>\w+)\])\)")
# The stacked per-row call as black wraps it at 88 columns, and as it explodes it with a trailing comma.
WRAPS = {
    "black": "{indent}{target} = torch.stack(\n{indent}    {rows}\n{indent})",
    "exploded": ("{indent}{target} = torch.stack(\n{indent}    [\n{indent}        torch.logsumexp({v}, dim=-1)\n"
                 "{indent}        for {v} in {x}\n{indent}    ],\n{indent})"),
}


def _wrap_logsumexp_call(tree: Path, style: str) -> int:
    """Rewrite verl's one-line ``X = torch.stack([torch.logsumexp(v, dim=-1) for v in rows])`` in
    torch_functional.py as a formatter wraps it; the call's first line."""
    path = tree / "verl" / "utils" / "torch_functional.py"
    lines = path.read_text().split("\n")
    hits = [i for i, line in enumerate(lines) if _ONE_LINE_STACK.fullmatch(line)]
    assert len(hits) == 1, hits
    match = _ONE_LINE_STACK.fullmatch(lines[hits[0]])
    assert match is not None
    lines[hits[0]] = WRAPS[style].format(**match.groupdict())
    path.write_text("\n".join(lines))
    return hits[0] + 1


@pytest.mark.parametrize("style", sorted(WRAPS))
@pytest.mark.parametrize("real_tree", ["0.9.1", "0.8.0"], indirect=True)
def test_a_logsumexp_call_wrapped_over_lines_is_patched_to_the_same_values(
        real_tree: Path, style: str, tmp_path: Path) -> None:
    """A release reformatted as black formats it (the stacked call over 3 or 6 lines) is not refused: the
    site is found by its syntax, patched, and gives the log-probs, gradients and kernel count of the
    one-line release's patch; a second run changes nothing."""
    import torch

    one_line = tmp_path / "one-line"
    shutil.copytree(str(real_tree), str(one_line))
    line = _wrap_logsumexp_call(real_tree, style)
    rel = "verl/utils/torch_functional.py"
    plan = make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert [(s.file, s.line) for s in plan.sites if s.kind == KIND_LOGSUMEXP] == [(rel, line)]
    pristine = tmp_path / "pristine"
    shutil.copytree(str(real_tree), str(pristine))
    patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    patch_tree(str(one_line), "pascal", "sdpa", releases=RELEASES)
    wrapped_fn, one_line_fn = _log_probs_function(real_tree), _log_probs_function(one_line)
    gen = torch.Generator().manual_seed(1)
    tokens, vocab = 1100, 257
    for shape in [(tokens,), (4, tokens // 4)]:
        logits = torch.randn(*shape, vocab, generator=gen) * 4
        labels = torch.randint(0, vocab, shape, generator=gen)
        want, want_grad, per_row = _logsumexp_kernels(_log_probs_function(pristine), logits, labels)
        got, got_grad, chunked = _logsumexp_kernels(wrapped_fn, logits, labels)
        same, same_grad, one_line_chunked = _logsumexp_kernels(one_line_fn, logits, labels)
        assert torch.equal(got, same) and torch.equal(got_grad, same_grad)
        assert torch.allclose(got, want, rtol=0, atol=1e-5) and torch.allclose(got_grad, want_grad, atol=1e-6)
        assert per_row == shape[0] and chunked == one_line_chunked == -(-tokens // verl_patch.LOGSUMEXP_CHUNK)
    before = snapshot(real_tree)
    again = patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert not again.changes and snapshot(real_tree) == before
    assert by_kind(again.sites, PATCHED)[KIND_LOGSUMEXP] == 1


def _poll_default(tree: Path) -> Any:
    """The default of ReplayBuffer.__init__'s poll_interval in ``tree``, as Python evaluates it."""
    text = (tree / "verl" / "trainer" / "ppo" / "v1" / "replay_buffer.py").read_text()
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "ReplayBuffer")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    names = [a.arg for a in init.args.args]
    return ast.literal_eval(init.args.defaults[names.index("poll_interval") - len(names)])


@pytest.mark.parametrize("real_tree", ["0.9.1"], indirect=True)
def test_the_v1_replay_buffer_polls_every_tenth_of_a_second(real_tree: Path, tmp_path: Path) -> None:
    """verl 0.9.1's V1 trainer collects a step's responses from a replay buffer that looked every 2 s (a
    default its configuration does not reach): generation was counted in 2 s steps. Patched: 0.1 s, once."""
    pristine = tmp_path / "pristine"
    shutil.copytree(str(real_tree), str(pristine))
    assert _poll_default(pristine) == 2.0
    patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert _poll_default(real_tree) == verl_patch.REPLAY_POLL_S == 0.1
    again = make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert [s.state for s in again.sites if s.kind == KIND_REPLAY_POLL] == [PATCHED]
    # Not listed for a release, the default is left as released.
    unlisted = {v: {f: {k: n for k, n in kinds.items() if k != KIND_REPLAY_POLL} for f, kinds in t.items()}
                for v, t in RELEASES.items()}
    assert not [s for s in make_plan(str(pristine), "pascal", "sdpa", releases=unlisted).sites
                if s.kind == KIND_REPLAY_POLL]


def _calls_text(text: str) -> List[str]:
    """Source of every call whose callee's name ends in 'autocast' (plain text regex, not the engine)."""
    return re.findall(r"autocast\((?:[^()]|\([^()]*\))*\)", text)


def _policies_text(text: str) -> List[str]:
    """Source of every call of an FSDP mixed-precision policy (plain text regex, not the engine)."""
    return re.findall(r"MixedPrecision(?:Policy)?\((?:[^()]|\([^()]*\))*\)", text)


def _literals(text: str, value: str) -> List[str]:
    """String tokens of ``text`` whose value is exactly ``value`` (the tokenizer, not the engine's AST)."""
    import io
    import tokenize

    return [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.STRING and tok.string.strip("'\"") == value]


# String literals that name FlashAttention-2 without asking for it, per release and file, each read
# in the source: 0.9.1's set of attentions prefix grouping supports (monkey_patch.py), and VeOmni's
# table from an attention's name to its kernel's (engine.py), looked up with the attention asked for.
NAMING_NOT_ASKING: Dict[str, Dict[str, int]] = {
    "0.9.1": {"verl/models/transformers/monkey_patch.py": 1, "verl/workers/config/engine.py": 1},
    "0.8.0": {"verl/models/transformers/monkey_patch.py": 1, "verl/workers/config/engine.py": 1},
    "0.7.1": {"verl/models/transformers/monkey_patch.py": 1},
}


@real_versions
def test_real_sdist_patched_tree_has_no_site_left_by_plain_text(real_tree: Path) -> None:
    """Independent of the engine's scanner: grep-level checks on the patched package."""
    version = real_tree.name[len("verl-"):]
    patch_tree(str(real_tree), "pascal", "eager", releases=RELEASES)
    for path in py_files(real_tree / "verl"):
        rel = path.relative_to(real_tree).as_posix()
        if rel == "verl/utils/torch_dtypes.py":
            continue
        text = path.read_text(encoding="utf-8")
        # Every string literal that is exactly the name is a site in these releases (prose that
        # mentions it, such as a docstring of 0.6.1's NPU patch, is not), but those named above.
        assert len(_literals(text, "flash_attention_2")) == NAMING_NOT_ASKING.get(version, {}).get(rel, 0), rel
        for call in _calls_text(text):
            assert "bfloat16" not in call or "enabled=False" in call, (rel, call)
        for call in _policies_text(text):  # FSDP's parameters in bf16 (verl's SFT trainer up to 0.6)
            assert "bfloat16" not in call, (rel, call)
        lines = text.splitlines()
        for number, line in enumerate(lines):
            if re.match(r"\s*from flash_attn\.bert_padding import", line):
                previous = lines[number - 1].strip()
                assert previous.startswith("try:"), "%s:%d: bare flash-attn import" % (rel, number + 1)
    # Where verl asks for FlashAttention-2 in a call, the patch writes the attention asked for.
    asking = [rel for rel, kinds in RELEASES[version].items() if KIND_ATTN in kinds]
    assert any(re.search(r"attn_implementation=([\'\"])eager\1", (real_tree / rel).read_text()) for rel in asking)


@real_versions
def test_real_sdist_compat_module_exports_every_imported_name(real_tree: Path) -> None:
    plan = make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    compat = ast.parse((REPO_ROOT / "module_utils/verl_pascal_compat/bert_padding.py").read_text())
    exported = next(
        ast.literal_eval(node.value)
        for node in compat.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
    )
    for site in plan.sites:
        if site.kind == KIND_BERT:
            statement = ast.parse(site.before.strip()).body[0]
            assert isinstance(statement, ast.ImportFrom)
            assert {a.name for a in statement.names} <= set(exported), site.describe()


@pytest.mark.parametrize("real_tree", REQUIRED_VERSIONS, indirect=True)
def test_real_sdist_second_run_is_a_no_op(real_tree: Path) -> None:
    first = run_cli("--source", str(real_tree), "--profile", "pascal")
    assert first.returncode == 0, first.stderr
    before = snapshot(real_tree)
    second = run_cli("--source", str(real_tree), "--profile", "pascal")
    assert second.returncode == 0, second.stderr
    assert "already fully patched" in second.stdout
    assert snapshot(real_tree) == before


@pytest.mark.parametrize("real_tree", REQUIRED_VERSIONS, indirect=True)
def test_real_sdist_check_exit_codes(real_tree: Path) -> None:
    version = real_tree.name[len("verl-") :]
    pristine = snapshot(real_tree)
    check = run_cli("--source", str(real_tree), "--profile", "pascal", "--check")
    assert check.returncode == 1, check.stderr
    for rel, line, kind in REAL_LINES[version]:
        assert "%s:%d:" % (rel, line) in check.stdout and kind in check.stdout
    assert check.stdout.count("(pending)") == sum(REAL_COUNTS[version].values())
    assert snapshot(real_tree) == pristine, "--check wrote something"

    assert run_cli("--source", str(real_tree), "--profile", "pascal").returncode == 0
    clean = run_cli("--source", str(real_tree), "--profile", "pascal", "--check")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    other_attn = run_cli("--source", str(real_tree), "--profile", "pascal", "--attn", "eager", "--check")
    assert other_attn.returncode == 1 and "attn_implementation" in other_attn.stdout


@pytest.mark.parametrize("real_tree", REQUIRED_VERSIONS, indirect=True)
def test_real_sdist_json_output(real_tree: Path) -> None:
    version = real_tree.name[len("verl-") :]
    proc = run_cli("--source", str(real_tree), "--profile", "pascal", "--check", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["verl_version"] == version and data["supported"] is True and data["check"] is True
    assert data["pending"] == sum(REAL_COUNTS[version].values())
    assert data["counts"] == REAL_COUNTS[version]
    assert data["table_entry"] == RELEASES[version]
    assert {"file", "line", "col", "kind", "state", "before", "after"} <= set(data["sites"][0])
    applied = json.loads(run_cli("--source", str(real_tree), "--profile", "pascal", "--json").stdout)
    assert applied["changed"] is True and applied["check"] is False


@pytest.mark.parametrize("real_tree", ["0.5.0"], indirect=True)
def test_real_sdist_unsupported_version_is_refused(real_tree: Path) -> None:
    (real_tree / "verl" / "version" / "version").write_text("9.9.9\n")
    before = snapshot(real_tree)
    proc = run_cli("--source", str(real_tree), "--profile", "pascal")
    assert proc.returncode == 2
    assert "9.9.9" in proc.stderr and "0.4.1" in proc.stderr and "0.5.0" in proc.stderr
    assert "verl_pascal/releases/verl-9.9.9/release.yml" in proc.stderr
    assert run_cli("--source", str(real_tree), "--profile", "pascal", "--check").returncode == 2
    assert snapshot(real_tree) == before
    # A maintainer adding the release: never exits 0 while a site is left.
    probe = run_cli("--source", str(real_tree), "--profile", "pascal", "--check", "--json", "--allow-unsupported")
    assert probe.returncode == 1
    # Gated kinds (hf_rollout_n) are never found without the release's table: a maintainer lists them by hand.
    ungated = {f: {k: n for k, n in kinds.items() if k not in verl_patch.GATED_KINDS}
               for f, kinds in RELEASES["0.5.0"].items()}
    assert json.loads(probe.stdout)["table_entry"] == ungated
    assert run_cli("--source", str(real_tree), "--profile", "pascal", "--allow-unsupported").returncode == 0
    assert run_cli("--source", str(real_tree), "--profile", "pascal", "--check", "--allow-unsupported").returncode == 0


# The releases whose SFT trainer verl-ppo --sft runs (an `sft` table in the folder), and those among them
# whose trainer hard-codes its FSDP policies' bf16 parameters.
SFT_VERSIONS = [v for v in ALL_VERSIONS if verl_releases.read(v).get("sft")]
SFT_POLICY_VERSIONS = [v for v in SFT_VERSIONS
                       if any(KIND_MIXED_PRECISION in kinds for kinds in RELEASES[v].values())]


def _module_file(root: Path, module: str) -> Optional[Path]:
    base = root.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imported(node: ast.AST, package: str) -> List[str]:
    """The modules an import statement may load (a from-import's names may be modules), absolute."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
    return [base] + [base + "." + a.name for a in node.names]


def verl_imports(root: Path, module: str, top_level_only: bool) -> Dict[str, Path]:
    """Every module of the verl package that importing ``module`` can load ({module: file}): its imports,
    theirs and so on, with each package's __init__; ``top_level_only``: only the statements that run on
    import (a function's own imports run when it is called)."""
    found: Dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = _module_file(root, name)
        if name in found or path is None:
            continue
        found[name] = path
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in (tree.body if top_level_only else ast.walk(tree)):
            for target in _imported(node, package):
                parts = target.split(".")
                if parts[0] == "verl":
                    todo.extend(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


def unpatched_sites(root: Path, files: Dict[str, Path]) -> List[str]:
    """The sites in ``files`` the project's scanner finds still as released (bf16, FlashAttention-2, flash-attn)."""
    left: List[str] = []
    for path in files.values():
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        for site in verl_patch.scan_text(text, rel, None, "sdpa"):
            if site.state == verl_patch.KEPT:
                left.append("%s:%d %s" % (rel, site.node.lineno, site.kind))  # type: ignore[attr-defined]
    return left


#: The configuration switches that keep Triton out of a run (torch.compile's Inductor, Liger's kernels): the
#: SFT overrides turn each off wherever the trainer's configuration has it (tests/test_release_configs.py).
TRITON_SWITCHES = {"use_torch_compile", "use_liger"}


def triton_entries(root: Path, files: Dict[str, Path]) -> List[Tuple[str, int, List[str]]]:
    """Each torch.compile call and Liger or Triton import in ``files``, with the names its enclosing
    conditions test (``config.use_liger``, ``config.get("use_liger")``): (file, line, names)."""
    entries: List[Tuple[str, int, List[str]]] = []
    for path in files.values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            compiled = isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.compile"
            imports = [m.split(".")[0] for m in _imported(node, "verl")]
            if not (compiled or {"liger_kernel", "triton"} & set(imports)):
                continue
            names, at = set(), node
            while at in parents:
                at = parents[at]
                if isinstance(at, (ast.If, ast.IfExp)):
                    names |= {n.attr for n in ast.walk(at.test) if isinstance(n, ast.Attribute)}
                    names |= {n.id for n in ast.walk(at.test) if isinstance(n, ast.Name)}
                    names |= {n.value for n in ast.walk(at.test) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            entries.append((path.relative_to(root).as_posix(), node.lineno, sorted(names)))  # type: ignore[attr-defined]
    return entries


@pytest.mark.parametrize("real_tree", SFT_VERSIONS, indirect=True)
def test_the_sft_trainer_and_all_it_imports_are_left_with_no_bf16_flash_or_unswitched_triton(real_tree: Path) -> None:
    """verl-ppo --sft runs the release's SFT trainer under P40 rules: after the patch, no module of verl that
    the trainer can import (its imports, theirs, and those a function makes when called) holds a bf16 autocast
    or FSDP policy, a FlashAttention-2 request or a bare flash-attn import, by the project's own scanner; and
    every torch.compile and Liger or Triton import that loads with it sits behind a switch the SFT overrides
    turn off. Before the patch the same modules hold such sites: the SFT path needs the patch."""
    version = real_tree.name[len("verl-"):]
    module = verl_releases.read(version)["sft"]["module"]
    files = verl_imports(real_tree, module, top_level_only=False)
    trainer = "verl/trainer/%s.py" % module.rsplit(".", 1)[-1]
    assert trainer in {p.relative_to(real_tree).as_posix() for p in files.values()}
    assert unpatched_sites(real_tree, files), "the SFT path had nothing to patch: this test would prove nothing"
    patch_tree(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert unpatched_sites(real_tree, files) == []
    entries = triton_entries(real_tree, verl_imports(real_tree, module, top_level_only=True))
    assert [e for e in entries if not TRITON_SWITCHES & set(e[2])] == []


@pytest.mark.parametrize("real_tree", SFT_POLICY_VERSIONS, indirect=True)
def test_an_sft_policy_site_moved_upstream_fails_and_writes_nothing(real_tree: Path) -> None:
    """verl's SFT trainer (0.5.0, 0.6.1) gives FSDP literal bf16 parameters; a release whose trainer takes them
    from elsewhere is refused, naming the file, rather than run with the patch left out."""
    trainer = real_tree / "verl/trainer/fsdp_sft_trainer.py"
    text = trainer.read_text()
    assert text.count("param_dtype=torch.bfloat16") == 2
    trainer.write_text(text.replace("param_dtype=torch.bfloat16", "param_dtype=self.param_dtype"))
    before = snapshot(real_tree)
    with pytest.raises(UpstreamChangedError, match=r"fsdp_sft_trainer\.py: mixed_precision_bf16 expected >= 2, found 0"):
        make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    proc = run_cli("--source", str(real_tree), "--profile", "pascal")
    assert proc.returncode == 2 and "fsdp_sft_trainer.py" in proc.stderr
    assert snapshot(real_tree) == before


@pytest.mark.parametrize("real_tree", ["0.5.0"], indirect=True)
def test_real_sdist_site_moved_upstream_fails_and_writes_nothing(real_tree: Path) -> None:
    actor = real_tree / "verl/workers/actor/dp_actor.py"
    text = actor.read_text()
    assert text.count("dtype=torch.bfloat16") == 1
    actor.write_text(text.replace("dtype=torch.bfloat16", "dtype=self.param_dtype"))
    before = snapshot(real_tree)
    with pytest.raises(UpstreamChangedError, match=r"dp_actor\.py: autocast_bf16 expected >= 1, found 0"):
        make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    proc = run_cli("--source", str(real_tree), "--profile", "pascal")
    assert proc.returncode == 2 and "upstream" in proc.stderr
    assert snapshot(real_tree) == before


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    missing = run_cli("--source", str(tmp_path / "nope"), "--profile", "pascal")
    assert missing.returncode == 2 and "no such directory" in missing.stderr
    empty = run_cli("--source", str(tmp_path), "--profile", "pascal", "--check")
    assert empty.returncode == 2 and "no verl package" in empty.stderr
    assert run_cli("--source", str(tmp_path), "--profile", "ampere").returncode == 2  # argparse


def test_cli_source_that_is_a_file_says_so(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a tree\n")
    proc = run_cli("--source", str(notes), "--profile", "pascal")
    assert proc.returncode == 2 and "%s is a file, not a directory" % notes in proc.stderr
    assert "Traceback" not in proc.stderr
    archive = tmp_path / "verl-0.5.0.tar.gz"
    archive.write_bytes(b"\x1f\x8b")
    proc = run_cli("--source", str(archive), "--profile", "pascal", "--check")
    assert proc.returncode == 2 and "is a file, not a directory" in proc.stderr and "unpacked" in proc.stderr


@pytest.mark.parametrize("real_tree", ["0.5.0"], indirect=True)
def test_cli_damaged_source_file_says_reinstall(real_tree: Path) -> None:
    actor = real_tree / "verl/workers/actor/dp_actor.py"
    data = actor.read_bytes()
    actor.write_bytes(data[: len(data) // 2])  # a truncated copy: cut inside a statement
    with pytest.raises(SyntaxError):
        compile(actor.read_bytes(), str(actor), "exec")
    before = snapshot(real_tree)
    for extra in ((), ("--check",)):
        proc = run_cli("--source", str(real_tree), "--profile", "pascal", *extra)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "verl/workers/actor/dp_actor.py is damaged" in proc.stderr
        assert "reinstall verl from its sdist" in proc.stderr
        assert "Python" not in proc.stderr  # another interpreter would not help
    assert snapshot(real_tree) == before


def test_cli_source_file_that_is_not_utf8_is_damaged(tmp_path: Path) -> None:
    root = _package(tmp_path, {"verl/bad.py": b"x = '\xff\xfe'\n"})
    proc = run_cli("--source", str(root), "--profile", "pascal", "--allow-unsupported")
    assert proc.returncode == 2 and "verl/bad.py is damaged" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("real_tree", ["0.5.0"], indirect=True)
def test_cli_closed_stdout_exits_quietly(real_tree: Path) -> None:
    """`verl-patch ... --diff | head -1`: the reader is gone before the output is written."""
    for extra in (("--check",), ()):
        read_end, write_end = os.pipe()
        os.close(read_end)  # head -1 has read its line and exited
        try:
            proc = subprocess.run(
                [*CLI, "--source", str(real_tree), "--profile", "pascal", "--diff", *extra],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=300,
            )
        finally:
            os.close(write_end)
        assert proc.returncode == 141, proc.stderr
        assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    # The patch is written before its report: losing the report loses nothing.
    assert run_cli("--source", str(real_tree), "--profile", "pascal", "--check").returncode == 0


@pytest.mark.parametrize("real_tree", ["0.5.0"], indirect=True)
def test_real_sdist_native_profile_changes_nothing(real_tree: Path) -> None:
    before = snapshot(real_tree)
    proc = run_cli("--source", str(real_tree), "--profile", "native", "--check")
    assert proc.returncode == 0 and "nothing to patch" in proc.stdout
    assert run_cli("--source", str(real_tree), "--profile", "native").returncode == 0
    assert snapshot(real_tree) == before
    assert run_cli("--source", str(real_tree), "--profile", "pascal").returncode == 0
    refused = run_cli("--source", str(real_tree), "--profile", "native", "--check")
    assert refused.returncode == 2 and "reinstall" in refused.stderr


@pytest.mark.parametrize("real_tree", ["0.5.0"], indirect=True)
def test_real_sdist_package_dir_as_source(real_tree: Path) -> None:
    """--source may be verl/ itself (or a site-packages dir): an installed copy can be checked."""
    assert run_cli("--source", str(real_tree / "verl"), "--profile", "pascal", "--check").returncode == 1
    assert run_cli("--source", str(real_tree / "verl"), "--profile", "pascal").returncode == 0
    assert run_cli("--source", str(real_tree), "--profile", "pascal", "--check").returncode == 0


# --------------------------------------------------------------------------
# The synthetic tree: finding by syntax, exact rewrites
# --------------------------------------------------------------------------


def test_synthetic_sites_found_by_syntax(synthetic: Path) -> None:
    plan = make_plan(str(synthetic), "pascal", "sdpa", allow_unsupported=True)
    odd = [s for s in plan.sites if s.file == "verl/workers/odd_forms.py"]
    assert by_kind(odd, PENDING) == {KIND_AUTOCAST: 5, KIND_ATTN: 7, KIND_BERT: 1, KIND_MIXED_PRECISION: 0, KIND_ROLLOUT_N: 0, KIND_LOGSUMEXP: 0, KIND_REPLAY_POLL: 0, KIND_GENERATE_POSITIONS: 0, KIND_ROLLOUT_LOG_PROBS: 0}
    assert {s.line for s in odd if s.kind == KIND_AUTOCAST} == {12, 17, 19, 21, 30}
    policies = [s for s in plan.sites if s.file == "verl/workers/mixed_precision_forms.py"]
    assert {(s.line, s.kind, s.state) for s in policies} == {(n, KIND_MIXED_PRECISION, PENDING) for n in (10, 11, 16, 17)}
    assert {s.file for s in plan.sites} == {"verl/workers/odd_forms.py", "verl/workers/uses_padding.py",
                                            "verl/workers/mixed_precision_forms.py"}
    assert plan.warnings and "not supported" in plan.warnings[0]


def test_synthetic_rewrite_is_exact(synthetic: Path) -> None:
    patch_tree(str(synthetic), "pascal", "sdpa", allow_unsupported=True)
    for name in ("odd_forms.py", "uses_padding.py", "mixed_precision_forms.py"):
        assert (synthetic / "verl/workers" / name).read_bytes() == (EXPECTED / name).read_bytes(), name
    for rel in ("verl/utils/torch_dtypes.py", "tests/outside_package.py", "verl/__init__.py"):
        assert (synthetic / rel).read_bytes() == (SYNTHETIC / rel).read_bytes(), rel
    assert (synthetic / "verl/_pascal_compat/bert_padding.py").read_bytes() == (
        REPO_ROOT / "module_utils/verl_pascal_compat/bert_padding.py"
    ).read_bytes()


def test_synthetic_unsupported_without_flag(synthetic: Path) -> None:
    with pytest.raises(UnsupportedVersionError, match="0.0.0\\+synthetic.*supported: 0.3.0.post1, 0.4.0, 0.4.1, 0.5.0, 0.6.1"):
        make_plan(str(synthetic), "pascal", "sdpa", releases=RELEASES)


def test_the_release_before_a_supported_one_is_refused(extracted: Callable[[str], Path], tmp_path: Path) -> None:
    """0.6.0 has no folder (0.6.1 fixed its bugs): the patcher refuses it and changes nothing."""
    tree = tmp_path / "verl-0.6.0"
    shutil.copytree(str(extracted("0.6.0")), str(tree))
    before = snapshot(tree)
    with pytest.raises(UnsupportedVersionError, match="verl 0.6.0 is not supported.*0.5.0, 0.6.1"):
        patch_tree(str(tree), "pascal", "sdpa", releases=RELEASES)
    assert snapshot(tree) == before


def test_the_advice_for_an_unsupported_release_runs_none_of_its_sdist_before_its_sha256_is_checked(
        synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """verl-patch's advice for a release without a folder names no pip command (pip download prepares an
    sdist's metadata, running its setup.py, before anyone checks it). Its lock and prefetch command,
    followed as written against an index serving a hostile sdist, put the file where the advice unpacks
    it only with the sha256 copied from the index, refuse another file, and never run its setup.py."""
    from hostile_sdist import hostile_sdist
    from prefetch_server import Upstream, simple_page

    from verl_pascal.prefetch import cli as prefetch_cli

    (synthetic / "verl" / "version" / "version").write_text("9.9.9\n")
    proc = run_cli("--source", str(synthetic), "--profile", "pascal")
    advice = proc.stderr
    assert proc.returncode == 2 and "Traceback" not in advice and len(advice.strip().splitlines()) == 1
    for runs_the_sdist in ("pip download", "pip install", "--no-binary", "setup.py", "easy_install"):
        assert runs_the_sdist not in advice
    lock_text = re.search(r"put `([^`]+)` in a file LOCK\.yml", advice)
    command = re.search(r"run `(verl-pascal-prefetch [^`]+)`", advice)
    assert lock_text and command and "unpack DIR/verl-9.9.9.tar.gz" in advice
    assert advice.index("sha256") < advice.index("unpack") < advice.index("verl-patch --source")

    marker = tmp_path / "setup-py-ran"
    (tmp_path / "dist").mkdir()
    sdist = hostile_sdist(tmp_path / "dist", marker, "verl", "9.9.9")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    files = {f"files/{sdist.name}": sdist.read_bytes(), "simple/verl/": simple_page({sdist.name: digest})}
    mirror = tmp_path / "DIR"
    with Upstream(files) as server:
        for sha256, fetched in (("0" * 64, False), (digest, True)):  # a file the copied sha256 is not, then it
            lock = tmp_path / "LOCK.yml"
            lock.write_text(lock_text.group(1).replace("<that sha256>", sha256) + "\n")
            argv = [{"LOCK.yml": str(lock), "DIR": str(mirror)}.get(a, a) for a in command.group(1).split()[1:]]
            code = prefetch_cli.main(argv + ["--pip-index-url", server.url + "/simple/", "--no-progress"])
            capsys.readouterr()
            assert (code == 0) == fetched
            assert (mirror / sdist.name).is_file() == fetched
    assert (mirror / sdist.name).read_bytes() == sdist.read_bytes()
    assert not marker.exists()


@pytest.mark.parametrize("real_tree", ["0.6.1", "0.7.1"], indirect=True)
def test_legacy_actor_autocasts_with_a_config_dtype_the_launch_sets(real_tree: Path) -> None:
    """verl 0.6.1's and 0.7.1's actor (and reference) autocast with fsdp_config.dtype, not a literal the
    patcher could find: the release folder's fp32 overrides set exactly that key."""
    version = real_tree.name[len("verl-"):]
    actor = (real_tree / "verl/workers/actor/dp_actor.py").read_text()
    assert 'self.config.fsdp_config.get("dtype", "bfloat16")' in actor
    assert "torch.autocast(device_type=self.device_name, dtype=self.param_dtype)" in actor
    overrides = verl_releases.read(version)["profile_overrides"]["fp32"]
    assert {"actor_rollout_ref.actor.fsdp_config.dtype=fp32", "actor_rollout_ref.ref.fsdp_config.dtype=fp32"} <= set(overrides)
    plan = make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert "verl/workers/actor/dp_actor.py" not in {site.file for site in plan.sites}


# The engine workers' (verl 0.8 on) sections of each role, as the release spells them.
ENGINE_SECTIONS = ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "critic.fsdp")


@pytest.mark.parametrize("real_tree", ["0.8.0", "0.9.1"], indirect=True)
def test_engine_autocast_and_compile_are_config_driven_and_the_launch_turns_both_off(
        real_tree: Path, tmp_path: Path) -> None:
    """verl 0.8.0's and 0.9.1's FSDP engine autocasts with mixed_precision.param_dtype (bf16 when
    unset) and compiles its entropy unless fsdp_config.use_torch_compile is off: no literal for the patcher.
    The launch script must set both, for the actor, the reference and the critic, under the keys
    the release reads (critic.fsdp.*, not 0.5.0's critic.model.fsdp_config.*)."""
    from verl_pascal.launch import render

    engine = (real_tree / "verl/workers/engine/fsdp/transformer_impl.py").read_text()
    assert 'param_dtype = PrecisionType.to_dtype(mixed_precision_config.get("param_dtype", "bf16"))' in engine
    assert "nullcontext()\n            if autocast_dtype == torch.float32" in engine
    assert "torch.compile(entropy_from_logits, dynamic=True)\n            if self.engine_config.use_torch_compile" in engine
    version = real_tree.name[len("verl-"):]
    script = render.write(str(tmp_path / "verl-ppo"), {"verl_version": version, "launch_data_dir": "/d",
                                                       "launch_model_dir": "/m"})
    argv = subprocess.run([script, "--dry-run"], capture_output=True, text=True, check=True).stdout.split()
    for section in ENGINE_SECTIONS:
        assert f"++{section}.mixed_precision.param_dtype=fp32" in argv, section
        assert f"{section}.use_torch_compile=False" in argv, section
    assert not [a for a in argv if "critic.model.fsdp_config" in a]
    assert "actor_rollout_ref.rollout.dtype=fp32" in argv
    plan = make_plan(str(real_tree), "pascal", "sdpa", releases=RELEASES)
    assert "verl/workers/engine/fsdp/transformer_impl.py" not in {site.file for site in plan.sites}


def test_synthetic_idempotent_and_retarget(synthetic: Path) -> None:
    patch_tree(str(synthetic), "pascal", "sdpa", allow_unsupported=True)
    before = snapshot(synthetic)
    again = patch_tree(str(synthetic), "pascal", "sdpa", allow_unsupported=True)
    assert not again.changes and snapshot(synthetic) == before
    assert by_kind(again.sites, PATCHED) == {KIND_AUTOCAST: 5, KIND_ATTN: 7, KIND_BERT: 2, KIND_MIXED_PRECISION: 4, KIND_ROLLOUT_N: 0, KIND_LOGSUMEXP: 0, KIND_REPLAY_POLL: 0, KIND_GENERATE_POSITIONS: 0, KIND_ROLLOUT_LOG_PROBS: 0}

    retarget = patch_tree(str(synthetic), "volta_turing", "eager", allow_unsupported=True)
    assert by_kind(retarget.pending) == {KIND_AUTOCAST: 0, KIND_ATTN: 7, KIND_BERT: 0, KIND_MIXED_PRECISION: 0, KIND_ROLLOUT_N: 0, KIND_LOGSUMEXP: 0, KIND_REPLAY_POLL: 0, KIND_GENERATE_POSITIONS: 0, KIND_ROLLOUT_LOG_PROBS: 0}
    odd = (synthetic / "verl/workers/odd_forms.py").read_text()
    assert odd == (EXPECTED / "odd_forms.py").read_text().replace("'sdpa'", "'eager'").replace('"sdpa"', '"eager"')
    marker = (synthetic / "verl/_pascal_compat/__init__.py").read_text()
    assert 'PROFILE = "volta_turing"' in marker and 'ATTN = "eager"' in marker
    manifest = json.loads((synthetic / "verl/.verl_pascal_patch.json").read_text())
    assert manifest["attn"] == "eager" and manifest["profile"] == "volta_turing"
    assert sum(1 for s in manifest["sites"] if s["after"] == '"eager"') == 6
    assert not patch_tree(str(synthetic), "volta_turing", "eager", allow_unsupported=True).changes
    with pytest.raises(VerlPatchError, match="reinstall"):
        make_plan(str(synthetic), "native", patch="none")


def test_check_mode_plan_writes_nothing_and_diff_is_unified(synthetic: Path) -> None:
    before = snapshot(synthetic)
    plan = patch_tree(str(synthetic), "pascal", "sdpa", check=True, allow_unsupported=True)
    assert plan.changed and snapshot(synthetic) == before
    diff = plan.unified_diff()
    assert "--- a/verl/workers/odd_forms.py" in diff and "+++ b/verl/_pascal_compat/bert_padding.py" in diff
    assert "-        dtype=th.bfloat16,  # keep this comment" in diff
    assert "+        dtype=th.float32, enabled=False,  # keep this comment" in diff
    entries = plan.diffs()
    assert {e["after_header"] for e in entries} >= {"verl/workers/odd_forms.py", "verl/.verl_pascal_patch.json"}
    assert all(set(e) == {"before_header", "after_header", "before", "after"} for e in entries)


def _package(tmp_path: Path, files: Dict[str, bytes]) -> Path:
    root = tmp_path / "tree"
    (root / "verl" / "version").mkdir(parents=True)
    (root / "verl" / "__init__.py").write_bytes(b"")
    (root / "verl" / "version" / "version").write_bytes(b"0.0.1\n")
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_crlf_bom_and_tabs_are_kept(tmp_path: Path) -> None:
    source = (
        "\ufeffimport torch\r\n"
        "if True:\r\n"
        "\tfrom flash_attn.bert_padding import pad_input\r\n"
        "\twith torch.autocast('cuda', dtype=torch.bfloat16):\r\n"
        "\t\tpass\r\n"
    ).encode("utf-8")
    root = _package(tmp_path, {"verl/crlf.py": source})
    patch_tree(str(root), "pascal", "sdpa", allow_unsupported=True)
    text = (root / "verl/crlf.py").read_bytes().decode("utf-8")
    assert text.startswith("\ufeff") and "\n" not in text.replace("\r\n", "")
    assert "\ttry:  # verl-pascal:" in text and "\t\tfrom flash_attn.bert_padding import pad_input\r\n" in text
    assert "\t\tfrom verl._pascal_compat.bert_padding import pad_input\r\n" in text
    assert "torch.autocast('cuda', dtype=torch.float32, enabled=False)" in text
    compile(text.lstrip("\ufeff"), "crlf.py", "exec")


def test_import_sharing_a_line_is_refused_and_nothing_written(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "verl/a.py": b"import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    pass\n",
            "verl/b.py": b"if True: from flash_attn.bert_padding import pad_input\n",
        },
    )
    before = snapshot(root)
    with pytest.raises(RewriteError, match="shares its line"):
        patch_tree(str(root), "pascal", "sdpa", allow_unsupported=True)
    assert snapshot(root) == before
    proc = run_cli("--source", str(root), "--profile", "pascal", "--allow-unsupported")
    assert proc.returncode == 2 and "verl/b.py:1" in proc.stderr


def test_rewrite_that_does_not_compile_aborts_before_writing(synthetic: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: Any, call: Any, dtype: Any, enabled: Any) -> List[verl_patch.Edit]:
        end = ctx.src.span(call)[1]
        return [verl_patch.Edit(end, end, ")")]

    monkeypatch.setattr(autocast, "autocast_edits", broken)
    before = snapshot(synthetic)
    with pytest.raises(RewriteError, match="does not compile"):
        patch_tree(str(synthetic), "pascal", "sdpa", allow_unsupported=True)
    assert snapshot(synthetic) == before


def test_rewrite_that_leaves_a_site_aborts(synthetic: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autocast, "autocast_edits", lambda ctx, call, dtype, enabled: [])
    before = snapshot(synthetic)
    with pytest.raises(RewriteError, match="left a autocast_bf16 site"):
        patch_tree(str(synthetic), "pascal", "sdpa", allow_unsupported=True)
    assert snapshot(synthetic) == before


def test_patched_imports_fall_back_and_still_prefer_flash_attn(synthetic: Path, tmp_path: Path) -> None:
    """Run the patched module: pure torch without flash_attn, flash-attn's module where it imports."""
    pytest.importorskip("torch", reason="torch is not importable: cannot import the patched module")
    probe = "import verl.workers.uses_padding as m; print(m.pad_input.__module__, m.unpad_input.__module__)"

    def run(*paths: Path) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in paths))
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)

    unpatched = run(synthetic)
    assert unpatched.returncode != 0 and "flash_attn" in unpatched.stderr  # the failure the patch removes
    patch_tree(str(synthetic), "pascal", "sdpa", allow_unsupported=True)
    fallback = run(synthetic)
    assert fallback.returncode == 0, fallback.stderr
    assert fallback.stdout.split() == ["verl._pascal_compat.bert_padding"] * 2
    fake = tmp_path / "fake-flash-attn"
    (fake / "flash_attn").mkdir(parents=True)
    (fake / "flash_attn" / "__init__.py").write_text("")
    (fake / "flash_attn" / "bert_padding.py").write_text(
        "def index_first_axis(*a): pass\n"
        "def rearrange(*a): pass\n"
        "def pad_input(*a): pass\n"
        "def unpad_input(*a): pass\n"
    )
    preferred = run(fake, synthetic)
    assert preferred.returncode == 0, preferred.stderr
    assert preferred.stdout.split() == ["flash_attn.bert_padding"] * 2


def test_engine_is_stdlib_only_and_python38_compatible() -> None:
    """The engine ships to hosts with Python 3.8+: stdlib imports only (and its own modules, imported
    relatively, so that Ansible ships them and verl_pascal reaches them by its one name), no 3.9+ syntax."""
    stdlib = {"__future__", "ast", "dataclasses", "difflib", "hashlib", "json", "os", "pkgutil", "re", "signal"}
    stdlib |= {"sys", "tempfile", "typing"}
    files = sorted((REPO_ROOT / "module_utils" / "verl_patch").rglob("*.py"))
    assert len(files) > 1
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), feature_version=(3, 8))):
            if isinstance(node, ast.Import):
                assert {a.name.split(".")[0] for a in node.names} <= stdlib, path
            elif isinstance(node, ast.ImportFrom) and not node.level:
                assert (node.module or "").split(".")[0] in stdlib, path
    ast.parse((REPO_ROOT / "verl_pascal" / "patch_cli.py").read_text(), feature_version=(3, 8))


def test_table_lists_the_release_files() -> None:
    for version, table in RELEASES.items():
        assert "verl/utils/torch_dtypes.py" not in table
        for rel, kinds in table.items():
            assert rel.startswith("verl/") and rel.endswith(".py"), (version, rel)
            assert set(kinds) <= set(verl_patch.KINDS) and all(n >= 1 for n in kinds.values())


# --------------------------------------------------------------------------
# The Ansible module, through `ansible`
# --------------------------------------------------------------------------


def run_module(tmp_path: Path, args: str, *flags: str) -> Dict[str, Any]:
    """The module as the verl role calls it for verl 0.5.0 on pascal: the patch kind of the
    profile's row, the release and the patch-site table of its folder."""
    sites = json.dumps(RELEASES["0.5.0"])
    return run_ansible_module(tmp_path, "verl_patch", f"{args} patch=fp32 version=0.5.0 sites='{sites}'", *flags)


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
@pytest.mark.parametrize("real_tree", ["0.5.0"], indirect=True)
def test_module_check_mode_diff_then_apply(real_tree: Path, tmp_path: Path) -> None:
    before = snapshot(real_tree)
    checked = run_module(tmp_path, "source=%s profile=pascal attn=sdpa" % real_tree, "--check", "--diff")
    assert checked.get("failed") is not True, checked
    assert checked["changed"] is True and checked["verl_version"] == "0.5.0"
    assert snapshot(real_tree) == before, "check mode wrote something"
    diffs = checked["diff"]
    assert any(d["after_header"] == "verl/workers/actor/dp_actor.py" for d in diffs)
    compat = [d for d in diffs if d["after_header"] == "verl/_pascal_compat/bert_padding.py"]
    assert compat and "def unpad_input" in compat[0]["after"]  # AnsiballZ shipped the compat module
    assert checked["manifest"].endswith("verl/.verl_pascal_patch.json")
    assert sum(1 for s in checked["sites"] if s["state"] == PENDING) == sum(REAL_COUNTS["0.5.0"].values())

    applied = run_module(tmp_path, "source=%s" % real_tree)
    assert applied["changed"] is True and applied["counts"] == REAL_COUNTS["0.5.0"]
    again = run_module(tmp_path, "source=%s" % real_tree, "--check")
    assert again["changed"] is False
    assert run_cli("--source", str(real_tree), "--profile", "pascal", "--check").returncode == 0


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_module_fails_on_unsupported_version(synthetic: Path, tmp_path: Path) -> None:
    result = run_module(tmp_path, "source=%s" % synthetic)
    assert result.get("failed") is True and "not supported" in result["msg"]


PLAYBOOK_PATCH = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Patch the tree
      verl_patch: {source: "%s", patch: fp32, allow_unsupported: true}
      register: first
    - name: Patch it again
      verl_patch: {source: "%s", patch: fp32, allow_unsupported: true}
      register: second
    - name: The first run patched, the second changed nothing
      ansible.builtin.assert:
        that: [first is changed, second is not changed, first.counts.autocast_bf16 > 0]
"""


@needs_ansible
def test_a_playbook_ships_the_engine_package_and_patches_as_the_engine_does(synthetic: Path, tmp_path: Path) -> None:
    """ansible-playbook runs library/verl_patch.py with the engine as a package (module_utils/verl_patch/):
    AnsiballZ ships each of its modules, reached by relative imports, and the compat files; the tree it
    leaves is byte for byte the one the engine leaves in-process."""
    expected = tmp_path / "expected"
    shutil.copytree(str(SYNTHETIC), str(expected))
    patch_tree(str(expected), allow_unsupported=True)
    proc = run_playbook(tmp_path, PLAYBOOK_PATCH % (synthetic, synthetic))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def tree(root: Path) -> Dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts}

    assert tree(synthetic) == tree(expected)
    compat = REPO_ROOT / "module_utils" / "verl_pascal_compat" / "bert_padding.py"
    assert (synthetic / "verl/_pascal_compat/bert_padding.py").read_bytes() == compat.read_bytes()
