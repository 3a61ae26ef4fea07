"""Pure-torch stand-ins for what verl imports from ``flash_attn.bert_padding``.

flash-attn cannot be built for compute capability 6.x (Pascal), and importing
``flash_attn`` fails without its CUDA extension; yet verl 0.3 to 0.5 import
four helpers from ``flash_attn.bert_padding`` at module import time, and none
of them needs a CUDA kernel. This module re-implements them in plain torch,
with flash-attn's semantics (flash-attn 2.7 ``flash_attn/bert_padding.py``):

- ``index_first_axis(x, indices)``: ``x[indices]`` along dim 0, as an autograd
  function whose backward scatters into zeros;
- ``index_put_first_axis(values, indices, n)``: zeros of ``n`` rows with
  ``values`` put at ``indices``;
- ``unpad_input(hidden, attention_mask, unused_mask=None)`` returns five values
  ``(hidden_unpadded, indices, cu_seqlens, max_seqlen_in_batch, used_seqlens)``
  like flash-attn 2.7 (older releases return only the first four; every verl
  call site unpacks with ``*_`` or takes ``[0]``, so both arities work);
- ``pad_input(hidden_unpadded, indices, batch, seqlen)``;
- ``rearrange``: the subset of ``einops.rearrange`` that verl uses (named axes,
  one level of parentheses, ``...``, sizes given as keywords), flash-attn
  re-exports einops' function under that name.

The verl patcher copies this file into the patched tree as
``verl/_pascal_compat/bert_padding.py``; the patched imports still prefer
flash-attn's module wherever it imports.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

__all__ = [
    "IndexFirstAxis",
    "IndexPutFirstAxis",
    "index_first_axis",
    "index_put_first_axis",
    "pad_input",
    "rearrange",
    "unpad_input",
]

_ELLIPSIS = "..."
_TOKEN = re.compile(r"\.\.\.|\(|\)|[A-Za-z_][A-Za-z0-9_]*|\S+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class IndexFirstAxis(torch.autograd.Function):
    """``input[indices]`` along the first axis; backward scatters into zeros."""

    @staticmethod
    def forward(ctx, input: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(indices)
        if input.ndim < 2:
            raise ValueError("index_first_axis needs a tensor of at least 2 dimensions")
        ctx.first_axis_dim, other_shape = input.shape[0], input.shape[1:]
        second_dim = other_shape.numel()
        flat = input.reshape(input.shape[0], second_dim)
        gathered = torch.gather(flat, 0, indices.unsqueeze(1).expand(-1, second_dim))
        return gathered.reshape(-1, *other_shape)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> Tuple[torch.Tensor, None]:  # type: ignore[override]
        (indices,) = ctx.saved_tensors
        other_shape = grad_output.shape[1:]
        flat = grad_output.reshape(grad_output.shape[0], -1)
        grad_input = torch.zeros(
            [ctx.first_axis_dim, flat.shape[1]], device=grad_output.device, dtype=grad_output.dtype
        )
        grad_input.scatter_(0, indices.unsqueeze(1).expand(-1, flat.shape[1]), flat)
        return grad_input.reshape(ctx.first_axis_dim, *other_shape), None


index_first_axis = IndexFirstAxis.apply


class IndexPutFirstAxis(torch.autograd.Function):
    """Zeros of ``first_axis_dim`` rows with ``values`` put at ``indices``."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, values: torch.Tensor, indices: torch.Tensor, first_axis_dim: int
    ) -> torch.Tensor:
        ctx.save_for_backward(indices)
        if indices.ndim != 1 or values.ndim < 2:
            raise ValueError("index_put_first_axis needs 1-D indices and values of at least 2 dimensions")
        output = torch.zeros(first_axis_dim, *values.shape[1:], device=values.device, dtype=values.dtype)
        output[indices] = values
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> Tuple[torch.Tensor, None, None]:  # type: ignore[override]
        (indices,) = ctx.saved_tensors
        return grad_output[indices], None, None


index_put_first_axis = IndexPutFirstAxis.apply


def unpad_input(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    unused_mask: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Drop the padding tokens of a (batch, seqlen, ...) tensor.

    ``attention_mask`` (batch, seqlen): 1 or True for a real token.
    ``unused_mask`` (batch, seqlen): tokens kept although not attended.
    Returns (total_nnz, ...) hidden states, the int64 indices of the kept
    tokens in the flattened (batch * seqlen) input, int32 cumulative sequence
    lengths (batch + 1), the longest kept sequence as an int, and the int32
    number of attended tokens per sequence.
    """
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(hidden_states.shape[0] * hidden_states.shape[1], *hidden_states.shape[2:])
    return (
        index_first_axis(flat, indices),
        indices,
        cu_seqlens,
        max_seqlen_in_batch,
        used_seqlens_in_batch,
    )


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of ``unpad_input``: (total_nnz, ...) back to (batch, seqlen, ...), zeros at padding."""
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *output.shape[1:])


def _parse_side(side: str) -> List[Tuple[List[str], bool]]:
    """'(b s) c ...' -> [(['b', 's'], True), (['c'], False), (['...'], False)]: (names, parenthesised)."""
    groups: List[Tuple[List[str], bool]] = []
    current: Optional[List[str]] = None
    for token in _TOKEN.findall(side):
        if token == "(":
            if current is not None:
                raise ValueError("rearrange: nested parentheses are not supported: %r" % side)
            current = []
        elif token == ")":
            if current is None:
                raise ValueError("rearrange: unbalanced parentheses: %r" % side)
            groups.append((current, True))
            current = None
        elif token == _ELLIPSIS or _NAME.match(token):
            if current is None:
                groups.append(([token], False))
            else:
                current.append(token)
        else:
            raise ValueError("rearrange: unsupported token %r in %r" % (token, side))
    if current is not None:
        raise ValueError("rearrange: unbalanced parentheses: %r" % side)
    return groups


def _flat_names(groups: Sequence[Tuple[List[str], bool]], side: str) -> List[str]:
    names = [name for group, _ in groups for name in group]
    if len(set(names)) != len(names):
        raise ValueError("rearrange: an axis appears twice on one side: %r" % side)
    return names


def _group_sizes(group: Sequence[str], dim: int, known: Dict[str, int]) -> List[int]:
    """Sizes of the elementary axes of one left-hand group of total size ``dim``."""
    unknown = [name for name in group if name not in known]
    if len(unknown) > 1:
        raise ValueError("rearrange: cannot infer the sizes of %s" % " ".join(unknown))
    product = 1
    for name in group:
        if name in known:
            product *= known[name]
    if unknown:
        if product == 0 or dim % product:
            raise ValueError("rearrange: dimension %d does not split by %d" % (dim, product))
        return [dim // product if name in unknown else known[name] for name in group]
    if product != dim:
        raise ValueError("rearrange: axes %s give %d, the tensor has %d" % (" ".join(group), product, dim))
    return [known[name] for name in group]


def _expand_ellipsis(groups: List[Tuple[List[str], bool]], count: int) -> List[List[str]]:
    """Bare '...' becomes ``count`` groups of one axis; '(...)' one group of ``count`` axes."""
    ellipsis_names = ["...%d" % i for i in range(count)]
    expanded: List[List[str]] = []
    for group, parenthesised in groups:
        if group == [_ELLIPSIS] and not parenthesised:
            expanded.extend([[name] for name in ellipsis_names])
        else:
            expanded.append([n for name in group for n in (ellipsis_names if name == _ELLIPSIS else [name])])
    return expanded


def rearrange(tensor: torch.Tensor, pattern: str, **axes_lengths: int) -> torch.Tensor:
    """``einops.rearrange`` for a single tensor: reshape, permute, reshape.

    Supports named axes, one level of parentheses on either side (composition
    on the right, decomposition on the left with sizes as keywords) and one
    ``...`` per side (on the left only outside parentheses, as in einops).
    """
    if pattern.count("->") != 1:
        raise ValueError("rearrange: the pattern needs exactly one '->': %r" % pattern)
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(left_text), _parse_side(right_text)
    left_names, right_names = _flat_names(left, left_text), _flat_names(right, right_text)
    if set(left_names) != set(right_names):
        raise ValueError("rearrange: both sides must name the same axes: %r" % pattern)
    if any(_ELLIPSIS in group and parenthesised for group, parenthesised in left):
        raise ValueError("rearrange: '...' inside parentheses on the left side: %r" % pattern)
    unknown_lengths = set(axes_lengths) - set(left_names)
    if unknown_lengths:
        raise ValueError("rearrange: sizes given for axes not in the pattern: %s" % sorted(unknown_lengths))
    fixed_groups = len(left) - (1 if _ELLIPSIS in left_names else 0)
    ellipsis_dims = tensor.ndim - fixed_groups
    if ellipsis_dims < 0 or (_ELLIPSIS not in left_names and ellipsis_dims != 0):
        raise ValueError("rearrange: pattern %r does not match a %d-D tensor" % (pattern, tensor.ndim))
    left_axes = _expand_ellipsis(left, ellipsis_dims)
    right_axes = _expand_ellipsis(right, ellipsis_dims)
    elementary: List[str] = []
    sizes: List[int] = []
    for group, dim in zip(left_axes, tensor.shape):
        sizes.extend(_group_sizes(group, int(dim), axes_lengths))
        elementary.extend(group)
    size_of = dict(zip(elementary, sizes))
    order = [elementary.index(name) for group in right_axes for name in group]
    permuted = tensor.reshape(sizes).permute(order)
    out_shape = []
    for group in right_axes:
        product = 1
        for name in group:
            product *= size_of[name]
        out_shape.append(product)
    return permuted.reshape(out_shape)
