"""The checks, one module each, registered here: adding a check is one module, its tests and docs.

Judged in this order for each case × target (config.CHECK_NAMES):

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
element by the sum of the runs' bounds (:func:`gradcheck_rnn.judging.compare.term_bound`).
"""

from __future__ import annotations

from . import (determinism, fd, future, gradgrad, jvp, linearity, padding, permutation, poisoned, reference, segments,
               stateless)
from ...model.rnn_config import CHECK_NAMES
from .base import Check

CHECKS: dict[str, Check] = {module.CHECK.name: module.CHECK for module in (
    reference, determinism, padding, permutation, future, linearity, stateless, segments, poisoned, fd, jvp, gradgrad)}
ALL_CHECKS = CHECK_NAMES
assert tuple(CHECKS) == CHECK_NAMES, "config.CHECK_NAMES names every registered check, in order"
__all__ = ["ALL_CHECKS", "CHECKS", "Check"]
