"""The entry point, patch_tree: complete an interrupted patch, plan, then write the plan
through its journal (check mode: report what a run would write)."""

from __future__ import annotations

import os
from typing import Optional

from .atomic import find_leftovers, fsync_dir, remove_leftovers, write_file, write_point
from .errors import InterruptedPatchError
from .journal import entry_path, journal_path, journal_text, read_journal, roll_forward, unwritten_entries
from .kinds import PATCH_FP32, Releases
from .model import FileChange, Plan
from .plan import check_choices, make_plan
from .tree import find_package_dir, read_source, read_verl_version, root_rel


def apply_plan(plan: Plan) -> None:
    """Write the journal, then roll it forward: sources first, the compat module next, the manifest last.

    The journal's rename is the commit point: a kill before it leaves the tree as it was (bar stray
    temporary files), a kill after it leaves a journal that the next run completes.
    """
    journal = journal_path(plan.package_dir)
    write_file(journal, journal_text(plan).encode("utf-8"))
    fsync_dir(plan.package_dir)
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
        path = entry_path(package_dir, entry)
        before = read_source(path, entry.rel) if os.path.exists(path) else None
        plan.changes.append(FileChange(path, root_rel(package_dir, path), before, entry.after, "interrupted"))
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
    write_point()  # after the last write
    return plan
