"""``determinism``: two fresh runs of the same case are bit-identical, or the row is
``nondeterministic`` (as torch.autograd.gradcheck reports non-determinism apart from wrong
gradients). Both runs are validated first, so a non-finite result is a ``fail`` that says so,
never non-determinism; so is a difference that a run with the memory torch hands out
uninitialised poisoned (:mod:`.poisoned`) shows to be a read of memory the target never wrote.

The two runs are back to back: the first is the target's latest run when that ran this very case
(the shared base run, since determinism comes right after reference), else a fresh one."""

from __future__ import annotations

from ...model.compare import TensorError
from ...model.tolerances import Tolerances
from .base import Check, Labels, Nondeterministic, differences
from .poisoned import unwritten_reads


def check_determinism(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    first = call.latest_run_of(case)  # the base run, when determinism follows reference
    if first is None:
        first = call.run(case)
    second = call.run(case)
    rows = differences(case, first, second)
    differing = [row for row in rows if not row.passed]
    for row in differing:
        row.message = f"{row.name}: two runs of the same case differ by up to {row.max_abs:.3g}"
    if differing:
        unwritten = unwritten_reads(call, case, (first, second), tolerances)
        if unwritten:  # what differed is whatever the allocator held: a read of unwritten memory
            return unwritten
        raise Nondeterministic("; ".join(row.message for row in differing[:3]), rows)
    return rows


# right after reference, so that the base run is the first of its two back-to-back runs (one target
# run fewer per case)
CHECK = Check("determinism", check_determinism, order=20, labels=Labels("run 2", "run 1"))
