"""Process set-up, in one place: torch/BLAS threads and the JAX compilation cache.

Every process that judges (the CLI, a worker, the pytest fixture, the Python API) calls
:func:`set_up_process` before its first case. Nothing here touches JAX's float64 switch: the
JAX reference computes under JAX's *scoped* x64 switch (see references/jax_ref.py), so a
JAX-based target sees the process's own ``jax_enable_x64`` setting, as in the user's program.
"""

from __future__ import annotations

import os
from pathlib import Path

TORCH_THREADS_ENV = "GRADCHECK_RNN_TORCH_THREADS"
JAX_CACHE_ENV = "GRADCHECK_RNN_JAX_CACHE"


def limit_torch_threads() -> None:
    """Judge the tiny cases of a sweep on one torch thread ($GRADCHECK_RNN_TORCH_THREADS overrides).

    Measured on a 2-core machine with the other core busy: a (20×40)·(40×7) float64 matmul took
    11–16 ms with two OpenMP threads spin-waiting on each other and 11 µs with one.
    """
    import torch

    torch.set_num_threads(int(os.environ.get(TORCH_THREADS_ENV, "1")))


def use_persistent_jax_cache() -> None:
    """Keep the JAX reference's compiled programs across runs in ~/.cache/gradcheck-rnn/jax.

    A new program costs ~1.5 s to compile; a new process loads it from the serialized executable
    kept beside this cache (references/artifacts.py) in ~0.05 s without tracing it again. Set $GRADCHECK_RNN_JAX_CACHE to another folder, or to "" to turn it off.
    """
    os.environ.setdefault(JAX_CACHE_ENV, str(Path.home() / ".cache" / "gradcheck-rnn" / "jax"))


def set_up_process() -> None:
    """Threads and the JAX cache for a process that is about to judge."""
    limit_torch_threads()
    use_persistent_jax_cache()
