"""``determinism``: two fresh runs of the same case are bit-identical, or the row is
``nondeterministic`` (as torch.autograd.gradcheck reports non-determinism apart from wrong
gradients). Both runs are validated first, so a non-finite result is a ``fail`` that says so,
never non-determinism."""

from __future__ import annotations

from ..compare import TensorError
from ..tolerances import Tolerances
from .base import Check, Nondeterministic, differences


def check_determinism(context, call, tolerances: Tolerances) -> list[TensorError]:
    rows = differences(context.case, call.run(context.case), call.run(context.case))
    differing = [row for row in rows if not row.passed]
    for row in differing:
        row.message = f"{row.name}: two runs of the same case differ by up to {row.max_abs:.3g}"
    if differing:
        raise Nondeterministic("; ".join(row.message for row in differing[:3]), rows)
    return rows


CHECK = Check("determinism", check_determinism, shares_base_run=False,
              summary="two runs of the same case are bit-identical")
