"""The checks, one module each, registered here: adding a check is one module (its ``CHECK``
record, :class:`~.base.Check`, says everything the tool needs to know of it), listed in
:data:`BUILT_IN`, with its tests and docs.

Judged in this order for each case × target (each record's ``order``):

=============  ==========================  ====================================================
check          target runs                 what it proves
=============  ==========================  ====================================================
reference      the shared base run         outputs and every requested gradient equal both
                                           float64 references
determinism    base run + 1 (+2 if others  two runs of the same case are bit-identical
               ran between)
padding        base run + 1                x and dy at padded steps change nothing (MXNet #19323)
permutation    base run + 1                permuting the batch permutes outputs and input
                                           gradients
future         its own pair of cases       extending a sequence changes dx before it as the
                                           reference does (MXNet #21143)
linearity      base run + 2                the backward is linear in the head gradients
                                           (PyTorch #1532)
stateless      base run + another case     a run of another case in between changes nothing
               + the case again            (ONNX RT #3797); the other run's outputs are not judged
segments       base run + 2K − 1 (the      the case run in K segments, final states fed
               case cut in K segments)     forward and state gradients backward, equals the
                                           uncut run and the references (fla #1140, #459)
poisoned       base run + 1 (under         memory torch hands out uninitialised reads as NaN:
               poisoned memory)            nothing changes (fla #892)
fd             the shared base run         directional derivatives equal central differences
                                           (float64 targets)
jvp            its jvp along 2 directions  forward-mode output tangents equal both references';
               (+ the shared base run)     they move with the direction; vᵀ(Ju) = (Jᵀv)ᵀu
                                           with its own gradients
gradgrad       its hvp along 2 directions  Hessian-vector products equal both references'; they
                                           move with the direction; u₁ᵀHu₀ = u₀ᵀHu₁
=============  ==========================  ====================================================

The base run (the target on the unchanged case) is made once per case × target
(:class:`gradcheck_rnn.judging.judge.TargetCall`); every case a check derives is first put to the
target's ``supports_case``. Checks that compare runs of the target with each other judge each
element by the sum of the runs' bounds (:func:`gradcheck_rnn.model.compare.term_bound`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Mapping

from . import (determinism, fd, future, gradgrad, jvp, linearity, padding, permutation, poisoned, reference, segments,
               stateless)
from ...errors import UsageError
from .base import Check, Labels

# the built-in checks' modules (any order: each record's ``order`` places it)
BUILT_IN: tuple[ModuleType, ...] = (reference, determinism, padding, permutation, future, linearity, stateless,
                                    segments, poisoned, fd, jvp, gradgrad)
CHECKS: dict[str, Check] = {}  # name -> record, in judging order


def register(check: Check) -> Check:
    """Add ``check`` to the registry at its place in the judging order (its ``order``); a name or
    an order another check has is refused."""
    for other in CHECKS.values():
        if check.name == other.name or check.order == other.order:
            raise ValueError(f"check {check.name!r} (order {check.order}) clashes with {other.name!r} "
                             f"(order {other.order})")
    ordered = sorted([*CHECKS.values(), check], key=lambda c: c.order)
    CHECKS.clear()
    CHECKS.update((c.name, c) for c in ordered)
    return check


for _module in BUILT_IN:
    register(_module.CHECK)


def check_names() -> tuple[str, ...]:
    """Every registered check's name, in judging order (``--check`` takes these)."""
    return tuple(CHECKS)


def enabled(table: Mapping[str, object], source: str) -> tuple[str, ...]:
    """The checks a profile's ``[checks]`` table (``source``: the profile's file) leaves on, in
    judging order: a check it does not name is on. UsageError for a name no check has, a value
    that is not true or false, or every check off."""
    names = check_names()
    for key, value in table.items():
        if key not in names or not isinstance(value, bool):
            raise UsageError(f"checks.{key} = {value!r} is not allowed; checks are {', '.join(names)}, "
                             f"each true or false, and strict_contracts (true or false)")
    chosen = tuple(name for name in names if table.get(name, True))
    if not chosen:
        raise UsageError(f"profile {source!r} turns every check off; enable at least one of "
                         f"{', '.join(names)} in [checks]")
    return chosen


__all__ = ["BUILT_IN", "CHECKS", "Check", "Labels", "check_names", "enabled", "register"]
