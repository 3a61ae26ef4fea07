"""The finders, one module per site kind: each takes a file's ScanContext and returns its
sites of that kind (FoundSite), with the edits that patch the pending ones."""

from __future__ import annotations

from .attention import find_attn_literals
from .autocast import find_autocasts
from .bert_padding import find_bert_imports
from .generate_positions import find_generate_positions
from .logsumexp import find_logsumexp_rows
from .mixed_precision import find_mixed_precision
from .replay_poll import find_replay_poll
from .rollout_log_probs import find_rollout_log_probs
from .rollout_n import find_rollout_n

FINDERS = (find_autocasts, find_attn_literals, find_bert_imports, find_mixed_precision, find_rollout_n,
           find_logsumexp_rows, find_replay_poll, find_generate_positions, find_rollout_log_probs)
