"""What the pool's fork server imports once, so that every worker forked from it starts at once.

A worker that imports torch and jax itself takes seconds; one forked from a process that already
holds them is ready in a tenth of that (benchmarks/RESULTS.md, "Worker start-up"). The fork
server is a fresh interpreter (``multiprocessing``'s forkserver), so it never ran a torch, BLAS
or XLA computation and holds none of their thread pools: forking it is safe, unlike forking the
supervisor (which may have judged cases itself, e.g. in a test process).

The server ignores SIGINT from the start (:func:`~gradcheck_rnn.run.interrupts.ignore_interrupts`;
``multiprocessing`` itself ignores it only after the preload): a Ctrl-C during these imports is the
supervisor's to report, in one line, and must not print this process's KeyboardInterrupt traceback.

Only libraries and modules that read nothing from the environment at import are preloaded. The
JAX reference (:mod:`gradcheck_rnn.references.jax_cudnn`) reads ``GRADCHECK_RNN_JAX_CACHE`` when
imported, so each worker imports it itself, after taking the supervisor's environment
(:func:`gradcheck_rnn.run.worker.forked_main`); once jax is loaded that import costs little.

The thread counts of OpenMP, MKL and OpenBLAS are fixed when those libraries load, so they are set
here while numpy and torch are imported: one thread each (``GRADCHECK_RNN_TORCH_THREADS``
overrides), so that N workers use N cores. Then the environment is put back as it was: a target,
and any interpreter it starts, sees the user's environment (docs/contracts.md, "Isolation").
An exec'd worker (:func:`gradcheck_rnn.run.worker.main`) imports this module first for the same reason.
"""

from __future__ import annotations

import importlib
import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
MODULES = ("numpy", "torch", "jax", "jax.numpy", "gradcheck_rnn.judging.judge", "gradcheck_rnn.targets",
           "gradcheck_rnn.references.loop", "gradcheck_rnn.judging.checks")


def preload() -> list[str]:
    """Import :data:`MODULES` under the thread variables; the names that could not be imported.

    A module that fails here is left to the worker, which imports it again and reports the error
    as a worker that cannot set up its targets (one sentence, exit 2) instead of a silent server.
    """
    from .interrupts import ignore_interrupts

    ignore_interrupts()
    saved = dict(os.environ)  # jax's import sets variables of its own too (TF_CPP_MIN_LOG_LEVEL)
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, os.environ.get("GRADCHECK_RNN_TORCH_THREADS", "1")))
    missing = []
    try:
        for name in MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - see the docstring
                missing.append(name)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return missing


MISSING = preload()
