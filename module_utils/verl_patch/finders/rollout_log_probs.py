"""The gated ``hf_rollout_log_probs`` finder: verl's own HF rollout (0.4.0 to 0.5.0) returns no
log-probs, so its trainer cannot log how far the rollout's distribution is from the actor's
(``training/rollout_probs_diff_*``, which it logs whenever the batch has ``rollout_log_probs``).
The rewrite hands ``generate`` a logits processor (PROBE_SOURCE, appended to the file) that keeps
the log-probability of each sampled token under the distribution it was sampled from, and puts
them into the rollout's batch as ``rollout_log_probs``."""

from __future__ import annotations

import ast
from typing import List, Optional, Tuple

from ..context import FoundSite, ScanContext
from ..kinds import KEPT, KIND_ROLLOUT_LOG_PROBS, MARKER, PATCHED, PENDING
from ..names import str_const
from ..source import Edit

PROBE_CLASS = "_VerlPascalRolloutLogProbs"
PROBE_NAME = "_verl_pascal_log_probs"
PROCESSOR_KEY = "logits_processor"
BATCH_KEY = "rollout_log_probs"
CONFIG_KEY = "generation_config"
# The keys that mark the dict literal of the rollout's output batch.
BATCH_KEYS = ("responses", "input_ids")

# Appended to the rollout's file. The processor runs where transformers puts a caller's processors:
# after its own (a repetition penalty, say) and before the sampling warpers, so it divides by the
# temperature itself, as the actor does when it scores the same tokens. It leaves the scores as
# they are. Top-k and top-p are not applied: the gap is measured against the actor's distribution.
PROBE_SOURCE = '''

class %(cls)s:
    """%(marker)s the log-probability of each token generate samples, under the distribution it
    was sampled from (the scores divided by the temperature), for the trainer's
    training/rollout_probs_diff_* against the actor's log-probs of the same tokens."""

    def __init__(self, generation_config):
        sampled = bool(getattr(generation_config, "do_sample", False))
        self.temperature = float(getattr(generation_config, "temperature", None) or 1.0) if sampled else 1.0
        self.steps = []
        self.last = None

    def __call__(self, input_ids, scores):
        import torch

        if self.last is not None:  # the token sampled at the step before is input_ids' last
            self.steps.append(self.last.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.last = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def gather(self, responses):
        """(batch, response length) float32: the log-prob of each generated token, 0 after the last."""
        import torch

        steps = list(self.steps)
        if self.last is not None:
            steps.append(self.last.gather(-1, responses[:, len(steps) : len(steps) + 1]).squeeze(-1))
        self.steps, self.last = [], None
        out = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        if steps:
            out[:, : len(steps)] = torch.stack(steps, dim=1).to(out.device)
        return out
''' % {"cls": PROBE_CLASS, "marker": MARKER}

CALL_TEXT = "%s=[(%s := %s(%%s))],  %s the rollout's log-probs\n" % (PROCESSOR_KEY, PROBE_NAME, PROBE_CLASS, MARKER)
ENTRY_TEXT = '"%s": %s.gather(%%s),  %s for training/rollout_probs_diff_*\n' % (BATCH_KEY, PROBE_NAME, MARKER)


def _generate_calls(ctx: ScanContext) -> List[ast.Call]:
    return [call for call in ctx.by_type.get(ast.Call, [])
            if isinstance(call.func, ast.Attribute) and call.func.attr == "generate"]  # type: ignore[attr-defined]


def _keyword(call: ast.Call, name: str) -> Optional[ast.keyword]:
    return next((k for k in call.keywords if k.arg == name), None)


def _batch_dict(ctx: ScanContext, call: ast.Call) -> Optional[Tuple[ast.Dict, ast.AST]]:
    """The output batch's dict literal after ``call`` in its function, and its ``responses`` value."""
    func = ctx.parents.get(call)
    while func is not None and not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        func = ctx.parents.get(func)
    for node in ast.walk(func) if func is not None else []:
        if not isinstance(node, ast.Dict) or node.lineno <= call.lineno:
            continue
        values = {str_const(k): v for k, v in zip(node.keys, node.values) if k is not None}
        if all(key in values for key in BATCH_KEYS):
            return node, values["responses"]
    return None


def _inserted(text: str, newline: str, before: ast.AST) -> str:
    """``text`` (one line, ending in a newline) in the file's newline, then the indentation up to
    ``before``'s column, so the line inserted ahead of ``before`` keeps the layout."""
    return text.replace("\n", newline) + " " * before.col_offset  # type: ignore[attr-defined]


def find_rollout_log_probs(ctx: ScanContext) -> List[FoundSite]:
    """``<model>.generate(..., generation_config=<cfg>, ...)`` gets a logits processor that keeps the
    sampled tokens' log-probs, and the batch dict after it a ``rollout_log_probs`` entry (gated)."""
    if KIND_ROLLOUT_LOG_PROBS not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for call in _generate_calls(ctx):
        config = _keyword(call, CONFIG_KEY)
        batch = _batch_dict(ctx, call)
        if config is None or batch is None or batch[0].keys[0] is None:  # a dict opening with ** is no site
            continue
        processor = _keyword(call, PROCESSOR_KEY)
        if processor is not None:  # patched; a processor of verl's own is no site (the table then refuses)
            if MARKER in ctx.src.line_text(processor.value.lineno):  # type: ignore[attr-defined]
                found.append(FoundSite(KIND_ROLLOUT_LOG_PROBS, PATCHED, call))
            continue
        if ctx.attn is None:
            found.append(FoundSite(KIND_ROLLOUT_LOG_PROBS, KEPT, call))
            continue
        first_keyword, (dict_node, responses) = call.keywords[0], batch
        first_key = dict_node.keys[0]
        at_call = ctx.src.offset(first_keyword.lineno, first_keyword.col_offset)  # type: ignore[attr-defined]
        at_dict = ctx.src.offset(first_key.lineno, first_key.col_offset)  # type: ignore[attr-defined]
        text = ctx.src.text
        newline = "\r\n" if "\r\n" in text else "\n"
        tail = "" if text.endswith(("\n", "\r")) else newline
        found.append(FoundSite(KIND_ROLLOUT_LOG_PROBS, PENDING, call, [
            Edit(at_call, at_call, _inserted(CALL_TEXT % ctx.src.segment(config.value), newline, first_keyword)),
            Edit(at_dict, at_dict, _inserted(ENTRY_TEXT % ctx.src.segment(responses), newline, first_key)),
            Edit(len(text), len(text), tail + PROBE_SOURCE.replace("\n", newline)),
        ]))
    return found
