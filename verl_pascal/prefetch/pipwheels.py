"""The pip hook: wheels resolved by pip itself, laid out as a PEP 503 index.

``pip download --dest TMP --only-binary=:all: --python-version X.Y
--platform ...`` resolves the requirement files for the target environment
(not the controller's); each file it saves moves to
``<mirror>/simple/<normalized project>/``, with an ``index.html`` per project
(links carry ``#sha256=``) and a root ``simple/index.html``. Hosts then install
with ``pip install --no-index --find-links`` or ``--index-url
<mirror>/simple/``. Files already in the mirror are linked into pip's
destination first, so pip does not download them again.

A complete lock (``--pip-lock``: exact pins of every dependency, like the verl
role's ``verl_pascal/releases/*``) is downloaded with ``--no-deps`` and
without ``--only-binary``: wheels for the target where there are any, the
sdist of a project that publishes none (``antlr4-python3-runtime``). pip
prepares an sdist's metadata (runs its setup.py) once it has it, so every pin
of such a lock must carry ``--hash=sha256:...``: ``check_lock`` refuses a lock
with a pin without one before pip starts, and pip runs with
``--require-hashes``, which checks each file before it opens it.

``find-links.html`` at the mirror's top is one flat page linking every file
under simple/: ``pip install --no-index --find-links
http://mirror-host:8080/find-links.html`` installs from the mirror and from
nothing else, from any static HTTP server.

(Sdists the lock pins by name and sha256, ``verl_releases``, do not go
through pip: ``sdists`` finds them on the index and the ``Fetcher`` checks
them before anything opens them.)
"""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from .artifacts import Artifact
from .fetch import sha256_file

SIMPLE = "simple"
FIND_LINKS = "find-links.html"
_DOWNLOADING = re.compile(r"(?:Downloading|Processing|Collecting)\s+(\S+)")
_REUSED = re.compile(r"File was already downloaded\s+(\S+)")
_DIST_SUFFIXES = (".whl", ".tar.gz", ".zip")
_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's own (pip/_internal/req/req_file.py)
_SHA256_VALUE = re.compile(r"sha256:[0-9a-fA-F]{64}")
_ADDS_PINS = ("-r", "--requirement", "-e", "--editable")  # options that bring requirements this file lacks
LOCK_ADVICE = "write it with verl-pascal-pip-lock, or pip-compile --generate-hashes"


class PipLockError(Exception):
    """A lock given to --pip-lock that pip must not be given."""


def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    """The normalized project of a wheel (``name-ver-...whl``) or sdist (``name-ver.tar.gz``)."""
    if filename.endswith(".whl"):
        return normalize(filename.split("-")[0])
    stem = filename[: -len(".tar.gz")] if filename.endswith(".tar.gz") else filename.rsplit(".", 1)[0]
    return normalize(stem.rsplit("-", 1)[0])


def default_platforms(glibc_minor: int = 31, arch: str = "x86_64") -> List[str]:
    """Every manylinux tag a glibc 2.<minor> box runs (Debian 11, Ubuntu 20.04: 2.31), plus linux_<arch>.

    pip expands only the legacy manylinux2014/2010 aliases itself, so the
    PEP 600 tags are listed here; ``linux_x86_64`` is the tag of PyTorch's own
    index (``torch-2.6.0+cu118-cp310-cp310-linux_x86_64.whl``).
    """
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 4, -1)]
    return tags + [f"manylinux2014_{arch}", f"linux_{arch}"]


@dataclass
class PipOptions:
    requirements: List[Path]
    locks: List[Path] = field(default_factory=list)  # complete locks: --no-deps, sdists allowed
    python_version: Optional[str] = None  # "3.10"
    platforms: List[str] = field(default_factory=default_platforms)
    index_url: Optional[str] = None  # None: pip's own configuration
    extra_index_urls: List[str] = field(default_factory=list)
    find_links: List[str] = field(default_factory=list)
    extra_args: List[str] = field(default_factory=list)
    progress: bool = True
    python: str = sys.executable


def pip_command(opts: PipOptions, dest: Path, lock: Optional[Path] = None) -> List[str]:
    """``pip download`` of opts.requirements (wheels only), or of one complete ``lock`` (``--no-deps``).

    Each lock is resolved on its own: two locks may pin different versions of one project.
    """
    cmd = [opts.python, "-m", "pip", "download", "--dest", str(dest),
           *(["--no-deps", "--require-hashes"] if lock else ["--only-binary=:all:"]),
           "--progress-bar", "on" if opts.progress else "off", "--disable-pip-version-check"]
    if opts.python_version:
        cmd += ["--python-version", opts.python_version]
    for platform in opts.platforms:
        cmd += ["--platform", platform]
    cmd += index_options(opts)
    for req in [lock] if lock else opts.requirements:
        cmd += ["-r", str(req)]
    return cmd + list(opts.extra_args)


def logical_lines(text: str) -> Iterator[Tuple[int, str]]:
    """A requirements file as pip reads it (its ``join_lines`` and ``ignore_comments``): (number of the
    first line, text), with the lines a trailing backslash continues joined and comments dropped."""
    start = 0  # the first line of a line a backslash continues
    parts: List[str] = []  # its pieces
    for number, line in enumerate(text.splitlines(), 1):
        comment = bool(_COMMENT.match(line))
        if line.endswith("\\") and not comment:
            start = start if parts else number
            parts.append(line.strip("\\"))
            continue
        first, joined = (start, "".join(parts) + (" " + line if comment else line)) if parts else (number, line)
        parts = []
        yield from _uncommented(first, joined)
    yield from _uncommented(start, "".join(parts))


def _uncommented(number: int, line: str) -> Iterator[Tuple[int, str]]:
    stripped = _COMMENT.sub("", line).strip()
    if stripped:
        yield number, stripped


def has_sha256(options: Sequence[str]) -> bool:
    """Whether pip's per-requirement options carry a ``--hash=sha256:<64 hex>`` (or ``--hash sha256:...``)."""
    for index, token in enumerate(options):
        value = token[len("--hash="):] if token.startswith("--hash=") else (
            options[index + 1] if token == "--hash" and index + 1 < len(options) else "")
        if _SHA256_VALUE.fullmatch(value):
            return True
    return False


def unhashed_pin(text: str) -> Optional[Tuple[int, str]]:
    """(line number, requirement) of the first pin pip would take without a sha256 to check, or None.

    As pip splits a line: the requirement runs up to the first word that starts with ``-``. A line of
    options that brings in requirements (``-r FILE``, ``-e PATH``) counts as such a pin.
    """
    for number, line in logical_lines(text):
        words = line.split()
        if words[0].startswith("-"):
            if any(words[0] == opt or words[0].startswith(opt + ("=" if opt.startswith("--") else ""))
                   for opt in _ADDS_PINS):
                return number, line
            continue
        cut = next((i for i, word in enumerate(words) if word.startswith("-")), len(words))
        if not has_sha256(words[cut:]):
            return number, " ".join(words[:cut])
    return None


def check_lock(lock: Path) -> None:
    """PipLockError (one line: the file, the first pin without a sha256, what to do) unless every pin has one."""
    try:
        text = lock.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PipLockError(f"cannot read the --pip-lock file {lock}: {getattr(exc, 'strerror', None) or exc}") from exc
    found = unhashed_pin(text)
    if found:
        number, requirement = found
        raise PipLockError(f"{lock}: line {number}: {requirement} has no --hash=sha256:...; --pip-lock takes only "
                           f"a lock whose every pin carries the sha256 of its files (pip would otherwise run an "
                           f"sdist's setup.py unchecked): {LOCK_ADVICE}")


def index_options(opts: PipOptions) -> List[str]:
    cmd: List[str] = []
    if opts.index_url:
        cmd += ["--index-url", opts.index_url]
    for url in opts.extra_index_urls:
        cmd += ["--extra-index-url", url]
    for link in opts.find_links:
        cmd += ["--find-links", link]
    return cmd


def source_urls(output: str) -> Dict[str, str]:
    """File name -> where pip took it from, read from pip's log (best effort)."""
    urls: Dict[str, str] = {}
    for match in _DOWNLOADING.finditer(output):
        where = match.group(1)
        name = os.path.basename(where.split("#", 1)[0])
        if name.endswith(_DIST_SUFFIXES) and ("/" in where):
            urls[name] = where if "://" in where else Path(where).as_uri()
    return urls


def existing_dists(mirror: Path) -> Dict[str, Path]:
    """File name -> path of every distribution already under simple/."""
    root = mirror / SIMPLE
    if not root.is_dir():
        return {}
    return {p.name: p for p in root.glob("*/*") if p.name.endswith(_DIST_SUFFIXES)}


def seed(dest: Path, dists: Dict[str, Path]) -> None:
    """Hard-link (or copy) the mirror's files into pip's destination: pip reuses them."""
    for name, path in dists.items():
        try:
            os.link(path, dest / name)
        except OSError:
            shutil.copy2(path, dest / name)


def run_pip(cmd: Sequence[str], echo: Callable[[str], None]) -> Tuple[int, str]:
    """Run pip, echoing its lines; returns (exit code, whole output). Ctrl-C stops pip too."""
    lines: List[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.append(line)
                echo(line.rstrip("\n"))
        except KeyboardInterrupt:
            stop(proc)
            raise
    return proc.returncode, "".join(lines)


def stop(proc: "subprocess.Popen[str]", grace: float = 5.0) -> None:
    """Interrupt pip (it may not have had the Ctrl-C: a signal to this process only), kill it if it lingers."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def reused(output: str) -> List[str]:
    """File names pip took from its destination (the mirror's files seeded there), from its log."""
    return [os.path.basename(m.group(1)) for m in _REUSED.finditer(output)]


def recorded_again(mirror: Path, names: Sequence[str], fallback_url: str) -> List[Artifact]:
    """Artifacts for files already under simple/ that the manifest lacks (after it was rebuilt)."""
    found: List[Artifact] = []
    for name, path in sorted(existing_dists(mirror).items()):
        if name in names:
            project = path.parent.name
            found.append(Artifact(key=f"pip:{project}", path=f"{SIMPLE}/{project}/{name}", url=fallback_url,
                                  sha256=sha256_file(path).hexdigest(), size=path.stat().st_size, source="pip"))
    return found


def place(dest: Path, mirror: Path, urls: Dict[str, str], fallback_url: str) -> List[Artifact]:
    """Move pip's files into simple/<project>/; one Artifact (with its sha256) per file pip used."""
    placed: List[Artifact] = []
    for path in sorted(dest.iterdir()):
        if not path.name.endswith(_DIST_SUFFIXES):
            continue
        project = project_of(path.name)
        final = mirror / SIMPLE / project / path.name
        final.parent.mkdir(parents=True, exist_ok=True)
        digest = sha256_file(path).hexdigest()
        os.replace(path, final)
        placed.append(Artifact(key=f"pip:{project}", path=f"{SIMPLE}/{project}/{path.name}",
                               url=urls.get(path.name, fallback_url), sha256=digest,
                               size=final.stat().st_size, source="pip"))
    return placed


def write_index(mirror: Path, hashes: Dict[str, str]) -> None:
    """simple/index.html and simple/<project>/index.html (PEP 503) for the files present.

    ``hashes``: mirror path -> sha256 (from the manifest); missing ones are computed.
    """
    root = mirror / SIMPLE
    if not root.is_dir():
        return
    projects = sorted(p for p in root.iterdir() if p.is_dir())
    for project in projects:
        links = []
        for dist in sorted(project.iterdir()):
            if not dist.name.endswith(_DIST_SUFFIXES):
                continue
            digest = hashes.get(f"{SIMPLE}/{project.name}/{dist.name}") or sha256_file(dist).hexdigest()
            name = html.escape(dist.name)
            links.append(f'    <a href="{name}#sha256={digest}">{name}</a><br>\n')
        (project / "index.html").write_text(_page(f"Links for {project.name}", "".join(links)), encoding="utf-8")
    index = "".join(f'    <a href="{p.name}/">{p.name}</a><br>\n' for p in projects)
    (root / "index.html").write_text(_page("Simple index", index), encoding="utf-8")
    flat = []
    for project in projects:
        for dist in sorted(project.iterdir()):
            if dist.name.endswith(_DIST_SUFFIXES):
                digest = hashes.get(f"{SIMPLE}/{project.name}/{dist.name}") or sha256_file(dist).hexdigest()
                href = html.escape(f"{SIMPLE}/{project.name}/{dist.name}")
                flat.append(f'    <a href="{href}#sha256={digest}">{html.escape(dist.name)}</a><br>\n')
    (mirror / FIND_LINKS).write_text(_page("Every file under simple/", "".join(flat)), encoding="utf-8")


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html>\n  <head><meta name=\"pypi:repository-version\" content=\"1.0\">"
            f"<title>{title}</title></head>\n  <body>\n    <h1>{title}</h1>\n{body}  </body>\n</html>\n")


def download(opts: PipOptions, mirror: Path, echo: Callable[[str], None],
             recorded: Sequence[str] = ()) -> Tuple[List[Artifact], Optional[str]]:
    """Run the pip hook; returns (artifacts placed, error message or None).

    Files pip takes from the mirror are returned too when ``recorded`` (the
    manifest's names) lacks them, so a deleted manifest.json is rebuilt.
    """
    dest = mirror / ".pip-download"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    try:
        seeded = existing_dists(mirror)
        seed(dest, seeded)
        output = ""
        for lock in ([None] if opts.requirements else []) + list(opts.locks):
            code, out = run_pip(pip_command(opts, dest, lock=lock), echo)
            output += out
            if code != 0:
                return [], f"pip download failed (exit {code}); see its output above"
        for name in seeded:  # already in the mirror: keep the mirror's copy
            (dest / name).unlink()
        fallback = f"pip:{opts.index_url or 'configured index'}"
        unrecorded = [n for n in reused(output) if f"{SIMPLE}/{project_of(n)}/{n}" not in set(recorded)]
        return recorded_again(mirror, unrecorded, fallback) + place(dest, mirror, source_urls(output), fallback), None
    finally:
        shutil.rmtree(dest, ignore_errors=True)
