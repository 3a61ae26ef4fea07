"""Every rollout a composed verl configuration will run, judged as the job will resolve it.

Below compute capability 7.0 only the HF rollout runs, so every rollout of the
run must be ``hf``: the actor's (``actor_rollout_ref.rollout.name``), the
reward model's, the distillation teachers', the legacy ``reward_model``'s, and
any a later release adds. They are found by walking the configuration, not
from a list: a mapping under the key ``rollout``, or one verl builds as its
``RolloutConfig`` (``_target_``: the teachers' ``inference``), that has a
``name``. A disabled section is judged too: its switch may be an
interpolation as well, and a legacy switch turns on the new section
(``reward_model.enable`` -> ``reward.reward_model``); a name left unset
(``???``, ``null``) selects nothing, and only the actor's must be set.

What the job reads where it runs cannot be judged here: ``${oc.env:...}``
(hydra.job.env_set and Ray's runtime_env set variables only there) and
``${now:...}``. So the configuration is resolved as the job will resolve it,
with these standing for an unknown string: a rollout name that depends on one
is refused (write it literally); anything that builds configuration from one
(a key looked up, ``oc.decode``, ``oc.create``), or that calls a resolver
this judgement does not know (``hydra``, one registered by user code), is
refused wherever it is, since it may build a whole rollout section. What
resolves within the configuration itself (a reference, ``oc.select``: verl's
own teacher default is ``${oc.select:actor_rollout_ref.rollout.name}``) is
judged by what it selects.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

Key = Tuple[Union[str, int], ...]

#: The actor's rollout: the one every run has, so it must be set.
ACTOR: Key = ("actor_rollout_ref", "rollout", "name")
#: What a value read where the job runs resolves to here: a string, but which one only the job knows.
UNKNOWN = "\x00known only where the job runs\x00"
#: Resolvers whose value is read where the job runs: always a string.
READ_WHERE_IT_RUNS = ("oc.env", "now")
#: OmegaConf's resolvers whose value follows from the configuration and their first argument.
FROM_THE_CONFIGURATION = ("oc.create", "oc.decode", "oc.deprecated", "oc.select", "oc.dict.keys", "oc.dict.values")
MISSING = "???"
WHERE = "(its environment, hydra.job.env_set, Ray's runtime_env)"


@dataclass(frozen=True)
class Verdict:
    """0: every rollout runs here; 1: the configuration cannot be read; 2: refused. One line per finding."""

    status: int
    lines: Tuple[str, ...] = ()


class Unforeseeable(Exception):
    """A resolver was handed a value known only where the job runs."""


@dataclass
class Trace:
    """What resolving met that only the job knows: where a resolver was handed it, and the last key that read it."""

    handed: List[Tuple[str, str]] = field(default_factory=list)
    read_at: str = ""


def dotted(key: Key) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in key).lstrip(".")


def parts(full_key: str) -> Key:
    """``a.b[0].c`` (OmegaConf's full_key) -> ('a', 'b', 0, 'c')."""
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", full_key))


def full_key(node: Any) -> str:
    return str(node._get_full_key(key=None))


def omegaconf_resolver(name: str) -> Callable[..., Any]:
    """OmegaConf's own resolver ``name`` (``oc.dict.keys`` -> ``omegaconf.resolvers.oc.dict.keys``)."""
    from omegaconf.resolvers import oc

    resolver: Any = oc
    for attribute in name.split(".")[1:]:
        resolver = getattr(resolver, attribute)
    return resolver


def guarded(name: str, trace: Trace) -> Callable[..., Any]:
    """OmegaConf's resolver ``name``, refusing a first argument (a key, a text to parse) that holds an unknown value."""
    resolver = omegaconf_resolver(name)
    wanted = set(inspect.signature(resolver).parameters)

    def resolve(*args: Any, _parent_: Any, _node_: Any, _root_: Any) -> Any:
        if args and isinstance(args[0], str) and UNKNOWN in args[0]:
            trace.handed.append((full_key(_node_), f"hands {name} a value known only where the job runs {WHERE}"))
            raise Unforeseeable(name)
        special = {"_parent_": _parent_, "_node_": _node_, "_root_": _root_}
        return resolver(*args, **{k: v for k, v in special.items() if k in wanted})

    return resolve


def read_where_it_runs(trace: Trace) -> Callable[..., str]:
    """``oc.env`` and ``now`` as judged here: a string only the job knows."""

    def resolve(*_args: Any, _node_: Any) -> str:
        trace.read_at = full_key(_node_)
        return UNKNOWN

    return resolve


@contextlib.contextmanager
def job_resolvers(trace: Trace) -> Iterator[None]:
    """OmegaConf resolves with the resolvers above only, as the job would but for what it reads where it runs."""
    from omegaconf import OmegaConf
    from omegaconf.basecontainer import BaseContainer

    saved = BaseContainer._resolvers
    BaseContainer._resolvers = {}
    try:
        for name in READ_WHERE_IT_RUNS:
            OmegaConf.register_new_resolver(name, read_where_it_runs(trace))
        for name in FROM_THE_CONFIGURATION:
            OmegaConf.register_new_resolver(name, guarded(name, trace))
        yield
    finally:
        BaseContainer._resolvers = saved


def rollout_names(tree: Any, at: Key = ()) -> Iterator[Tuple[Key, Any]]:
    """Every rollout's name in a resolved configuration: (its key, its value)."""
    if isinstance(tree, dict):
        target = str(tree.get("_target_") or "")
        if "name" in tree and (at[-1:] == ("rollout",) or target.endswith("RolloutConfig")):
            yield at + ("name",), tree["name"]
        for key, value in tree.items():
            yield from rollout_names(value, at + (key,))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            yield from rollout_names(value, at + (index,))


def written(raw: Any, key: Key) -> Tuple[Key, Any]:
    """What the composed configuration holds on the way to ``key``: the deepest key it has, and its raw value."""
    for depth, part in enumerate(key):
        if isinstance(raw, dict) and part in raw:
            raw = raw[part]
        elif isinstance(raw, list) and isinstance(part, int) and part < len(raw):
            raw = raw[part]
        else:
            return key[:depth], raw
    return key, raw


def raw_strings(raw: Any, at: Key = ()) -> Iterator[Tuple[Key, str]]:
    """Every string the composed configuration holds, with its key."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            yield from raw_strings(value, at + (key,))
    elif isinstance(raw, list):
        for index, value in enumerate(raw):
            yield from raw_strings(value, at + (index,))
    elif isinstance(raw, str):
        yield at, raw


def name_finding(key: Key, name: Any, raw: Any, lowest: str) -> Optional[Tuple[int, str]]:
    """What is wrong with one rollout's resolved name, below 7.0 (None: it runs)."""
    if name == "hf" or (key != ACTOR and name in (None, MISSING)):
        return None
    if name in (None, MISSING):
        return 1, f"cannot read {dotted(ACTOR)} from the composed configuration: it is not set."
    if isinstance(name, str) and UNKNOWN in name:
        where, value = written(raw, key)
        return 2, (f"{dotted(where)} is '{value}', so the rollout it selects is known only where the job runs "
                   f"{WHERE}; write the rollout name literally ({dotted(key)}=hf).")
    return 2, (f"the configuration selects the rollout '{name}' at {dotted(key)}, which needs compute capability "
               f"7.0 or newer; this box's lowest is {lowest}: keep the HF rollout ({dotted(key)}=hf), "
               "which runs on Pascal.")


def calling(resolver: str, raw: Any) -> str:
    """The first key whose value calls ``resolver``."""
    call = re.compile(r"\$\{\s*" + re.escape(resolver) + r"\s*:")
    return next((dotted(key) for key, text in raw_strings(raw) if call.search(text)), "")


def culprit(exc: Exception, trace: Trace, raw: Any) -> Optional[Tuple[str, str]]:
    """Where resolving met what only the job knows, or a resolver it cannot follow, and what it does there."""
    from omegaconf.errors import UnsupportedInterpolationType

    if trace.handed:
        return trace.handed[0]
    if isinstance(exc, UnsupportedInterpolationType):
        resolver = str(exc).splitlines()[0].rsplit(" ", 1)[-1]
        return calling(resolver, raw), f"calls the resolver '{resolver}', which this check cannot follow"
    if UNKNOWN in str(exc):
        return trace.read_at, f"looks up a key known only where the job runs {WHERE}"
    return None


def unresolved(exc: Exception, trace: Trace, raw: Any, lowest: str) -> Verdict:
    """The verdict on a configuration that does not resolve as the job will."""
    found = culprit(exc, trace, raw)
    if found is None:
        key = str(getattr(exc, "full_key", None) or "the configuration")
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return Verdict(1, (f"cannot read {key} from the composed configuration: {first}",))
    where, value = written(raw, parts(found[0]))
    what = f"{dotted(where)} is '{value}', which" if where else "the configuration"
    return Verdict(2, (f"{what} {found[1]}: below compute capability 7.0 (this box's lowest is {lowest}) "
                       "it could select a rollout other than hf; write it literally.",))


def judge(cfg: Any, lowest: str) -> Verdict:
    """Every rollout of ``cfg`` (a composed, unresolved DictConfig) on a box whose lowest capability is below 7.0."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=False)
    trace = Trace()
    try:
        with job_resolvers(trace):
            tree = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # what OmegaConf raises for an interpolation, a resolver, a missing value
        return unresolved(exc, trace, raw, lowest)
    names = dict(rollout_names(tree))
    names.setdefault(ACTOR, None)
    findings = [f for f in (name_finding(k, v, raw, lowest) for k, v in names.items()) if f is not None]
    return Verdict(max((status for status, _ in findings), default=0), tuple(line for _, line in findings))
