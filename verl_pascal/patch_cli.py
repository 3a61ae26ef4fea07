"""Patch a verl source tree so that it runs without bf16 and FlashAttention-2.

The ``verl-patch`` command (``pip install -e .`` puts it on PATH); Python 3.8+
with PyYAML (it reads the GPU-profile table). The logic is
module_utils/verl_patch/ (standard library only), shared with the Ansible
module library/verl_patch.py.

A run killed part-way (even by SIGKILL) leaves a journal in the tree; the next
run without --check completes that patch first, and --check reports it.

Exit status: 0 the tree is (with --check: already) fully patched for the
profile; 1 --check found unpatched sites (listed as file:line:col: kind), an
interrupted patch or stray temporary files; 2 unsupported verl version, a site
that upstream moved, a damaged file, or bad input; 141 stdout was closed early
(for example piped into head): the patch itself was still applied.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from verl_pascal import profiles, verl_releases
from verl_pascal.module_utils import verl_patch


def parse_args(argv: Optional[List[str]], supported: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; ``supported``: the releases the epilog names (default: each folder that validates)."""
    if supported is None:
        supported = list(release_tables()[0])
    parser = argparse.ArgumentParser(
        prog="verl-patch",
        description=__doc__.split("\n\n")[0],
        epilog="Supported verl releases (a folder each in verl_pascal/releases/): %s." % ", ".join(supported),
    )
    parser.add_argument("--source", required=True, help="verl sdist root, site-packages dir, or the verl package dir")
    parser.add_argument(
        "--profile", required=True, choices=profiles.names(), help="a row of the GPU-profile table (gpu_profiles.yml)"
    )
    parser.add_argument("--attn", default="sdpa", choices=verl_patch.ATTN_CHOICES, help="attention (default: sdpa)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a site is unpatched")
    parser.add_argument("--diff", action="store_true", help="print a unified diff of what changes (or would)")
    parser.add_argument("--json", action="store_true", help="print the result (sites, versions, diffs) as JSON")
    parser.add_argument(
        "--allow-unsupported",
        action="store_true",
        help="patch or check a release without a release folder (to add one); never skips a found site",
    )
    return parser.parse_args(argv)


def report_repairs(plan: verl_patch.Plan, check: bool) -> None:
    """What an interrupted earlier run left, and what this run did about it."""
    if plan.interrupted:
        print(
            "an interrupted patch is pending (journal %s): %d file(s) still to write; "
            "run verl-patch without --check to complete it" % (plan.interrupted, len(plan.changes))
        )
        for change in plan.changes:
            print("  " + change.rel)
    elif plan.recovered:
        print("completed an interrupted patch: wrote %d file(s)" % len(plan.recovered))
    if plan.leftovers:
        verb = "found" if check else "removed"
        tail = "; run verl-patch without --check to remove them" if check else ""
        print("%s %d stray temporary file(s) of an interrupted run%s" % (verb, len(plan.leftovers), tail))
        for rel in plan.leftovers:
            print("  " + rel)


def report_text(plan: verl_patch.Plan, check: bool) -> None:
    for warning in plan.warnings:
        print("warning: " + warning, file=sys.stderr)
    report_repairs(plan, check)
    if plan.interrupted:
        return
    head = "verl %s, profile %s, attn %s: " % (plan.verl_version, plan.profile, plan.attn)
    if plan.patch != verl_patch.PATCH_FP32:
        print(head + "nothing to patch (%d sites kept as released)" % len(plan.sites))
        return
    if check:
        if plan.changes or plan.pending:
            print(head + "NOT fully patched: %d site(s), %d file(s) to change" % (len(plan.pending), len(plan.changes)))
            for site in plan.pending:
                print("  " + site.describe())
            for change in plan.changes:
                if change.kind != "source":
                    print("  %s: %s missing or outdated" % (change.rel, change.kind))
        else:
            print(head + "fully patched (%d sites)" % len(plan.sites))
        return
    if plan.changes:
        print(
            head
            + "patched %d site(s) in %d file(s); manifest %s"
            % (len(plan.pending), len(plan.changes), plan.manifest_path)
        )
        for site in plan.pending:
            print("  " + site.describe())
    else:
        print(head + "already fully patched (%d sites)" % len(plan.sites))


def release_tables() -> Tuple[Dict[str, Dict[str, Dict[str, int]]], Dict[str, str]]:
    """(version -> patch-site table of each release folder that validates, version -> the error of each
    that does not): a bad folder makes its release unavailable, not the others."""
    good, bad = verl_releases.scan()
    return {version: release["patch_sites"] for version, release in good.items()}, bad


def main(argv: Optional[List[str]] = None) -> int:
    tables, broken = release_tables()
    args = parse_args(argv, list(tables))
    try:
        patch = profiles.rows()[args.profile]["patch"]
        plan = verl_patch.patch_tree(
            args.source, args.profile, args.attn, args.check, args.allow_unsupported, patch, tables
        )
    except verl_patch.UnsupportedVersionError as exc:
        # A release whose folder does not validate: its file and key, not "not supported".
        print("verl-patch: error: %s" % broken.get(exc.version, str(exc)), file=sys.stderr)
        return 2
    except verl_patch.VerlPatchError as exc:
        print("verl-patch: error: %s" % exc, file=sys.stderr)
        return 2
    except OSError as exc:
        print("verl-patch: error: %s" % exc, file=sys.stderr)
        return 2
    if plan.verl_version in broken:  # --allow-unsupported on a release whose folder does not validate
        plan.warnings.insert(0, broken[plan.verl_version])
    if args.json:
        data = plan.to_dict()
        data["check"] = args.check
        if args.diff:
            data["diff"] = plan.unified_diff()
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        report_text(plan, args.check)
        if args.diff:
            sys.stdout.write(plan.unified_diff())
    return 1 if args.check and (plan.changed or plan.pending) else 0


def run() -> int:
    """main(), quiet when stdout is closed early (``verl-patch ... --diff | head -1``)."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at devnull so that the flush at exit cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a tool killed by the closed pipe
    return status


if __name__ == "__main__":
    sys.exit(run())
