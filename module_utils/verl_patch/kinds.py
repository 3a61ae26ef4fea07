"""The names the engine and its callers share: the site kinds (what each is, and its
tunables), the states of a site, the patch kinds of the GPU-profile table, the
attention choices, the marker of a patched line, and the shape of a release's
patch-site table."""

from __future__ import annotations

from typing import Mapping

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

# verl 0.4.0 to 0.5.0's HF rollout passes the prompts' position ids to the model's
# `generate`, which keeps a position_ids it is given and does not extend it while
# decoding (seen with transformers 4.56, what 0.5.0's lock installs): every
# generated token is given the last prompt token's position. The rollout then samples from another distribution
# than the one the actor trains and scores (a tiny warm-started model scored 0.05
# where it scores 0.23). The rewrite passes None, and generate counts each
# token's position from the attention mask, as it does when given none (0.3.0
# passed none). Gated: listed where verl's own HF rollout generates.
KIND_GENERATE_POSITIONS = "hf_generate_positions"
GENERATE_POSITIONS_KEY = "position_ids"

# verl 0.4.0 to 0.5.0's trainer logs how far the rollout's probabilities of the
# sampled tokens are from the actor's (training/rollout_probs_diff_*) whenever
# the rollout returns its log-probs, which its own HF rollout never does: the
# check that catches a rollout sampling from another distribution than the one
# the actor trains (the position fault above was one) is missing where verl's HF
# rollout runs. The rewrite hands generate a logits processor that keeps each
# sampled token's log-prob and puts them into the batch as rollout_log_probs.
# Gated: listed where verl's own HF rollout generates and the trainer logs them.
KIND_ROLLOUT_LOG_PROBS = "hf_rollout_log_probs"
KINDS = (KIND_AUTOCAST, KIND_ATTN, KIND_BERT, KIND_MIXED_PRECISION, KIND_ROLLOUT_N, KIND_LOGSUMEXP, KIND_REPLAY_POLL,
         KIND_GENERATE_POSITIONS, KIND_ROLLOUT_LOG_PROBS)
GATED_KINDS = frozenset({KIND_ROLLOUT_N, KIND_LOGSUMEXP, KIND_REPLAY_POLL, KIND_GENERATE_POSITIONS,
                         KIND_ROLLOUT_LOG_PROBS})
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
MARKER = "# verl-pascal:"

# Sites that MUST be found in a release: {file: {kind: minimum count}}. The
# table of each supported release is in its folder (release.yml, patch_sites;
# verl_pascal/releases/verl-X/) and is given to the engine by its caller, as
# ``releases`` (version -> table). A supported release missing a site means
# upstream moved or changed something: the patcher then refuses (the CLI exits
# 2) rather than leave a site behind.
SiteTable = Mapping[str, Mapping[str, int]]
Releases = Mapping[str, SiteTable]
