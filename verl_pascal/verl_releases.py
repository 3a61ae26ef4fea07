"""The verl release folders (releases/verl-X/ beside this file), for Python.

Each folder holds everything release-specific: release.yml (sdist name and
sha256, rollout mode, minimum torch, Hydra overrides, key renames, the
modules checked before activation, the patch-site table)
and the dependency locks. Ansible reads the same folders (the verl role and
the site settings); this module is how the package's commands and the tests
read them. Adding a release is adding a folder.

Every read goes through ``validate``: a release.yml that is not YAML, is
empty, lacks a key or holds a value of the wrong type raises one
``ReleaseError`` whose one-line message names the file and the key. Only that
release is unavailable: ``scan``, ``available``, ``patch_tables`` and
``sdists`` leave it out and serve the others.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from verl_pascal.module_utils.verl_patch import KINDS

FOLDER = Path(__file__).resolve().parent / "releases"

Release = Dict[str, Any]
#: What to do about a bad release.yml, the tail of every ReleaseError.
FIX = 'fix the file (docs/architecture.md, "A verl release"); until then this release is unavailable'
#: The keys every release.yml must have: the roles fetch the sdist by name and check its sha256
#: (the prefetch too), the patcher needs the site table, and the folder must be the release it says.
REQUIRED = ("version", "sdist", "sha256", "patch_sites")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# <project>-<version>.tar.gz or .zip, a plain file name (as the prefetch reads it).
_SDIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*?-[0-9][A-Za-z0-9.+!_]*\.(?:tar\.gz|zip)")


class ReleaseError(ValueError):
    """A release.yml that cannot be used; the message, one line, names the file and the key."""


def folder(version: str) -> Path:
    return FOLDER / f"verl-{version}"


def release_file(version: str) -> Path:
    return folder(version) / "release.yml"


# --- What each key must hold: (what the message asks for, the test) -----------------------------


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(_is_str(item) for item in value)


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(_is_str(k) and _is_str(v) for k, v in value.items())


def _is_overrides_map(value: Any) -> bool:
    return isinstance(value, dict) and all(_is_str(k) and _is_strings(v) for k, v in value.items())


#: The keys of a release's ``sft`` table (the launch script's --sft): three names, then overrides.
SFT_NAMES = ("module", "config", "model_key")


def _is_sft(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) <= {*SFT_NAMES, "overrides", "profile_overrides"}
            and all(_is_str(value.get(name)) for name in SFT_NAMES)
            and _is_strings(value.get("overrides", [])) and _is_overrides_map(value.get("profile_overrides", {})))


#: A ``patch_lines`` entry: "FILE:LINE KIND", one of the release's sites by line.
_PATCH_LINE = re.compile(r"(verl/\S+\.py):([1-9][0-9]*) ([a-z0-9_]+)")


def patch_line(entry: Any) -> Optional[Tuple[str, int, str]]:
    """A ``patch_lines`` entry as (file, line, kind); None when it is not one."""
    match = _PATCH_LINE.fullmatch(entry) if isinstance(entry, str) else None
    if match is None or match.group(3) not in KINDS:
        return None
    return match.group(1), int(match.group(2)), match.group(3)


def patch_lines(release: Mapping[str, Any]) -> List[Tuple[str, int, str]]:
    """A validated release's ``patch_lines``, as (file, line, kind)."""
    return [line for line in map(patch_line, release.get("patch_lines", [])) if line is not None]


def _is_patch_lines(value: Any) -> bool:
    return isinstance(value, list) and all(patch_line(entry) is not None for entry in value)


def _is_summary(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"status", "adds"} and all(map(_is_str, value.values()))


def _is_gib(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0)


Check = Tuple[str, Callable[[Any], bool]]

#: Keys a release may have, checked where present (the roles, the launch template and the
#: host-memory estimate read them).
OPTIONAL: Dict[str, Check] = {
    "rollout_mode": ("sync or async", lambda v: v in ("sync", "async")),
    "hf_rollout": ("verl or verl_pascal (whose HF rollout)", lambda v: v in ("verl", "verl_pascal")),
    "environment": ("a mapping {VARIABLE: value}, both strings", _is_str_map),
    "min_torch": ('a quoted version string, e.g. "2.6", or null', lambda v: v is None or _is_str(v)),
    "check_imports": ("a list of module names", _is_strings),
    "key_renames": ("a mapping {old prefix: new prefix}", _is_str_map),
    "hydra_overrides": ("a list of Hydra overrides (strings)", _is_strings),
    "profile_overrides": ("a mapping {patch kind: [Hydra overrides]}", _is_overrides_map),
    "host_processes": ("a mapping {process: Hydra key}", _is_str_map),
    "host_memory_gib": ("a positive number of GiB, or null", _is_gib),
    "summary": ("a mapping with status and adds (text for README's release table)", _is_summary),
    "patch_lines": ('a list of "FILE:LINE KIND" strings, e.g. "verl/utils/model.py:649 attn_implementation"',
                    _is_patch_lines),
    "sft": ("a mapping with module, config and model_key (strings), overrides (a list of Hydra overrides) "
            "and profile_overrides ({patch kind: [Hydra overrides]})", _is_sft),
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problem(path: Path, key: str, wanted: str, data: Mapping[str, Any]) -> ReleaseError:
    found = "is missing" if key not in data else "is %s" % _shown(data[key])
    return ReleaseError(f"{path}: {key} {found} (wanted: {wanted}); {FIX}")


def _sites_problem(sites: Mapping[Any, Any]) -> Optional[str]:
    """What is wrong in a patch_sites mapping ({file: {kind: minimum count}}), None if nothing."""
    for rel, kinds in sites.items():
        if not (isinstance(rel, str) and rel.endswith(".py")):
            return f"patch_sites has the key {_shown(rel)} (wanted: a .py file of the package, e.g. verl/utils/model.py)"
        if not isinstance(kinds, dict) or not kinds:
            return f"patch_sites.{rel} is {_shown(kinds)} (wanted: a mapping {{kind: minimum count}})"
        for kind, count in kinds.items():
            if kind not in KINDS:
                return f"patch_sites.{rel} has the kind {_shown(kind)} (wanted one of: {', '.join(KINDS)})"
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                return f"patch_sites.{rel}.{kind} is {_shown(count)} (wanted: a count, 1 or more)"
    return None


def _check_required(data: Mapping[str, Any], path: Path, version: str) -> None:
    if data.get("version") != version:
        raise _problem(path, "version", f'the string "{version}", the version its folder is named for (quoted)', data)
    if not (isinstance(data.get("sdist"), str) and _SDIST.fullmatch(data["sdist"])):
        raise _problem(path, "sdist", f"the sdist's file name on the package index, e.g. verl-{version}.tar.gz", data)
    if not (isinstance(data.get("sha256"), str) and _SHA256.fullmatch(data["sha256"])):
        raise _problem(path, "sha256", "the sdist's sha256, 64 lowercase hex digits, as the index's simple API "
                       "lists it beside the file", data)
    if not isinstance(data.get("patch_sites"), dict):
        raise _problem(path, "patch_sites", "a mapping {file: {kind: minimum count}}", data)
    sites = _sites_problem(data["patch_sites"])
    if sites is not None:
        raise ReleaseError(f"{path}: {sites}; {FIX}")


def validate(data: Any, path: Path, version: str) -> Release:
    """``data``, parsed from ``path`` (the release.yml of ``version``), if every key holds what its
    readers need; ReleaseError naming the file and the first bad key otherwise."""
    if data is None:
        raise ReleaseError(f"{path}: is empty (wanted: a mapping with at least {', '.join(REQUIRED)}); {FIX}")
    if not isinstance(data, dict):
        raise ReleaseError(f"{path}: is a {type(data).__name__}, not a mapping of keys "
                           f"({', '.join(REQUIRED)}, ...); {FIX}")
    _check_required(data, path, version)
    for key, (wanted, test) in OPTIONAL.items():
        if key in data and not test(data[key]):
            raise _problem(path, key, wanted, data)
    for rel, line, kind in patch_lines(data):
        if kind not in data["patch_sites"].get(rel, {}):
            raise ReleaseError(f"{path}: patch_lines has {rel}:{line} {kind}, a site patch_sites does not list "
                               f"(wanted: patch_sites.{rel}.{kind}); {FIX}")
    return dict(data)


def _yaml_problem(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return " ".join(f"{where}{problem}".split())


def parse(path: Path) -> Any:
    """The YAML in ``path``; FileNotFoundError when it does not exist, ReleaseError when it cannot be read."""
    import yaml  # PyYAML: the controller's dependency, and verl's on the boxes

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeError) as exc:
        raise ReleaseError(f"{path}: cannot be read ({' '.join(str(exc).split())}); {FIX}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ReleaseError(f"{path}: is not valid YAML ({_yaml_problem(exc)}); {FIX}") from None


def read(version: str) -> Release:
    """release.yml of ``version``, validated; FileNotFoundError when there is no folder, ReleaseError
    (naming the file and the key) when its file cannot be used."""
    path = release_file(version)
    return validate(parse(path), path, version)


def _version_key(version: str) -> List[Tuple[int, str]]:
    """Numeric parts by number; any other part (a folder named oddly) sorts, never raises."""
    return [(int(x), "") if x.isdigit() else (-1, x) for x in version.replace(".post", ".").split(".")]


def versions() -> List[str]:
    """Every release with a folder, oldest first (whether or not its release.yml validates)."""
    found = [p.parent.name[len("verl-"):] for p in FOLDER.glob("verl-*/release.yml")]
    return sorted(found, key=_version_key)


def scan() -> Tuple[Dict[str, Release], Dict[str, str]]:
    """({version: release} of every folder that validates, {version: its one-line error} of the others)."""
    good: Dict[str, Release] = {}
    bad: Dict[str, str] = {}
    for version in versions():
        try:
            good[version] = read(version)
        except ReleaseError as exc:
            bad[version] = str(exc)
    return good, bad


def available(needed: Sequence[str] = ()) -> Dict[str, Release]:
    """Every release whose folder validates; ReleaseError when one of ``needed`` has a folder that does not."""
    good, bad = scan()
    for version in needed:
        if version in bad:
            raise ReleaseError(bad[version])
    return good


def patch_tables() -> Dict[str, Dict[str, Dict[str, int]]]:
    """version -> the sites the patcher must find in it (releases whose folder validates)."""
    return {version: release["patch_sites"] for version, release in available().items()}


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def sdists(warn: Callable[[str], None] = _warn) -> Dict[str, Dict[str, str]]:
    """version -> {sdist, sha256} of every release the verl role can install (it has a
    dependency lock): what the prefetch puts in a mirror. A folder that does not validate is
    left out, and ``warn`` is told its error (on stderr by default)."""
    good, bad = scan()
    for problem in bad.values():
        warn(problem)
    return {v: {"sdist": r["sdist"], "sha256": r["sha256"]} for v, r in good.items() if locks(v)}


def locks(version: str) -> List[Path]:
    """The dependency locks of ``version`` (py<X.Y>-torch<A.B>.txt)."""
    return sorted(folder(version).glob("py*-torch*.txt"))


#: README's "rollout on Pascal" column, by (hf_rollout, rollout_mode).
ROLLOUTS = {
    ("verl", "sync"): "verl's own HF rollout",
    ("verl_pascal", "sync"): "the project's, `verl_pascal.rollout`",
    ("verl_pascal", "async"): "the project's server, `verl_pascal.rollout.replica`",
}
#: The markers around the generated table in README.md.
TABLE_BEGIN = "<!-- release table: generated from verl_pascal/releases/ by `python -m verl_pascal.verl_releases --table` -->"
TABLE_END = "<!-- end of the release table -->"


def table(default: str) -> str:
    """README's release table: every folder, newest first, the default release marked; from each
    folder's ``summary``, ``hf_rollout`` and ``rollout_mode``."""
    lines = [TABLE_BEGIN,
             "| verl | status | rollout on Pascal (`rollout.name=hf`) | what the project adds |",
             "|---|---|---|---|"]
    good, bad = scan()
    for version in reversed(versions()):
        if version in bad:
            raise ReleaseError(bad[version])
        release = good[version]
        summary = release.get("summary") or {"status": "", "adds": ""}
        rollout = ROLLOUTS.get((release.get("hf_rollout", "verl"), release.get("rollout_mode", "sync")), "") \
            if locks(version) else ""
        name = f"{version} (default)" if version == default else version
        lines.append(f"| {name} | {summary['status']} | {rollout} | {summary['adds']} |")
    return "\n".join([*lines, TABLE_END])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``--table``: print README's release table (the default release read from the version lock)."""
    import argparse

    import yaml

    parser = argparse.ArgumentParser(prog="python -m verl_pascal.verl_releases", description=main.__doc__)
    parser.add_argument("--table", action="store_true", required=True)
    parser.add_argument("--versions-file", type=Path,
                        default=FOLDER.parent.parent / "inventory" / "group_vars" / "all" / "versions.yml")
    args = parser.parse_args(argv)
    try:
        default = str(yaml.safe_load(args.versions_file.read_text(encoding="utf-8"))["verl_version"])
        print(table(default))
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        print(f"verl_releases: cannot read verl_version from {args.versions_file}: {exc}", file=sys.stderr)
        return 2
    except ReleaseError as exc:
        print(f"verl_releases: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
