"""Targets for tests/test_check_tolerances.py: correct kernels at the edges of what the
reference-free checks must accept."""

from __future__ import annotations

import numpy as np

from gradcheck_rnn import Case, Outputs
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget

_fused = FusedCPUTarget()


def _to_float32(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).astype(np.float32).astype(np.float64)


def float32_outputs_on_float64(case: Case) -> Outputs:
    """fused-cpu computing in float64, with y and dx rounded to float32 on float64 cases: an error
    of at most 2⁻²⁴ relative, inside the float64 tolerance (rtol 1e-7), so the reference check
    accepts it and no other check may fail it."""
    outputs = _fused.run(case)
    if case.config.dtype != "f64":
        return outputs
    grads = dict(outputs.grads)
    if "x" in grads:
        grads["x"] = _to_float32(grads["x"])
    return Outputs(_to_float32(outputs.y), outputs.hy, outputs.cy, grads)


class OnlyZeroStateHeads:
    """fused-cpu for cases whose head gradients of the final states (dhy, dcy) are all zero — a
    kernel with no input for them; it declines the rest in ``supports_case``."""

    def supports_case(self, case: Case) -> bool | str:
        heads = [a for a in (case.dhy, case.dcy) if a is not None]
        return True if not any(np.any(a) for a in heads) else "takes no gradient of the final states"

    def run(self, case: Case) -> Outputs:
        if self.supports_case(case) is not True:
            raise ValueError("non-zero dhy or dcy")
        return _fused.run(case)


only_zero_state_heads = OnlyZeroStateHeads()


class StateHeadsRaise(OnlyZeroStateHeads):
    """:class:`OnlyZeroStateHeads` whose ``supports_case`` raises where that one declines."""

    def supports_case(self, case: Case) -> bool:
        if super().supports_case(case) is not True:
            raise RuntimeError("cannot tell")
        return True


state_heads_raise = StateHeadsRaise()
