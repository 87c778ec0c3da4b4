"""Targets for tests/test_engine.py: correct kernels that misbehave around the protocol."""

import numpy as np

from gradcheck_rnn import Outputs
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget

_fused = FusedCPUTarget()


def writes_into_its_inputs(case):
    """Correct results, then overwrites every array of the case in place (a kernel reusing its
    input buffers): no other run, of this target or another, may see it."""
    outputs = _fused.run(case)
    case.x *= 3.0
    case.params[next(iter(case.params))] *= 2.0
    for name in ("h0", "c0", "dy", "dhy", "dcy"):
        array = getattr(case, name)
        if array is not None:
            array += 1.0
    case.seq_lengths[:] = 1
    return outputs


def drops_the_input_gradient(case):
    outputs = _fused.run(case)
    outputs.grads.pop("x", None)
    return outputs


def wrong_shapes(case):
    outputs = _fused.run(case)
    return Outputs(outputs.y[:-1], outputs.hy, outputs.cy,
                   {k: (v[:-1] if k == "x" else v) for k, v in outputs.grads.items()})


def returns_none(case):
    return None


def always_nan(case):
    outputs = _fused.run(case)
    return Outputs(outputs.y * float("nan"), outputs.hy * float("nan"), None if outputs.cy is None else outputs.cy,
                   {k: v * float("nan") for k, v in outputs.grads.items()})


def integer_gradients(case):
    outputs = _fused.run(case)
    return Outputs(outputs.y, outputs.hy, outputs.cy,
                   {k: (np.zeros(np.shape(v), dtype=np.int64) if k == "x" else v) for k, v in outputs.grads.items()})


def raises_with_brackets(case):
    stacks = {}
    key = "h"
    stacks[key] = stacks[key]  # a KeyError whose source line holds [key]


def raises_markup(case):
    raise ValueError("shape [/b] mismatch")


class Counting:
    """fused-cpu, counting its calls."""

    def __init__(self):
        self.calls = 0

    def run(self, case):
        self.calls += 1
        return _fused.run(case)


counting = Counting()


def sees_x64(case):
    """Raises when the process's JAX float64 switch is on while this target runs."""
    import jax

    if jax.config.jax_enable_x64 or jax.numpy.zeros(1).dtype != jax.numpy.float32:
        raise AssertionError("jax_enable_x64 is on inside the target")
    return _fused.run(case)


def takes_no_case():
    """A zero-argument callable: calling it with the case fails before any of its lines runs."""
    return None


def overflows_on_other_seeds(case):
    """Correct on the case under test (data seed 11); non-finite y on any other, as a correct
    low-precision kernel may be on a case whose values it cannot represent."""
    outputs = _fused.run(case)
    if case.seed != 11:
        outputs.y = np.full(np.shape(outputs.y), np.inf)
    return outputs
