"""Tests for module_utils/verl_pascal_compat/bert_padding.py (CPU torch).

Each helper is compared with a reference written here in plain torch
indexing, on random masks and on the shapes verl passes (see the call sites
in verl/workers/actor/dp_actor.py and friends): input ids (batch, seqlen, 1),
position ids (batch, seqlen) and mrope position ids (3, batch, seqlen),
log-probs (total_nnz, 1) padded back to (batch, seqlen, 1).
"""

from __future__ import annotations

from typing import List, Tuple

import pytest

torch = pytest.importorskip("torch", reason="torch is not importable here (pip install torch, CPU build)")

from verl_pascal.module_utils.verl_pascal_compat import bert_padding as bp  # noqa: E402

Tensor = torch.Tensor
SHAPES: List[Tuple[int, ...]] = [(1,), (7,), (3, 5)]  # trailing dims after (batch, seqlen)


def random_mask(batch: int, seqlen: int, generator: torch.Generator, as_bool: bool = False) -> Tensor:
    """Left- or right-padded rows like verl's, plus one random ragged row and one empty row."""
    mask = torch.zeros(batch, seqlen, dtype=torch.int64)
    for row in range(batch):
        length = int(torch.randint(0, seqlen + 1, (1,), generator=generator))
        if row % 3 == 0:
            mask[row, seqlen - length :] = 1  # left padding (prompts)
        elif row % 3 == 1:
            mask[row, :length] = 1  # right padding (responses)
        else:
            mask[row] = (torch.rand(seqlen, generator=generator) > 0.5).long()
    mask[0] = 1
    if batch > 2:
        mask[-1] = 0
    return mask.bool() if as_bool else mask


def ref_unpad(hidden: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor, Tensor, int, Tensor]:
    flat = hidden.reshape(hidden.shape[0] * hidden.shape[1], *hidden.shape[2:])
    keep = mask.reshape(-1).bool()
    indices = torch.arange(keep.numel())[keep]
    lengths = mask.long().sum(-1)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(torch.int32)
    return flat[keep], indices, cu, int(lengths.max()), lengths.to(torch.int32)


def ref_pad(hidden: Tensor, indices: Tensor, batch: int, seqlen: int) -> Tensor:
    out = hidden.new_zeros(batch * seqlen, *hidden.shape[1:])
    out[indices] = hidden
    return out.reshape(batch, seqlen, *hidden.shape[1:])


@pytest.mark.parametrize("trailing", SHAPES)
@pytest.mark.parametrize("as_bool", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_unpad_matches_reference(trailing: Tuple[int, ...], as_bool: bool, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    batch, seqlen = 5, 11
    hidden = torch.randn(batch, seqlen, *trailing, generator=gen)
    mask = random_mask(batch, seqlen, gen, as_bool)
    got = bp.unpad_input(hidden, mask)
    want = ref_unpad(hidden, mask)
    assert len(got) == 5
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1], want[1]) and got[1].dtype == torch.int64
    assert torch.equal(got[2], want[2]) and got[2].dtype == torch.int32 and got[2].shape == (batch + 1,)
    assert got[3] == want[3] and isinstance(got[3], int)
    assert torch.equal(got[4], want[4]) and got[4].dtype == torch.int32


@pytest.mark.parametrize("trailing", SHAPES)
def test_pad_unpad_round_trip(trailing: Tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(7)
    batch, seqlen = 6, 9
    hidden = torch.randn(batch, seqlen, *trailing, generator=gen)
    mask = random_mask(batch, seqlen, gen)
    unpadded, indices, *_ = bp.unpad_input(hidden, mask)
    padded = bp.pad_input(unpadded, indices, batch, seqlen)
    expected = hidden * mask.reshape(batch, seqlen, *([1] * len(trailing)))
    assert padded.shape == hidden.shape
    assert torch.equal(padded, expected)
    assert torch.equal(padded, ref_pad(unpadded, indices, batch, seqlen))


def test_unused_mask_counts_in_lengths_but_not_in_used() -> None:
    attention = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    unused = torch.tensor([[0, 0, 1, 0], [0, 1, 1, 0]])
    hidden = torch.arange(8.0).reshape(2, 4, 1)
    out, indices, cu, longest, used = bp.unpad_input(hidden, attention, unused)
    assert indices.tolist() == [0, 1, 2, 4, 5, 6]
    assert cu.tolist() == [0, 3, 6] and longest == 3 and used.tolist() == [2, 1]
    assert out.squeeze(-1).tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0]


def test_verl_call_patterns() -> None:
    """The exact expressions of verl 0.5.0's dp_actor.py / dp_critic.py / torch_functional.py."""
    gen = torch.Generator().manual_seed(3)
    batch, seqlen = 4, 10
    mask = random_mask(batch, seqlen, gen)
    input_ids = torch.randint(0, 1000, (batch, seqlen), generator=gen)
    position_ids = torch.clamp(mask.cumsum(-1) - 1, min=0)
    mrope = torch.stack([position_ids, position_ids + 1, position_ids + 2])

    input_ids_rmpad, indices, cu_seqlens, *_ = bp.unpad_input(input_ids.unsqueeze(-1), mask)
    input_ids_rmpad = input_ids_rmpad.transpose(0, 1)
    nnz = int(mask.sum())
    assert input_ids_rmpad.shape == (1, nnz)
    assert torch.equal(input_ids_rmpad[0], input_ids[mask.bool()])

    pos_rmpad = bp.index_first_axis(bp.rearrange(position_ids.unsqueeze(-1), "b s ... -> (b s) ..."), indices)
    pos_rmpad = pos_rmpad.transpose(0, 1)
    assert pos_rmpad.shape == (1, nnz) and torch.equal(pos_rmpad[0], position_ids[mask.bool()])

    mrope_rmpad = bp.index_first_axis(bp.rearrange(mrope, "c b s ... -> (b s) c ..."), indices)
    mrope_rmpad = mrope_rmpad.transpose(0, 1).unsqueeze(1)
    assert mrope_rmpad.shape == (3, 1, nnz)
    for channel in range(3):
        assert torch.equal(mrope_rmpad[channel, 0], mrope[channel][mask.bool()])

    log_probs = torch.randn(nnz, generator=gen)
    full = bp.pad_input(hidden_states=log_probs.unsqueeze(-1), indices=indices, batch=batch, seqlen=seqlen)
    assert full.shape == (batch, seqlen, 1)
    assert torch.equal(full.squeeze(-1)[mask.bool()], log_probs)
    assert torch.equal(full.squeeze(-1)[~mask.bool()], torch.zeros(int((~mask.bool()).sum())))
    assert bp.unpad_input(input_ids.unsqueeze(dim=-1), mask)[0].shape == (nnz, 1)  # pipeline_parallel.py


def test_index_first_axis_gradient_matches_indexing() -> None:
    gen = torch.Generator().manual_seed(11)
    source = torch.randn(20, 3, 4, generator=gen, dtype=torch.float64)
    indices = torch.randperm(20, generator=gen)[:13]
    weights = torch.randn(13, 3, 4, generator=gen, dtype=torch.float64)
    ours = source.clone().requires_grad_(True)
    (bp.index_first_axis(ours, indices) * weights).sum().backward()
    ref = source.clone().requires_grad_(True)
    (ref[indices] * weights).sum().backward()
    assert torch.equal(ours.grad, ref.grad)
    assert torch.autograd.gradcheck(lambda x: bp.index_first_axis(x, indices), (source.clone().requires_grad_(True),))


def test_pad_input_gradient_matches_reference() -> None:
    gen = torch.Generator().manual_seed(12)
    batch, seqlen = 3, 7
    mask = random_mask(batch, seqlen, gen)
    indices = torch.nonzero(mask.flatten()).flatten()
    values = torch.randn(indices.numel(), 5, generator=gen, dtype=torch.float64)
    weights = torch.randn(batch, seqlen, 5, generator=gen, dtype=torch.float64)
    ours = values.clone().requires_grad_(True)
    (bp.pad_input(ours, indices, batch, seqlen) * weights).sum().backward()
    ref = values.clone().requires_grad_(True)
    (ref_pad(ref, indices, batch, seqlen) * weights).sum().backward()
    assert torch.equal(ours.grad, ref.grad)
    assert torch.autograd.gradcheck(
        lambda v: bp.pad_input(v, indices, batch, seqlen), (values.clone().requires_grad_(True),)
    )


def test_unpad_then_pad_gradient_flows_to_unpadded_tokens_only() -> None:
    gen = torch.Generator().manual_seed(13)
    hidden = torch.randn(4, 6, 2, generator=gen, requires_grad=True)
    mask = random_mask(4, 6, gen)
    unpadded, indices, *_ = bp.unpad_input(hidden, mask)
    bp.pad_input(unpadded * 3.0, indices, 4, 6).sum().backward()
    assert torch.equal(hidden.grad, 3.0 * mask.unsqueeze(-1).expand(4, 6, 2).float())


def test_index_first_axis_needs_two_dims() -> None:
    """As in flash-attn (an assert there): verl always unsqueezes (batch, seqlen) ids to 3-D first."""
    with pytest.raises(ValueError):
        bp.index_first_axis(torch.arange(5.0), torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        bp.unpad_input(torch.zeros(2, 3), torch.ones(2, 3))


def ref_rearrange_merge(x: Tensor) -> Tensor:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


@pytest.mark.parametrize(
    "pattern, shape, lengths, reference",
    [
        ("b s ... -> (b s) ...", (2, 3, 4, 5), {}, ref_rearrange_merge),
        ("b s ... -> (b s) ...", (2, 3), {}, ref_rearrange_merge),
        ("c b s ... -> (b s) c ...", (3, 2, 4), {}, lambda x: x.permute(1, 2, 0).reshape(8, 3)),
        ("c b s ... -> (b s) c ...", (3, 2, 4, 5), {}, lambda x: x.permute(1, 2, 0, 3).reshape(8, 3, 5)),
        ("(b s) ... -> b s ...", (6, 4), {"b": 2}, lambda x: x.reshape(2, 3, 4)),
        ("s b h d -> s b (h d)", (2, 3, 4, 5), {}, lambda x: x.reshape(2, 3, 20)),
        ("b s h d -> b h s d", (2, 3, 4, 5), {}, lambda x: x.permute(0, 2, 1, 3)),
        ("b ... -> b (...)", (2, 3, 4), {}, lambda x: x.reshape(2, 12)),
        ("(b s) d -> s b d", (6, 4), {"s": 3}, lambda x: x.reshape(2, 3, 4).transpose(0, 1)),
    ],
)
def test_rearrange_matches_reference(pattern: str, shape: Tuple[int, ...], lengths: dict, reference) -> None:
    x = torch.randn(*shape)
    got = bp.rearrange(x, pattern, **lengths)
    want = reference(x)
    assert got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize(
    "pattern, shape, lengths",
    [
        ("b s -> (b s)", (2, 3, 4), {}),  # rank mismatch
        ("b s -> b", (2, 3), {}),  # axis dropped
        ("(b s) d -> b s d", (6, 4), {}),  # cannot infer
        ("(b s) d -> b s d", (7, 4), {"b": 2}),  # does not divide
        ("b (s ...) -> b s ...", (2, 6), {}),  # ellipsis in parentheses on the left
        ("b s -> b s", (2, 3), {"q": 1}),  # unknown axis size
        ("b ((s)) -> b s", (2, 3), {}),  # nested parentheses
        ("b s", (2, 3), {}),  # no arrow
    ],
)
def test_rearrange_rejects_bad_patterns(pattern: str, shape: Tuple[int, ...], lengths: dict) -> None:
    with pytest.raises(ValueError):
        bp.rearrange(torch.zeros(*shape), pattern, **lengths)


def test_exports_what_verl_imports() -> None:
    assert {"index_first_axis", "pad_input", "rearrange", "unpad_input"} <= set(bp.__all__)
    for name in bp.__all__:
        assert hasattr(bp, name)
