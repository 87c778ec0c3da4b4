"""The JAX references' compiled programs: kept in memory, and loaded from disk by a new process.

Both JAX programs (the cuDNN cells' bucketed one, :mod:`.jax_cudnn`, and every other family's
``lax.scan`` of its step, :mod:`.jax_family`) are compile-bound: a new program costs its trace,
lowering and XLA compile (seconds), a call about a millisecond. So each :class:`ProgramStore`
keeps its programs in memory, and writes each one it really compiled, serialized
(:mod:`jax.experimental.serialize_executable`), to ``$GRADCHECK_RNN_JAX_CACHE/gradcheck-rnn-programs/``
(:mod:`.artifacts`), where a later process (a warm run, every pool worker) loads it: no trace, no
lowering, no compile (benchmarks/RESULTS.md, "Costs the code is built around").

A stale file can never serve another program. Its name is the program's key (the bucket, or the
whole padded config) and a fingerprint of jax, jaxlib, the backend, the CPU, the compile options,
x64 and the source of every module the program's maths is read from (:attr:`ProgramStore.sources`:
this file, the reference's module, the families, the config and the parameter layout). A family whose code lives
outside those folders (a user family) is never written to a file: its programs go through JAX's
own persistent compilation cache only, which keys them by the lowered program itself (the trace
and lowering are paid again in each process, the XLA compile is not).

Only an executable that its process really compiled is written. An earlier version (9be385b)
serialized whatever ``.compile()`` returned, and that is usually a program XLA:CPU *loaded from
the persistent cache*, whose serialization lacks the object code: 0.49 MB instead of 0.66 MB for
the ci program, and every later process failed to call it with ``JaxRuntimeError: NOT_FOUND:
Function wrapped_iota not found`` (jax 0.10.2, CPU). So a compile that records a persistent-cache
hit (jax.monitoring, this thread) is not serialized; a process that finds the program only in the
cache compiles it once more under a one-off name (a cache miss, and no cache entry written) to
write the artifact. The program's name carries the fingerprint, so a new jax or an edit of a
source is a cache miss as well, and the first process writes the artifact from its own compile.
Writes are atomic; an artifact that cannot be read or deserialized, or whose program fails when
called, is deleted and the program compiled again (:meth:`ProgramStore.call`), so a bad artifact
costs a compile, never an error row. Results are bit-identical either way
(tests/test_jax_reference.py, tests/test_program_store.py).

Compile options: the CPU backend is asked for LLVM -O0 (``COMPILER_OPTIONS``): it about halves the
compile of a new program for a fraction of a millisecond more per call, which pays until a
process makes thousands of calls of one program (benchmarks/RESULTS.md, "JAX reference: one
program per bucket, loaded, not re-traced" and "Calibrations behind constants").
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import jax
import jax.monitoring
import numpy as np

from ..runtime import jax_compilation_cache
from . import artifacts

# LLVM -O0 for the CPU backend: it halves the compile and costs about a third of a millisecond a
# call, which repays XLA's default only after thousands of calls in one process
# (benchmarks/RESULTS.md, "JAX reference: one program per bucket").
COMPILER_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0}

PACKAGE = Path(__file__).resolve().parent.parent
# The modules a program's maths may be read from besides the reference's own module and this one:
# every family (cells, steps, buckets), the config's properties and the parameter layout. The rest
# of model/ (the draw, case ids, narrowing) never reaches a traced function, and an edit there
# should not cost every machine its compiles.
MATHS_MODULES = ("families/*.py", "model/rnn_config.py", "model/layout.py")

_SEEN = threading.local()  # persistent-cache hits of this thread's compiles


def _on_jax_event(name: str, **_: Any) -> None:
    if name == "/jax/compilation_cache/cache_hits":  # recorded in the thread that compiles
        _SEEN.hits = getattr(_SEEN, "hits", 0) + 1


jax.monitoring.register_event_listener(_on_jax_event)


def maths_sources(module_file: str) -> tuple[str, ...]:
    """The sources a program of the reference in ``module_file`` is read from: that module, this
    one, ``buckets.py`` and :data:`MATHS_MODULES`, sorted."""
    here = Path(__file__).resolve()
    files = {Path(module_file).resolve(), here, here.with_name("buckets.py")}
    for pattern in MATHS_MODULES:
        files.update(PACKAGE.glob(pattern))
    return tuple(sorted(str(f) for f in files))


def is_package_code(obj: Any) -> bool:
    """Whether every class of ``obj`` (a family) is defined in this package: only then do
    :func:`maths_sources` cover its maths, and its programs may be written to files."""
    return all(cls.__module__.startswith(PACKAGE.name + ".") or cls is object for cls in type(obj).__mro__)


def _compile(function: Callable[..., Any], args: tuple, name: str) -> tuple[Any, bool]:
    """Trace, lower and compile ``function`` as ``name``; and whether XLA really compiled it
    (False: loaded from JAX's persistent compilation cache, which must not be serialized)."""

    def program(*a):
        return function(*a)

    program.__name__ = program.__qualname__ = name  # a new function: no in-memory trace or compile reuse
    hits = getattr(_SEEN, "hits", 0)
    fn = jax.jit(program).lower(*args).compile(compiler_options=COMPILER_OPTIONS or None)
    return fn, getattr(_SEEN, "hits", 0) == hits


def _no_cache_writes() -> contextlib.AbstractContextManager:
    """This thread's compiles write no persistent-cache entry (jax's thread-local config state)."""
    try:
        from jax._src import config as jax_config

        return jax_config.persistent_cache_min_compile_time_secs(float("inf"))
    except Exception:  # another jax: the one-off fresh program leaves an unused cache entry
        return contextlib.nullcontext()


class ProgramStore:
    """The compiled programs of one reference, by key: in memory (at most ``capacity``, least
    recently used evicted), and in artifact files for a later process.

    ``sources`` are the files the programs' maths is read from (their hashes are part of every
    artifact's name). Counts are per process: ``compiled`` (traced, lowered and compiled, an XLA
    cache hit included), ``loaded`` (from an artifact), ``written`` (artifacts written).
    """

    def __init__(self, sources: tuple[str, ...], capacity: int | None = None) -> None:
        self.sources = sources
        self.capacity = capacity
        self.counts = {"compiled": 0, "loaded": 0, "written": 0}
        self._lock = threading.Lock()
        self._programs: OrderedDict[Hashable, Any] = OrderedDict()
        self._from_artifact: dict[Hashable, Path | None] = {}

    def keys(self) -> list[Hashable]:
        """The keys of the programs ready in this process, least recently used first."""
        with self._lock:
            return list(self._programs)

    def fingerprint(self) -> str:
        """The artifacts' fingerprint now: jax, jaxlib, backend, CPU, options, x64 and the sources."""
        x64_now = jax.dtypes.canonicalize_dtype(np.float64) == np.float64
        return artifacts.fingerprint(self.sources, repr(sorted(COMPILER_OPTIONS.items())), bool(x64_now))

    def artifact(self, name: str) -> Path | None:
        """The artifact file of the program named ``name`` (None when artifacts are off)."""
        return artifacts.path_for(name, self.fingerprint())

    def call(self, key: Hashable, name: str | None, function: Callable[..., Any], args: tuple) -> Any:
        """``function(*args)`` through its compiled program, fetched to host memory.

        ``key`` names the program in memory; ``name`` names its artifact file (None: never written
        or read, only JAX's persistent cache). A program loaded from an artifact that fails is
        forgotten, its file deleted, and the program compiled again: never an error row.
        """
        fn = self._program(key, name, function, args, use_artifact=True)
        try:
            return jax.device_get(fn(*args))
        except Exception:
            with self._lock:
                path = self._from_artifact.pop(key, None)
                if path is None:
                    raise
                if self._programs.get(key) is fn:
                    del self._programs[key]
            artifacts.discard(path)
        return jax.device_get(self._program(key, name, function, args, use_artifact=False)(*args))

    def _program(self, key: Hashable, name: str | None, function: Callable[..., Any], args: tuple,
                 use_artifact: bool) -> Any:
        with self._lock:
            fn = self._programs.pop(key, None)
            if fn is None:
                self._from_artifact.pop(key, None)
                with jax_compilation_cache():  # this compile only: jax.config stays the caller's
                    fn = self._load_or_compile(key, name, function, args, use_artifact)
            self._programs[key] = fn  # the most recently used last
            while self.capacity is not None and len(self._programs) > self.capacity:
                evicted, _ = self._programs.popitem(last=False)
                self._from_artifact.pop(evicted, None)
        return fn

    def _load_or_compile(self, key: Hashable, name: str | None, function: Callable[..., Any], args: tuple,
                         use_artifact: bool) -> Any:
        fp = self.fingerprint()
        path = artifacts.path_for(name, fp) if name is not None else None
        if use_artifact:
            fn = artifacts.load(path)
            if fn is not None:
                self.counts["loaded"] += 1
                self._from_artifact[key] = path
                return fn
        # The persistent compilation cache's key includes the module name: a new fingerprint (a new
        # jax, an edit of a source) is a new cache entry too, so the first process really compiles.
        fn, compiled_here = _compile(function, args, f"gradcheck_rnn_{fp}")
        self.counts["compiled"] += 1
        if path is None:
            return fn
        if not compiled_here:
            # Loaded from the persistent cache, so its serialization would lack XLA:CPU's object code
            # ("Function wrapped_iota not found" in the next process). Unless another process wrote the
            # artifact meanwhile, compile once more, past the cache, to write a complete one.
            if path.exists() or not artifacts.writable():
                return fn
            with _no_cache_writes():
                fresh, compiled_here = _compile(function, args,
                                                f"gradcheck_rnn_{fp}_fresh_{os.getpid()}_{time.monotonic_ns()}")
            if not compiled_here:
                return fn
            fn = fresh
        if artifacts.store(path, fn):
            self.counts["written"] += 1
        return fn
