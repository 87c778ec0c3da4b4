"""The checks, one module each, registered here: adding a check is one module, its tests and docs.

=============  ===========  ===================================================================
check          base run     what it proves
=============  ===========  ===================================================================
reference      shared       outputs and every requested gradient equal both float64 references
padding        shared       x and dy at padded steps change nothing (MXNet #19323)
permutation    shared       permuting the batch permutes outputs and input gradients
future         own runs     extending a sequence changes dx before it (MXNet #21143)
determinism    own runs     two runs of the same case are bit-identical
linearity      shared       the backward is linear in the head gradients (PyTorch #1532)
stateless      own runs     a run of another case in between changes nothing (ONNX RT #3797)
fd             shared       directional derivatives equal central differences (float64)
=============  ===========  ===================================================================

*Shared* checks judge the target's one run on the unchanged case (computed once per case ×
target, see :class:`gradcheck_rnn.judge.TargetCall`); determinism and stateless must run the
target afresh, since repeated and interleaved calls are what they are about, and future runs
its own pair of cases.
"""

from __future__ import annotations

from . import determinism, fd, future, linearity, padding, permutation, reference, stateless
from ..config import CHECK_NAMES
from .base import Check

CHECKS: dict[str, Check] = {module.CHECK.name: module.CHECK for module in (
    reference, determinism, padding, permutation, future, linearity, stateless, fd)}
ALL_CHECKS = CHECK_NAMES
assert tuple(CHECKS) == CHECK_NAMES, "config.CHECK_NAMES names every registered check, in order"
# The checks besides the reference comparison.
REFERENCE_FREE = tuple(name for name in CHECKS if name != "reference")

__all__ = ["ALL_CHECKS", "CHECKS", "Check", "REFERENCE_FREE"]
