"""The statuses of a result row, in one place: what each means, which fail a run, how failures
sort, how a row's tensors sort (worst first) and how every writer (console, report.md,
report.html, junit, github) shows them.

* ``pass`` / ``fail`` — the check judged the target;
* ``error`` — the target raised (``SystemExit`` too), returned something that is not an
  ``Outputs``, or its process died or timed out;
* ``skip`` — the target or the check does not apply to this case (the message says why);
* ``reference-disagreement`` — the float64 references (or the finite-difference witness) did not
  agree with each other: never blamed on the target;
* ``nondeterministic`` — two runs of the same case returned different *finite* values;
* ``drifted`` — only with ``--baseline``: the row passed, but a tensor's ratio grew past the drift
  factor since the baseline run (:mod:`gradcheck_rnn.workflows.baseline`); a run fails on it only with
  ``--fail-on-drift``;
* ``out-of-contract`` — the case breaks a precondition the target's library documents (a
  :mod:`contract <gradcheck_rnn.targets.contracts>` the target declares), and every tensor that did
  not pass is one that breaking it can reach: what the target does there is shown, with the contract
  quoted, and counted, but fails a run only with ``--strict-contracts``. A tensor outside the
  contract that did not pass has this status too, inside a row that may still fail on the others.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, TypeVar

from .numbers import from_json_number

T = TypeVar("T")

STATUSES = ("pass", "fail", "error", "skip", "reference-disagreement", "nondeterministic", "drifted",
            "out-of-contract")
# Statuses that make a run fail (exit 1); pass and skip do not.
BAD_STATUSES = frozenset({"fail", "error", "reference-disagreement", "nondeterministic"})
# Most serious first: how a row sorts among the failures, in every writer.
SEVERITY = ("fail", "nondeterministic", "reference-disagreement", "error", "out-of-contract")
# Statuses of rows the reports detail (the failures, and what was seen outside a contract).
SHOWN_STATUSES = BAD_STATUSES | {"out-of-contract"}
# Statuses of rows that judged the target (their ratios count toward "worst ratio").
JUDGED = ("pass", "fail", "nondeterministic", "drifted")
# Statuses of rows within every tolerance (a drifted row passed, its ratio only grew).
PASSED = ("pass", "drifted")

STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "skip": "dim",
         "reference-disagreement": "bold yellow", "nondeterministic": "bold red", "missing": "bold red",
         "drifted": "bold yellow", "out-of-contract": "yellow"}
LABEL = {"reference-disagreement": "disagree", "nondeterministic": "nondet.", "out-of-contract": "contract"}  # 8 columns in failure lines


def is_bad(status: str) -> bool:
    """Whether a row with this status makes the run fail."""
    return status in BAD_STATUSES


def failing_statuses(strict_contracts: bool = False) -> frozenset[str]:
    """The statuses that fail a run: :data:`BAD_STATUSES`, and ``out-of-contract`` under ``--strict-contracts``."""
    return BAD_STATUSES | {"out-of-contract"} if strict_contracts else BAD_STATUSES


def is_shown(status: str) -> bool:
    """Whether the reports detail a row with this status (a failure, or a row outside a contract)."""
    return status in SHOWN_STATUSES


def _badness(status: str, ratio: float | None) -> tuple[bool, bool, float]:
    """The key of the one "worst tensor first" order: a missing tensor, then a NaN ratio (a shape
    or non-finite failure; None is one too), then the largest ratio."""
    nan = ratio is None or math.isnan(ratio)
    return status == "missing", nan, math.inf if nan else ratio


def held_facts(tensor: Any) -> tuple[str, float | None]:
    """The status and ratio of a tensor comparison held in memory (a ``TensorError``)."""
    return tensor.status, tensor.ratio


def stored_facts(tensor: dict[str, Any]) -> tuple[str, float]:
    """The status and ratio of a tensor as a stored row holds it (a dict; NaN stored as null)."""
    return tensor["status"], from_json_number(tensor.get("ratio"))


def tensors_worst_first(tensors: Iterable[T], facts: Callable[[T], tuple[str, float | None]] = held_facts) -> list[T]:
    """Tensors in the one "worst tensor first" order that the console, every report, a row's worst
    tensor and the error pictures use: missing, then NaN, then the largest ratio (ties keep their
    order). ``facts`` reads a tensor's status and ratio: :func:`held_facts` or :func:`stored_facts`."""
    return sorted(tensors, key=lambda tensor: _badness(*facts(tensor)), reverse=True)


def worst_tensor(tensors: Iterable[T], facts: Callable[[T], tuple[str, float | None]] = held_facts) -> T | None:
    """The first of :func:`tensors_worst_first` (without sorting them all), or None when there is none."""
    return max(tensors, key=lambda tensor: _badness(*facts(tensor)), default=None)


def failure_order(status: str, worst_ratio: float | None, case_id: str, target: str, check: str) -> tuple:
    """The sort key of a failing row, the same for the console and every report: by severity, then
    worst ratio first (NaN, Inf and no ratio at all count as the worst), then case, target, check."""
    ratio = math.inf if worst_ratio is None or math.isnan(worst_ratio) else worst_ratio
    rank = SEVERITY.index(status) if status in SEVERITY else len(SEVERITY)
    return rank, -ratio, case_id, target, check
