"""Version-aware, syntax-based patcher that makes verl run without bf16 and FlashAttention-2.

verl hard-codes four things a Pascal GPU (sm_61) cannot do, and no config key
reaches them:

``autocast_bf16``
    ``torch.autocast(..., dtype=torch.bfloat16)`` around the actor, critic,
    HF-rollout, reward-model, SFT and engine forward passes. Rewritten to
    ``dtype=torch.float32, enabled=False``: a disabled autocast is an exact
    no-op context, so the ``with`` statement keeps working and the model runs
    in the dtype it was loaded in (fp32 with the project's overrides).
``attn_implementation``
    the string literal ``"flash_attention_2"`` given as ``attn_implementation``
    (keyword, dict value, assignment, ``.get`` default, parameter default).
    Replaced by the profile's attention, ``"sdpa"`` (default) or ``"eager"``.
``bert_padding_import``
    ``from flash_attn.bert_padding import ...``, which raises ImportError where
    flash-attn is not installed (it cannot be built for sm_6x). Wrapped in
    ``try: <the import> except ImportError: from verl._pascal_compat.bert_padding
    import ...``: flash-attn's helpers are still used where flash-attn imports,
    the pure-torch copies shipped by this patcher everywhere else.
``mixed_precision_bf16``
    an FSDP mixed-precision policy (``MixedPrecision`` or ``MixedPrecisionPolicy``)
    given ``torch.bfloat16`` literally for a dtype (the SFT trainer of verl 0.3 to
    0.6, ``fsdp_sft_trainer.py``; PPO's workers take theirs from the
    configuration). FSDP would cast the fp32 parameters to bf16 for every forward
    and backward. Each such dtype becomes ``torch.float32`` and the line is marked
    (``# verl-pascal: ...``), which is how a patched policy is recognised.

Sites are found with the ``ast`` module and rewritten by splicing the source
text at the nodes' exact positions, so a re-wrapped, reformatted or moved call
is still found, and comments and formatting elsewhere stay as they are. Not
touched: ``verl/utils/torch_dtypes.py`` (the name-to-dtype table: rewriting it
changes what "bf16" means for every caller), anything outside the ``verl``
package (docs, tests, examples). ``torch.compile(entropy_from_logits)`` is not
patched either: ``actor_rollout_ref.actor.use_torch_compile=False`` reaches it.

Patch kinds: the GPU-profile table gives each profile one. ``fp32`` (Pascal,
sm_6x, and Volta/Turing, sm_7x) patches every kind of site above: neither has
FlashAttention-2 (it needs sm_80+); sm_7x has fast fp16 but verl's FSDP path
has no loss scaler for fp16, so fp32 is the only safe choice there too.
``none`` changes nothing (Ampere and newer run verl as shipped). The profile's
name is recorded in the tree, not interpreted.

Idempotent: a patched site is recognised by its form (the disabled autocast,
the attention literal in a patched tree, the import inside our try/except) and
left alone, so a second run changes no byte. The tree records what was done:
``verl/_pascal_compat/__init__.py`` (profile and attention, installed with the
package) and ``verl/.verl_pascal_patch.json`` (the manifest: every site changed,
written by each run that changes something). Re-patching a patched tree with
the other attention, or for another fp32 profile, works; going back to a
profile with patch ``none`` is refused: reinstall verl from its sdist instead.

All rewritten files are compiled and re-scanned in memory before anything is
written: a failed rewrite leaves the tree untouched. Writing is a transaction
that survives the process being killed at any point: first a journal,
``verl/.verl_pascal_patch.journal``, holding every file's new content and a
hash of its old content, is written to a temporary file, fsync'd and renamed
into place; then each file is written through a temporary file
(``.verl_patch.*`` beside it) and ``os.replace``; then the journal is removed.
A run that finds a journal rolls it forward (writes the files still holding
their old content, refusing any file that holds neither) before it plans
anything, and every run that writes removes stray ``.verl_patch.*`` files, so a
re-run after a kill ends with the patch complete and no temporary file left.
``check`` mode writes nothing: on an interrupted tree it reports the journal's
pending files instead of scanning. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import pkgutil
import re
import signal
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

ENGINE_VERSION = "1.0.0"

KIND_AUTOCAST = "autocast_bf16"
KIND_ATTN = "attn_implementation"
KIND_BERT = "bert_padding_import"
# verl's SFT trainer up to 0.6 builds its FSDP mixed-precision policy with literal bf16 parameters
# (PPO's workers read theirs from the configuration, which the GPU profile sets to fp32).
KIND_MIXED_PRECISION = "mixed_precision_bf16"
# verl 0.5.0's HF rollout samples rollout.n responses per prompt although its
# trainer has already repeated every prompt rollout.n times: n*n per prompt, and
# GRPO (n > 1) fails at its first step. Right in other releases (0.4.x repeats
# after generating), so the kind is gated: patched only where a release's table
# lists it.
KIND_ROLLOUT_N = "hf_rollout_n"
# verl's fp32 log-probs without flash-attn's Triton cross-entropy (never on
# Pascal) take one logsumexp per row: `torch.stack([torch.logsumexp(r, dim=-1)
# for r in logits])`. The engine workers (0.8 on) hand it a 2-D (tokens, vocab)
# tensor, so a row is one token: ~10 000 tiny kernels per pass, CPU-bound, and
# the reason 0.9.1 trained slower than 0.5.0, whose legacy workers pass 3-D
# (rows = samples). The rewrite takes rows in chunks of LOGSUMEXP_CHUNK: the same
# values, as many kernels as chunks. Gated: listed where the engine workers train.
KIND_LOGSUMEXP = "logsumexp_rows"
LOGSUMEXP_CHUNK = 512
# verl 0.9's V1 trainer takes a step's responses from its replay buffer, which
# looks for them every `poll_interval` seconds: a constructor default (2.0) that
# verl's configuration does not reach. A generation that ends just past a
# multiple of 2 s is counted as the next one: up to 2 s lost a step, about 1 s
# on average. The rewrite makes the default REPLAY_POLL_S (a poll is one small
# call to TransferQueue's controller). Gated: listed where the V1 trainer runs.
KIND_REPLAY_POLL = "replay_poll"
REPLAY_POLL_PARAM = "poll_interval"
REPLAY_POLL_S = 0.1
KINDS = (KIND_AUTOCAST, KIND_ATTN, KIND_BERT, KIND_MIXED_PRECISION, KIND_ROLLOUT_N, KIND_LOGSUMEXP, KIND_REPLAY_POLL)
GATED_KINDS = frozenset({KIND_ROLLOUT_N, KIND_LOGSUMEXP, KIND_REPLAY_POLL})
KIND_COMPAT = "compat_module"

PENDING = "pending"
PATCHED = "patched"
KEPT = "kept"

# What a profile's row in the GPU-profile table (verl_pascal/gpu_profiles.yml)
# asks of the patcher: fp32 rewrites every site, none keeps verl as released.
PATCH_FP32 = "fp32"
PATCH_NONE = "none"
PATCH_KINDS = (PATCH_FP32, PATCH_NONE)
ATTN_CHOICES = ("sdpa", "eager")
PROFILE_NAME = r"[a-z][a-z0-9_]*"
FA2 = "flash_attention_2"

PACKAGE = "verl"
COMPAT_DIR = "_pascal_compat"
COMPAT_MODULE = "verl._pascal_compat.bert_padding"
COMPAT_SOURCE_FILES = ("bert_padding.py",)
MANIFEST_NAME = ".verl_pascal_patch.json"
JOURNAL_NAME = ".verl_pascal_patch.journal"  # present only while a patch is being written
JOURNAL_FORMAT = 1
TEMP_PREFIX = ".verl_patch."  # temporary files beside their target; stray ones are removed
# Test hook, never set in production: with VERL_PATCH_FAULT_AT_WRITE=N the process
# SIGKILLs itself at its Nth write point (right before each file-system write, and
# once after the last one), so tests can kill a real run at every write in turn.
FAULT_ENV = "VERL_PATCH_FAULT_AT_WRITE"
NEVER_TOUCH = ("verl/utils/torch_dtypes.py",)
TRIGGERS = ("autocast", "flash_attn", "attn_implementation", "MixedPrecision", "num_return_sequences", "logsumexp",
            REPLAY_POLL_PARAM)
BERT_MODULE = "flash_attn.bert_padding"
MARKER = "# verl-pascal:"

# Where each autocast flavour takes its parameters, in positional order.
_AUTOCAST_NEW = ("device_type", "dtype", "enabled", "cache_enabled")
_AUTOCAST_OLD = ("enabled", "dtype", "cache_enabled")
AUTOCAST_SIGNATURES: Dict[str, Tuple[str, ...]] = {
    "torch.autocast": _AUTOCAST_NEW,
    "torch.amp.autocast": _AUTOCAST_NEW,
    "torch.amp.autocast_mode.autocast": _AUTOCAST_NEW,
    "torch.cuda.amp.autocast": _AUTOCAST_OLD,
    "torch.cuda.amp.autocast_mode.autocast": _AUTOCAST_OLD,
    "torch.cpu.amp.autocast": _AUTOCAST_OLD,
    "torch.cpu.amp.autocast_mode.autocast": _AUTOCAST_OLD,
}
ATTN_NAMES = ("attn_implementation", "_attn_implementation")
# FSDP's mixed-precision policies (torch.distributed.fsdp; verl re-exports FSDP2's from verl.utils.fsdp_utils),
# by the last part of their name, with the dtypes each takes in positional order.
MIXED_PRECISION_SIGNATURES: Dict[str, Tuple[str, ...]] = {
    "MixedPrecision": ("param_dtype", "reduce_dtype", "buffer_dtype"),
    "MixedPrecisionPolicy": ("param_dtype", "reduce_dtype", "output_dtype"),
}

# Sites that MUST be found in a release: {file: {kind: minimum count}}. The
# table of each supported release is in its folder (release.yml, patch_sites;
# verl_pascal/releases/verl-X/) and is given to the engine by its caller, as
# ``releases`` (version -> table). A supported release missing a site means
# upstream moved or changed something: the patcher then refuses (the CLI exits
# 2) rather than leave a site behind.
SiteTable = Mapping[str, Mapping[str, int]]
Releases = Mapping[str, SiteTable]


class VerlPatchError(Exception):
    """The tree cannot be patched as asked; the message says why and what to do."""


class BadSourceError(VerlPatchError):
    """The source directory is missing or holds no verl package."""


class DamagedSourceError(BadSourceError):
    """A file of the verl package cannot be read or parsed: the tree is damaged."""


class InterruptedPatchError(VerlPatchError):
    """The journal of an interrupted patch cannot be rolled forward."""


class UnsupportedVersionError(VerlPatchError):
    """The verl release has no patch-site table (no release folder)."""

    def __init__(self, message: str, version: str = "") -> None:
        super().__init__(message)
        self.version = version  # the tree's release, for a caller that knows why it has no table


class UpstreamChangedError(VerlPatchError):
    """A supported release lacks a site the table says it has."""


class RewriteError(VerlPatchError):
    """A rewrite would not compile, or would leave a site behind."""


@dataclass
class Site:
    """One hard-coded site; line and columns are 1-based line and 0-based character columns."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    kind: str
    state: str
    before: str
    after: str

    def describe(self) -> str:
        text = " ".join(self.before.split())
        return "%s:%d:%d: %s (%s): %s" % (self.file, self.line, self.col + 1, self.kind, self.state, text)


@dataclass
class FileChange:
    """New content for one file; ``before`` is None for a file that does not exist yet."""

    path: str
    rel: str
    before: Optional[str]
    after: str
    kind: str


@dataclass
class Plan:
    """Everything a run would do, computed without writing anything."""

    source: str
    package_dir: str
    verl_version: str
    profile: str
    attn: str
    supported: bool
    patch: str = PATCH_FP32
    sites: List[Site] = field(default_factory=list)
    changes: List[FileChange] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    interrupted: Optional[str] = None  # check mode: the journal of an interrupted patch, not yet rolled forward
    recovered: List[str] = field(default_factory=list)  # files this run wrote to complete an interrupted patch
    leftovers: List[str] = field(default_factory=list)  # stray temporary files removed (check mode: found)

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.package_dir, MANIFEST_NAME)

    @property
    def pending(self) -> List[Site]:
        return [s for s in self.sites if s.state == PENDING]

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.recovered or self.leftovers or self.interrupted)

    def table_entry(self) -> Dict[str, Dict[str, int]]:
        """The patch_sites table (release.yml) that matches what was found."""
        return counts_by_file(s for s in self.sites if s.state in (PENDING, PATCHED))

    def diffs(self) -> List[Dict[str, str]]:
        """Ansible-style diffs: one {before_header, after_header, before, after} per changed file."""
        return [
            {
                "before_header": c.rel if c.before is not None else "/dev/null",
                "after_header": c.rel,
                "before": c.before or "",
                "after": c.after,
            }
            for c in self.changes
        ]

    def unified_diff(self) -> str:
        parts: List[str] = []
        for c in self.changes:
            parts.extend(
                difflib.unified_diff(
                    (c.before or "").splitlines(True),
                    c.after.splitlines(True),
                    "a/" + c.rel if c.before is not None else "/dev/null",
                    "b/" + c.rel,
                )
            )
        return "".join(parts)

    def to_dict(self) -> Dict[str, object]:
        return {
            "changed": self.changed,
            "source": self.source,
            "verl_version": self.verl_version,
            "supported": self.supported,
            "profile": self.profile,
            "patch": self.patch,
            "attn": self.attn,
            "engine_version": ENGINE_VERSION,
            "manifest": self.manifest_path,
            "counts": {kind: sum(1 for s in self.sites if s.kind == kind) for kind in KINDS},
            "pending": len(self.pending),
            "sites": [asdict(s) for s in self.sites],
            "files_changed": [c.rel for c in self.changes],
            "warnings": list(self.warnings),
            "interrupted": self.interrupted,
            "recovered": list(self.recovered),
            "leftovers": list(self.leftovers),
            "table_entry": self.table_entry(),
        }


# ----------------------------------------------------------------------------
# Source text: exact positions
# ----------------------------------------------------------------------------

_NEWLINE = re.compile(r"\r\n|\r|\n")


class SourceText:
    """A file's text with ast positions (1-based lines, UTF-8 byte columns) mapped to string offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def line_text(self, lineno: int) -> str:
        start = self.line_starts[lineno - 1]
        end = self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self.line_text(lineno)
        chars = len(line.encode("utf-8")[:col_bytes].decode("utf-8", errors="ignore"))
        return self.line_starts[lineno - 1] + chars

    def span(self, node: ast.AST) -> Tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def position(self, offset: int) -> Tuple[int, int]:
        """(1-based line, 0-based character column) of a string offset."""
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.line_starts[lo]


@dataclass
class Edit:
    """Replace text[start:end] by ``text``."""

    start: int
    end: int
    text: str


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (zero-width inserts may touch a replacement's end)."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for prev, cur in zip(ordered, ordered[1:]):
        if cur.start < prev.end:
            raise RewriteError("overlapping edits at offsets %d and %d" % (prev.start, cur.start))
    out = text
    for edit in reversed(ordered):
        out = out[: edit.start] + edit.text + out[edit.end :]
    return out


# ----------------------------------------------------------------------------
# Name resolution: which dotted name does an expression denote?
# ----------------------------------------------------------------------------


def import_aliases(nodes: Iterable[ast.AST]) -> Dict[str, str]:
    """Local name -> dotted name bound by the module's imports (any scope)."""
    aliases: Dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = node.module + "." + alias.name
    return aliases


def dotted_name(node: ast.AST, aliases: Dict[str, str]) -> Optional[str]:
    """'torch.bfloat16' for ``th.bfloat16`` after ``import torch as th``; None if not a dotted name."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value, aliases)
        return None if base is None else base + "." + node.attr
    return None


def walk_with_parents(tree: ast.AST) -> Tuple[List[ast.AST], Dict[ast.AST, ast.AST]]:
    """Every node of the tree (any order) and each node's parent, in one pass."""
    nodes: List[ast.AST] = []
    parents: Dict[ast.AST, ast.AST] = {}
    stack = [tree]
    node_type = ast.AST
    while stack:
        node = stack.pop()
        nodes.append(node)
        for name in node._fields:  # ast.iter_child_nodes, without its generator overhead
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type):
                        parents[item] = node
                        stack.append(item)
            elif isinstance(value, node_type):
                parents[value] = node
                stack.append(value)
    return nodes, parents


def str_const(node: Optional[ast.AST]) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    index = getattr(ast, "Index", None)  # Python 3.8 wraps subscripts in ast.Index
    if index is not None and isinstance(node, index):
        return str_const(node.value)  # type: ignore[attr-defined]
    return None


def is_false(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


# ----------------------------------------------------------------------------
# Finding sites
# ----------------------------------------------------------------------------


@dataclass
class FoundSite:
    """A site with its node and, when pending, the edits that patch it."""

    kind: str
    state: str
    node: ast.AST
    edits: List[Edit] = field(default_factory=list)


@dataclass
class ScanContext:
    """Per-file state the finders share."""

    rel: str
    src: SourceText
    by_type: Dict[type, List[ast.AST]]
    aliases: Dict[str, str]
    parents: Dict[ast.AST, ast.AST]
    attn: Optional[str]  # attention to write; None: only look (native)
    previous_attn: Optional[str]  # attention of an earlier patch, from the tree's marker
    gated: FrozenSet[str] = frozenset()  # the gated kinds the release's table lists for this file


def call_argument(call: ast.Call, name: str, signature: Sequence[str]) -> Optional[ast.AST]:
    """The expression passed for parameter ``name``, by keyword or position."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    index = signature.index(name)
    positional = call.args
    if any(isinstance(a, ast.Starred) for a in positional[: index + 1]):
        return None
    return positional[index] if index < len(positional) else None


def autocast_edits(ctx: ScanContext, call: ast.Call, dtype: ast.AST, enabled: Optional[ast.AST]) -> List[Edit]:
    """dtype torch.bfloat16 -> torch.float32 (same module alias), enabled -> False."""
    edits: List[Edit] = []
    if isinstance(dtype, ast.Attribute) and dotted_name(dtype.value, ctx.aliases) == "torch":
        start, end = ctx.src.span(dtype)
        edits.append(Edit(start, end, ctx.src.segment(dtype.value) + ".float32"))
    if enabled is not None:
        start, end = ctx.src.span(enabled)
        edits.append(Edit(start, end, "False"))
    else:
        last = max(list(call.args) + [kw.value for kw in call.keywords], key=lambda n: ctx.src.span(n)[1])
        end = ctx.src.span(last)[1]
        edits.append(Edit(end, end, ", enabled=False"))
    return edits


def find_autocasts(ctx: ScanContext) -> List[FoundSite]:
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Call, []):
        assert isinstance(node, ast.Call)
        signature = AUTOCAST_SIGNATURES.get(dotted_name(node.func, ctx.aliases) or "")
        if signature is None:
            continue
        dtype = call_argument(node, "dtype", signature)
        enabled = call_argument(node, "enabled", signature)
        dtype_name = dotted_name(dtype, ctx.aliases) if dtype is not None else None
        if dtype_name == "torch.bfloat16" and dtype is not None:
            if is_false(enabled):
                found.append(FoundSite(KIND_AUTOCAST, PATCHED, node))
            elif ctx.attn is None:
                found.append(FoundSite(KIND_AUTOCAST, KEPT, node))
            else:
                found.append(FoundSite(KIND_AUTOCAST, PENDING, node, autocast_edits(ctx, node, dtype, enabled)))
        elif dtype_name == "torch.float32" and is_false(enabled):
            found.append(FoundSite(KIND_AUTOCAST, PATCHED, node))  # our rewrite; fp32 autocast is otherwise pointless
    return found


def _default_owner(args: ast.arguments, node: ast.AST) -> Optional[str]:
    positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
    defaults = list(args.defaults)
    for arg, default in zip(positional[len(positional) - len(defaults) :], defaults):
        if default is node:
            return arg.arg
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if default is node:
            return arg.arg
    return None


def _target_name(target: ast.AST) -> Optional[str]:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript):
        return str_const(target.slice)
    return None


def in_attn_position(node: ast.Constant, parent: Optional[ast.AST]) -> bool:
    """Is this string the value given for attn_implementation?"""
    if isinstance(parent, ast.keyword):
        return parent.arg in ATTN_NAMES
    if isinstance(parent, ast.Dict):
        return any(v is node and str_const(k) in ATTN_NAMES for k, v in zip(parent.keys, parent.values))
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(_target_name(t) in ATTN_NAMES for t in targets)
    if isinstance(parent, ast.Call):
        args = parent.args
        if isinstance(parent.func, ast.Attribute) and parent.func.attr in ("get", "setdefault", "pop"):
            return len(args) >= 2 and args[1] is node and str_const(args[0]) in ATTN_NAMES
        if isinstance(parent.func, ast.Name) and parent.func.id == "setattr":
            return len(args) == 3 and args[2] is node and str_const(args[1]) in ATTN_NAMES
        return False
    if isinstance(parent, ast.arguments):
        return _default_owner(parent, node) in ATTN_NAMES
    return False


def literal_like(segment: str, value: str) -> str:
    """``value`` as a literal in the quote style of ``segment`` ("x" or 'x', optional u prefix)."""
    match = re.match(r"^([uU]?)(['\"])[A-Za-z0-9_]*\2$", segment)
    if match:
        return match.group(1) + match.group(2) + value + match.group(2)
    return json.dumps(value)


def find_attn_literals(ctx: ScanContext) -> List[FoundSite]:
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Constant, []):
        value = str_const(node)
        if value is None or not in_attn_position(node, ctx.parents.get(node)):  # type: ignore[arg-type]
            continue
        start, end = ctx.src.span(node)
        if value == FA2:
            if ctx.attn is None:
                found.append(FoundSite(KIND_ATTN, KEPT, node))
            else:
                found.append(
                    FoundSite(
                        KIND_ATTN, PENDING, node, [Edit(start, end, literal_like(ctx.src.segment(node), ctx.attn))]
                    )
                )
        elif ctx.previous_attn is not None and value == ctx.previous_attn:
            if ctx.attn is None or value == ctx.attn:
                found.append(FoundSite(KIND_ATTN, PATCHED, node))
            else:  # patched earlier with the other attention: retarget
                found.append(
                    FoundSite(
                        KIND_ATTN, PENDING, node, [Edit(start, end, literal_like(ctx.src.segment(node), ctx.attn))]
                    )
                )
    return found


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception") for n in names)


def _has_compat_fallback(node: ast.ImportFrom, parent: Optional[ast.AST]) -> bool:
    if not isinstance(parent, ast.Try) or node not in parent.body:
        return False
    for handler in parent.handlers:
        if handler.type is not None and not _catches_import_error(handler):
            continue
        for stmt in handler.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == COMPAT_MODULE:
                return True
    return False


def bert_import_edit(ctx: ScanContext, node: ast.ImportFrom) -> Edit:
    """Wrap the import (whole lines) in try/except ImportError with the compat fallback."""
    src = ctx.src
    start, end = src.span(node)
    last_line = node.end_lineno or node.lineno
    line_start, last_line_start = src.line_starts[node.lineno - 1], src.line_starts[last_line - 1]
    indent = src.line_text(node.lineno)[: start - line_start]
    trailing = src.line_text(last_line)[end - last_line_start :]
    if indent.strip() or (trailing.strip() and not trailing.strip().startswith("#")):
        raise RewriteError(
            "%s:%d: 'from %s import ...' shares its line with other code; "
            "put it on its own line(s) or add this form to verl_patch" % (ctx.rel, node.lineno, BERT_MODULE)
        )
    unit = "\t" if "\t" in indent else "    "
    body = _NEWLINE.sub(lambda m: m.group(0) + unit, src.text[start:end])
    first_newline = _NEWLINE.search(src.text)
    newline = first_newline.group(0) if first_newline else "\n"
    names = ", ".join(a.name + (" as " + a.asname if a.asname else "") for a in node.names)
    lines = [
        indent + "try:  " + MARKER + " flash-attn's helpers where it imports, pure torch otherwise",
        indent + unit + body + trailing,
        indent + "except ImportError:",
        indent + unit + "from " + COMPAT_MODULE + " import " + names,
    ]
    return Edit(line_start, last_line_start + len(src.line_text(last_line)), newline.join(lines))


def _other_bert_import(node: ast.AST) -> bool:
    """``import flash_attn.bert_padding`` or ``from flash_attn import bert_padding``."""
    if isinstance(node, ast.Import):
        return any(a.name == BERT_MODULE or a.name.startswith(BERT_MODULE + ".") for a in node.names)
    if isinstance(node, ast.ImportFrom) and node.module == "flash_attn" and not node.level:
        return any(a.name == "bert_padding" for a in node.names)
    return False


def find_bert_imports(ctx: ScanContext) -> List[FoundSite]:
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Import, []) + ctx.by_type.get(ast.ImportFrom, []):
        if ctx.attn is not None and _other_bert_import(node):
            raise RewriteError(
                "%s:%d: this import of %s is a form verl_patch does not rewrite; add it to verl_patch"
                % (ctx.rel, node.lineno, BERT_MODULE)  # type: ignore[attr-defined]
            )
        if not (isinstance(node, ast.ImportFrom) and node.module == BERT_MODULE and not node.level):
            continue
        if _has_compat_fallback(node, ctx.parents.get(node)):
            found.append(FoundSite(KIND_BERT, PATCHED, node))
        elif ctx.attn is None:
            found.append(FoundSite(KIND_BERT, KEPT, node))
        else:
            found.append(FoundSite(KIND_BERT, PENDING, node, [bert_import_edit(ctx, node)]))
    return found


ROLLOUT_N_KEY = "num_return_sequences"
ROLLOUT_N_NOTE = "  " + MARKER + " the trainer already repeats each prompt rollout.n times"


def find_rollout_n(ctx: ScanContext) -> List[FoundSite]:
    """``"num_return_sequences": <...>.n`` in a dict literal -> 1 (gated: only where the table lists it)."""
    if KIND_ROLLOUT_N not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Dict, []):
        for key, value in zip(node.keys, node.values):  # type: ignore[attr-defined]
            if str_const(key) != ROLLOUT_N_KEY:
                continue
            line = ctx.src.line_text(src_line(value))
            if isinstance(value, ast.Constant) and value.value == 1 and MARKER in line:
                found.append(FoundSite(KIND_ROLLOUT_N, PATCHED, value))
            elif isinstance(value, ast.Attribute) and value.attr == "n":
                if ctx.attn is None:
                    found.append(FoundSite(KIND_ROLLOUT_N, KEPT, value))
                    continue
                start, end = ctx.src.span(value)
                line_end = ctx.src.offset(src_line(value), 0) + len(line)  # line_text has no newline
                edits = [Edit(start, end, "1"), Edit(line_end, line_end, ROLLOUT_N_NOTE)]
                found.append(FoundSite(KIND_ROLLOUT_N, PENDING, value, edits))
    return found


LOGSUMEXP_NOTE = "  %s rows in chunks of %d, not one kernel per token" % (MARKER, LOGSUMEXP_CHUNK)


def _is_minus_one(node: Optional[ast.AST]) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant) and node.operand.value == 1
    return isinstance(node, ast.Constant) and node.value == -1


def _logsumexp_listcomp(ctx: ScanContext, node: ast.AST) -> Optional[Tuple[str, ast.AST]]:
    """``[torch.logsumexp(v, dim=-1) for v in ROWS]``: (v, ROWS), else None."""
    if not (isinstance(node, ast.ListComp) and len(node.generators) == 1):
        return None
    gen, elt = node.generators[0], node.elt
    if gen.ifs or getattr(gen, "is_async", 0) or not isinstance(gen.target, ast.Name):
        return None
    if not (isinstance(elt, ast.Call) and dotted_name(elt.func, ctx.aliases) == "torch.logsumexp"):
        return None
    dims = [kw.value for kw in elt.keywords if kw.arg == "dim"] + list(elt.args[1:2])
    if len(elt.args) < 1 or not isinstance(elt.args[0], ast.Name) or elt.args[0].id != gen.target.id:
        return None
    if len(dims) != 1 or not _is_minus_one(dims[0]) or len(elt.keywords) + len(elt.args) != 2:
        return None
    return gen.target.id, gen.iter


def end_line(node: ast.AST) -> int:
    """The last line of ``node`` (a call black wrapped over several lines ends below its first)."""
    return int(getattr(node, "end_lineno", None) or src_line(node))


def line_end_offset(src: SourceText, lineno: int) -> int:
    """The string offset of the end of line ``lineno``, before its newline: where a note is appended."""
    return src.offset(lineno, 0) + len(src.line_text(lineno))


def logsumexp_edits(ctx: ScanContext, call: ast.Call, var: str, rows: ast.AST) -> List[Edit]:
    """The stacked per-row loop -> chunks of rows, viewed back to the rows' shape.

    The call is replaced from its first character to its last, however many lines it spans, by one
    line; the note goes at the end of the line the call ends on, which is then the same line."""
    torch_ = ctx.src.segment(call.func.value)  # type: ignore[attr-defined]
    it = ctx.src.segment(rows)
    if not isinstance(rows, ast.Name):
        it = "(%s)" % it
    text = "%s.cat([%s.logsumexp(%s, dim=-1) for %s in %s.reshape(-1, %s.shape[-1]).split(%d)]).view(%s.shape[:-1])" % (
        torch_, torch_, var, var, it, it, LOGSUMEXP_CHUNK, it)
    start, end = ctx.src.span(call)
    note_at = line_end_offset(ctx.src, end_line(call))
    return [Edit(start, end, text), Edit(note_at, note_at, LOGSUMEXP_NOTE)]


def _is_patched_logsumexp(ctx: ScanContext, node: ast.Call) -> bool:
    """``torch.cat([torch.logsumexp(v, dim=-1) for v in ...]).view(...)`` with the note on its last line."""
    if not (isinstance(node.func, ast.Attribute) and node.func.attr == "view"):
        return False
    inner = node.func.value
    return (isinstance(inner, ast.Call) and dotted_name(inner.func, ctx.aliases) == "torch.cat"
            and bool(inner.args) and _logsumexp_listcomp(ctx, inner.args[0]) is not None
            and MARKER in ctx.src.line_text(end_line(node)))


def find_logsumexp_rows(ctx: ScanContext) -> List[FoundSite]:
    """``torch.stack([torch.logsumexp(r, dim=-1) for r in x])``, on one line or wrapped over several
    -> chunks of rows (gated)."""
    if KIND_LOGSUMEXP not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Call, []):
        assert isinstance(node, ast.Call)
        if dotted_name(node.func, ctx.aliases) == "torch.stack" and len(node.args) == 1 and not node.keywords:
            match = _logsumexp_listcomp(ctx, node.args[0])
            if match is None:
                continue
            if ctx.attn is None:
                found.append(FoundSite(KIND_LOGSUMEXP, KEPT, node))
            else:
                found.append(FoundSite(KIND_LOGSUMEXP, PENDING, node, logsumexp_edits(ctx, node, *match)))
        elif _is_patched_logsumexp(ctx, node):
            found.append(FoundSite(KIND_LOGSUMEXP, PATCHED, node))
    return found


REPLAY_POLL_NOTE = "  %s polls every %ss, not every %%s" % (MARKER, REPLAY_POLL_S)


def _poll_defaults(func: ast.AST) -> List[ast.Constant]:
    """The numeric default of ``func``'s parameter named REPLAY_POLL_PARAM, if it has one."""
    args = func.args  # type: ignore[attr-defined]
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return [d for a, d in pairs if a.arg == REPLAY_POLL_PARAM and isinstance(d, ast.Constant)
            and isinstance(d.value, (int, float)) and not isinstance(d.value, bool)]


def find_replay_poll(ctx: ScanContext) -> List[FoundSite]:
    """``def __init__(..., poll_interval: float = 2.0, ...)`` -> REPLAY_POLL_S (gated)."""
    if KIND_REPLAY_POLL not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for func in ctx.by_type.get(ast.FunctionDef, []) + ctx.by_type.get(ast.AsyncFunctionDef, []):
        for default in _poll_defaults(func):
            line = ctx.src.line_text(src_line(default))
            if default.value == REPLAY_POLL_S and MARKER in line:
                found.append(FoundSite(KIND_REPLAY_POLL, PATCHED, default))
            elif ctx.attn is None:
                found.append(FoundSite(KIND_REPLAY_POLL, KEPT, default))
            else:
                start, end = ctx.src.span(default)
                line_end = ctx.src.offset(src_line(default), 0) + len(line)
                found.append(FoundSite(KIND_REPLAY_POLL, PENDING, default, [
                    Edit(start, end, repr(REPLAY_POLL_S)),
                    Edit(line_end, line_end, REPLAY_POLL_NOTE % ctx.src.segment(default))]))
    return found


MIXED_PRECISION_NOTE = "  %s fp32 parameters and compute (Pascal has no bf16)" % MARKER


def mixed_precision_dtypes(ctx: ScanContext, call: ast.Call) -> List[ast.AST]:
    """The dtypes a call of an FSDP mixed-precision policy is given (by keyword or position); [] for other calls."""
    name = dotted_name(call.func, ctx.aliases) or ""
    signature = MIXED_PRECISION_SIGNATURES.get(name.rsplit(".", 1)[-1])
    if signature is None:
        return []
    given = [call_argument(call, param, signature) for param in signature]
    return [arg for arg in given if arg is not None]


def torch_float32(ctx: ScanContext, dtype: ast.AST) -> str:
    """``torch.float32`` as this file can spell it: through the same module alias as ``dtype``, or any name
    the file binds to torch."""
    if isinstance(dtype, ast.Attribute) and dotted_name(dtype.value, ctx.aliases) == "torch":
        return ctx.src.segment(dtype.value) + ".float32"
    modules = sorted(local for local, target in ctx.aliases.items() if target == "torch")
    if modules:
        return ("torch" if "torch" in modules else modules[0]) + ".float32"
    raise RewriteError(
        "%s:%d: a bf16 mixed-precision dtype in a file that does not import torch as a module; "
        "add this form to verl_patch" % (ctx.rel, src_line(dtype))
    )


def find_mixed_precision(ctx: ScanContext) -> List[FoundSite]:
    """``MixedPrecision(param_dtype=torch.bfloat16, ...)`` (FSDP1 or FSDP2's policy) -> torch.float32, marked."""
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Call, []):
        assert isinstance(node, ast.Call)
        dtypes = mixed_precision_dtypes(ctx, node)
        bf16 = [d for d in dtypes if dotted_name(d, ctx.aliases) == "torch.bfloat16"]
        if not bf16:
            if any(dotted_name(d, ctx.aliases) == "torch.float32" and MARKER in ctx.src.line_text(end_line(d))
                   for d in dtypes):
                found.append(FoundSite(KIND_MIXED_PRECISION, PATCHED, node))
            continue
        if ctx.attn is None:
            found.append(FoundSite(KIND_MIXED_PRECISION, KEPT, node))
            continue
        edits = [Edit(*ctx.src.span(d), torch_float32(ctx, d)) for d in bf16]
        note_at = line_end_offset(ctx.src, end_line(bf16[0]))
        edits.append(Edit(note_at, note_at, MIXED_PRECISION_NOTE))
        found.append(FoundSite(KIND_MIXED_PRECISION, PENDING, node, edits))
    return found


FINDERS = (find_autocasts, find_attn_literals, find_bert_imports, find_mixed_precision, find_rollout_n,
           find_logsumexp_rows, find_replay_poll)


def src_line(node: ast.AST) -> int:
    return int(getattr(node, "lineno", 0))


def parse(text: str, rel: str) -> ast.AST:
    try:
        return ast.parse(text, filename=rel)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte
        where = ", line %s" % exc.lineno if isinstance(exc, SyntaxError) else ""
        raise DamagedSourceError(
            "%s is damaged: it does not parse (%s%s); reinstall verl from its sdist"
            % (rel, getattr(exc, "msg", exc), where)
        )


def scan_text(
    text: str, rel: str, attn: Optional[str], previous_attn: Optional[str], gated: FrozenSet[str] = frozenset()
) -> List[FoundSite]:
    """All sites of one file's text, in source order; ``gated``: the gated kinds to look for here."""
    nodes, parents = walk_with_parents(parse(text, rel))
    by_type: Dict[type, List[ast.AST]] = {}
    for node in nodes:
        by_type.setdefault(type(node), []).append(node)
    imports = by_type.get(ast.Import, []) + by_type.get(ast.ImportFrom, [])
    ctx = ScanContext(rel, SourceText(text), by_type, import_aliases(imports), parents, attn, previous_attn, gated)
    found = [site for finder in FINDERS for site in finder(ctx)]
    found.sort(key=lambda s: (s.node.lineno, s.node.col_offset))  # type: ignore[attr-defined]
    return found


def to_site(rel: str, src: SourceText, found: FoundSite) -> Site:
    start, end = src.span(found.node)
    if found.kind in (KIND_BERT, KIND_MIXED_PRECISION) and found.edits:  # whole lines; the note at a line's end
        start = min([start] + [e.start for e in found.edits])
        end = max([end] + [e.end for e in found.edits])
    growth = sum(len(e.text) - (e.end - e.start) for e in found.edits)
    after = apply_edits(src.text, found.edits)[start : end + growth]
    node_start, node_end = src.span(found.node)
    line, col = src.position(node_start)
    end_line, end_col = src.position(node_end)
    return Site(rel, line, col, end_line, end_col, found.kind, found.state, src.text[start:end], after)


# ----------------------------------------------------------------------------
# The tree
# ----------------------------------------------------------------------------


def find_package_dir(source: str) -> Tuple[str, str]:
    """(root that holds verl/, verl package dir) for an sdist root, a site-packages dir or verl/ itself."""
    source = os.path.abspath(source)
    if os.path.exists(source) and not os.path.isdir(source):
        archive = source.endswith((".tar.gz", ".tgz", ".zip", ".whl"))
        raise BadSourceError(
            "%s is a file, not a directory: give the %sverl sdist root, a site-packages directory or the "
            "verl package directory" % (source, "unpacked " if archive else "")
        )
    if not os.path.isdir(source):
        raise BadSourceError("%s: no such directory" % source)
    if os.path.isfile(os.path.join(source, PACKAGE, "__init__.py")):
        return source, os.path.join(source, PACKAGE)
    if os.path.basename(source) == PACKAGE and os.path.isfile(os.path.join(source, "__init__.py")):
        return os.path.dirname(source), source
    raise BadSourceError("%s: holds no verl package (expected %s/__init__.py)" % (source, PACKAGE))


def read_verl_version(package_dir: str) -> str:
    """From verl/version/version (verl 0.3 to 0.5 keep it there), else a literal __version__ in verl/__init__.py."""
    version_file = os.path.join(package_dir, "version", "version")
    if os.path.isfile(version_file):
        with open(version_file, encoding="utf-8") as handle:
            version = handle.read().strip()
        if version:
            return version
    with open(os.path.join(package_dir, "__init__.py"), encoding="utf-8") as handle:
        match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", handle.read(), re.M)
    if match:
        return match.group(1)
    raise BadSourceError("%s: cannot tell the verl version (no version/version file, no __version__)" % package_dir)


def python_files(root: str, package_dir: str) -> List[str]:
    """Relative paths (posix) of the package's .py files that may hold sites, sorted."""
    found: List[str] = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", COMPAT_DIR))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.endswith(".py") and not os.path.islink(path):
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                if rel not in NEVER_TOUCH:
                    found.append(rel)
    return found


def read_text(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8")


def read_source(path: str, rel: str) -> str:
    """A package file's text; a file that is not UTF-8 is damaged (verl's files all are)."""
    try:
        return read_text(path)
    except UnicodeDecodeError as exc:
        raise DamagedSourceError(
            "%s is damaged: it is not UTF-8 text (byte %d); reinstall verl from its sdist" % (rel, exc.start)
        )


def previous_patch(package_dir: str) -> Optional[Dict[str, str]]:
    """{'profile', 'attn'} from the marker of an earlier patch, None for a pristine tree."""
    path = os.path.join(package_dir, COMPAT_DIR, "__init__.py")
    if not os.path.isfile(path):
        return None
    values: Dict[str, str] = {}
    for node in parse(read_source(path, path), path).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = str_const(node.value)
            if value is not None:
                values[node.targets[0].id.lower()] = value
    if not re.fullmatch(PROFILE_NAME, values.get("profile", "")) or values.get("attn") not in ATTN_CHOICES:
        raise VerlPatchError("%s: unreadable patch marker; reinstall verl from its sdist" % path)
    return values


def compat_init(profile: str, attn: str) -> str:
    return (
        '"""Written by verl-pascal\'s verl_patch engine: this verl tree is patched; do not edit."""\n'
        "\n"
        "PROFILE = %s\n"
        "ATTN = %s\n" % (json.dumps(profile), json.dumps(attn))
    )


def compat_source(name: str) -> str:
    """A file of the verl_pascal_compat package, found beside this module (a checkout or AnsiballZ)."""
    package = (__package__ + "." if __package__ else "") + "verl_pascal_compat"
    data: Optional[bytes] = None
    try:
        data = pkgutil.get_data(package, name)
    except (ImportError, OSError):
        data = None
    if data is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_pascal_compat", name)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise VerlPatchError("cannot read the compat module %s: %s" % (name, exc))
    return data.decode("utf-8")


def compat_files(package_dir: str, profile: str, attn: str) -> Dict[str, str]:
    files = {os.path.join(package_dir, COMPAT_DIR, "__init__.py"): compat_init(profile, attn)}
    for name in COMPAT_SOURCE_FILES:
        files[os.path.join(package_dir, COMPAT_DIR, name)] = compat_source(name)
    return files


def counts_by_file(sites: Iterable[Site]) -> Dict[str, Dict[str, int]]:
    table: Dict[str, Dict[str, int]] = {}
    for site in sites:
        kinds = table.setdefault(site.file, {})
        kinds[site.kind] = kinds.get(site.kind, 0) + 1
    return table


def check_required(version: str, sites: Sequence[Site], table: SiteTable) -> None:
    """Raise UpstreamChangedError if a site the release's table requires was not found."""
    have = counts_by_file(s for s in sites if s.state in (PENDING, PATCHED, KEPT))
    missing = [
        "%s: %s expected >= %d, found %d" % (rel, kind, need, have.get(rel, {}).get(kind, 0))
        for rel, kinds in sorted(table.items())
        for kind, need in sorted(kinds.items())
        if have.get(rel, {}).get(kind, 0) < need
    ]
    if missing:
        raise UpstreamChangedError(
            "verl %s: sites the table expects were not found, so upstream moved or changed "
            "something (or the tree was edited by hand); nothing was written. Missing:\n  %s"
            % (version, "\n  ".join(missing))
        )


def unsupported_message(version: str, releases: Releases) -> str:
    """Why ``version`` is refused, and how to add it without running its sdist's code: the sdist is
    fetched by its URL on the index and kept only with the sha256 the user copied from the index's
    simple API; nothing builds it or runs its setup.py (pip download would, before any check)."""
    sdist = "verl-%s.tar.gz" % version
    return (
        "verl %s is not supported by verl_patch %s; supported: %s. To add it, fetch its sdist with its "
        "sha256 checked before anything opens it: copy the sha256 of %s from the package index's simple API "
        "(<index>/verl/ lists each file with its sha256), put `verl_releases: {'%s': {sdist: %s, sha256: "
        "'<that sha256>'}}` in a file LOCK.yml and run `verl-pascal-prefetch --lock LOCK.yml --mirror DIR` "
        "(it keeps the file only if its sha256 matches); then unpack DIR/%s with tar, run verl-patch --source "
        "<the unpacked verl-%s> --profile pascal --check --json --allow-unsupported, review every site it lists, "
        "and write its table_entry as patch_sites in a new release folder, verl_pascal/releases/verl-%s/release.yml"
        % (version, ENGINE_VERSION, ", ".join(sorted(releases)) or "none", sdist, version, sdist, sdist, version,
           version)
    )


def verify_rewrite(rel: str, after: str, attn: str, gated: FrozenSet[str] = frozenset()) -> None:
    """The rewritten text compiles and holds no pending site."""
    try:
        compile(after, rel, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise RewriteError(
            "%s: the rewrite does not compile (%s, line %s); nothing was written" % (rel, exc.msg, exc.lineno)
        )
    left = [s for s in scan_text(after, rel, attn, attn, gated) if s.state == PENDING]
    if left:
        line = src_line(left[0].node)
        raise RewriteError("%s:%d: the rewrite left a %s site; nothing was written" % (rel, line, left[0].kind))


def plan_file(
    root: str, rel: str, attn: Optional[str], previous_attn: Optional[str], gated: FrozenSet[str] = frozenset()
) -> Tuple[List[Site], Optional[FileChange]]:
    path = os.path.join(root, rel)
    text = read_source(path, rel)
    if not any(t in text for t in TRIGGERS):
        return [], None
    bom = text.startswith("\ufeff")
    body = text[1:] if bom else text
    found = scan_text(body, rel, attn, previous_attn, gated)
    src = SourceText(body)
    sites = [to_site(rel, src, f) for f in found]
    if attn is None or not any(f.state == PENDING for f in found):
        return sites, None
    after = apply_edits(body, [e for f in found for e in f.edits])
    verify_rewrite(rel, after, attn, gated)  # also catches a pending site whose rewrite did nothing
    return sites, FileChange(path, rel, text, ("\ufeff" if bom else "") + after, "source")


def manifest_text(plan: Plan, old: Optional[Dict[str, object]]) -> str:
    """The manifest after this run: earlier changed sites (same release) plus this run's."""
    entries: List[Dict[str, object]] = []
    if old and old.get("verl_version") == plan.verl_version and isinstance(old.get("sites"), list):
        entries = [e for e in old["sites"] if isinstance(e, dict)]  # type: ignore[union-attr]
    for site in plan.pending:
        entries.append(
            {"file": site.file, "line": site.line, "kind": site.kind, "before": site.before, "after": site.after}
        )
    data = {
        "engine": "verl-pascal verl_patch",
        "engine_version": ENGINE_VERSION,
        "verl_version": plan.verl_version,
        "profile": plan.profile,
        "attn": plan.attn,
        "compat_module": COMPAT_MODULE,
        "sites": entries,
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def read_manifest(path: str) -> Optional[Dict[str, object]]:
    try:
        data = json.loads(read_text(path))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_choices(profile: str, attn: str, patch: str) -> None:
    if not re.fullmatch(PROFILE_NAME, profile):
        raise VerlPatchError("not a profile name: %r (lower-case letters, digits and _)" % profile)
    if patch not in PATCH_KINDS:
        raise VerlPatchError("unknown patch %r; choose one of %s" % (patch, ", ".join(PATCH_KINDS)))
    if attn not in ATTN_CHOICES:
        raise VerlPatchError("unknown attention %r; choose one of %s" % (attn, ", ".join(ATTN_CHOICES)))


def make_plan(
    source: str,
    profile: str = "pascal",
    attn: str = "sdpa",
    allow_unsupported: bool = False,
    patch: str = PATCH_FP32,
    releases: Optional[Releases] = None,
) -> Plan:
    """Find every site and compute every file change; writes nothing."""
    check_choices(profile, attn, patch)
    root, package_dir = find_package_dir(source)
    version = read_verl_version(package_dir)
    previous = previous_patch(package_dir)
    patching = patch == PATCH_FP32
    if not patching and previous is not None:
        raise VerlPatchError(
            "%s is patched (profile %s); profile %s needs verl as released: reinstall it from its sdist"
            % (package_dir, previous["profile"], profile)
        )
    releases = releases or {}
    supported = version in releases
    plan = Plan(root, package_dir, version, profile, attn, supported, patch)
    if patching and not supported:
        if not allow_unsupported:
            raise UnsupportedVersionError(unsupported_message(version, releases), version)
        plan.warnings.append(unsupported_message(version, releases))
    previous_attn = previous["attn"] if previous else None
    table = releases.get(version, {})
    for rel in python_files(root, package_dir):
        gated = frozenset(k for k in table.get(rel, {}) if k in GATED_KINDS)
        sites, change = plan_file(root, rel, attn if patching else None, previous_attn, gated)
        plan.sites.extend(sites)
        if change is not None:
            plan.changes.append(change)
    if patching and supported:
        check_required(version, plan.sites, releases[version])
    if patching:
        for path, text in sorted(compat_files(package_dir, profile, attn).items()):
            before = read_text(path) if os.path.isfile(path) else None
            if before != text:
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                plan.changes.append(FileChange(path, rel, before, text, KIND_COMPAT))
        if plan.changes:
            old_text = read_text(plan.manifest_path) if os.path.isfile(plan.manifest_path) else None
            new_text = manifest_text(plan, read_manifest(plan.manifest_path))
            if new_text != old_text:
                rel = os.path.relpath(plan.manifest_path, root).replace(os.sep, "/")
                plan.changes.append(FileChange(plan.manifest_path, rel, old_text, new_text, "manifest"))
    for change in plan.changes:
        if change.rel in NEVER_TOUCH:  # defence in depth: python_files already skips it
            raise RewriteError("%s must never be rewritten" % change.rel)
    return plan


# ----------------------------------------------------------------------------
# Writing: a journal, rolled forward by this run or, after a kill, by the next
# ----------------------------------------------------------------------------

_write_points_seen = 0


def _write_point() -> None:
    """Called right before every file-system write and once after the last one: the test hook."""
    global _write_points_seen
    target = os.environ.get(FAULT_ENV, "")
    if not target.isdigit():
        return
    _write_points_seen += 1
    if _write_points_seen == int(target):
        os.kill(os.getpid(), signal.SIGKILL)


def _sha256(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read_bytes(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _fsync_dir(directory: str) -> None:
    """Make renames and unlinks in ``directory`` durable (where the platform can)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically: it holds the old or the new bytes, never a mix."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        _write_point()
        os.makedirs(directory, exist_ok=True)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
    _write_point()
    handle, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        _write_point()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def journal_path(package_dir: str) -> str:
    return os.path.join(package_dir, JOURNAL_NAME)


@dataclass
class JournalEntry:
    """One file of a patch: its path inside the package, the hash of its old bytes (None: absent), its new text."""

    rel: str
    before_sha256: Optional[str]
    after: str


def journal_text(plan: Plan) -> str:
    entries = [
        {
            "path": os.path.relpath(c.path, plan.package_dir).replace(os.sep, "/"),
            "before_sha256": _sha256(None if c.before is None else c.before.encode("utf-8")),
            "after": c.after,
        }
        for c in plan.changes
    ]
    data = {
        "format": JOURNAL_FORMAT,
        "engine_version": ENGINE_VERSION,
        "profile": plan.profile,
        "attn": plan.attn,
        "files": entries,
    }
    return json.dumps(data, sort_keys=True) + "\n"


def _unreadable_journal(path: str, why: str) -> InterruptedPatchError:
    return InterruptedPatchError(
        "%s: the journal of an interrupted patch is unreadable (%s); reinstall verl from its sdist, "
        "then delete this file" % (path, why)
    )


def _entry(path: str, item: object) -> JournalEntry:
    if not isinstance(item, dict):
        raise _unreadable_journal(path, "an entry is not an object")
    rel, before, after = item.get("path"), item.get("before_sha256"), item.get("after")
    if not isinstance(rel, str) or not isinstance(after, str) or not (before is None or isinstance(before, str)):
        raise _unreadable_journal(path, "an entry lacks path, before_sha256 or after")
    parts = rel.split("/")
    if rel.startswith("/") or ".." in parts or "" in parts:
        raise _unreadable_journal(path, "path %r leaves the package" % rel)
    return JournalEntry(rel, before, after)


def read_journal(package_dir: str) -> Optional[List[JournalEntry]]:
    """The entries of an interrupted patch's journal; None when there is none."""
    path = journal_path(package_dir)
    raw = _read_bytes(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise _unreadable_journal(path, str(exc))
    if not isinstance(data, dict) or data.get("format") != JOURNAL_FORMAT or not isinstance(data.get("files"), list):
        raise _unreadable_journal(path, "not a format-%d journal" % JOURNAL_FORMAT)
    return [_entry(path, item) for item in data["files"]]


def _entry_path(package_dir: str, entry: JournalEntry) -> str:
    return os.path.join(package_dir, *entry.rel.split("/"))


def unwritten_entries(package_dir: str, entries: Sequence[JournalEntry]) -> List[JournalEntry]:
    """Entries whose file still holds its old bytes; raise if a file holds neither old nor new bytes."""
    todo: List[JournalEntry] = []
    for entry in entries:
        current = _read_bytes(_entry_path(package_dir, entry))
        if current == entry.after.encode("utf-8"):
            continue
        if _sha256(current) != entry.before_sha256:
            raise InterruptedPatchError(
                "%s: changed since the interrupted patch recorded in %s was written (it holds neither its "
                "old nor its new content); reinstall verl from its sdist, then delete that journal"
                % (entry.rel, journal_path(package_dir))
            )
        todo.append(entry)
    return todo


def _root_rel(package_dir: str, path: str) -> str:
    """``path`` relative to the directory that holds the package ("verl/..."), like every Plan path."""
    return os.path.relpath(path, os.path.dirname(package_dir)).replace(os.sep, "/")


def _leftover_paths(package_dir: str) -> List[str]:
    found: List[str] = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.startswith(TEMP_PREFIX) and not os.path.islink(path):
                found.append(path)
    return found


def find_leftovers(package_dir: str) -> List[str]:
    """Stray temporary files (``.verl_patch.*``) anywhere in the package."""
    return [_root_rel(package_dir, path) for path in _leftover_paths(package_dir)]


def remove_leftovers(package_dir: str) -> List[str]:
    removed: List[str] = []
    for path in _leftover_paths(package_dir):
        _write_point()
        os.unlink(path)
        removed.append(_root_rel(package_dir, path))
    return removed


def roll_forward(package_dir: str) -> List[str]:
    """Complete the patch the journal records, then remove the journal.

    Returns the files that were written ("verl/..."); [] when there is no journal.
    """
    entries = read_journal(package_dir)
    if entries is None:
        return []
    todo = unwritten_entries(package_dir, entries)  # checks every file before writing any
    for entry in todo:
        _write_file(_entry_path(package_dir, entry), entry.after.encode("utf-8"))
    for directory in sorted({os.path.dirname(_entry_path(package_dir, e)) for e in todo}):
        _fsync_dir(directory)
    _write_point()
    os.unlink(journal_path(package_dir))
    _fsync_dir(package_dir)
    return [_root_rel(package_dir, _entry_path(package_dir, e)) for e in todo]


def apply_plan(plan: Plan) -> None:
    """Write the journal, then roll it forward: sources first, the compat module next, the manifest last.

    The journal's rename is the commit point: a kill before it leaves the tree as it was (bar stray
    temporary files), a kill after it leaves a journal that the next run completes.
    """
    journal = journal_path(plan.package_dir)
    _write_file(journal, journal_text(plan).encode("utf-8"))
    _fsync_dir(plan.package_dir)
    try:
        roll_forward(plan.package_dir)
    except OSError as exc:
        raise InterruptedPatchError(
            "%s; the patch is partly written and %s records the rest: once the cause is fixed, "
            "run the patcher again (not in check mode) to complete it" % (exc, journal)
        )


def interrupted_plan(
    root: str, package_dir: str, profile: str, attn: str, patch: str, releases: Releases
) -> Optional[Plan]:
    """Check mode on a tree with a journal: the files a run would still write; None without a journal."""
    entries = read_journal(package_dir)
    if entries is None:
        return None
    version = read_verl_version(package_dir)
    plan = Plan(root, package_dir, version, profile, attn, version in releases, patch)
    plan.interrupted = journal_path(package_dir)
    for entry in unwritten_entries(package_dir, entries):
        path = _entry_path(package_dir, entry)
        before = read_source(path, entry.rel) if os.path.exists(path) else None
        plan.changes.append(FileChange(path, _root_rel(package_dir, path), before, entry.after, "interrupted"))
    plan.leftovers = find_leftovers(package_dir)
    return plan


def patch_tree(
    source: str,
    profile: str = "pascal",
    attn: str = "sdpa",
    check: bool = False,
    allow_unsupported: bool = False,
    patch: str = PATCH_FP32,
    releases: Optional[Releases] = None,
) -> Plan:
    """Plan and, unless ``check``, apply. The returned plan says what changed (or would change).

    A run first completes a patch that an earlier run left interrupted, so the plan is made on a
    consistent tree; check mode instead reports the interrupted patch (see ``interrupted_plan``).
    """
    check_choices(profile, attn, patch)
    root, package_dir = find_package_dir(source)
    if check:
        interrupted = interrupted_plan(root, package_dir, profile, attn, patch, releases or {})
        if interrupted is not None:
            return interrupted
        plan = make_plan(source, profile, attn, allow_unsupported, patch, releases)
        plan.leftovers = find_leftovers(package_dir)
        return plan
    recovered = roll_forward(package_dir)
    leftovers = remove_leftovers(package_dir)
    plan = make_plan(source, profile, attn, allow_unsupported, patch, releases)
    plan.recovered, plan.leftovers = recovered, leftovers
    if plan.changes:
        apply_plan(plan)
    _write_point()  # after the last write
    return plan
