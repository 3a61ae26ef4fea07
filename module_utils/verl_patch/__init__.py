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

The modules, each one seam of the engine:

- ``patch``: the entry point, ``patch_tree`` (roll forward, plan, apply);
- ``plan``: ``make_plan``, the plan of a whole tree, and the release's table checked;
- ``scan``: one file's sites (``scan_text``) and its verified rewrite;
- ``finders/``: one finder per site kind;
- ``context``, ``names``, ``source``: what the finders share (the per-file
  context, name resolution, exact text positions and edits);
- ``tree``: the verl tree on disk, the patch marker and the compat module;
- ``model``: ``Site``, ``FileChange``, ``Plan``;
- ``journal`` and ``atomic``: the journaled, kill-safe writes;
- ``kinds`` and ``errors``: the shared names and the errors.

This package re-exports the names its callers use (library/verl_patch.py,
``verl-patch``, the tests): import them from here.
"""

from __future__ import annotations

from .atomic import FAULT_ENV, TEMP_PREFIX
from .context import FoundSite, ScanContext
from .errors import (BadSourceError, DamagedSourceError, InterruptedPatchError, RewriteError, UnsupportedVersionError,
                     UpstreamChangedError, VerlPatchError)
from .journal import JOURNAL_NAME, roll_forward
from .kinds import (ATTN_CHOICES, ENGINE_VERSION, GATED_KINDS, KEPT, KIND_ATTN, KIND_AUTOCAST, KIND_BERT, KIND_COMPAT,
                    KIND_GENERATE_POSITIONS, KIND_LOGSUMEXP, KIND_MIXED_PRECISION, KIND_REPLAY_POLL, KIND_ROLLOUT_LOG_PROBS,
                    KIND_ROLLOUT_N, KINDS, LOGSUMEXP_CHUNK,
                    MARKER, PATCH_FP32, PATCH_KINDS, PATCH_NONE, PATCHED, PENDING, REPLAY_POLL_S, Releases, SiteTable)
from .model import FileChange, Plan, Site
from .patch import apply_plan, patch_tree
from .plan import make_plan
from .scan import scan_text
from .source import Edit, SourceText

__all__ = [
    "ATTN_CHOICES", "ENGINE_VERSION", "FAULT_ENV", "GATED_KINDS", "JOURNAL_NAME", "KEPT", "KINDS", "KIND_ATTN",
    "KIND_AUTOCAST", "KIND_BERT", "KIND_COMPAT", "KIND_GENERATE_POSITIONS", "KIND_LOGSUMEXP", "KIND_MIXED_PRECISION", "KIND_REPLAY_POLL",
    "KIND_ROLLOUT_LOG_PROBS", "KIND_ROLLOUT_N", "LOGSUMEXP_CHUNK", "MARKER", "PATCHED", "PATCH_FP32", "PATCH_KINDS", "PATCH_NONE", "PENDING",
    "REPLAY_POLL_S", "TEMP_PREFIX", "BadSourceError", "DamagedSourceError", "Edit", "FileChange", "FoundSite",
    "InterruptedPatchError", "Plan", "Releases", "RewriteError", "ScanContext", "Site", "SiteTable", "SourceText",
    "UnsupportedVersionError", "UpstreamChangedError", "VerlPatchError", "apply_plan", "make_plan", "patch_tree",
    "roll_forward", "scan_text",
]
