"""``future``: extending a sequence by one step must change dx at its old last step exactly as
much as the float64 reference says it does (MXNet #21143, truncated BPTT).

Whether a change is *required* is decided per sequence by the loop reference on the same pair
of cases (:func:`future_pair`, the check's float64 truth), never by a fixed noise floor: a
dead relu unit, a saturated gate or a contribution that decays below what the x tolerance
resolves legitimately changes (almost) nothing, and such sequences are not judged. On the
others, the target's change must match the reference's change within the sum of the x
tolerances of the two runs it is the difference of.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ... import references
from ...model.case import Case, with_changes
from ...model.compare import TensorError, term_bound, to_float64
from ...model.tolerances import Tolerances
from .base import Check, Labels, Skip


@dataclass
class FuturePair:
    """The ``future`` check's two cases (the loss on y only; then the candidate sequences extended
    by one step) and the float64 loop reference's dx on each."""

    base: Case
    extended: Case
    candidates: list[int]  # sequences of length 1..T-1 with a non-zero dy at the step after their end
    dx_before: np.ndarray | None = None
    dx_after: np.ndarray | None = None

    @cached_property
    def dx_drift(self) -> np.ndarray | None:
        """How far a correct kernel's dx may move on each of the two cases through relu kinks
        (their allowances added), or None where no kink reaches dx."""
        from ...references.drift import checked_allowance

        parts = [checked_allowance(c, {"x": dx}).for_tensor("x")
                 for c, dx in ((self.base, self.dx_before), (self.extended, self.dx_after))]
        parts = [p for p in parts if p is not None]
        return sum(parts) if parts else None


def future_pair(context) -> FuturePair:
    """The pair; the loop reference's dx on both when there is a candidate and x is requested.

    The loss is on y only: a head gradient on hy would move from step t to t+1 and change
    dx[t] even in a kernel that drops the future, hiding the bug the check looks for. A
    sequence of length 0 has no step before the new one, so it is never a candidate.
    """
    case, cfg = context.case, context.case.config
    candidates = [b for b in range(cfg.batch_size)
                  if 0 < case.seq_lengths[b] < cfg.max_len and case.dy[case.seq_lengths[b], b].any()]
    base = with_changes(case, dhy=np.zeros_like(case.dhy),
                        dcy=None if case.dcy is None else np.zeros_like(case.dcy))
    lengths = case.seq_lengths.copy()
    lengths[candidates] += 1
    pair = FuturePair(base, with_changes(base, seq_lengths=lengths), candidates)
    if candidates and "x" in case.wants:
        pair.dx_before = to_float64(references.run_reference("loop", pair.base).grads["x"])
        pair.dx_after = to_float64(references.run_reference("loop", pair.extended).grads["x"])
    return pair


def check_future(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    if "x" not in case.wants:
        raise Skip("the input gradient is not requested")
    pair = context.truth(CHECK)
    candidates = pair.candidates
    if not candidates:
        raise Skip("no sequence of length 1..T-1 with a non-zero dy at the step after its end")
    tol = tolerances.for_tensor(case.config.dtype, "x")
    steps = case.seq_lengths[candidates] - 1
    ref_old, ref_new = pair.dx_before[steps, candidates], pair.dx_after[steps, candidates]  # (sequences, I)
    ref_change = ref_new - ref_old
    # Each run of a correct target is within atol + rtol·|reference| of the reference, so their
    # difference is within the sum of the two bounds of the reference's difference.
    slack = term_bound(tol, [ref_old, ref_new])
    decisive = (np.abs(ref_change) > slack).any(axis=1)
    if not decisive.any():
        raise Skip("the float64 reference's change of dx at each extended sequence's last step is within the x "
                   "tolerance (dead relu units, saturated gates or a decayed gradient): nothing to judge")
    before, after = call.run(pair.base), call.run(pair.extended)
    target_change = after["x"][steps, candidates] - before["x"][steps, candidates]
    ratios = (np.abs(target_change - ref_change) / slack)[decisive]
    drift = None
    if ratios.max() > 1 and case.config.family.kinked and pair.dx_drift is not None:
        # a correct low-precision kernel may put a relu unit within rounding of 0 on either side
        # in either run: widen the bound by how far that moves dx (as the reference check does)
        from ...references.drift import widened  # torch: the checks' registry is read without it

        drift = widened(pair.dx_drift[steps, candidates], tol.rtol)
        ratios = (np.abs(target_change - ref_change) / (slack + drift))[decisive]
    k, unit = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
    seq = int(np.asarray(candidates)[decisive][k])
    t, ratio = int(case.seq_lengths[seq]) - 1, float(ratios[k, unit])
    a, b = float(target_change[decisive][k, unit]), float(ref_change[decisive][k, unit])
    error = TensorError("x", "pass" if ratio <= 1 else "fail", abs(a - b), abs(a - b) / abs(b) if b else np.inf,
                        ratio, {"t": t, "b": seq, "unit": int(unit)}, a, b, rtol=tol.rtol, atol=tol.atol,
                        reference="loop")
    if drift is not None:
        error.drift = float(drift.max())
    if ratio > 1:
        error.message = (f"x: extending sequence {seq} by one step changed dx at its last step t={t} by a={a:.3g} "
                         f"where the float64 reference changes it by b={b:.3g}: the gradient from the future "
                         f"does not reach it (truncated BPTT, MXNet #21143)")
    return [error]


CHECK = Check("future", check_future, order=50, labels=Labels("target", "reference", "change of dx"),
              truth=future_pair)
