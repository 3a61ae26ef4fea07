"""The verl tree on disk: where its package is, its release, the files that may hold
sites, reading them, the marker of an earlier patch and the compat module it installs."""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import re
from typing import Dict, List, Optional, Tuple

from .errors import BadSourceError, DamagedSourceError, VerlPatchError
from .kinds import ATTN_CHOICES, PROFILE_NAME
from .names import str_const
from .source import parse

PACKAGE = "verl"
COMPAT_DIR = "_pascal_compat"
COMPAT_MODULE = "verl._pascal_compat.bert_padding"
COMPAT_SOURCE_FILES = ("bert_padding.py",)
MANIFEST_NAME = ".verl_pascal_patch.json"
NEVER_TOUCH = ("verl/utils/torch_dtypes.py",)


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


def root_rel(package_dir: str, path: str) -> str:
    """``path`` relative to the directory that holds the package ("verl/..."), like every Plan path."""
    return os.path.relpath(path, os.path.dirname(package_dir)).replace(os.sep, "/")


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
    """A file of the verl_pascal_compat package, found beside this package (a checkout or AnsiballZ)."""
    parent = (__package__ or "").rpartition(".")[0]  # module_utils, as Ansible or verl_pascal names it
    package = (parent + "." if parent else "") + "verl_pascal_compat"
    data: Optional[bytes] = None
    try:
        data = pkgutil.get_data(package, name)
    except (ImportError, OSError):
        data = None
    if data is None:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "verl_pascal_compat", name)
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
