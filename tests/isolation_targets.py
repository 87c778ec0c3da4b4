"""Targets that try to end or fake the run, for tests/test_isolation.py.

Never judge these in the test process itself (``--in-process``): ``hard_exit`` and ``segfaults``
would end it. Each misbehaves on every call, so its rows do not depend on which case comes first.
"""

import os
import signal
import sys

import numpy as np

from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget

_fused = FusedCPUTarget()


def exits_zero(case):
    """A library that calls sys.exit(0) inside its kernel: the run must not end green."""
    sys.exit(0)


def hard_exit(case):
    """os._exit(0): no exception at all; the process is gone with a success status."""
    os._exit(0)


def segfaults(case):
    os.kill(os.getpid(), signal.SIGSEGV)


class ExitsWhenAsked:
    """Its supports_case raises SystemExit(3): an error row, never the run's exit code."""

    def supports_case(self, case):
        raise SystemExit(3)

    def run(self, case):
        return _fused.run(case)


exits_when_asked = ExitsWhenAsked()


def nan_outputs(case):
    """Correct but for NaN in y: a fail that says so."""
    outputs = _fused.run(case)
    outputs.y = np.full(np.shape(outputs.y), np.nan)
    return outputs


def writes_into_its_inputs(case):
    """Correct results, then overwrites its inputs in place: no other run may see it."""
    outputs = _fused.run(case)
    case.x *= 3.0
    for value in case.params.values():
        value *= 2.0
    if case.dy is not None:
        case.dy += 1.0
    return outputs


def slow(case):
    """Correct and slow (0.3 s a run), and says on its first call that judging has begun, so a
    test can interrupt a run in the middle: it touches $GRADCHECK_RNN_TEST_MARKER."""
    import time

    marker = os.environ.get("GRADCHECK_RNN_TEST_MARKER")
    if marker:
        open(marker, "a").close()
    time.sleep(0.3)
    return _fused.run(case)


class CrashesUnderAnEnvironment:
    """A target whose repro lines need an environment variable (as fused-gpu's need TRITON_INTERPRET=1
    under the interpreter) and that crashes its worker: the supervisor writes that row itself."""

    repro_env = "ISOLATION_TARGETS_MODE=crash"

    def run(self, case):
        os._exit(7)


crashes_under_an_environment = CrashesUnderAnEnvironment()


CHILD_RECORD_ENV = "ISOLATION_TARGETS_CHILD_RECORD"
_CHILD = "import json, os, sys, numpy; print(json.dumps({'environ': dict(os.environ), 'numpy': numpy.__file__}))"


def records_a_child_interpreter(case):
    """A target that starts another Python interpreter (a framework in its own venv, a vendor tool):
    what that interpreter sees (its environment, the numpy it imports) goes to the file named by
    $ISOLATION_TARGETS_CHILD_RECORD; then the fused kernel's answer."""
    import subprocess

    child = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True)
    with open(os.environ[CHILD_RECORD_ENV], "w") as record:
        record.write(child.stdout)
    return _fused.run(case)


class AbortsInForwardMode:
    """Correct first order (the fused kernel) whose forward mode aborts its process (SIGABRT), as
    XLA's native code did under the flax target's ``jax.jvp`` in a soak: the jvp row is an error
    that names the signal, and the case's other rows and the run go on."""

    def run(self, case):
        return _fused.run(case)

    def jvp(self, case, tangents):
        os.abort()


aborts_in_forward_mode = AbortsInForwardMode()


_held_maps: list = []


def leaks_memory_maps(case):
    """Correct results, and a seventh of the kernel's memory maps per process kept on each call, as a
    target that keeps a JIT-compiled program per shape does (the flax target's XLA programs): within
    eight cases its process would reach the limit, where a JIT compiler's next map fails."""
    import mmap

    with open("/proc/sys/vm/max_map_count") as file:
        limit = int(file.read())
    _held_maps.extend(mmap.mmap(-1, mmap.PAGESIZE) for _ in range(limit // 7))  # shared: never merged
    return _fused.run(case)
