"""Process set-up, in one place: torch/BLAS threads and the JAX compilation cache.

Two ways in, because the library must leave its caller's process as it found it (threads,
environment, JAX config; docs/contracts.md, "Process set-up") while the command line and the
pool's workers are processes of our own:

- :func:`judging` (``gr.check``, ``gr.sweep``, the pytest fixture): the settings for the duration
  of a ``with`` block, and the caller's threads and environment back afterwards;
- :func:`set_up_process` (the command line, a worker): the same settings, kept.

Neither touches ``jax.config``: the JAX reference enters :func:`jax_compilation_cache` around its
own compiles only (thread-local, restored on exit), and computes under JAX's *scoped* x64 switch
(see references/jax_cudnn.py), so a JAX-based target sees the process's own settings
(``jax_enable_x64`` included), as in the user's program.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

TORCH_THREADS_ENV = "GRADCHECK_RNN_TORCH_THREADS"
IN_PROCESS_ENV = "GRADCHECK_RNN_IN_PROCESS"  # --in-process; gr.check/gr.sweep read it too
JAX_CACHE_ENV = "GRADCHECK_RNN_JAX_CACHE"
CACHE_DIR_ENV = "GRADCHECK_RNN_CACHE_DIR"  # the root of everything cached: the JAX cache, the tests' venvs


def cache_dir() -> Path:
    """The folder under which gradcheck-rnn and its tests cache things: $GRADCHECK_RNN_CACHE_DIR, or
    ~/.cache/gradcheck-rnn when unset or "". The JAX cache is its ``jax`` (unless
    $GRADCHECK_RNN_JAX_CACHE names another) and the tests' MXNet and flax/Keras venvs its ``venvs``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "gradcheck-rnn").expanduser()


def limit_torch_threads() -> None:
    """Judge the tiny cases of a sweep on one torch thread ($GRADCHECK_RNN_TORCH_THREADS overrides).

    On a 2-core machine with the other core busy, two OpenMP threads spin-waiting on each other
    made a tiny float64 matmul about a thousand times slower than one thread
    (benchmarks/RESULTS.md, "Costs the code is built around").
    """
    import torch

    torch.set_num_threads(int(os.environ.get(TORCH_THREADS_ENV, "1")))


def use_persistent_jax_cache() -> None:
    """Keep the JAX reference's compiled programs across runs in :func:`cache_dir`/jax.

    A new program costs seconds to compile; a new process loads it from the serialized executable
    kept beside this cache (references/artifacts.py) without tracing it again, in a small part of
    that (benchmarks/RESULTS.md, "Costs the code is built around"). Set $GRADCHECK_RNN_JAX_CACHE
    to another folder, or to "" to turn it off.
    The folder is named in the environment so that pool workers, started from it, share it.
    """
    os.environ.setdefault(JAX_CACHE_ENV, str(cache_dir() / "jax"))


def set_up_process() -> None:
    """Threads and the JAX cache for a process of our own (the command line, a worker), kept."""
    limit_torch_threads()
    use_persistent_jax_cache()


@contextlib.contextmanager
def judging() -> Iterator[None]:
    """:func:`set_up_process` for the duration of the block, in a caller's process: its torch
    threads and its environment (the JAX cache folder's variable) are restored on exit."""
    import torch

    threads = torch.get_num_threads()
    cache = os.environ.get(JAX_CACHE_ENV)
    try:
        set_up_process()
        yield
    finally:
        torch.set_num_threads(threads)
        if cache is None:
            os.environ.pop(JAX_CACHE_ENV, None)
        else:
            os.environ[JAX_CACHE_ENV] = cache


def jax_cache_folder() -> str | None:
    """The JAX reference's cache folder: $GRADCHECK_RNN_JAX_CACHE, None when unset or "" (off)."""
    return os.environ.get(JAX_CACHE_ENV) or None


@contextlib.contextmanager
def jax_compilation_cache() -> Iterator[None]:
    """JAX's persistent compilation cache in :func:`jax_cache_folder` for the compiles inside the
    block, on this thread, every program written (the reference's compile costs the same either way).

    Thread-local config states, so ``jax.config`` keeps the caller's values. JAX opens its cache
    once, at the first compile, and keeps that folder for every later compile; so it is closed on
    entry (our compiles open ours) and on exit (the caller's next compile opens the caller's own).
    """
    folder = jax_cache_folder()
    if folder is None:
        yield
        return
    from jax._src import compilation_cache, config

    compilation_cache.reset_cache()
    try:
        with config.compilation_cache_dir(folder), config.persistent_cache_min_compile_time_secs(0.0):
            yield
    finally:
        compilation_cache.reset_cache()


@contextlib.contextmanager
def poisoned_memory() -> Iterator[None]:
    """Memory torch hands out uninitialised (``torch.empty`` and its kin, ``new_empty``,
    ``resize_``) filled with NaN for the duration of the block, torch's settings restored after.

    torch does this only under deterministic algorithms
    (``torch.utils.deterministic.fill_uninitialized_memory``), switched on here with
    ``warn_only``: an op without a deterministic implementation (some CUDA kernels) warns instead
    of raising, so a correct target is never made to fail by the switch itself. What it cannot
    reach: numpy's ``np.empty``, JAX (whose buffers are always written), a target in another
    interpreter (``NAME@PYTHON``), and memory a C++ or CUDA extension allocates itself."""
    import warnings

    import torch

    # torch's own switch, without use_deterministic_algorithms' first import of torch._inductor
    # (4 s; it only sets inductor's flag for compiled code, which poisoning does not need)
    switch = getattr(torch._C, "_set_deterministic_algorithms", torch.use_deterministic_algorithms)
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory)
    switch(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")
            yield
    finally:
        switch(saved[0], warn_only=saved[1])
        torch.utils.deterministic.fill_uninitialized_memory = saved[2]
