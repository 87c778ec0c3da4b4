"""Judging targets on cases: references first, then every requested tensor, one result each.

Order of judgement for one case × target:

1. ``skip`` when the target's ``supports(config)`` or ``supports_case(case)`` returns a reason;
2. ``reference-disagreement`` when the ``loop`` and ``jax`` references disagree with each other
   (tight float64 tolerance) — never blamed on the target;
3. ``error`` when the target raises or returns something that is not an :class:`Outputs`;
4. ``fail`` when any compared tensor (y, hy, cy and every *requested* gradient) is missing,
   non-finite or outside tolerance against either reference; else ``pass``.
"""

from __future__ import annotations

import copy
import itertools
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .case import Case, Outputs, as_mapping, gradient_names
from .compare import TensorError, compare_tensor, from_json_number
from .references.drift import rejudge_with_drift
from .targets import Target, as_target
from .tolerances import REFERENCE_AGREEMENT, Tolerances

STATUSES = ("pass", "fail", "error", "skip", "reference-disagreement")


def run_reference(name: str, case: Case) -> Outputs:
    """Run one float64 reference (``loop`` or ``jax``) on a case."""
    if name == "loop":
        from .references.loop import run_loop_reference

        return run_loop_reference(case)
    from .references.jax_ref import run_jax_reference

    return run_jax_reference(case)


class References:
    """Both references of one case, computed once and shared by every target judged on it."""

    names = ("loop", "jax")

    def __init__(self, case: Case) -> None:
        self.case = case
        self.outputs = {name: run_reference(name, case) for name in self.names}
        self.disagreement = self._check_agreement()

    def tensor_names(self) -> list[str]:
        """y, hy, cy (LSTM), then every gradient the case requests, in report order."""
        config = self.case.config
        outputs = ["y", "hy"] + (["cy"] if config.has_cell_state else [])
        return outputs + [g for g in gradient_names(config, self.case.initial_state) if g in self.case.wants]

    def _check_agreement(self) -> TensorError | None:
        loop, jax = (as_mapping(self.outputs[n]) for n in self.names)
        for name in self.tensor_names():
            error = compare_tensor(name, jax.get(name), loop[name], REFERENCE_AGREEMENT, self.case.config)
            if not error.passed:
                error.reference = "jax vs loop"
                return error
        return None


@dataclass
class CaseResult:
    """The verdict on one case × target, with every compared tensor."""

    case_id: str
    target: str
    status: str
    mode: str
    dtype: str
    wants: str
    message: str = ""
    seconds: float = 0.0
    tensors: list[TensorError] = field(default_factory=list)
    check: str = "reference"  # or the name of a reference-free check (metamorphic.CHECKS)
    repro_options: str = ""  # e.g. "--config nightly --rtol 0.01": what judged it, for the repro line
    traceback: str = ""  # for errors: the target's own frames (file:line), see describe_exception
    case_index: int | None = None  # i of draw_case(profile, seed, i) in a sweep: merge orders shards by it

    @property
    def compared(self) -> list[str]:
        return [t.name for t in self.tensors]

    @property
    def worst(self) -> TensorError | None:
        judged = [t for t in self.tensors if t.status != "missing"]
        missing = [t for t in self.tensors if t.status == "missing"]
        if missing:
            return missing[0]
        return max(judged, key=lambda t: (t.ratio != t.ratio, t.ratio), default=None)

    @property
    def failing(self) -> list[TensorError]:
        return [t for t in self.tensors if not t.passed]

    @property
    def repro(self) -> str:
        checks = "" if self.check == "reference" else f" --check {self.check}"
        options = f" {self.repro_options}" if self.repro_options else ""
        return f"gradcheck-rnn repro {self.case_id} --target {self.target}{checks}{options}"

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "case_id": self.case_id, "target": self.target, "check": self.check, "status": self.status, "mode": self.mode,
            "dtype": self.dtype, "wants": self.wants, "message": self.message, "seconds": round(self.seconds, 6),
            "compared": self.compared, "worst_ratio": None if worst is None else worst.to_json()["ratio"],
            "worst_tensor": None if worst is None else worst.name, "repro": self.repro, "traceback": self.traceback,
            "tensors": [t.to_json() for t in self.tensors], "case_index": self.case_index,
        }

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> "CaseResult":
        """Inverse of :meth:`to_json` (a results.json row back to a result, e.g. to merge shards)."""
        check = row.get("check", "reference")
        prefix = f"gradcheck-rnn repro {row['case_id']} --target {row['target']}" + \
            ("" if check == "reference" else f" --check {check}")
        repro = row.get("repro", "")
        return cls(row["case_id"], row["target"], row["status"], row.get("mode", ""), row.get("dtype", ""),
                   row.get("wants", ""), message=row.get("message", ""),
                   seconds=from_json_number(row.get("seconds", 0.0)),
                   tensors=[TensorError.from_json(t) for t in row.get("tensors", [])], check=check,
                   repro_options=repro[len(prefix):].strip() if repro.startswith(prefix) else "",
                   traceback=row.get("traceback", ""), case_index=row.get("case_index"))


def repro_options(config: str | None, rtol: float | None, atol: float | None) -> str:
    """The options a repro command needs to judge as the run did: ``--config nightly --rtol 0.01``
    (the profile whose tolerances applied and the command-line overrides; none at the defaults)."""
    return " ".join(f"--{name} {value}" for name, value in (("config", config), ("rtol", rtol), ("atol", atol))
                    if value is not None)


def new_result(case: Case, target: Target, status: str, **kwargs: Any) -> CaseResult:
    """A result row for ``case`` × ``target``, filled with the case's mode, dtype and wants group."""
    return CaseResult(case.id, target.name, status, case.config.mode, case.config.dtype, case.wants_group, **kwargs)


_PACKAGE_DIR = str(Path(__file__).resolve().parent)


def describe_exception(exc: BaseException, max_frames: int = 6) -> tuple[str, str]:
    """A one-line message and a short traceback of the target's own frames.

    Frames inside gradcheck_rnn are left out (they only say "the runner called the target"), so
    a plugin's error points at the plugin: ``KeyError: 'nope' (at my_rnn.py:12 in run)``.
    """
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not str(Path(f.filename).resolve()).startswith(_PACKAGE_DIR)] or traceback.extract_tb(exc.__traceback__)
    frames = frames[-max_frames:]
    message = f"{type(exc).__name__}: {exc}"
    if frames:
        last = frames[-1]
        message += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}' + (f"\n    {f.line}" if f.line else "")
             for f in frames]
    return message, "\n".join(lines)


def compare_outputs(case: Case, outputs: Outputs, references: References,
                    tolerances: Tolerances) -> list[TensorError]:
    """Every compared tensor of a target against both references; the worse comparison is kept."""
    actual = as_mapping(outputs)
    errors = []
    for name in references.tensor_names():
        tol = tolerances.for_tensor(case.config.dtype, name)
        candidates = []
        for ref_name in references.names:
            error = compare_tensor(name, actual.get(name), as_mapping(references.outputs[ref_name])[name],
                                   tol, case.config)
            error.reference = ref_name
            candidates.append(error)
        errors.append(max(candidates, key=lambda e: (e.status != "pass", e.ratio != e.ratio, e.ratio)))
    # low precision: failing tensors are re-judged with the drift a correct kernel can have there
    expected = {n: as_mapping(references.outputs[n]) for n in references.names}
    return rejudge_with_drift(case, actual, expected, tolerances, errors)


def check_case(case: Case, target: Any, tolerances: Tolerances | None = None,
               references: References | None = None) -> CaseResult:
    """Judge one target on one case (see the module docstring for the order of judgement)."""
    target = as_target(target)
    tolerances = tolerances or Tolerances()
    reason = target.supports_case(case)
    if reason is not True:
        return new_result(case, target, "skip", message=str(reason))
    references = references or References(case)
    if references.disagreement is not None:
        return new_result(case, target, "reference-disagreement", message=references.disagreement.message,
                       tensors=[references.disagreement])
    start = time.perf_counter()
    try:
        # A private copy: a target that writes into its inputs must not corrupt the next target's case.
        outputs = target.run(copy.deepcopy(case))
    except Exception as exc:  # a target that raises is an "error" result; the sweep goes on
        message, frames = describe_exception(exc)
        return new_result(case, target, "error", message=message, traceback=frames,
                          seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if not isinstance(outputs, Outputs):
        return new_result(case, target, "error", seconds=seconds,
                       message=f"run() returned {type(outputs).__name__}, expected gradcheck_rnn.Outputs")
    try:
        tensors = compare_outputs(case, outputs, references, tolerances)
    except Exception as exc:  # unusable arrays (wrong type, wrong dtype) are the target's error
        return new_result(case, target, "error", message=f"unusable outputs: {type(exc).__name__}: {exc}",
                       seconds=seconds)
    failing = [t for t in tensors if not t.passed]
    message = "; ".join(t.message for t in failing[:3])
    return new_result(case, target, "fail" if failing else "pass", message=message, seconds=seconds, tensors=tensors)


def judge_case(case: Case, targets: list[Target], tolerances: Tolerances | None = None,
               checks: Iterable[str] = ("reference",), start: int = 0) -> Iterator[CaseResult]:
    """Every enabled check of every target on one case; references are computed once, when first needed.

    Rows come target by target, check by check. ``start`` skips the first rows of that order: a
    worker process resumes a case there after the row before crashed its predecessor.
    """
    from .metamorphic import run_check

    references = None
    pairs = [(target, check) for target in targets for check in checks]
    for target, check in pairs[start:]:
        if check != "reference":
            yield run_check(check, case, target, tolerances)
            continue
        if references is None and target.supports_case(case) is True:
            references = References(case)
        yield check_case(case, target, tolerances, references)


def run_sweep(cases: Iterable[Case], targets: list[Target], tolerances: Tolerances | None = None,
              fail_fast: bool = False, on_result: Callable[[CaseResult], None] | None = None,
              checks: Iterable[str] = ("reference",), indices: Iterable[int] | None = None) -> list[CaseResult]:
    """Judge every target on every case with the given checks (``reference`` and/or metamorphic.CHECKS).

    ``indices`` are the cases' sweep indices (default 0, 1, 2, …), recorded on each row.
    """
    results: list[CaseResult] = []
    checks = list(checks)
    for index, case in zip(itertools.count() if indices is None else indices, cases):
        for result in judge_case(case, targets, tolerances, checks):
            result.case_index = index
            results.append(result)
            if on_result:
                on_result(result)
            if fail_fast and result.status not in ("pass", "skip"):
                return results
    return results


EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_NOTHING_CHECKED = 0, 1, 2, 5


def top_skip_reasons(results: Iterable[CaseResult], target: str | None = None, count: int = 2) -> str:
    """The most frequent skip reasons (of one target), e.g. ``'needs CUDA' ×40``."""
    reasons = Counter(r.message for r in results if r.status == "skip" and target in (None, r.target))
    return "; ".join(f"{reason!r} ×{n}" for reason, n in reasons.most_common(count))


def verdict(results: Iterable[CaseResult], named_targets: Iterable[str] = ()) -> tuple[int, str]:
    """The exit code of a judging command and its one-sentence reason (docs/contracts.md, "Exit codes").

    0 all passed (skips allowed); 1 any fail, error or reference disagreement; 5 nothing was
    checked — no result, every result a skip, or a target named on the command line judged on
    no case at all (a vacuous run is never "all passed"). 1 wins over 5.
    """
    results = list(results)
    bad = Counter(r.status for r in results if r.status not in ("pass", "skip"))
    if bad:
        return EXIT_FAIL, "failures found: " + ", ".join(f"{n} {status}" for status, n in bad.items())
    if not results:
        return EXIT_NOTHING_CHECKED, "nothing was checked: no case was drawn or no check was enabled"
    judged = Counter(r.target for r in results if r.status == "pass")
    if not judged:
        every = "the only result was" if len(results) == 1 else f"all {len(results)} results were"
        return EXIT_NOTHING_CHECKED, f"nothing was checked: {every} skipped ({top_skip_reasons(results)})"
    for name in dict.fromkeys(named_targets):
        if not judged[name]:
            return EXIT_NOTHING_CHECKED, (f"target {name} was judged on no case: every result was skipped "
                                          f"({top_skip_reasons(results, name) or 'it ran on no case'})")
    return EXIT_PASS, f"all passed: {sum(judged.values())} results judged"


def exit_code(results: Iterable[CaseResult], named_targets: Iterable[str] = ()) -> int:
    """The exit code of :func:`verdict`."""
    return verdict(results, named_targets)[0]
