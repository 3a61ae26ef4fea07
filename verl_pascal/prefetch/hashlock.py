"""verl-pascal-pip-lock: resolve requirements into a complete lock whose every pin carries its file's sha256.

pip's resolver does the work, for the target environment rather than the
controller's: ``pip install --dry-run --ignore-installed --only-binary=:all:
--python-version X.Y --platform ... --target TMP --report REPORT``. The report
names every distribution pip would install and the sha256 the index gave for
its file (PEP 503 ``#sha256=`` links; a local file is hashed here). Each pin
also gets the sha256 of every other file the index lists for that version (the
wheels for other glibc or CPU tags, the sdist), so the box's pip may pick
whichever file suits it. The lock lists each as ``name==version
--hash=sha256:...``: a role installs it with
``pip install --require-hashes -r LOCK``, so an index or mirror that serves
another file under the same version is refused before pip opens it.

    verl-pascal-pip-lock --python-version 3.10 --index-url URL -o LOCK REQUIREMENT...

Exit status: 0 written; 1 pip could not resolve, or a file has no sha256;
2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from .fetch import sha256_file
from .mirror import atomic_write
from .pipwheels import default_platforms, normalize
from .sdists import PipIndexError, pip_index

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class LockGenError(Exception):
    """The requirements could not be turned into a hashed lock."""


def report_command(requirements: Sequence[str], target: Path, report: Path, python_version: str,
                   platforms: Sequence[str], index_url: Optional[str], find_links: Sequence[str],
                   python: str = sys.executable) -> List[str]:
    """The pip command that resolves `requirements` for the target and writes its installation report."""
    cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "--python-version", python_version,
           "--target", str(target), "--report", str(report)]
    for platform in platforms:
        cmd += ["--platform", platform]
    if index_url:
        cmd += ["--index-url", index_url]
    for link in find_links:
        cmd += ["--find-links", link]
    return cmd + list(requirements)


def sha256_of(item: Dict[str, Any]) -> str:
    """The sha256 of the file an installation-report item would install."""
    info = item.get("download_info") or {}
    archive = info.get("archive_info") or {}
    digest = (archive.get("hashes") or {}).get("sha256")
    if not digest and str(archive.get("hash", "")).startswith("sha256="):
        digest = archive["hash"].split("=", 1)[1]
    if digest:
        return str(digest)
    url = str(info.get("url", ""))
    if url.startswith("file:"):
        path = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
        return sha256_file(path).hexdigest()
    name = item.get("metadata", {}).get("name", "?")
    raise LockGenError(f"the index gives no sha256 for {name} ({url or 'no URL'}); "
                       "use an index whose links carry #sha256= (PEP 503)")


HashLookup = Callable[[str, str], Set[str]]


def index_hashes(index_urls: Sequence[str]) -> HashLookup:
    """A lookup of (project, version) -> the sha256 of every file the indexes list for it."""
    def lookup(name: str, version: str) -> Set[str]:
        found: Set[str] = set()
        for index_url in index_urls:
            try:
                page = pip_index.fetch_page(pip_index.project_url(index_url, name))
            except PipIndexError:
                continue
            for link in pip_index.parse_project_page(page.body, page.content_type, page.url):
                listed = pip_index.version_of(link.filename, name)
                if listed is not None and listed.lower() == version.lower() and link.hashes.get("sha256"):
                    found.add(link.hashes["sha256"])
        return found
    return lookup


def no_lookup(name: str, version: str) -> Set[str]:
    return set()


def lock_lines(report: Dict[str, Any], more_hashes: HashLookup = no_lookup) -> List[str]:
    """`name==version \\` and its `--hash` lines for every item of a pip installation report, by name."""
    items = sorted(report.get("install", []), key=lambda i: normalize(i["metadata"]["name"]))
    if not items:
        raise LockGenError("pip's report installs nothing")
    lines: List[str] = []
    for item in items:
        meta = item["metadata"]
        hashes = sorted({sha256_of(item)} | more_hashes(meta["name"], meta["version"]))
        lines.append(f"{normalize(meta['name'])}=={meta['version']} \\")
        lines += [f"    --hash=sha256:{digest} \\" for digest in hashes[:-1]]
        lines.append(f"    --hash=sha256:{hashes[-1]}")
        if item.get("requested"):
            lines.append("    # requested")
    return lines


def resolve(requirements: Sequence[str], python_version: str, platforms: Sequence[str],
            index_url: Optional[str], find_links: Sequence[str]) -> Dict[str, Any]:
    """Run pip's resolver and return its installation report."""
    with tempfile.TemporaryDirectory(prefix="pip-lock-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = report_command(requirements, Path(tmp) / "target", report, python_version, platforms,
                             index_url, find_links)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LockGenError(f"pip could not resolve {' '.join(requirements)}:\n{proc.stderr.strip()}")
        return json.loads(report.read_text())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-pascal-pip-lock", description=__doc__.split("\n\n")[0])
    parser.add_argument("requirements", nargs="+", metavar="REQUIREMENT",
                        help="requirement specifiers, e.g. torch==2.6.0+cu118 (or -r FILE as 2 words: use @FILE)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the lock to write")
    parser.add_argument("--python-version", required=True, metavar="X.Y", help="the target env's Python")
    parser.add_argument("--platform", action="append", default=[], metavar="TAG",
                        help="wheel platform tag (repeatable; default: manylinux up to glibc 2.31 and linux_x86_64)")
    parser.add_argument("--index-url", help="the one index (default: pip's configuration)")
    parser.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    parser.add_argument("--header", action="append", default=[], metavar="LINE",
                        help="a comment line for the top of the lock (repeatable)")
    return parser


def expand(requirements: Sequence[str]) -> List[str]:
    """`@FILE` stands for the requirement lines of FILE (comments and blank lines dropped)."""
    out: List[str] = []
    for req in requirements:
        if req.startswith("@"):
            for line in Path(req[1:]).read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    out.append(line)
        else:
            out.append(req)
    return out


def run(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        requirements = expand(args.requirements)
        report = resolve(requirements, args.python_version, args.platform or default_platforms(),
                         args.index_url, args.find_links)
        urls = [args.index_url] if args.index_url else pip_index.pip_index_config(sys.executable).urls
        lines = lock_lines(report, index_hashes(urls))
    except (LockGenError, PipIndexError, OSError) as exc:
        print(f"pip-lock: {exc}", file=sys.stderr)
        return EXIT_FAILED
    header = [f"# {line}" for line in args.header]
    header.append(f"# Python {args.python_version}: every file pip installs, by sha256 (pip install --require-hashes).")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, "\n".join(header + lines) + "\n")  # the lock whole or not at all
    print(f"pip-lock: wrote {args.output} ({sum(1 for line in lines if '==' in line)} pins)")
    return EXIT_OK


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
