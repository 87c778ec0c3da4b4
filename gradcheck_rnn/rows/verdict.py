"""The one verdict of a run: its exit code, its one-sentence reason and why it stopped.

Whatever made the run (a sweep, a merge of shards, a detection run, a calibration, a run a signal
stopped), :func:`conclude` is the only place a :class:`Run` gets its exit code and reason: the
engine (:func:`gradcheck_rnn.run.judge_run`, and the merge) calls it once; results.json stores
the verdict and every writer, the console included, reads the stored value. Exit codes:
docs/contracts.md, "Exit codes".
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from ..model.numbers import plural
from .result import CaseResult
from ..model.statuses import BAD_STATUSES, PASSED, failing_statuses

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_NOTHING_CHECKED = 0, 1, 2, 5
# An interrupted run exits as a shell reports a process ended by the signal: 128 + its number.
EXIT_INTERRUPTED = {"SIGINT": 130, "SIGTERM": 143}


class StopReason(enum.Enum):
    """Why a run stopped judging (as hypothesis's ``ExitReason``): every row judged, ``--fail-fast``
    after the first row that did not pass, or a signal."""

    COMPLETE = "complete"
    FAIL_FAST = "fail-fast"
    SIGINT = "SIGINT"
    SIGTERM = "SIGTERM"

    def describe(self) -> str:
        """One phrase for a reader: ``stopped by --fail-fast after the first row that did not pass``."""
        return {StopReason.COMPLETE: "every case judged",
                StopReason.FAIL_FAST: "stopped by --fail-fast after the first row that did not pass",
                StopReason.SIGINT: "interrupted by SIGINT",
                StopReason.SIGTERM: "interrupted by SIGTERM"}[self]

    @property
    def signal(self) -> str | None:
        """The signal's name when one stopped the run, else None."""
        return self.value if self in (StopReason.SIGINT, StopReason.SIGTERM) else None


def top_skip_reasons(skips: dict[str, Counter[str]], target: str | None = None, count: int = 2) -> str:
    """The most frequent skip reasons (of one target, or of all) in a tally's ``skips`` (target ->
    reason -> rows), e.g. ``'needs CUDA' ×40``."""
    reasons: Counter[str] = Counter()
    for name, counter in skips.items():
        if target in (None, name):
            reasons.update(counter)
    return "; ".join(f"{reason!r} ×{n}" for reason, n in reasons.most_common(count))


def tally_verdict(tally: Any, named_targets: Iterable[str] = (), drift: dict[str, Any] | None = None,
                  strict_contracts: bool = False) -> tuple[int, str]:
    """The exit code of a judging command and its one-sentence reason (docs/contracts.md, "Exit
    codes"), from the run's :class:`~gradcheck_rnn.rows.log.Tally`: no row need be held.

    0 all passed (skips allowed); 1 any fail, error, reference disagreement or non-determinism,
    or a drifted row with ``--fail-on-drift``, or an out-of-contract row with ``--strict-contracts``; 5 nothing was checked — no result, every result a
    skip, a target named on the command line judged on no case at all, or, with
    ``--fail-on-drift``, no row compared with the baseline (a vacuous run is never "all passed").
    1 wins over 5. Drifted rows without ``--fail-on-drift`` pass, with a warning, and so do
    out-of-contract rows without ``--strict-contracts`` (they count as judged). ``drift`` is the
    run's comparison with its baseline (results.json's ``"drift"``), None without one.
    """
    fail_on_drift = drift is not None and drift["fail_on_drift"]
    failing = failing_statuses(strict_contracts) | ({"drifted"} if fail_on_drift else set())
    bad = {status: n for status, n in tally.statuses.items() if status in failing and n}
    if bad:
        return EXIT_FAIL, "failures found: " + ", ".join(f"{n} {status}" for status, n in bad.items())
    if not tally.rows:
        return EXIT_NOTHING_CHECKED, "nothing was checked: no case was drawn or no check was enabled"
    judged = Counter({target: sum(counts[s] for counts in checks.values() for s in (*PASSED, "out-of-contract"))
                      for target, checks in tally.checks.items()})
    if not sum(judged.values()):
        every = "the only result was" if tally.rows == 1 else f"all {tally.rows} results were"
        return EXIT_NOTHING_CHECKED, f"nothing was checked: {every} skipped ({top_skip_reasons(tally.skips)})"
    for name in dict.fromkeys(named_targets):
        if not judged[name]:
            return EXIT_NOTHING_CHECKED, (f"target {name} was judged on no case: every result was skipped "
                                          f"({top_skip_reasons(tally.skips, name) or 'it ran on no case'})")
    if fail_on_drift and not drift["compared"]:
        return EXIT_NOTHING_CHECKED, (f"no drift was checked: no passing row of this run has a row in the baseline "
                                      f"{drift['baseline']}, and --fail-on-drift never passes on none")
    drifted, outside = tally.statuses["drifted"], tally.statuses["out-of-contract"]
    warning = f"; warning: {drifted} drifted since the baseline (--fail-on-drift fails on it)" if drifted else ""
    if outside:
        warning += f"; note: {plural(outside, 'result')} out-of-contract (--strict-contracts fails on them)"
    return EXIT_PASS, f"all passed: {plural(sum(judged.values()), 'result')} judged{warning}"


@dataclass
class Run:
    """What :func:`gradcheck_rnn.sweep` returns: every row, and the run's one verdict."""

    results: list[CaseResult]
    exit_code: int
    reason: str
    spec: Any = None  # the gradcheck_rnn.run.RunSpec that was judged
    stop: StopReason = StopReason.COMPLETE
    # the run's totals (gradcheck_rnn.rows.log.Tally), made as its rows arrived: with a row log,
    # ``results`` holds only the rows that did not pass, and the counts of every row are here
    tally: Any = None
    seconds: float | None = None  # the wall time of judging it (judge_run); None: not timed (a merged run)
    # what the verdict's rule adds to results.json beside the rows (a detection run's table, a baseline's drift)
    extra: dict[str, Any] = field(default_factory=dict)
    # Counted once, when the verdict is made, from the tally (the one place a run's tally is read
    # after its store wrote it): how many rows and cases were judged, and the tallies results.json
    # stores (:meth:`~gradcheck_rnn.rows.log.Tally.document_part`; None without a tally).
    rows: int = field(init=False)
    cases_judged: int = field(init=False)
    totals: dict[str, Any] | None = field(init=False)

    def __post_init__(self) -> None:
        if self.tally is None:
            self.rows = len(self.results)
            self.cases_judged = len({r.case_id if r.case_index is None else r.case_index for r in self.results})
            self.totals = None
        else:
            self.rows, self.cases_judged, self.totals = (self.tally.rows, self.tally.cases_judged,
                                                         self.tally.document_part())

    @property
    def failures(self) -> list[CaseResult]:
        """The rows that make the run fail (fail, error, reference-disagreement, nondeterministic;
        out-of-contract too when the run's contracts are strict)."""
        failing = failing_statuses(getattr(self.spec, "strict_contracts", False))
        return [r for r in self.results if r.status in failing]

    def verdict_json(self) -> dict[str, Any]:
        """The stored verdict: what results.json records under ``"verdict"``."""
        return {"exit_code": self.exit_code, "reason": self.reason}

    @property
    def complete(self) -> bool:
        """Whether every row was judged (False when --fail-fast or a signal stopped the run)."""
        return self.stop is StopReason.COMPLETE

    @property
    def interrupted(self) -> str | None:
        """``"SIGINT"`` or ``"SIGTERM"`` when a signal stopped the run, else None."""
        return self.stop.signal



class VerdictRule(Protocol):
    """A run's own verdict instead of the sweep's (a detection run's: every mutant caught, no
    false alarm): the exit code, the reason and what results.json stores beside the rows."""

    def __call__(self, results: list[CaseResult], tally: Any, spec: Any) -> tuple[int, str, dict[str, Any]]: ...


def conclude(results: list[CaseResult], spec: Any, tally: Any, stop: StopReason = StopReason.COMPLETE,
             rule: VerdictRule | None = None, extra: dict[str, Any] | None = None,
             seconds: float | None = None) -> Run:
    """The judged run with its one verdict. A run a signal stopped is never a pass: it exits as a
    shell reports the signal (130, 143) and says how far it got. Otherwise ``rule`` decides when
    given, else the sweep's verdict of the ``tally`` (:func:`~gradcheck_rnn.rows.verdict.tally_verdict`).
    ``extra``: what the run's observers stored beside the rows (a baseline's ``"drift"``, which the
    sweep's verdict reads), kept with what the rule stores."""
    if stop.signal is not None:
        results = sorted(results, key=lambda r: -1 if r.case_index is None else r.case_index)  # stable
        run = Run(results, EXIT_INTERRUPTED[stop.signal], "", spec, stop, tally, seconds)
        bad = Counter(r.status for r in results if r.status in BAD_STATUSES)
        found = "; so far " + ", ".join(f"{n} {status}" for status, n in bad.items()) if bad else ""
        run.reason = f"{stop.describe()}: {run.cases_judged} of {len(spec.indices)} cases judged{found}"
        return run
    extra = dict(extra or {})
    if rule is not None:
        code, reason, found = rule(results, tally, spec)
        extra.update(found)
    else:
        code, reason = tally_verdict(tally, spec.named_targets, extra.get("drift"), spec.strict_contracts)
    return Run(results, code, reason, spec, stop, tally, seconds, extra)
