"""Triton kernels on a machine without CUDA: the interpreter, with one configuration per autotuner.

Triton runs a kernel on the CPU only under ``TRITON_INTERPRET=1``, and it reads that variable when
``@triton.jit`` decorates the kernel, i.e. when the library is imported. Its autotuners benchmark
every configuration on the device before the first launch, which the interpreter cannot do ("0
active drivers"); an autotuner with a single configuration launches it without benchmarking.

So a target that calls a Triton library on CPU imports it with :func:`import_interpreted` (the
variable set for the import only) and calls it inside :func:`interpreter_call` (the variable set again, each autotuner of the
library's modules cut to its first configuration for the call, restored afterwards). Neither
leaves anything changed in the user's process: on a machine with CUDA both do nothing.

A target that offers its autotuners' candidates as a kernel configuration (fla-recurrent's
``-kc.autotune.<i>``) runs the call inside :func:`pinned_candidate` as well, on CPU and on a GPU:
every autotuner holds only its candidate ``i`` for the call (its last where it has fewer), so
the interpreter runs that one instead of the first, and a GPU runs it without benchmarking
(Triton's autotuner launches a single configuration as it is).
Like torch_grad.py it imports nothing from gradcheck_rnn.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INTERPRET = "TRITON_INTERPRET"


def interpreted() -> bool:
    """True where Triton has no GPU to compile for, so its kernels must run in the interpreter."""
    import torch

    return not torch.cuda.is_available()


@contextmanager
def _interpret() -> Iterator[None]:
    """TRITON_INTERPRET=1 for the block, the user's value (or none) restored after."""
    before = os.environ.get(INTERPRET)
    os.environ[INTERPRET] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[INTERPRET]
        else:
            os.environ[INTERPRET] = before


def import_interpreted(module: str) -> Any:
    """``module`` imported with TRITON_INTERPRET=1 where there is no GPU."""
    if module in sys.modules or not interpreted():
        return importlib.import_module(module)
    with _interpret():
        return importlib.import_module(module)


def _autotuners(prefix: str) -> list[Any]:
    """Every Triton autotuner reachable from the loaded modules named ``prefix``…, behind heuristics too."""
    from triton.runtime.autotuner import Autotuner

    found: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == prefix or name.startswith(prefix + ".")):
            continue
        for value in list(vars(module).values()):
            for _ in range(4):  # heuristics and autotune wrap each other through .fn
                if isinstance(value, Autotuner):
                    found[id(value)] = value
                value = getattr(value, "fn", None)
                if value is None:
                    break
    return list(found.values())


def candidate_count(module: str) -> int:
    """The most autotune candidates any autotuner of ``module`` (imported as :func:`import_interpreted`
    does) offers; 1 where it has no autotuner."""
    import_interpreted(module)
    return max((len(tuner.configs) for tuner in _autotuners(module)), default=1)


@contextmanager
def pinned_candidate(prefix: str, candidate: int) -> Iterator[None]:
    """For the block, every autotuner of the ``prefix`` modules with one configuration, its
    ``candidate``-th (its last where it has fewer), on any device; the configurations restored after."""
    saved = [(tuner, tuner.configs) for tuner in _autotuners(prefix) if tuner.configs]
    for tuner, configs in saved:
        tuner.configs = [configs[min(candidate, len(configs) - 1)]]
    try:
        yield
    finally:
        for tuner, configs in saved:
            tuner.configs = configs


def imported_for_a_gpu(prefix: str) -> str | None:
    """Where Triton or the ``prefix`` library was imported in this process without the interpreter on
    a machine without CUDA (before any target imported it), which one: its jit functions were built
    for a GPU and an interpreted kernel cannot call them ("Cannot call @triton.jit'd outside of the
    scope of a kernel"); None when the interpreter can run the library here."""
    if not interpreted():
        return None
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if type(tl.cdiv) is JITFunction:  # Triton's own helpers (tl.cdiv, tl.sigmoid, ...), which kernels call
        return "triton"
    for tuner in _autotuners(prefix):
        kernel = tuner.fn
        while not isinstance(kernel, JITFunction) and getattr(kernel, "fn", None) is not None:
            kernel = kernel.fn
        if type(kernel) is JITFunction:  # not a Gluon kernel (GluonJITFunction), which has no interpreted form
            return prefix
    return None


@contextmanager
def interpreter_call(prefix: str) -> Iterator[None]:
    """On a machine without CUDA, for the block: TRITON_INTERPRET=1 (Triton reads it again when a
    library imports more of it lazily, e.g. gluon) and the autotuners of the ``prefix`` modules
    with their first configuration only."""
    if not interpreted():
        yield
        return
    saved = [(tuner, tuner.configs) for tuner in _autotuners(prefix)]
    for tuner, configs in saved:
        tuner.configs = configs[:1]
    try:
        with _interpret():
            yield
    finally:
        for tuner, configs in saved:
            tuner.configs = configs
