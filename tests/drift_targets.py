"""A target for tests/test_baseline.py: the fused CPU kernel, or (GROWTH = 50) a copy of it whose
gradients carry 50× its own rounding error, still under tolerance: the change ``--baseline`` must notice."""

from __future__ import annotations

import os

import torch

from gradcheck_rnn import Outputs
from gradcheck_rnn.model.case import Case
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget

# How many times its own error each gradient of kernel() carries: 1 is the correct kernel. Tests set it
# and judge in their own process (--in-process), where the target reads it, or set GROWTH_ENV for
# worker processes, which take the command's environment.
GROWTH = 1.0
GROWTH_ENV = "DRIFT_TARGETS_GROWTH"


class InFloat64(FusedCPUTarget):
    """fused-cpu run in float64 whatever the case's dtype: what the noisy copy's error is measured against."""

    dtypes = {"f64": torch.float64, "f32": torch.float64}


_fused, _exact = FusedCPUTarget(), InFloat64()


def kernel(case: Case) -> Outputs:
    """The fused CPU kernel with each gradient's error (against itself in float64) made GROWTH times larger."""
    outputs = _fused.run(case)
    growth = float(os.environ.get(GROWTH_ENV, GROWTH))
    if growth == 1.0:
        return outputs
    exact = _exact.run(case)
    grads = {name: (exact.grads[name] + growth * (value.double() - exact.grads[name])).to(value.dtype)
             for name, value in outputs.grads.items()}
    return Outputs(outputs.y, outputs.hy, outputs.cy, grads)
