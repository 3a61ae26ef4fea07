"""Apply the P40 rules in every Python process that has this folder first on
PYTHONPATH and P40_RULES=1 in its environment: Ray's worker processes inherit
both, so the whole run is guarded. The verl_pascal package must be importable
too (installed, or the folder holding it also on PYTHONPATH). Settings: P40_RULES_MEMORY_GIB (default 22,
"none" for no cap), P40_RULES_DEVICES (default cuda), P40_RULES_REPORT_DIR
(violations and per-process peak memory as JSON lines), P40_RULES_MODE
(fail, the default, or record), P40_RULES_GUARD (0: cap and TF32 only,
to measure the guard's own cost), P40_RULES_SUMMARY_EVERY_S (how often each
process rewrites its summary, default 5)."""

import os

if os.environ.get("P40_RULES") == "1":
    try:
        import torch  # noqa: F401
    except ImportError:  # a helper process without torch: nothing to guard
        pass
    else:
        from verl_pascal.p40_rules.guard import Settings, activate

        activate(Settings.from_env(dict(os.environ)))
