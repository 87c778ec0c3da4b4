"""``poisoned``: the target run with the memory torch hands out uninitialised filled with NaN.

A kernel that reads or returns memory it never wrote (a result buffer from ``torch.empty`` whose
rows past the last sequence are never written, fla-org/flash-linear-attention #892; QwenLM/FlashQLA
#36) shows it as whatever the allocator held before: zeros (no bug seen), finite garbage (a wrong
value, or two runs that differ: ``nondeterministic``), or NaN. Under
:func:`gradcheck_rnn.runtime.poisoned_memory` that memory is NaN every time, so every element
computed from it is NaN and is told apart from the run without poison, which is finite there: the
row fails and says so in words ("reads memory it never wrote: x[tail] rows 0–1").

Its own check rather than a mode of every run: torch fills memory only under deterministic
algorithms, which change the kernels torch picks (and warn where none is deterministic), so the
base run every other check shares stays the target as its user calls it. The other tensors of the
poisoned run must equal the base run within the sum of the two runs' bounds. The determinism and
stateless checks ask :func:`unwritten_reads` before they call two differing runs
non-determinism, so unwritten memory is never reported as ``nondeterministic``.

What it cannot reach: numpy (``np.empty``), JAX (its buffers are always written), a target in
another interpreter (``NAME@PYTHON``), and memory a compiled extension allocates itself: there it
passes without proving anything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...model.case import Case
from ...model.compare import TensorError, compare_tensor
from ...model.tolerances import Tolerances
from .base import Arrays, Check, Labels


def first_axis_ranges(mask: np.ndarray) -> str:
    """The indices of ``mask``'s first axis where any element is set, as ranges: ``7–9, 12``."""
    rows = np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))
    spans: list[list[int]] = []
    for row in rows.tolist():
        if spans and row == spans[-1][1] + 1:
            spans[-1][1] = row
        else:
            spans.append([row, row])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)


def compare_poisoned(case: Case, poisoned: Arrays, clean: Arrays, tolerances: Tolerances,
                     witnesses: Sequence[Arrays] = ()) -> list[TensorError]:
    """Each tensor of the poisoned run against the clean run: non-finite where the clean run is
    finite fails as an unwritten read; otherwise within the sum of the two runs' bounds.

    ``witnesses``: other runs without poison. The memory a clean run never wrote holds what the
    allocator held, which can be NaN too (left by an earlier poisoned run): an element finite in
    any of them is evidence as well, so the read is named whole, never mistaken for state or
    non-determinism."""
    rows = []
    for name, value in clean.items():
        got = poisoned.get(name)
        if got is None:  # missing or unreadable: validation's row says so
            continue
        tol = tolerances.for_tensor(case.config.dtype, name)
        row = compare_tensor(name, got, value, tol, case.config, terms=[got, value])
        if got.shape == value.shape:
            finite = np.isfinite(value)
            for witness in witnesses:
                other = witness.get(name)
                if other is not None and other.shape == value.shape:
                    finite |= np.isfinite(other)
            unwritten = ~np.isfinite(got) & finite
            if unwritten.any():
                row.status = "fail"
                row.message = (f"reads memory it never wrote: {name} rows {first_axis_ranges(unwritten)} "
                               f"({int(unwritten.sum())} element(s) NaN with uninitialised memory poisoned, "
                               f"finite without)")
        rows.append(row)
    return rows


def unwritten_reads(call, case: Case, runs: Sequence[Arrays], tolerances: Tolerances) -> list[TensorError]:
    """The rows of :func:`compare_poisoned` (against the first of ``runs``, the others its
    witnesses) that read unwritten memory ([] when none does, or when the poisoned run raises):
    what a check that found two runs differing asks, with both, before it calls them
    non-deterministic or stateful."""
    try:
        poisoned, _ = call.run_poisoned(case)
    except Exception:  # noqa: BLE001 - a run that raises poisoned says nothing of unwritten memory
        return []
    return [row for row in compare_poisoned(case, poisoned, runs[0], tolerances, runs[1:])
            if row.message.startswith("reads memory it never wrote")]


def check_poisoned(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    clean = call.base()
    poisoned, problems = call.run_poisoned(case)
    unusable = [p for p in problems if p.name not in poisoned]  # missing, wrong shape or dtype
    return compare_poisoned(case, poisoned, clean, tolerances) + unusable


CHECK = Check("poisoned", check_poisoned, order=90, labels=Labels("under poisoned memory", "run 1"))
