"""Read what a role manages on a box, all of it in one call (library/box_state.py).

A re-run of a provisioned box spends its time on round trips: one per task,
most of which only look. A role asks this module once for everything it
would look at, and runs a changing task only for what is not as wanted: its
``when:`` names an entry of ``differs``. The rules for "as wanted" are those
of the module the changing task runs, so that a task skipped here would have
reported no change:

- ``file``: a regular file with exactly ``content`` (the template or copy
  task's rendered text) or ``sha256`` (a copied binary), and ``owner``,
  ``group``, ``mode`` when given.
- ``directory``: a directory (not a link to one), with ``owner``, ``group``, ``mode``.
- ``link``: a symbolic link whose target is ``src`` as written.
- ``absent``: nothing at the path, not even a dangling link.
- ``tree``: what ``ansible.builtin.file`` with ``recurse: true`` (and its
  default ``follow: true``) sets: the path and every entry below it, links
  themselves included, and each link's target one level deep (descending into
  it when it is a directory), owned by ``owner`` (and ``group``).

Besides files: ``read`` (small files' text), ``sha256`` (files' sha256),
``glob``, ``users`` (the passwd entries), ``digests`` (one sha256 over a tree's files, names and link
targets: a tree with any file changed, added or removed gives another),
``commands`` (read-only commands, as a given user), ``python`` (the
environment probe, module_utils/env_probe.py, run by an env's own Python) and
``links`` (what the link_tree module would change, module_utils/linktree.py).
Reads only; standard library only.
"""

from __future__ import annotations

import fnmatch
import glob as globmod
import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple

try:  # shipped by Ansible as ansible.module_utils.linktree; beside this file for the tests
    from ansible.module_utils import linktree  # type: ignore[import-not-found]
except ImportError:
    from . import linktree  # type: ignore[no-redef]

STATES = ("file", "directory", "link", "absent", "tree")
#: Text read back per file at most (markers, stamps, version files, headers).
READ_LIMIT = 1024 * 1024
COMMAND_TIMEOUT = 120


class BoxStateError(Exception):
    """A request this module cannot answer; the message names the entry."""


@dataclass(frozen=True)
class Want:
    """One file as a changing task leaves it."""

    name: str
    path: str
    state: str
    content: Optional[str] = None
    sha256: Optional[str] = None
    src: Optional[str] = None
    owner: Optional[str] = None
    group: Optional[str] = None
    mode: Optional[str] = None


def want_from(name: str, spec: Mapping[str, Any]) -> Want:
    """A files entry, checked: a known state, and what that state needs."""
    known = {"path", "state", "content", "sha256", "src", "owner", "group", "mode"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise BoxStateError(f"files.{name}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    path, state = spec.get("path"), spec.get("state", "file")
    if not isinstance(path, str) or not path.startswith("/"):
        raise BoxStateError(f"files.{name}: path must be an absolute path, not {path!r}")
    if state not in STATES:
        raise BoxStateError(f"files.{name}: state must be one of {', '.join(STATES)}, not {state!r}")
    if state == "file" and (spec.get("content") is None) == (spec.get("sha256") is None):
        raise BoxStateError(f"files.{name}: a file needs its content or its sha256 (one of them)")
    if state == "link" and not spec.get("src"):
        raise BoxStateError(f"files.{name}: a link needs its src")
    if state == "tree" and not spec.get("owner"):
        raise BoxStateError(f"files.{name}: a tree needs its owner")
    mode = spec.get("mode")
    if mode is not None and not (isinstance(mode, str) and mode.isdigit() and set(mode) <= set("01234567")):
        raise BoxStateError(f"files.{name}: mode must be an octal string such as '0644', not {mode!r}")
    return Want(name=name, path=path, state=state, content=spec.get("content"), sha256=spec.get("sha256"), src=spec.get("src"),
                owner=spec.get("owner"), group=spec.get("group"), mode=mode)


def _lstat(path: str) -> Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def uid_of(owner: str) -> Optional[int]:
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        return int(owner) if owner.isdigit() else None


def gid_of(group: str) -> Optional[int]:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return int(group) if group.isdigit() else None


def attributes_reason(want: Want, st: os.stat_result) -> Optional[str]:
    """Why the owner, group or mode are not the wanted ones; None when they are."""
    if want.owner is not None:
        uid = uid_of(want.owner)
        if uid is None:
            return f"its owner {want.owner} does not exist yet"
        if st.st_uid != uid:
            return f"it is owned by uid {st.st_uid}, not {want.owner}"
    if want.group is not None:
        gid = gid_of(want.group)
        if gid is None:
            return f"its group {want.group} does not exist yet"
        if st.st_gid != gid:
            return f"its group is gid {st.st_gid}, not {want.group}"
    if want.mode is not None and stat.S_IMODE(st.st_mode) != int(want.mode, 8):
        return f"its mode is {stat.S_IMODE(st.st_mode):04o}, not {want.mode}"
    return None


def _content_differs(path: str, content: str) -> bool:
    wanted = content.encode("utf-8")
    if os.path.getsize(path) != len(wanted):
        return True
    with open(path, "rb") as f:
        return f.read() != wanted


def file_reason(want: Want) -> Optional[str]:
    """Why want.path is not as the changing task would leave it; None when it is."""
    st = _lstat(want.path)
    if want.state == "absent":
        return None if st is None else "it exists"
    if want.state == "tree":
        return tree_reason(want.path, want.owner or "", want.group)
    if st is None:
        return "it is missing"
    if want.state == "link":
        if not stat.S_ISLNK(st.st_mode):
            return "it is not a symbolic link"
        target = os.readlink(want.path)
        return None if target == want.src else f"it points at {target}, not {want.src}"
    if want.state == "directory" and not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if want.state == "file":
        if not stat.S_ISREG(st.st_mode):
            return "it is not a regular file"
        if want.content is not None and _content_differs(want.path, want.content):
            return "its content differs"
        if want.sha256 is not None and file_sha256(want.path) != want.sha256:
            return "its sha256 differs"
    return attributes_reason(want, st)


def file_sha256(path: str) -> Optional[str]:
    """A file's sha256, or None when there is no regular file there."""
    if not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_ids(top: str) -> Iterator[Tuple[str, int, int]]:
    """(path, uid, gid) of every path ``file`` with ``recurse: true, follow: true`` sets attributes on:
    top, every entry below it (links themselves), and each link's target one level deep, descending
    into it when it is a directory. One lstat per entry (os.scandir): a conda env is 10^5 of them."""
    st = os.lstat(top)
    yield top, st.st_uid, st.st_gid
    pending, seen = [top], set()
    while pending:
        root = pending.pop()
        real = os.path.realpath(root)
        # A directory a link leads back into (a venv's lib64 -> lib) was walked with its tree already.
        if any(real == done or real.startswith(done.rstrip("/") + "/") for done in seen):
            continue
        seen.add(real)
        dirs = [root]
        while dirs:
            with os.scandir(dirs.pop()) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed while walking
                    yield entry.path, st.st_uid, st.st_gid
                    if entry.is_symlink():
                        yield from _link_target(entry.path, pending)
                    elif entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.path)


def _link_target(link: str, pending: list) -> Iterator[Tuple[str, int, int]]:
    """The target ``file`` follows one level from a link in the tree (joined to the link's directory)."""
    target = os.path.join(os.path.dirname(link), os.readlink(link))
    if os.path.exists(target):
        if os.path.isdir(target):
            pending.append(target)
        st = os.lstat(target)
        yield target, st.st_uid, st.st_gid


def tree_reason(top: str, owner: str, group: Optional[str]) -> Optional[str]:
    """The first path of the tree not owned by owner (and group), as a reason; None when all are."""
    uid = uid_of(owner)
    gid = gid_of(group) if group is not None else None
    if uid is None or (group is not None and gid is None):
        return f"its owner {owner}{':' + group if group else ''} does not exist yet"
    if not os.path.lexists(top):
        return "it is missing"
    if not os.path.isdir(top):
        return "it is not a directory"
    for path, found_uid, found_gid in tree_ids(top):
        if found_uid != uid or (gid is not None and found_gid != gid):
            return f"{path} is owned by {found_uid}:{found_gid}, not {owner}{':' + group if group else ''}"
    return None


def read_text(path: str) -> Optional[str]:
    """A small file's text, or None when there is none (or it is not a readable file)."""
    try:
        with open(path, "rb") as f:
            data = f.read(READ_LIMIT + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return None
    if len(data) > READ_LIMIT:
        raise BoxStateError(f"{path} is larger than {READ_LIMIT} bytes: read it another way")
    return data.decode("utf-8", errors="replace")


def tree_digest(top: str, exclude: Sequence[str] = ()) -> Optional[str]:
    """sha256 over every file's relative path and content (a link's target) below top; None without top.
    Names matching an ``exclude`` pattern (files and directories) are left out."""
    if not os.path.isdir(top):
        return None
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not _excluded(d, exclude))
        for name in sorted(f for f in filenames if not _excluded(f, exclude)):
            path = os.path.join(dirpath, name)
            digest.update(os.path.relpath(path, top).encode("utf-8", "surrogateescape") + b"\0")
            digest.update(_file_digest(path) + b"\0")
        for name in dirnames:  # links to directories are not walked: their target is what they hold
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                digest.update(os.path.relpath(path, top).encode("utf-8", "surrogateescape") + b"\0")
                digest.update(_file_digest(path) + b"\0")
    return digest.hexdigest()


def _excluded(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _file_digest(path: str) -> bytes:
    if os.path.islink(path):
        return b"link:" + os.readlink(path).encode("utf-8", "surrogateescape")
    return (file_sha256(path) or "").encode("ascii")


def user_entry(name: str) -> Optional[Dict[str, Any]]:
    """The passwd entry of name (with its primary group's name), or None."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        group = grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:
        group = str(pw.pw_gid)
    return {"uid": pw.pw_uid, "gid": pw.pw_gid, "group": group, "home": pw.pw_dir, "shell": pw.pw_shell,
            "home_exists": os.path.exists(pw.pw_dir)}


def _as_user(user: Optional[str]) -> Tuple[Optional[Callable[[], None]], Dict[str, str]]:
    """preexec_fn and environment of a command run as user (None: as this process's user)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    if not user:
        env["HOME"] = os.environ.get("HOME", "/root")
        return None, env
    entry = user_entry(user)
    if entry is None:
        raise BoxStateError(f"user {user} does not exist")
    env.update(HOME=entry["home"], USER=user, LOGNAME=user)

    def drop() -> None:
        os.initgroups(user, entry["gid"])
        os.setgid(entry["gid"])
        os.setuid(entry["uid"])

    return (drop if os.getuid() != entry["uid"] else None), env


def run_command(argv: Sequence[str], user: Optional[str] = None, timeout: int = COMMAND_TIMEOUT) -> Dict[str, Any]:
    """rc, stdout and stderr of a read-only command (rc None: it could not start, stderr says why)."""
    preexec, env = _as_user(user)
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", env=env, cwd="/",
                              preexec_fn=preexec, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"rc": None, "stdout": "", "stderr": str(exc)}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def python_probe(spec: Mapping[str, Any], source: str) -> Dict[str, Any]:
    """The env probe's answer for one env (``error`` and no other key when its Python does not answer)."""
    python = spec.get("python")
    if not isinstance(python, str) or not python:
        raise BoxStateError("python: each entry needs the env's python")
    if not os.path.exists(python):
        return {"error": f"{python} does not exist"}
    if spec.get("user") and user_entry(spec["user"]) is None:
        return {"error": f"user {spec['user']} does not exist"}
    request = {k: list(spec.get(k) or []) for k in ("versions", "pins", "intact", "editable")}
    done = run_command([python, "-B", "-c", source, json.dumps(request)], spec.get("user"))
    if done["rc"] != 0:
        return {"error": f"{python} did not answer (exit {done['rc']}): {done['stderr'].strip()[-800:]}"}
    try:
        answer = json.loads(done["stdout"].strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"{python} printed no answer: {done['stdout'][-300:]!r}"}
    return dict(answer)


def link_plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """What the link_tree module (state present) would change: {actions: [...]}, or {error} when it would refuse."""
    try:
        actions = linktree.plan(linktree.PRESENT, spec["src"], spec["dest"],
                                {str(k): str(v) for k, v in dict(spec["dirs"]).items()})
    except (linktree.LinkTreeError, OSError) as exc:
        return {"error": str(exc)}
    return {"actions": [a.describe() for a in actions]}


def inspect_box(request: Mapping[str, Any], probe_source: Callable[[], str]) -> Dict[str, Any]:
    """Everything the request asks about; see the module's docstring. probe_source gives
    module_utils/env_probe.py's source, which an env's Python runs with ``-c``."""
    wants = [want_from(str(n), spec) for n, spec in (request.get("files") or {}).items()]
    why = {w.name: r for w in wants for r in [file_reason(w)] if r is not None}
    pythons = request.get("python") or {}
    src = probe_source() if pythons else ""
    return {
        "differs": sorted(why),
        "why": why,
        "read": {str(n): read_text(p) for n, p in (request.get("read") or {}).items()},
        "glob": {str(n): sorted(globmod.glob(p)) for n, p in (request.get("glob") or {}).items()},
        "users": {str(n): user_entry(str(n)) for n in (request.get("users") or [])},
        "sha256": {str(n): file_sha256(p) for n, p in (request.get("sha256") or {}).items()},
        "digests": {str(n): tree_digest(d["path"], d.get("exclude") or ())
                    for n, d in (request.get("digests") or {}).items()},
        "commands": {str(n): run_command(c["argv"], c.get("user"), int(c.get("timeout") or COMMAND_TIMEOUT))
                     for n, c in (request.get("commands") or {}).items()},
        "python": {str(n): python_probe(spec, src) for n, spec in pythons.items()},
        "links": {str(n): link_plan(spec) for n, spec in (request.get("links") or {}).items()},
    }
