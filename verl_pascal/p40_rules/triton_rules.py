"""The P40's Triton rule: no Triton kernel may be compiled or launched.

Triton refuses GPUs below compute capability 7.0 ("too old to be supported by
the triton GPU compiler"), so on a P40 every Triton kernel fails at run time:
fused kernels written with ``@triton.jit`` and everything ``torch.compile``'s
Inductor generates for the GPU. On an H200 they run, and the ATen-level guard
never sees them (a Triton kernel is no ATen op). This module closes that gap
by hooking Triton itself, in the process the guard runs in:

- ``triton.compile`` (and ``triton.compiler.compile``): a kernel is compiled;
- ``JITFunction.run``: a ``@triton.jit`` function is launched (compiled or
  taken from Triton's cache);
- Triton's launch-enter hook, where the Triton version has one: any compiled
  kernel is launched;
- Inductor's ``AsyncCompile.triton``, through which every Triton kernel that
  ``torch.compile`` generates is loaded, compiled or cached, whatever the
  launcher (hooked when Inductor is imported, so a run that never compiles
  pays nothing for it).

``inductor_in_process`` also makes Inductor compile in this process, uncached,
so that Triton's own compile hook sees its kernels too.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence

from .guard import Violation

RULE = "Triton kernel"
DETAIL = ("Triton refuses GPUs below compute capability 7.0 (a P40 is 6.1): no @triton.jit kernels, "
          "no torch.compile/Inductor; use eager PyTorch")
# Inductor settings that make every kernel compile in this process, uncached.
INDUCTOR_ENV: Dict[str, str] = {
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
    "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
    "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
}

Report = Callable[[Violation], None]


def inductor_in_process(env: Any = os.environ) -> None:
    """Make torch.compile's Inductor compile in this process, never from a cache."""
    env.update(INDUCTOR_ENV)


def _kernel_name(value: Any) -> str:
    name = getattr(value, "__name__", None) or getattr(getattr(value, "fn", None), "__name__", None)
    return str(name or type(value).__name__)


def _hook_compile(triton: Any, report: Report) -> List[str]:
    compiler = triton.compiler
    original = compiler.compile

    def compile(src: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A001 - Triton's own name
        report(Violation("triton.compile", RULE, f"{_kernel_name(getattr(src, 'fn', src))}: {DETAIL}"))
        return original(src, *args, **kwargs)

    hooked = ["triton.compiler.compile"]
    compiler.compile = compile
    inner = getattr(compiler, "compiler", None)
    if inner is not None and getattr(inner, "compile", None) is original:
        inner.compile = compile
        hooked.append("triton.compiler.compiler.compile")
    if getattr(triton, "compile", None) is original:
        triton.compile = compile
        hooked.append("triton.compile")
    return hooked


def _hook_jit(triton: Any, report: Report) -> List[str]:
    jit_class = triton.runtime.jit.JITFunction
    original = jit_class.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        report(Violation("triton launch", RULE, f"{_kernel_name(self.fn)}: {DETAIL}"))
        return original(self, *args, **kwargs)

    jit_class.run = run
    return ["triton.runtime.jit.JITFunction.run"]


def _hook_launch(triton: Any, report: Report) -> List[str]:
    def enter(metadata: Any) -> None:
        report(Violation("triton launch", RULE, f"{getattr(metadata, 'name', None) or 'a compiled kernel'}: {DETAIL}"))

    knobs = getattr(triton, "knobs", None)
    runtime = getattr(knobs, "runtime", None)
    if runtime is not None and hasattr(runtime, "launch_enter_hook"):
        runtime.launch_enter_hook = enter
        return ["triton.knobs.runtime.launch_enter_hook"]
    kernel_class = getattr(triton.compiler, "CompiledKernel", None)
    if kernel_class is not None and hasattr(kernel_class, "launch_enter_hook"):
        kernel_class.launch_enter_hook = enter
        return ["triton.compiler.CompiledKernel.launch_enter_hook"]
    return []


INDUCTOR_MODULE = "torch._inductor.async_compile"


def _hook_inductor(module: ModuleType, report: Report) -> List[str]:
    compile_class = getattr(module, "AsyncCompile", None)
    original = getattr(compile_class, "triton", None)
    if original is None:
        return []

    def triton(self: Any, kernel_name: str, source_code: str, device_str: str = "cuda", *args: Any, **kwargs: Any) -> Any:
        if device_str != "cpu":
            report(Violation("triton (torch.compile/Inductor)", RULE, f"{kernel_name} on {device_str}: {DETAIL}"))
        return original(self, kernel_name, source_code, device_str, *args, **kwargs)

    compile_class.triton = triton  # type: ignore[union-attr]
    return [f"{INDUCTOR_MODULE}.AsyncCompile.triton"]


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` once module ``name`` has been imported (at once if it already is)."""

    def __init__(self, name: str, then: Callable[[ModuleType], object]) -> None:
        self.name = name
        self.then = then

    def install(self) -> None:
        if self.name in sys.modules:
            self.then(sys.modules[self.name])
        else:
            sys.meta_path.insert(0, self)

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the real finders find it; this runs once
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then(module: ModuleType) -> None:
            exec_module(module)
            self.then(module)

        loader.exec_module = exec_then
        return spec


def install(report: Report) -> List[str]:
    """Hook Triton (when importable) and Inductor in this process; returns what was hooked."""
    AfterImport(INDUCTOR_MODULE, lambda module: _hook_inductor(module, report)).install()
    hooked = [f"{INDUCTOR_MODULE}.AsyncCompile.triton (when imported)"]
    try:
        import triton
        import triton.compiler
        import triton.runtime.jit
    except ImportError:
        return hooked
    return hooked + _hook_compile(triton, report) + _hook_jit(triton, report) + _hook_launch(triton, report)
