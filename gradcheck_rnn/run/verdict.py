"""The engine's one verdict of a run, whatever made it: a sweep, a merge of shards, a detection
run (``mutants``), a calibration, or a run a signal stopped. :func:`conclude` is the only place a
:class:`~gradcheck_rnn.rows.verdict.Run` gets its exit code and reason; callers read them and
never recompute them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from ..rows.result import CaseResult
from ..rows.statuses import BAD_STATUSES
from ..rows.verdict import EXIT_INTERRUPTED, Run, StopReason, tally_verdict
from .spec import RunSpec


class VerdictRule(Protocol):
    """A run's own verdict instead of the sweep's (a detection run's: every mutant caught, no
    false alarm): the exit code, the reason and what results.json stores beside the rows."""

    def __call__(self, results: list[CaseResult], tally: Any, spec: RunSpec) -> tuple[int, str, dict[str, Any]]: ...


def conclude(results: list[CaseResult], spec: RunSpec, tally: Any, stop: StopReason = StopReason.COMPLETE,
             rule: VerdictRule | None = None, drift: dict[str, Any] | None = None,
             seconds: float | None = None) -> Run:
    """The judged run with its one verdict. A run a signal stopped is never a pass: it exits as a
    shell reports the signal (130, 143) and says how far it got. Otherwise ``rule`` decides when
    given, else the sweep's verdict of the ``tally`` (:func:`~gradcheck_rnn.rows.verdict.tally_verdict`),
    with the run's comparison with its baseline (``drift``, stored beside the rows)."""
    if stop.signal is not None:
        results = sorted(results, key=lambda r: -1 if r.case_index is None else r.case_index)  # stable
        run = Run(results, EXIT_INTERRUPTED[stop.signal], "", spec, stop, tally, seconds)
        bad = Counter(r.status for r in results if r.status in BAD_STATUSES)
        found = "; so far " + ", ".join(f"{n} {status}" for status, n in bad.items()) if bad else ""
        run.reason = f"{stop.describe()}: {run.cases_judged} of {len(spec.indices)} cases judged{found}"
        return run
    if rule is not None:
        code, reason, extra = rule(results, tally, spec)
    else:
        code, reason = tally_verdict(tally, spec.named_targets, drift, spec.strict_contracts)
        extra = {} if drift is None else {"drift": drift}
    return Run(results, code, reason, spec, stop, tally, seconds, extra)
