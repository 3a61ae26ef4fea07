"""What the deprecated bin/ commands share: each now forwards to a console
command of the verl_pascal package (``pip install -e .`` puts them on PATH).
They go in verl-pascal 0.2.0."""

import os
import sys


def forward(command: str, module: str) -> None:
    """Say what replaces this script, then run ``python -m module`` with the same arguments.

    The checkout's root goes on PYTHONPATH of the new process, so the script
    still works where the package is not installed.
    """
    script = os.path.basename(sys.argv[0])
    print(
        f"bin/{script} is deprecated and goes in verl-pascal 0.2.0: run `{command}` "
        "(`pip install -e .` in this checkout puts it on PATH).",
        file=sys.stderr,
    )
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]], {**os.environ, "PYTHONPATH": path})
