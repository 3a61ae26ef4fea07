"""Find one distribution file on a package index, without pip building anything.

``pip download --no-binary :all: name==X`` prepares the sdist's metadata, and
so runs its ``setup.py``, before anyone can compare the file with a lock.
This module only reads the index's simple API (PEP 503 HTML, or PEP 691
JSON) and returns the URL of the exact file the lock names; the caller
downloads it and checks its sha256 before anything opens it.

- ``pip_index_config(python)`` asks that interpreter's pip which index it
  would use (pip's configuration files and ``PIP_INDEX_URL`` /
  ``PIP_EXTRA_INDEX_URL`` count; no index is written here);
- ``parse_project_page(body, content_type, page_url)`` lists a project
  page's files;
- ``find_file(...)`` looks a file name up on one or more indexes and raises
  ``PipIndexError`` with a reason a user can act on: no such project, the
  file is not listed (with the files of that version that are), the index
  cannot be reached, or the page's own ``#sha256=`` contradicts the lock.

Standard library only, Python 3.8+: Ansible ships it to hosts as
``ansible.module_utils.pip_index`` (the ``pip_index_file`` module).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit
from urllib.request import Request, urlopen

#: Asks pip for the indexes ``pip download`` would use, as JSON.
PIP_INDEX_SCRIPT = (
    "import json, sys\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"  # pip itself, never a pip/ of the cwd
    "from pip._internal.commands import create_command\n"
    "opts, _ = create_command('download').parse_args([])\n"
    "print(json.dumps({'index_url': opts.index_url, 'extra_index_urls': list(opts.extra_index_urls or []),"
    " 'no_index': bool(opts.no_index)}))\n"
)

#: PEP 691: JSON if the index has it, else PEP 503 HTML.
ACCEPT = ("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
          "text/html;q=0.01")
USER_AGENT = "verl-pascal-pip-index/1"
_JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_SDIST_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz", ".tar")


class PipIndexError(Exception):
    """The file cannot be located; the message says why and what to check."""


@dataclass(frozen=True)
class IndexConfig:
    """What pip is configured with: its index and extra indexes."""

    index_url: str
    extra_index_urls: Tuple[str, ...] = ()

    @property
    def urls(self) -> List[str]:
        return [self.index_url] + [u for u in self.extra_index_urls if u != self.index_url]


@dataclass(frozen=True)
class Link:
    """One file of a project page."""

    filename: str
    url: str  # absolute
    hashes: Dict[str, str] = field(default_factory=dict)  # from the #sha256= fragment or PEP 691 "hashes"


@dataclass(frozen=True)
class Found:
    """Where the file is: ``url`` on the page ``project_url`` of ``index_url``."""

    url: str
    index_url: str
    project_url: str
    sha256: Optional[str] = None  # what the index says; never a reason to trust the file


# --- pip's configuration --------------------------------------------------------

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def pip_index_config(python: str, run: Runner = subprocess.run, timeout: float = 60.0) -> IndexConfig:
    """The indexes ``python -m pip download`` would use, asked of pip itself."""
    env = dict(os.environ)
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    try:
        proc = run([python, "-c", PIP_INDEX_SCRIPT], capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PipIndexError(f"cannot run {python} to ask pip for its index URL: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise PipIndexError(f"cannot ask pip of {python} for its index URL (is pip installed for it?): "
                            f"exit {proc.returncode}: {last[0]}")
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise PipIndexError(f"pip of {python} answered {proc.stdout.strip()[:200]!r}, not its index URL") from exc
    if not isinstance(data, dict):
        raise PipIndexError(f"pip of {python} answered {proc.stdout.strip()[:200]!r}, not its index URL")
    if data.get("no_index"):
        raise PipIndexError(f"pip of {python} is configured with no index (--no-index / PIP_NO_INDEX): "
                            "give the index URL explicitly")
    if not data.get("index_url"):
        raise PipIndexError(f"pip of {python} has no index URL configured")
    return IndexConfig(str(data["index_url"]), tuple(str(u) for u in data.get("extra_index_urls") or ()))


def pip_index_url(python: str, run: Runner = subprocess.run) -> str:
    """The index URL ``python -m pip download`` would use."""
    return pip_index_config(python, run).index_url


# --- names and URLs ------------------------------------------------------------

def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_url(index_url: str, name: str) -> str:
    """``<index>/<normalized name>/``."""
    return index_url.rstrip("/") + "/" + normalize(name) + "/"


def redact(url: str) -> str:
    """The URL without a password (``user:***@host``), for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _without_credentials(url: str) -> Tuple[str, Optional[str]]:
    """(URL without user:password, the Basic Authorization header for them)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return urlunsplit(parts._replace(netloc=netloc)), "Basic " + base64.b64encode(token).decode()


def file_name_of(url: str) -> str:
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


def version_of(filename: str, project: str) -> Optional[str]:
    """The version in a wheel or sdist file name of ``project`` (None for another project's file)."""
    wanted = normalize(project)
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        return parts[1] if len(parts) >= 5 and normalize(parts[0]) == wanted else None
    stem = next((filename[: -len(s)] for s in _SDIST_SUFFIXES if filename.endswith(s)), None)
    if stem is None:
        return None
    for cut in range(len(stem) - 1, 0, -1):
        if stem[cut] == "-" and normalize(stem[:cut]) == wanted:
            return stem[cut + 1:]
    return None


# --- project pages -------------------------------------------------------------

class _Anchors(HTMLParser):
    """The ``href`` of every ``<a>``, and ``<base href>``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: List[str] = []
        self.base: Optional[str] = None

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.hrefs.append(str(values["href"]))
        elif tag == "base" and values.get("href") and self.base is None:
            self.base = str(values["href"])


def _fragment_hashes(url: str) -> Dict[str, str]:
    fragment = urlsplit(url).fragment
    name, sep, value = fragment.partition("=")
    return {name.lower(): value.lower()} if sep and name and value else {}


def parse_html_page(body: str, page_url: str) -> List[Link]:
    """PEP 503: one ``<a href>`` per file; relative links are resolved against the page (or its base)."""
    parser = _Anchors()
    parser.feed(body)
    parser.close()
    base = urljoin(page_url, parser.base) if parser.base else page_url
    links = []
    for href in parser.hrefs:
        url = urljoin(base, href)
        name = file_name_of(url)
        if name:
            links.append(Link(name, urlunsplit(urlsplit(url)._replace(fragment="")), _fragment_hashes(url)))
    return links


def parse_json_page(body: str, page_url: str) -> List[Link]:
    """PEP 691: ``{"files": [{"filename", "url", "hashes"}, ...]}``."""
    try:
        data = json.loads(body)
        files = data["files"]
        return [Link(str(f["filename"]), urljoin(page_url, str(f["url"])),
                     {str(k).lower(): str(v).lower() for k, v in (f.get("hashes") or {}).items()})
                for f in files]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PipIndexError(f"{redact(page_url)} is not a PEP 691 project page: {exc}") from exc


def parse_project_page(body: str, content_type: str, page_url: str) -> List[Link]:
    """The files of a project page, HTML or JSON by its content type."""
    if content_type.split(";", 1)[0].strip().lower() == _JSON_TYPE:
        return parse_json_page(body, page_url)
    return parse_html_page(body, page_url)


# --- fetching a page -----------------------------------------------------------

class PageNotFound(PipIndexError):
    """HTTP 404 or 410 (or no such file for a file: index)."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"{redact(url)}: {reason}")
        self.url = url
        self.reason = reason


class IndexUnreachable(PipIndexError):
    """No answer: DNS, connection refused, timeout, TLS."""


class ProjectNotFound(PipIndexError):
    """The index has no page for the project."""


class FileNotListed(PipIndexError):
    """The project page does not list the file."""


class HashMismatch(PipIndexError):
    """The index's own hash for the file contradicts the lock."""


@dataclass(frozen=True)
class Page:
    url: str  # where it was read from, after redirects (relative links resolve against it)
    body: str
    content_type: str


def _local_page(url: str) -> Page:
    path = unquote(urlsplit(url).path)
    if os.path.isdir(path):
        path = os.path.join(path, "index.html")
    try:
        with open(path, "rb") as handle:
            return Page(url, handle.read().decode("utf-8", "replace"), "text/html")
    except FileNotFoundError as exc:
        raise PageNotFound(url, "no such file") from exc
    except OSError as exc:
        raise IndexUnreachable(f"cannot read {url}: {exc}") from exc


def _keep_credentials(original: str, final: str) -> str:
    """``final`` (after redirects) with ``original``'s user:password when it is on the same host."""
    first, last = urlsplit(original), urlsplit(final)
    if first.username is None or last.username is not None or last.hostname != first.hostname:
        return final
    return urlunsplit(last._replace(netloc=first.netloc))


def fetch_page(url: str, timeout: float = 30.0) -> Page:
    """GET a project page; PageNotFound for 404/410, IndexUnreachable or PipIndexError for the rest."""
    if urlsplit(url).scheme == "file":
        return _local_page(url)
    plain, auth = _without_credentials(url)
    headers = {"Accept": ACCEPT, "User-Agent": USER_AGENT, "Cache-Control": "max-age=0"}
    if auth:
        headers["Authorization"] = auth
    try:
        with urlopen(Request(plain, headers=headers), timeout=timeout) as response:  # noqa: S310 (http(s) only)
            charset = response.headers.get_content_charset() or "utf-8"
            body = response.read().decode(charset, "replace")
            return Page(_keep_credentials(url, response.geturl()), body, response.headers.get("Content-Type", ""))
    except HTTPError as exc:
        if exc.code in (404, 410):
            raise PageNotFound(url, f"HTTP {exc.code}") from exc
        raise PipIndexError(f"HTTP {exc.code} {exc.reason} from {redact(url)}") from exc
    except (URLError, OSError) as exc:  # socket.timeout and ConnectionError are OSErrors
        reason = getattr(exc, "reason", None) or exc
        raise IndexUnreachable(f"cannot reach the package index at {redact(url)}: {reason}") from exc


# --- the lookup ----------------------------------------------------------------

def listed_versions(links: Sequence[Link], project: str) -> List[str]:
    """The versions on a page, in page order, each once."""
    seen: List[str] = []
    for link in links:
        version = version_of(link.filename, project)
        if version and version not in seen:
            seen.append(version)
    return seen


def not_listed_message(links: Sequence[Link], project: str, filename: str, page_url: str) -> str:
    """Which files of the wanted version the page lists, else which versions it has."""
    version = version_of(filename, project)
    head = f"{filename} is not listed on {redact(page_url)}"
    same = [link.filename for link in links if version and version_of(link.filename, project) == version]
    if same:
        return f"{head}; for version {version} it lists: {', '.join(same)}"
    versions = listed_versions(links, project)
    if not versions:
        return f"{head}; it lists {len(links)} file(s), none of project {normalize(project)}"
    shown = ", ".join(versions[-12:])
    more = f" (and {len(versions) - 12} more)" if len(versions) > 12 else ""
    what = f"version {version}" if version else "that name"
    return f"{head}; it lists no file of {what}; versions listed: {shown}{more}"


def check_page_hash(link: Link, sha256: Optional[str], page_url: str) -> None:
    """The index's own ``#sha256=`` must not contradict the lock (it never vouches for the file)."""
    listed = link.hashes.get("sha256")
    if sha256 and listed and listed != sha256.lower():
        raise HashMismatch(
            f"{link.filename}: sha256 mismatch: the lock expects {sha256.lower()}, the index lists {listed} "
            f"on {redact(page_url)}; not downloaded (a substituted file, or a lock entry for another file)")


PageFetcher = Callable[[str], Page]


def find_on_index(index_url: str, name: str, filename: str, sha256: Optional[str] = None,
                  fetch: PageFetcher = fetch_page) -> Found:
    """The file ``filename`` of project ``name`` on one index."""
    url = project_url(index_url, name)
    try:
        page = fetch(url)
    except PageNotFound as exc:
        raise ProjectNotFound(f"project page not found: {redact(url)} ({exc.reason}); the index "
                              f"{redact(index_url)} has no project {normalize(name)!r}") from exc
    links = parse_project_page(page.body, page.content_type, page.url)
    for link in links:
        if link.filename == filename:
            check_page_hash(link, sha256, page.url)
            return Found(link.url, index_url, page.url, link.hashes.get("sha256"))
    raise FileNotListed(not_listed_message(links, name, filename, page.url))


def find_file(index_urls: Sequence[str], name: str, filename: str, sha256: Optional[str] = None,
              fetch: PageFetcher = fetch_page) -> Found:
    """The first index (in order) that lists ``filename``; PipIndexError naming every index tried.

    A page whose ``#sha256=`` contradicts ``sha256`` stops the search at once.
    """
    if not index_urls:
        raise PipIndexError("no package index to look in")
    misses: List[PipIndexError] = []
    for index_url in index_urls:
        try:
            return find_on_index(index_url, name, filename, sha256, fetch)
        except HashMismatch:
            raise
        except PipIndexError as exc:
            misses.append(exc)
    if len(misses) == 1:
        raise misses[0]
    kind = type(misses[0]) if all(type(m) is type(misses[0]) for m in misses) else PipIndexError
    raise kind(f"{filename} was found on none of {len(misses)} indexes: " + " | ".join(map(str, misses)))
