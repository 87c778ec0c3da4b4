"""Shrinking: from a failing case to the smallest case that still fails the same way.

A sweep finds failures on whatever shapes it drew; a bug is debugged on the smallest one. This
is hypothesis's shrinker applied to case ids, deterministic and greedy:

1. the start case is judged; if it does not fail, :class:`DidNotReproduce` (exit 1), as
   hypothesis refuses a replay that passes;
2. the *failure* to keep is fixed there: the check, its status (``fail``, or ``nondeterministic``
   from the determinism check: both fail a run) and the failing tensor (the worst one, as the
   failure table shows it) — or, with ``any_tensor``, any failing tensor; a target that raises
   keeps its exception type instead;
3. candidates are tried in a fixed order, simplest first within each dimension (jump to 1, then
   halve, then decrement, like hypothesis's integer shrinking): fewer layers, unidirectional,
   fewer sequences, smaller T and shorter lengths, smaller I and H, the family's own options
   simpler (fewer sLSTM heads, its sigmoid forget gate; smaller s6 N and R, no gate: each family
   says which, :meth:`~gradcheck_rnn.families.Family.simpler_options`), then simpler variants (all
   gradients requested → the smallest group that still fails, default head gradients, with an
   initial state) and float64. The first candidate that keeps the failure is accepted and the
   same dimension is tried again from there; passes repeat until one accepts nothing.

A candidate keeps the data seed: its data are drawn afresh from the seed for its new shape, so
whether the failure survives is judged, never assumed. Every accepted change moves a size down
or a variant one way toward its default, so shrinking ends; ``max_steps`` (candidates judged)
bounds its time. Verdicts are cached by case id, so a case met again (each pass re-tries the
candidates of an unchanged case) costs nothing; the references of a case are computed once.

Parameter tensors match across layer counts by direction and kind (``l2.fwd.b_hh`` in a
3-layer case is ``l0.fwd.b_hh`` once one layer is left): shrinking the layers renumbers them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..model.case import Case, make_case
from ..model.compare import json_safe
from ..errors import UsageError
from ..families.base import smaller
from ..model.numbers import fmt
from ..judging.checks import check_names
from ..rows.result import CaseResult, Repro, finish
from ..model.statuses import BAD_STATUSES, JUDGED, worst_tensor
from ..targets import as_target
from ..model.tolerances import Tolerances

DEFAULT_MAX_STEPS = 300
# Smaller groups first: the fewer gradients requested, the fewer code paths the bug can hide in.
_SIMPLER_WANTS = {"all": ("x", "inputs", "params"), "inputs": ("x",)}
# float64 first: a failure that persists there has no rounding in the way of debugging it.
_WIDER_DTYPES = {"f32": ("f64",), "f16": ("f64", "f32"), "bf16": ("f64", "f32")}
# The statuses of a target judged wrong on named tensors (fail, nondeterministic): what is kept is a tensor.
TENSOR_FAILURES = tuple(status for status in JUDGED if status in BAD_STATUSES)


class DidNotReproduce(Exception):
    """The case given to :func:`shrink` does not fail: there is nothing to shrink (exit 1)."""


def error_of(result: CaseResult) -> str:
    """What identifies an error row: the class name of what the target raised (a field of the row,
    never parsed from its message), or, for an error the engine saw (a worker that died or timed
    out), its whole message."""
    return result.error_type or result.message


def tensor_role(name: str) -> str:
    """A tensor's name without its layer (``l2.fwd.b_hh`` -> ``fwd.b_hh``); x, y, h0, … unchanged."""
    parts = name.split(".")
    return ".".join(parts[1:]) if len(parts) == 3 and parts[0].startswith("l") else name


@dataclass(frozen=True)
class Failure:
    """What shrinking keeps: the check, and the failing tensor role or the exception type."""

    check: str
    status: str  # one of TENSOR_FAILURES, or "error"
    tensor: str | None = None  # the kept tensor's name in the start case; None with any_tensor
    error_type: str | None = None  # an error's identity: the row's error_type, or its message (a worker lost)

    def matching_tensor(self, result: CaseResult):
        """The failing tensor of ``result`` that shows this failure, or None if it does not."""
        if result.status != self.status or result.check != self.check or self.status not in TENSOR_FAILURES:
            return None
        if self.tensor is None:
            return result.worst
        role = tensor_role(self.tensor)
        same_role = [t for t in result.failing if tensor_role(t.name) == role]
        # The same layer when it still exists, else the same direction and kind in another layer.
        return next((t for t in same_role if t.name == self.tensor), same_role[0] if same_role else None)

    def kept_by(self, result: CaseResult) -> bool:
        """Whether ``result`` is the same failure."""
        if self.status == "error":
            return result.status == "error" and result.check == self.check and error_of(result) == self.error_type
        return self.matching_tensor(result) is not None

    def describe(self) -> str:
        if self.status == "error":
            return f"the {self.check} check raising {self.error_type}"
        how = "failing" if self.status == "fail" else f"{self.status} on"
        return f"the {self.check} check {how} {self.tensor or 'any tensor'}"


@dataclass
class Step:
    """One accepted case on the way down (the first is the start case)."""

    case_id: str
    change: str
    ratio: float
    result: CaseResult

    def to_json(self) -> dict[str, Any]:
        """Strict JSON, the ratio spelled as results.json spells it (NaN null, ±Inf "inf"/"-inf")."""
        return {"case_id": self.case_id, "change": self.change, "ratio": json_safe(self.ratio)}


@dataclass
class ShrinkResult:
    """The path from the start case to the minimal one, and what it cost."""

    target: str
    failure: Failure
    steps: list[Step]
    tried: int
    max_steps: int
    exhausted: bool = False  # the step budget ran out before a pass accepted nothing

    @property
    def minimal(self) -> Step:
        return self.steps[-1]

    @property
    def reproduction(self) -> Repro | None:
        """How to judge the minimal case again, as its row was finished by the run that judged it
        (its options, ``--case-timeout`` included when it timed out): never finished again here."""
        return self.minimal.result.reproduction

    @property
    def repro(self) -> str:
        """``gradcheck-rnn repro <minimal id> --target T [--check C] [options]``."""
        return self.minimal.result.repro

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "check": self.failure.check, "status": self.failure.status,
                "tensor": self.failure.tensor, "error_type": self.failure.error_type,
                "start": self.steps[0].case_id, "minimal": self.minimal.case_id, "repro": self.repro,
                "tried": self.tried, "max_steps": self.max_steps, "exhausted": self.exhausted,
                "steps": [s.to_json() for s in self.steps]}


def _rebuild(case: Case, **changes: Any) -> Case:
    """``case`` with config fields, lengths or variants changed; data drawn afresh from its seed."""
    spec: dict[str, Any] = {"seq_lengths": [int(v) for v in case.seq_lengths], "wants": case.wants_group,
                            "heads": case.heads, "initial_state": case.initial_state, "tail": case.tail,
                            # kept: a failure under a layout or a kernel configuration needs it
                            "grad_layout": case.grad_layout, "input_layout": case.input_layout,
                            "kernel_config": case.kernel_config}
    config_changes = {k: v for k, v in changes.items() if k not in spec}
    spec.update({k: v for k, v in changes.items() if k in spec})
    config = dataclasses.replace(case.config, **config_changes)
    return make_case(config, spec.pop("seq_lengths"), case.seed, **spec)


Candidate = tuple[str, Callable[[], Case]]


def _layers(case: Case) -> Iterator[Candidate]:
    L = case.config.num_layers
    for n in smaller(L):
        yield f"layers {L}→{n}", lambda n=n: _rebuild(case, num_layers=n)


def _direction(case: Case) -> Iterator[Candidate]:
    if case.config.bidirectional:
        yield "unidirectional", lambda: _rebuild(case, bidirectional=False)


def _batch(case: Case) -> Iterator[Candidate]:
    lengths = [int(v) for v in case.seq_lengths]
    B = len(lengths)
    if B == 1:
        return
    keeps = [[b] for b in range(B)]  # one sequence alone first, then all but one
    if B > 2:
        keeps += [[i for i in range(B) if i != b] for b in range(B)]
    for keep in keeps:
        kept = [lengths[i] for i in keep]
        yield f"B {B}→{len(kept)}", lambda kept=kept: _rebuild(case, batch_size=len(kept), seq_lengths=kept)


def _time(case: Case) -> Iterator[Candidate]:
    lengths = [int(v) for v in case.seq_lengths]
    T = case.config.max_len
    for n in smaller(T):
        clipped = [min(v, n) for v in lengths]
        yield f"T {T}→{n}", lambda n=n, clipped=clipped: _rebuild(case, max_len=n, seq_lengths=clipped)
    for b, length in enumerate(lengths):
        for n in smaller(length):
            shorter = lengths[:b] + [n] + lengths[b + 1:]
            yield f"len[{b}] {length}→{n}", lambda shorter=shorter: _rebuild(case, seq_lengths=shorter)


def _sizes(case: Case) -> Iterator[Candidate]:
    for name, label in (("input_size", "I"), ("hidden_size", "H"), ("proj_size", "P")):
        value = getattr(case.config, name)
        for n in smaller(value):
            changes = {name: n}
            if name == "hidden_size" and case.config.proj_size >= n:  # a projection must stay below H
                changes["proj_size"] = n - 1
            yield f"{label} {value}→{n}", lambda changes=changes: _rebuild(case, **changes)


def _family_options(case: Case) -> Iterator[Candidate]:
    """The family's own options, simpler (:meth:`~gradcheck_rnn.families.Family.simpler_options`):
    sLSTM's heads and forget gate, s6's N, R, softplus and gate, a user family's own."""
    for change, options in case.config.family.simpler_options(case.config):
        yield change, lambda options=options: _rebuild(case, options=options)


def _variants(case: Case) -> Iterator[Candidate]:
    for group in _SIMPLER_WANTS.get(case.wants_group, ()):
        yield f"wants {group}", lambda group=group: _rebuild(case, wants=group)
    if case.heads != "all":
        yield "heads all", lambda: _rebuild(case, heads="all")
    if not case.initial_state:
        yield "initial state", lambda: _rebuild(case, initial_state=True)
    if case.config.proj_size:
        yield "no projection", lambda: _rebuild(case, proj_size=0)
    if case.config.long_memory:
        yield "no long memory", lambda: _rebuild(case, long_memory=False)
    if case.tail > 1:  # a packed tail's failure needs a tail: one row is the simplest
        yield f"tail {case.tail}→1", lambda: _rebuild(case, tail=1)
    for dtype in _WIDER_DTYPES.get(case.config.dtype, ()):
        yield f"{case.config.dtype}→{dtype}", lambda dtype=dtype: _rebuild(case, dtype=dtype)


# The order in which dimensions are shrunk: the ones that cut the most work first.
DIMENSIONS: tuple[Callable[[Case], Iterator[Candidate]], ...] = (_layers, _direction, _batch, _time, _sizes,
                                                                  _family_options, _variants)


class _Shrinker:
    """Greedy search state: the failure kept, the verdict cache by case id and the step budget."""

    def __init__(self, judge: CaseJudge, failure: Failure, max_steps: int,
                 on_step: Callable[[Step], None] | None) -> None:
        self.judge = judge
        self.failure, self.max_steps, self.on_step = failure, max_steps, on_step
        self.verdicts: dict[str, CaseResult] = {}
        self.tried = 0
        self.exhausted = False

    def verdict(self, case: Case) -> CaseResult:
        if case.id not in self.verdicts:
            self.tried += 1
            self.verdicts[case.id] = self.judge(case)
        return self.verdicts[case.id]

    def ratio(self, result: CaseResult) -> float:
        tensor = self.failure.matching_tensor(result)
        return math.nan if tensor is None else tensor.ratio

    def shrink_dimension(self, case: Case, dimension: Callable[[Case], Iterator[Candidate]],
                         steps: list[Step]) -> Case:
        """Accept the first candidate of ``dimension`` that keeps the failure, repeatedly."""
        progress = True
        while progress and not self.exhausted:
            progress = False
            for change, build in dimension(case):
                try:
                    candidate = build()
                except UsageError:  # e.g. a config field that constrains the one being shrunk
                    continue
                if candidate.id not in self.verdicts and self.tried >= self.max_steps:
                    self.exhausted = True
                    break
                result = self.verdict(candidate)
                if self.failure.kept_by(result):
                    case = candidate
                    step = Step(case.id, change, self.ratio(result), result)
                    steps.append(step)
                    if self.on_step:
                        self.on_step(step)
                    progress = True
                    break
        return case


CaseJudge = Callable[[Case], CaseResult]  # one check of one target on one case, as one row


def in_process_judge(target: Any, check: str, tolerances: Tolerances | None = None,
                     repro_options: str = "") -> CaseJudge:
    """Judge candidates in this process, each row finished with ``repro_options`` (the library's
    default; ``gradcheck-rnn shrink`` judges them in a worker process through the run's executor
    instead, whose rows the run finished)."""
    from ..judging.judge import judge_one

    resolved, tolerances = as_target(target), tolerances or Tolerances()
    return lambda case: finish(judge_one(case, resolved, tolerances, check), repro_options, None)


def shrink(case: Case, target: Any, check: str = "reference", tolerances: Tolerances | None = None,
           any_tensor: bool = False, max_steps: int = DEFAULT_MAX_STEPS, repro_options: str = "",
           on_step: Callable[[Step], None] | None = None, judge: CaseJudge | None = None) -> ShrinkResult:
    """Shrink a failing case to the smallest case that fails the same way (see the module docstring).

    Raises :class:`DidNotReproduce` when ``case`` does not fail ``check`` on ``target``.
    ``judge`` judges one candidate and returns its row finished (default: :func:`in_process_judge`
    of ``target``, ``check``, ``tolerances`` and ``repro_options``, e.g. ``--config nightly``,
    which the minimal case's repro command ends with).
    """
    if check not in check_names():
        raise UsageError(f"unknown check {check!r}; allowed: {', '.join(check_names())}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise UsageError(f"max_steps={max_steps!r} is not allowed; it must be an integer >= 1")
    judge = judge or in_process_judge(target, check, tolerances, repro_options)
    start = judge(case)
    name = start.target
    if start.status in TENSOR_FAILURES:
        failure = Failure(check, start.status, tensor=None if any_tensor else worst_tensor(start.failing).name)
    elif start.status == "error":
        failure = Failure(check, "error", error_type=error_of(start))
    else:
        why = f" ({start.message})" if start.message else ""
        raise DidNotReproduce(f"the case did not fail: {case.id} is {start.status} on {name} "
                              f"under the {check} check{why}, so there is nothing to shrink")
    shrinker = _Shrinker(judge, failure, max_steps, on_step)
    shrinker.verdicts[case.id] = start
    first = Step(case.id, "start", shrinker.ratio(start), start)
    steps = [first]
    if on_step:
        on_step(first)
    progress = True
    while progress and not shrinker.exhausted:
        before = len(steps)
        for dimension in DIMENSIONS:
            case = shrinker.shrink_dimension(case, dimension, steps)
        progress = len(steps) > before
    return ShrinkResult(name, failure, steps, shrinker.tried, max_steps, shrinker.exhausted)


def steps_lines(result: ShrinkResult) -> list[str]:
    """The accepted steps as compact aligned lines: step, what changed, kept ratio, then the case id.

    The case id comes last on each line so that no terminal width cuts or wraps it mid-table.
    """
    width = max([14, *(len(step.change) for step in result.steps)])  # a family option's change may be longer
    lines = [f"Shrinking on {result.target}, keeping {result.failure.describe()}",
             f"{'#':>3}  {'change':<{width}} {'ratio':>9}  case id"]
    for i, step in enumerate(result.steps):
        lines.append(f"{i:>3}  {step.change:<{width}} {fmt(step.ratio):>9}  {step.case_id}")
    return lines


__all__ = ["DidNotReproduce", "Failure", "ShrinkResult", "Step", "shrink", "steps_lines", "tensor_role"]
