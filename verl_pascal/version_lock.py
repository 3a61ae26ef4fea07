"""The variables the playbooks read (the version lock and the site settings), outside Ansible.

Read by the prefetch (``verl-pascal-prefetch``), the launch renderer
(``verl_pascal/launch/render.py``) and the stand-in builder, so it belongs to
none of them.

The lock is every ``*.yml``/``*.yaml`` file of ``inventory/group_vars/all/``
(versions.yml, settings.yml, ...), merged in file-name order as Ansible does.
Values may hold Jinja: ``{{ name }}`` references are rendered here, without
Ansible; anything richer (filters, method calls) is handed to Ansible's Templar
when ansible is importable, and is an error otherwise. Values are rendered
lazily, so an expression that no artifact needs never matters.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOCK_PATHS: Tuple[Path, ...] = (REPO_ROOT / "inventory" / "group_vars" / "all",)

_SIMPLE_REF = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ANY_JINJA = re.compile(r"\{\{|\{%|\{#")
_LOCK_SUFFIXES = (".yml", ".yaml", ".json")


class LockError(Exception):
    """The lock cannot be read, or a value cannot be rendered."""


def expand_lock_paths(paths: Iterable[Path]) -> List[Path]:
    """Files to read, in order: a directory stands for its YAML files, sorted."""
    files: List[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _LOCK_SUFFIXES))
        elif path.is_file():
            files.append(path)
        else:
            raise LockError(f"lock file not found: {path}")
    return files


def load_lock_file(path: Path) -> Dict[str, Any]:
    """One YAML file of variables (an empty file is an empty mapping)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise LockError(f"cannot read lock file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LockError(f"lock file {path} is not a mapping of variables")
    return data


def load_lock(paths: Sequence[Path] = DEFAULT_LOCK_PATHS) -> Dict[str, Any]:
    """All variables of the lock files; a later file overrides an earlier one."""
    merged: Dict[str, Any] = {}
    for path in expand_lock_paths(paths):
        merged.update(load_lock_file(path))
    return merged


def parse_overrides(items: Iterable[str]) -> Dict[str, str]:
    """``--var name=value`` items, like ``ansible-playbook -e name=value`` (strings)."""
    overrides: Dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise LockError(f"--var wants NAME=VALUE, got {item!r}")
        overrides[name] = value
    return overrides


def _templar_render(text: str, variables: Mapping[str, Any]) -> Any:
    """Render a full Jinja expression with Ansible's Templar (only if importable)."""
    try:
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar
    except ImportError as exc:
        raise LockError(
            f"{text!r} needs Ansible to render (only '{{{{ name }}}}' references work without it): "
            "install ansible, or set the value with --var"
        ) from exc
    try:
        from ansible.template import trust_as_template
    except ImportError:  # ansible-core < 2.19 trusts every string

        def trust_as_template(value: Any) -> Any:
            return value

    trusted = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in variables.items()}
    try:
        return Templar(loader=DataLoader(), variables=trusted).template(trust_as_template(text))
    except Exception as exc:  # Ansible raises many kinds of template errors
        raise LockError(f"cannot render {text!r}: {exc}") from exc


class Lock:
    """The merged variables with lazy rendering of their templates."""

    def __init__(self, variables: Mapping[str, Any], overrides: Optional[Mapping[str, Any]] = None,
                 use_ansible: bool = True):
        """``use_ansible`` False: never hand a value to Ansible's Templar (a value that needs it is a
        LockError). Ansible patches interpreter globals when it templates (sys.intern, in 2.19), which
        breaks torch.compile's imports later in the same process."""
        self.raw: Dict[str, Any] = dict(variables)
        self.raw.update(overrides or {})
        self._cache: Dict[str, Any] = {}
        self.use_ansible = use_ansible

    @classmethod
    def from_paths(cls, paths: Sequence[Path] = DEFAULT_LOCK_PATHS, overrides: Optional[Mapping[str, Any]] = None) -> "Lock":
        variables = load_lock(paths)
        if isinstance(variables.get("verl_releases"), str):
            # settings.yml derives it from the release folders with Ansible lookups: read
            # the folders here (the releases the verl role can install).
            from verl_pascal import verl_releases

            variables["verl_releases"] = verl_releases.sdists()
        return cls(variables, overrides)

    def __contains__(self, name: object) -> bool:
        return name in self.raw

    def names(self) -> List[str]:
        return sorted(self.raw)

    def get(self, name: str, default: Any = None) -> Any:
        """The rendered value of ``name``, or ``default`` when it is not defined."""
        if name not in self.raw:
            return default
        return self._value(name, ())

    def _value(self, name: str, stack: Tuple[str, ...]) -> Any:
        if name in stack:
            raise LockError("template loop: " + " -> ".join(stack + (name,)))
        if name not in self.raw:
            raise LockError(f"undefined variable {name!r} (referenced by {stack[-1]!r})")
        if name not in self._cache:
            self._cache[name] = self._render(self.raw[name], stack + (name,))
        return self._cache[name]

    def render(self, value: Any) -> Any:
        """Render any value (strings, and strings inside lists and mappings)."""
        return self._render(value, ())

    def _render(self, value: Any, stack: Tuple[str, ...]) -> Any:
        if isinstance(value, str):
            return self._render_str(value, stack)
        if isinstance(value, list):
            return [self._render(v, stack) for v in value]
        if isinstance(value, dict):
            return {k: self._render(v, stack) for k, v in value.items()}
        return value

    def _render_str(self, text: str, stack: Tuple[str, ...]) -> Any:
        if not _ANY_JINJA.search(text):
            return text
        whole = _SIMPLE_REF.fullmatch(text.strip())
        if whole:  # the whole value is one reference: keep the referenced type
            return self._value(whole.group(1), stack)
        rest = _SIMPLE_REF.sub("", text)
        if not _ANY_JINJA.search(rest):
            return _SIMPLE_REF.sub(lambda m: str(self._value(m.group(1), stack)), text)
        if not self.use_ansible:
            raise LockError(f"{text!r} needs Ansible to render, and this reader does not use it")
        return _templar_render(text, self.raw)
