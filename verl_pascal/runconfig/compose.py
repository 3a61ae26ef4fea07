"""Compose a verl configuration and judge it, in one process (the launch script's ``compose``).

    python -m verl_pascal.runconfig.compose COMPOSED.yaml --min-compute-capability 6.1 -- OVERRIDE...

The composition is verl's own: ``verl.trainer.main_ppo`` runs as
``python -m verl.trainer.main_ppo --cfg job OVERRIDE...`` would (``runpy``,
as ``__main__``, the same argv), so Hydra prints the composed configuration,
every override applied, nothing checked. What it prints on stdout becomes
``COMPOSED.yaml`` (created or emptied first, as a shell's ``>`` does); what it
prints on stderr is shown only when the composition fails, followed by
``verl-ppo: the installed verl rejects the configuration above.`` (exit 1).
A composition that succeeds is then judged by
:func:`verl_pascal.runconfig.check.judge`, whose messages and exit status are
this command's. Two Python starts (each importing verl and torch) become one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import sys
import tempfile
import traceback
from typing import IO, Iterator, List, Optional, Sequence, TextIO, Tuple

from verl_pascal.runconfig import check

#: The module whose ``--cfg job`` composes the configuration.
TRAINER = "verl.trainer.main_ppo"


@contextlib.contextmanager
def fd_redirected(stream: TextIO, target: int) -> Iterator[None]:
    """``stream``'s file descriptor writes into ``target`` until the block ends (Python's and C's output alike)."""
    fd = stream.fileno()
    stream.flush()
    saved = os.dup(fd)
    os.dup2(target, fd)
    try:
        yield
    finally:
        stream.flush()
        os.dup2(saved, fd)
        os.close(saved)


def exit_status(code: object) -> int:
    """The status of a process ended by ``SystemExit(code)``; a message in its place is printed, as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def module_file(module: str) -> Optional[str]:
    """The file ``module`` runs from (None where it is not to be found)."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:  # its package is not there
        return None
    return spec.origin if spec else None


def uncaught(exc: Exception, module: str) -> int:
    """What ``python -m MODULE`` prints and ends with when ``exc`` escapes it (or it cannot be found): 1."""
    origin = module_file(module)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != origin:
        tb = tb.tb_next
    if tb is None and isinstance(exc, ImportError):  # never started: python -m's one line
        print(f"{sys.executable}: {exc}", file=sys.stderr)
    else:  # the traceback from the module's own frames on
        traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
    return 1


def run_trainer(overrides: Sequence[str], module: str = TRAINER) -> int:
    """``python -m MODULE --cfg job OVERRIDE...``, in this process: its exit status."""
    saved_argv = sys.argv
    sys.argv = [module, "--cfg", "job", *overrides]  # runpy puts the module's file first, as -m does
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exit_status(exc.code)
    except Exception as exc:  # what an uncaught exception ends the process with
        return uncaught(exc, module)
    finally:
        sys.argv = saved_argv
    return 0


def compose(composed: str, overrides: Sequence[str], module: str = TRAINER) -> bool:
    """The configuration composed into ``composed``; False (verl's messages shown) when it does not compose."""
    out = os.open(composed, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    with tempfile.TemporaryFile() as err:
        try:
            with fd_redirected(sys.stdout, out), fd_redirected(sys.stderr, err.fileno()):
                status = run_trainer(overrides, module)
        finally:
            os.close(out)
        if status == 0:
            return True
        show(err)
        check.say("the installed verl rejects the configuration above.")
        return False


def show(captured: IO[bytes]) -> None:
    """What the composition printed on stderr, onto stderr."""
    sys.stderr.flush()
    captured.seek(0)
    sys.stderr.buffer.write(captured.read())
    sys.stderr.buffer.flush()


def split_argv(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """The options before ``--`` and the overrides after it, verbatim (an override may start with ``-``)."""
    args = list(argv)
    if "--" not in args:
        return args, []
    at = args.index("--")
    return args[:at], args[at + 1:]


def main(argv: Optional[Sequence[str]] = None, module: str = TRAINER) -> int:
    """1 when the configuration does not compose, else the judgement's status (0: it may run)."""
    options, overrides = split_argv(sys.argv[1:] if argv is None else argv)
    parser = check.parser(__doc__.split("\n\n")[0], "the file the composed configuration is written to")
    args = parser.parse_args(options)
    if not compose(args.composed, overrides, module):
        return 1
    return check.judge(args.composed, args.min_compute_capability)


if __name__ == "__main__":
    raise SystemExit(main())
