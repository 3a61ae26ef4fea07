"""bin/prefetch: fill, list or verify an offline mirror of the stack's artifacts.

Exit status: 0 everything is in the mirror and verified; 1 a file failed
(download, sha256) or --verify found a problem; 2 bad usage or a lock error.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence

from . import artifacts as arts
from . import mirror as records
from . import pipwheels
from .fetch import FetchOptions, FetchResult, Fetcher, part_path
from .lock import DEFAULT_LOCK_PATHS, REPO_ROOT, Lock, LockError, parse_overrides
from .progress import Progress

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    default_lock = ", ".join(str(p.relative_to(REPO_ROOT)) for p in DEFAULT_LOCK_PATHS)
    parser = argparse.ArgumentParser(
        prog="prefetch",
        description="Download every artifact the version lock pins into a mirror directory "
        "(resumable, retried, sha256-checked), or --list / --verify it.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mirror", type=Path, help="the mirror directory (created if missing)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print what would be fetched, download nothing")
    mode.add_argument("--verify", action="store_true",
                      help="re-check the mirror against the lock and manifest.json, download nothing")
    parser.add_argument("--lock", type=Path, action="append", metavar="PATH",
                        help=f"lock file or directory of them (repeatable; default: {default_lock})")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="override a lock variable, like ansible-playbook -e (repeatable)")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME",
                        help="only these artifacts: a lock entry (cuda_runfile) or a file name")
    parser.add_argument("--jobs", "-j", type=int, default=3, help="parallel downloads (default 3)")
    parser.add_argument("--retries", type=int, default=4, help="retries per file after the first attempt (default 4)")
    parser.add_argument("--backoff", type=float, default=1.0,
                        help="seconds before the first retry, doubled for each next one (default 1)")
    parser.add_argument("--backoff-max", type=float, default=60.0, help="longest wait between retries (default 60)")
    parser.add_argument("--timeout", type=float, default=60.0, help="connect/read timeout in seconds (default 60)")
    parser.add_argument("--chunk-size", type=int, default=1024, metavar="KIB", help="read size in KiB (default 1024)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (messages only)")
    pip = parser.add_argument_group("pip-resolved wheels (into <mirror>/simple/, a PEP 503 index)")
    pip.add_argument("--pip-requirements", type=Path, action="append", default=[], metavar="FILE",
                     help="requirements file for `pip download` (repeatable)")
    pip.add_argument("--pip-lock", type=Path, action="append", default=[], metavar="FILE",
                     help="a complete lock (exact pins of every dependency, e.g. roles/verl/files/locks/"
                          "verl-0.5.0/py3.10-torch2.6.txt): pip download --no-deps, wheels for the target "
                          "where a project has them, else its sdist (repeatable)")
    pip.add_argument("--pip-python-version", metavar="X.Y",
                     help="the target env's Python (default: the lock's python_version, as X.Y)")
    pip.add_argument("--pip-platform", action="append", default=[], metavar="TAG",
                     help="wheel platform tag (repeatable; default: manylinux up to glibc 2.31 and linux_x86_64)")
    pip.add_argument("--pip-index-url", metavar="URL", help="default: the lock's pip_index_url, else pip's configuration")
    pip.add_argument("--pip-extra-index-url", action="append", default=[], metavar="URL")
    pip.add_argument("--pip-find-links", action="append", default=[], metavar="DIR_OR_URL")
    pip.add_argument("--pip-arg", action="append", default=[], metavar="ARG",
                     help="any other argument for pip download (repeatable, e.g. --pip-arg=--no-deps)")
    return parser


def fetch_options(args: argparse.Namespace) -> FetchOptions:
    return FetchOptions(retries=args.retries, backoff=args.backoff, backoff_max=args.backoff_max,
                        timeout=args.timeout, chunk_size=args.chunk_size * 1024)


def pip_options(args: argparse.Namespace, lock: Lock) -> pipwheels.PipOptions:
    version = args.pip_python_version
    if version is None and lock.get("python_version"):
        version = ".".join(str(lock.get("python_version")).split(".")[:2])
    opts = pipwheels.PipOptions(requirements=list(args.pip_requirements), locks=list(args.pip_lock),
                                python_version=version,
                                index_url=args.pip_index_url or lock.get("pip_index_url") or None,
                                extra_index_urls=list(args.pip_extra_index_url), find_links=list(args.pip_find_links),
                                extra_args=list(args.pip_arg), progress=not args.no_progress)
    if args.pip_platform:
        opts.platforms = list(args.pip_platform)
    return opts


def load_selection(args: argparse.Namespace) -> tuple:
    """(Lock, selected artifacts, warnings); LockError on any problem in the selection."""
    lock = Lock.from_paths(args.lock or DEFAULT_LOCK_PATHS, parse_overrides(args.var))
    found = arts.discover(lock)
    errors = arts.select_errors(found.errors, args.only)
    if errors:
        raise LockError("\n".join(f"{key}: {msg}" for key, msg in sorted(errors.items())))
    return lock, arts.select(found.artifacts, args.only), found.skipped


def human(size: Optional[int]) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(size)


def state_of(mirror: Optional[Path], art: arts.Artifact) -> str:
    """present / partial / missing, from the file system only (no hashing)."""
    if mirror is None:
        return "-"
    if (mirror / art.path).exists():
        return "present"
    return "partial" if part_path(mirror / art.path).exists() else "missing"


def cmd_list(args: argparse.Namespace, lock: Lock, selected: Sequence[arts.Artifact]) -> int:
    for art in selected:
        print(f"{art.key}\t{art.path}\t{human(art.size)}\t{state_of(args.mirror, art)}\t{art.sha256}\t{art.url}")
    total = sum(a.size or 0 for a in selected)
    print(f"# {len(selected)} file(s), {human(total)} with known sizes")
    for req in args.pip_requirements + args.pip_lock:
        opts = pip_options(args, lock)
        kind = "lock, --no-deps" if req in args.pip_lock else "wheels only"
        print(f"# pip: {req} -> simple/ ({kind}; python {opts.python_version or 'of pip'}, "
              f"platforms {', '.join(opts.platforms)})")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace, selected: Sequence[arts.Artifact]) -> int:
    entries = records.read_manifest(args.mirror)
    extra = None
    if args.only:
        extra = [n for n in entries if any(n == o or n.rsplit("/", 1)[-1] == o or entries[n].get("key") in (o, f"pip:{o}")
                                           for o in args.only)]
    problems = records.verify(args.mirror, selected, entries, extra)
    checked = len(selected) + len([n for n in (extra if extra is not None else entries) if n not in {a.path for a in selected}])
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if problems:
        print(f"verify: {len(problems)} problem(s) in {args.mirror}", file=sys.stderr)
        return EXIT_FAILED
    print(f"verify: {checked} file(s) in {args.mirror} match the lock and {records.MANIFEST}")
    return EXIT_OK


def fetch_sdist(args: argparse.Namespace, lock: Lock, art: arts.Artifact, progress: Progress) -> FetchResult:
    """An sdist the lock pins by sha256 only: pip downloads it (pip's index), then it is checked."""
    status, error = pipwheels.download_sdist(pip_options(args, lock), args.mirror, art, progress.write)
    size = (args.mirror / art.path).stat().st_size if status != "failed" else 0
    return FetchResult(art, status, sha256=art.sha256 if status != "failed" else None, error=error,
                       downloaded=size if status == "fetched" else 0)


def run_downloads(args: argparse.Namespace, lock: Lock, selected: Sequence[arts.Artifact],
                  progress: Progress) -> List[FetchResult]:
    fetcher = Fetcher(args.mirror, fetch_options(args), progress)

    def one(art: arts.Artifact) -> FetchResult:
        if art.source == arts.PIP_SDIST:
            result = fetch_sdist(args, lock, art, progress)
        else:
            result = fetcher.fetch(art)
        if result.status == "fetched":
            progress.write(f"fetched {art.path} ({human(result.downloaded)} downloaded, sha256 ok)")
        elif result.status == "present":
            progress.write(f"present {art.path} (sha256 ok, not downloaded)")
        else:
            progress.write(f"FAILED  {art.path}: {result.error}")
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        return list(pool.map(one, selected))


def cmd_fetch(args: argparse.Namespace, lock: Lock, selected: Sequence[arts.Artifact]) -> int:
    args.mirror.mkdir(parents=True, exist_ok=True)
    failures: List[str] = []
    new_entries = []
    if args.pip_requirements or args.pip_lock:
        placed, error = pipwheels.download(pip_options(args, lock), args.mirror,
                                           lambda line: print(line, file=sys.stderr, flush=True))
        if error:
            failures.append(f"pip: {error}")
        new_entries += [records.manifest_entry(a, a.size or 0) for a in placed]
    todo_bytes = sum(a.size or 0 for a in selected)
    progress = Progress(not args.no_progress, todo_bytes, args.jobs)
    try:
        results = run_downloads(args, lock, selected, progress)
    finally:
        progress.close()
    for result in results:
        art = result.artifact
        if result.ok:
            new_entries.append(records.manifest_entry(art, (args.mirror / art.path).stat().st_size))
        else:
            failures.append(f"{art.path} ({art.key}, {art.url}): {result.error}")
    entries = records.update_records(args.mirror, new_entries, drop=[r.artifact.path for r in results if not r.ok])
    pipwheels.write_index(args.mirror, {name: e["sha256"] for name, e in entries.items()})
    return report(args, results, failures)


def report(args: argparse.Namespace, results: Sequence[FetchResult], failures: Sequence[str]) -> int:
    fetched = sum(1 for r in results if r.status == "fetched")
    present = sum(1 for r in results if r.status == "present")
    downloaded = sum(r.downloaded for r in results)
    print(f"prefetch: {fetched} fetched, {present} already present, {len(failures)} failed; "
          f"{human(downloaded)} downloaded into {args.mirror}")
    if failures:
        print(f"prefetch: FAILED ({len(failures)}); nothing that failed is left under its final name:", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.mirror is None and not args.list:
        parser.error("--mirror DIR is required (except with --list)")
    if args.jobs < 1 or args.retries < 0 or args.chunk_size < 1:
        parser.error("--jobs and --chunk-size must be >= 1, --retries >= 0")
    try:
        lock, selected, skipped = load_selection(args)
    except LockError as exc:
        print(f"prefetch: lock error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for key, reason in sorted(skipped.items()):
        print(f"prefetch: skipping {key}: {reason}", file=sys.stderr)
    if args.list:
        return cmd_list(args, lock, selected)
    if args.verify:
        return cmd_verify(args, selected)
    return cmd_fetch(args, lock, selected)
