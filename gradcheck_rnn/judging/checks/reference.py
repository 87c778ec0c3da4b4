"""``reference``: every compared tensor against both float64 references, the worse comparison kept.

y, hy, cy and every *requested* gradient of the target's base run are compared element by
element with the ``loop`` and the ``jax`` reference (|a − b| <= atol + rtol·|b|, see
:mod:`gradcheck_rnn.model.compare`). The references are first compared with each other: if they
disagree the row is ``reference-disagreement``, never a target failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ...model.case import Case
from ...model.compare import TAIL, TensorError, compare_tails, compare_tensor
from ...model.statuses import worst_tensor
from ...model.tolerances import Tolerances
from .base import Check, Labels, ReferenceDisagreement

if TYPE_CHECKING:
    from ...references.drift import DriftAllowance


def compare_outputs(case: Case, actual: dict, expected: dict[str, dict], tensor_names: list[str],
                    tolerances: Tolerances, allowance: Callable[[], "DriftAllowance"]) -> list[TensorError]:
    """Every compared tensor of a target against each reference in ``expected``; the worse
    comparison of each tensor is kept. ``allowance`` gives the case's drift allowance, asked for
    only when a tensor fails the fixed tolerance."""
    from ...references.drift import rejudge_with_drift  # torch: the checks' registry is read without it

    errors = []
    for name in tensor_names:
        tol = tolerances.for_tensor(case.config.dtype, name)
        candidates = []
        for ref_name, ref in expected.items():
            error = compare_tensor(name, actual.get(name), ref[name], tol, case.config)
            error.reference = ref_name
            candidates.append(error)
        errors.append(worst_tensor([e for e in candidates if not e.passed] or candidates))
    # failing tensors are re-judged with the drift a correct kernel of the dtype can have (relu kinks)
    return rejudge_with_drift(case, actual, expected, tolerances, errors, allowance)


def check_reference(context, call, tolerances: Tolerances) -> list[TensorError]:
    if context.disagreement is not None:
        raise ReferenceDisagreement([context.disagreement])
    actual, problems = call.base_with_problems()
    rows = compare_outputs(context.case, actual, context.expected, context.tensor_names(), tolerances,
                           lambda: context.drift)
    # NaN/Inf reach the comparison, which fails them and maps where they are; a tensor that is
    # missing, of the wrong shape or dtype is reported as validation found it
    unusable = {p.name: p for p in problems if p.name not in actual}
    tails = compare_tails(actual, context.case.config) + [p for p in problems if p.name.endswith(TAIL)]
    return [unusable.get(row.name, row) for row in rows] + tails


CHECK = Check("reference", check_reference, order=10, labels=Labels("target", "reference"))
