"""``stateless``: run A, run B (same shapes, other weights), run A again: A is bit-identical
(ONNX Runtime #3797 stale buffers, MXNet #16037 stale weights).

The first run of A is the shared base run: whatever ran between it and A's second run (the other
checks' cases, then B) is "another case in between", so one fresh run of A is saved.

When the two runs of A differ, a run with the memory torch hands out uninitialised poisoned
(:mod:`.poisoned`) is asked first: if it shows a read of memory the target never wrote, that is
the row (``fail``, in words), whatever the allocator happened to hold twice in a row. Else A is
run once more right after: if even back-to-back runs of the same case differ, carried state
cannot be told from non-determinism and the row is ``nondeterministic``; otherwise the other
case's run changed A's result: ``fail``.
"""

from __future__ import annotations

from ...model.case import make_case
from ...model.compare import TensorError
from ...model.tolerances import Tolerances
from .base import Check, Labels, Nondeterministic, differences
from .poisoned import unwritten_reads


def check_stateless(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    first = call.base()
    other = make_case(case.config, case.seq_lengths, (case.seed + 1) % 2**31, wants=case.wants_group,
                      heads=case.heads, initial_state=case.initial_state)
    call.run_between(other)  # its outputs are not this case's: only the call in between matters
    again = call.run(case)
    rows = differences(case, first, again)
    if all(row.passed for row in rows):
        return rows
    # asked before the back-to-back runs: two of those can meet the same garbage and agree
    unwritten = unwritten_reads(call, case, (first, again), tolerances)
    if unwritten:  # what differed is whatever the allocator held: a read of unwritten memory
        return unwritten
    back_to_back = differences(case, again, call.run(case))
    if not all(row.passed for row in back_to_back):
        for row in back_to_back:
            if not row.passed:
                row.message = f"{row.name}: back-to-back runs of the same case differ by up to {row.max_abs:.3g}"
        raise Nondeterministic("runs of the same case differ even back to back, so state carried between "
                               "calls cannot be told from non-determinism", back_to_back)
    for row in rows:
        if not row.passed:
            row.message = f"{row.name}: state carried between calls — a run of another case changed this one's result"
    return rows


CHECK = Check("stateless", check_stateless, order=70, labels=Labels("after another case", "run 1"))
