"""The plan of a whole tree: every site and every file change, written nowhere; the
release's table checked, the compat module and the manifest added."""

from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Optional, Sequence

from .errors import RewriteError, UnsupportedVersionError, UpstreamChangedError, VerlPatchError
from .kinds import (ATTN_CHOICES, ENGINE_VERSION, GATED_KINDS, KEPT, KIND_COMPAT, PATCH_FP32, PATCH_KINDS, PATCHED,
                    PENDING, PROFILE_NAME, Releases, SiteTable)
from .model import FileChange, Plan, Site, counts_by_file
from .scan import plan_file
from .tree import (COMPAT_MODULE, NEVER_TOUCH, compat_files, find_package_dir, previous_patch, python_files, read_text,
                   read_verl_version)


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
