"""The statuses of a result row, in one place: what each means, which fail a run, how failures
sort and how every writer (console, report.md, report.html, junit, github) shows them.

* ``pass`` / ``fail`` — the check judged the target;
* ``error`` — the target raised (``SystemExit`` too), returned something that is not an
  ``Outputs``, or its process died or timed out;
* ``skip`` — the target or the check does not apply to this case (the message says why);
* ``reference-disagreement`` — the float64 references (or the finite-difference witness) did not
  agree with each other: never blamed on the target;
* ``nondeterministic`` — two runs of the same case returned different *finite* values;
* ``drifted`` — only with ``--baseline``: the row passed, but a tensor's ratio grew past the drift
  factor since the baseline run (:mod:`gradcheck_rnn.baseline`); a run fails on it only with
  ``--fail-on-drift``.
"""

from __future__ import annotations

import math

STATUSES = ("pass", "fail", "error", "skip", "reference-disagreement", "nondeterministic", "drifted")
# Statuses that make a run fail (exit 1); pass and skip do not.
BAD_STATUSES = frozenset({"fail", "error", "reference-disagreement", "nondeterministic"})
# Most serious first: how a row sorts among the failures, in every writer.
SEVERITY = ("fail", "nondeterministic", "reference-disagreement", "error")
# Statuses of rows that judged the target (their ratios count toward "worst ratio").
JUDGED = ("pass", "fail", "nondeterministic", "drifted")
# Statuses of rows within every tolerance (a drifted row passed, its ratio only grew).
PASSED = ("pass", "drifted")

STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "skip": "dim",
         "reference-disagreement": "bold yellow", "nondeterministic": "bold red", "missing": "bold red",
         "drifted": "bold yellow"}
LABEL = {"reference-disagreement": "disagree", "nondeterministic": "nondet."}  # 8 columns in failure lines


def is_bad(status: str) -> bool:
    """Whether a row with this status makes the run fail."""
    return status in BAD_STATUSES


def worst_first(status: str, ratio: float | None) -> tuple[bool, bool, float]:
    """The key of the one "worst tensor first" order (the console, every report, a row's worst
    tensor, the error picture): a missing tensor, then a NaN ratio (a shape or non-finite failure;
    None is one too), then the largest ratio. Take ``max`` of it, or sort with ``reverse=True``."""
    nan = ratio is None or math.isnan(ratio)
    return status == "missing", nan, math.inf if nan else ratio


def failure_order(status: str, worst_ratio: float | None, case_id: str, target: str, check: str) -> tuple:
    """The sort key of a failing row, the same for the console and every report: by severity, then
    worst ratio first (NaN, Inf and no ratio at all count as the worst), then case, target, check."""
    ratio = math.inf if worst_ratio is None or math.isnan(worst_ratio) else worst_ratio
    rank = SEVERITY.index(status) if status in SEVERITY else len(SEVERITY)
    return rank, -ratio, case_id, target, check
