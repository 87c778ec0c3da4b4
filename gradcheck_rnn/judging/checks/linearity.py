"""``linearity``: gradients for dy1 + dy2 equal the sum of the gradients for dy1 and for dy2
(PyTorch #1532, TF #26331: a repeated backward that accumulates or reuses stale buffers).

Each element is judged by the sum of the three runs' bounds, atol + rtol·|g| for each of g1, g2
and g(dy1 + dy2) (:func:`~gradcheck_rnn.judging.checks.base.compare_runs`): gradients of opposite sign
cancel in g1 + g2, and a bound relative to that sum failed float32-rounded float64 gradients
that the reference check accepts."""

from __future__ import annotations

import numpy as np

from ...model.case import round_to_dtype, with_changes
from ...model.compare import TensorError
from ...model.tolerances import Tolerances
from .base import Check, Labels, compare_runs


def check_linearity(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    rng = CHECK.rng(case)
    dtype = case.config.dtype

    def other(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else round_to_dtype(rng.standard_normal(a.shape), dtype)

    def plus(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else round_to_dtype(a + b, dtype)

    dy2, dhy2, dcy2 = other(case.dy), other(case.dhy), other(case.dcy)
    first = call.base()
    second = call.run(with_changes(case, dy=dy2, dhy=dhy2, dcy=dcy2))
    both = call.run(with_changes(case, dy=plus(case.dy, dy2), dhy=plus(case.dhy, dhy2), dcy=plus(case.dcy, dcy2)))
    # a tensor a run set aside (unusable outside a contract the case breaks: garbage memory may be
    # finite in one run and NaN in the next) is reported as such by the judge, not compared here
    grads = [k for k in first if k not in ("y", "hy", "cy") and k not in call.set_aside]
    return compare_runs(case, both, [{k: first[k] for k in grads}, {k: second[k] for k in grads}], tolerances)


CHECK = Check("linearity", check_linearity, order=60, labels=Labels("grad(dy1+dy2)", "grad(dy1)+grad(dy2)"),
              salt=3)
