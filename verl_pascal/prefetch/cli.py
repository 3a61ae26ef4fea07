"""verl-pascal-prefetch: fill, list or verify an offline mirror of the stack's artifacts.

Exit status: 0 everything is in the mirror and verified; 1 a file failed
(download, sha256, no space left on the disk) or --verify found a problem;
2 bad usage, a lock error, a --pip-lock with a pin without --hash=sha256, or
a damaged manifest.json (or one naming a file outside the mirror); 130 interrupted
(Ctrl-C): the files that finished are recorded, the .part files are kept and
the same command resumes them.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from verl_pascal.version_lock import DEFAULT_LOCK_PATHS, REPO_ROOT, Lock, LockError, parse_overrides

from . import artifacts as arts
from . import mirror as records
from . import pipwheels, sdists
from .fetch import FetchOptions, FetchResult, Fetcher, human, part_path
from .progress import Progress

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
STOP_GRACE = 5.0  # seconds the downloads get to stop after Ctrl-C


def build_parser() -> argparse.ArgumentParser:
    default_lock = ", ".join(str(p.relative_to(REPO_ROOT)) for p in DEFAULT_LOCK_PATHS)
    parser = argparse.ArgumentParser(
        prog="verl-pascal-prefetch",
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
    parser.add_argument("--retries", type=int, default=4,
                        help="retries per file in a row that bring no new byte (default 4; an attempt that "
                             "extends the .part starts the count again)")
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
                     help="a complete lock (exact pins of every dependency, e.g. verl_pascal/releases/"
                          "verl-0.5.0/py3.10-torch2.6.txt) whose every pin has --hash=sha256:...: pip download "
                          "--no-deps --require-hashes, wheels for the target where a project has them, else its "
                          "sdist (repeatable)")
    pip.add_argument("--pip-python-version", metavar="X.Y",
                     help="the target env's Python (default: the lock's python_version, as X.Y)")
    pip.add_argument("--pip-platform", action="append", default=[], metavar="TAG",
                     help="wheel platform tag (repeatable; default: manylinux up to glibc 2.31 and linux_x86_64)")
    pip.add_argument("--pip-index-url", metavar="URL",
                     help="default: the lock's pip_index_url, else pip's configuration; also where the lock's "
                          "sdists without a URL (verl_releases) are looked up, on its simple API")
    pip.add_argument("--pip-extra-index-url", action="append", default=[], metavar="URL",
                     help="more indexes, for pip and for those sdists (looked in after the first)")
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


def sdist_resolver(args: argparse.Namespace, lock: Lock) -> sdists.Resolver:
    """Where the lock's URL-less sdists are looked up: the index pip would use (see ``sdists``)."""
    return sdists.Resolver(args.pip_index_url or lock.get("pip_index_url") or None, args.pip_extra_index_url,
                           python=sys.executable, timeout=args.timeout)


def fetch_one(fetcher: Fetcher, resolver: sdists.Resolver, art: arts.Artifact, progress: Progress) -> FetchResult:
    """One artifact, with its line of output."""
    resolve = resolver.resolve if art.source == arts.PIP_SDIST else None
    result = fetcher.fetch(art, resolve=resolve)
    if result.status == "fetched":
        progress.write(f"fetched {art.path} ({human(result.downloaded)} downloaded, sha256 ok)")
    elif result.status == "present":
        progress.write(f"present {art.path} (sha256 ok, not downloaded)")
    elif result.status == "interrupted":
        progress.write(f"stopped {art.path}: {result.error}")
    else:
        progress.write(f"FAILED  {art.path}: {result.error}")
    return result


class Downloads:
    """``jobs`` worker threads over the selection; Ctrl-C in the main thread stops them within seconds."""

    def __init__(self, fetcher: Fetcher, resolver: sdists.Resolver, selected: Sequence[arts.Artifact],
                 progress: Progress, jobs: int):
        self.fetcher, self.resolver, self.selected, self.progress = fetcher, resolver, list(selected), progress
        self.todo: "queue.Queue[Tuple[int, arts.Artifact]]" = queue.Queue()
        for item in enumerate(self.selected):
            self.todo.put(item)
        self.done: "queue.Queue[Tuple[int, FetchResult]]" = queue.Queue()
        self.results: Dict[int, FetchResult] = {}
        self.threads = [threading.Thread(target=self._work, name=f"prefetch-{n}", daemon=True)
                        for n in range(min(max(1, jobs), len(self.selected)))]
        self.interrupted = False
        self.sigints = 0

    def _work(self) -> None:
        while not self.fetcher.cancel.is_set():
            try:
                index, art = self.todo.get_nowait()
            except queue.Empty:
                return
            try:
                result = fetch_one(self.fetcher, self.resolver, art, self.progress)
            except Exception as exc:  # a bug must not hang the run: report it as the file's failure
                result = FetchResult(art, "failed", error=f"{type(exc).__name__}: {exc}")
            self.done.put((index, result))

    def _collect(self, timeout: float) -> None:
        try:
            index, result = self.done.get(timeout=timeout)
        except queue.Empty:
            return
        self.results[index] = result

    def _busy(self) -> bool:
        return len(self.results) < len(self.selected) and (any(t.is_alive() for t in self.threads)
                                                            or not self.done.empty())

    def run(self) -> List[FetchResult]:
        """A result per artifact, in order: those never reached after Ctrl-C are ``interrupted``.

        While the downloads run, Ctrl-C only counts (``_on_sigint``): a KeyboardInterrupt raised
        inside the queue's condition wait can leave its lock held, and the next wait on the
        queue would then hang for good.
        """
        for thread in self.threads:
            thread.start()
        # Only the main thread receives signals (a benchmark runs several of these in threads).
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._on_sigint) if main else None
        try:
            while self._busy() and not self.sigints:
                self._collect(0.2)
            if self.sigints:
                self.stop()
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        while not self.done.empty():
            self._collect(0)
        return [self.results.get(i) or FetchResult(art, "interrupted", error="not started")
                for i, art in enumerate(self.selected)]

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.sigints += 1

    def stop(self) -> None:
        """Cancel every download and give them ``STOP_GRACE`` seconds to close their .part files
        (a second Ctrl-C: no longer)."""
        self.interrupted = True
        self.fetcher.cancel.set()
        self.progress.write("prefetch: interrupted: stopping the downloads; their .part files are kept for a resume")
        deadline = time.monotonic() + STOP_GRACE
        while self._busy() and time.monotonic() < deadline and self.sigints < 2:
            self._collect(0.1)


def cmd_fetch(args: argparse.Namespace, lock: Lock, selected: Sequence[arts.Artifact]) -> int:
    args.mirror.mkdir(parents=True, exist_ok=True)
    known = records.read_manifest(args.mirror)  # a damaged one stops the run before any download
    failures: List[str] = []
    new_entries = []
    results: List[FetchResult] = []
    interrupted = False
    try:
        if args.pip_requirements or args.pip_lock:
            placed, error = pipwheels.download(pip_options(args, lock), args.mirror,
                                               lambda line: print(line, file=sys.stderr, flush=True),
                                               recorded=list(known))
            if error:
                failures.append(f"pip: {error}")
            new_entries += [records.manifest_entry(a, a.size or 0) for a in placed]
    except KeyboardInterrupt:
        interrupted = True
        results = [FetchResult(art, "interrupted", error="not started") for art in selected]
    if not interrupted:
        results, interrupted = download_all(args, lock, selected)
    for result in results:
        art = result.artifact
        if result.ok:
            new_entries.append(records.manifest_entry(art, (args.mirror / art.path).stat().st_size))
        elif result.status == "failed":
            failures.append(f"{art.path} ({art.key}, {sdists.redact(art.url)}): {result.error}")
    try:
        entries = records.update_records(args.mirror, new_entries, drop=[r.artifact.path for r in results if not r.ok])
        pipwheels.write_index(args.mirror, {name: e["sha256"] for name, e in entries.items()})
    except OSError as exc:
        print(f"prefetch: cannot write the records of {args.mirror} ({records.MANIFEST}, {records.SHA256SUMS}, "
              f"simple/ pages): {exc}", file=sys.stderr)
        return EXIT_FAILED
    if interrupted:
        return report_interrupted(args, results, failures)
    return report(args, results, failures)


def download_all(args: argparse.Namespace, lock: Lock,
                 selected: Sequence[arts.Artifact]) -> Tuple[List[FetchResult], bool]:
    """(a result per artifact, whether Ctrl-C stopped the run)."""
    progress = Progress(not args.no_progress, sum(a.size or 0 for a in selected), args.jobs)
    fetcher = Fetcher(args.mirror, fetch_options(args), progress)
    downloads = Downloads(fetcher, sdist_resolver(args, lock), selected, progress, args.jobs)
    try:
        results = downloads.run()
    finally:
        progress.close()
    return results, downloads.interrupted


def report_interrupted(args: argparse.Namespace, results: Sequence[FetchResult], failures: Sequence[str]) -> int:
    done = [r for r in results if r.ok]
    stopped = [r for r in results if r.status == "interrupted"]
    print(f"prefetch: interrupted: {len(done)} file(s) finished and recorded in {records.MANIFEST}, "
          f"{len(stopped)} not finished, {len(failures)} failed", file=sys.stderr)
    for result in stopped:
        part = part_path(args.mirror / result.artifact.path)
        kept = f"{part.name} kept ({human(part.stat().st_size)})" if part.exists() else "nothing kept"
        print(f"  not finished: {result.artifact.path} ({kept})", file=sys.stderr)
    for line in failures:
        print(f"  failed: {line}", file=sys.stderr)
    print("prefetch: run the same command again to resume", file=sys.stderr)
    return EXIT_INTERRUPTED


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
        return dispatch(args)
    except KeyboardInterrupt:  # outside the downloads: nothing half-written (records are replaced atomically)
        print("prefetch: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def dispatch(args: argparse.Namespace) -> int:
    try:
        for pip_lock in args.pip_lock:  # before anything else: no pip for a lock with a pin pip cannot check
            pipwheels.check_lock(pip_lock)
    except pipwheels.PipLockError as exc:
        print(f"prefetch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        lock, selected, skipped = load_selection(args)
    except LockError as exc:
        print(f"prefetch: lock error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for key, reason in sorted(skipped.items()):
        print(f"prefetch: skipping {key}: {reason}", file=sys.stderr)
    try:
        if args.list:
            return cmd_list(args, lock, selected)
        if args.verify:
            return cmd_verify(args, selected)
        return cmd_fetch(args, lock, selected)
    except records.ManifestError as exc:
        print(f"prefetch: {exc}", file=sys.stderr)
        return EXIT_USAGE


def run() -> None:
    """verl-pascal-prefetch: exit with main()'s status; downloads that ignored Ctrl-C do not hold the exit."""
    code = main()
    if any(t.name.startswith("prefetch-") and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
