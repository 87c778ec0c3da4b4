"""Default tolerances, per target dtype and per tensor kind, and how users override them.

An element passes when |a − b| <= atol + rtol·|b| (a = target, b = float64 reference).
Tensor kinds: ``output`` (y, hy, cy), ``input_grad`` (x, h0, c0), ``weight_grad`` (every
weight and bias). The numbers come from ``gradcheck-rnn calibrate`` runs of correct kernels
(see docs/concepts/tolerances.md): each default sits well above the worst ratio a correct float32 or
float64 kernel reached and below the error of the historical bugs on short sequences.
``rtol=1e-2`` alone (MXNet's choice in #15278) misses truncated-BPTT errors under 1 %.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from ..errors import UsageError
from .names import INPUTS, OUTPUTS

KINDS = ("output", "input_grad", "weight_grad")


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    def __str__(self) -> str:
        return f"rtol={self.rtol:g}, atol={self.atol:g}"


DEFAULTS: dict[str, dict[str, Tolerance]] = {
    # float64 kernels differ from the references only by summation order (~1e-15 relative).
    "f64": {k: Tolerance(1e-7, 1e-9) for k in KINDS},
    # float32: inputs are exact float32 values, so all error is the kernel's own arithmetic.
    # Weight gradients (sums over T·B rows) get twice the room; every kind keeps a margin of >= 16
    # over the worst ratio of `gradcheck-rnn calibrate -t fused-cpu -c nightly -n 300`.
    "f32": {"output": Tolerance(1e-4, 1e-5), "input_grad": Tolerance(1e-4, 1e-5),
            "weight_grad": Tolerance(2e-4, 2e-5)},
    # float16 / bfloat16: half storage, float32 arithmetic, one rounding per stored value (fused-cpu;
    # torch-native for f16). Judged with the drift allowance near relu kinks (references/drift.py),
    # so these only hold the rounding-level drift of the smooth paths (docs/half-precision.md).
    # Set from `gradcheck-rnn calibrate -c half` and the half-soak profile with a margin of >= 3.4
    # over the worst ratio of a correct kernel; input_grad keeps more room, as the future check
    # compares changes of dx under it without a drift allowance. The figures and each choice:
    # benchmarks/RESULTS.md, "Tolerance calibrations".
    "f16": {"output": Tolerance(1e-2, 1e-2), "input_grad": Tolerance(2e-2, 2e-2),
            "weight_grad": Tolerance(2.5e-2, 2.5e-2)},
    "bf16": {"output": Tolerance(2.5e-2, 2.5e-2), "input_grad": Tolerance(1e-1, 1e-1),
             "weight_grad": Tolerance(3e-1, 3e-1)},
}

# The two float64 references must agree far tighter than any target tolerance.
REFERENCE_AGREEMENT = Tolerance(1e-8, 1e-10)


def tensor_kind(name: str) -> str:
    name = re.sub(r"\.u\d+$", "", name)  # the jvp and gradgrad checks' rows: y.u0, x.u1, l0.fwd.w_ih.u0
    if name in OUTPUTS:
        return "output"
    if name in INPUTS:
        return "input_grad"
    return "weight_grad"


# An override of rtol or atol: one number for every tensor, or one per tensor kind (JAX's
# check_grads takes a scalar or a per-dtype dict in the same spirit); None keeps the table.
Override = float | Mapping[str, float] | None


def _override(value: Override, kind: str, default: float) -> float:
    if isinstance(value, Mapping):
        value = value.get(kind)
    return default if value is None else float(value)


class Tolerances:
    """A tolerance table (dtype -> kind -> Tolerance) with optional overrides (scalar or per kind)."""

    def __init__(self, table: Mapping[str, Mapping[str, Tolerance]] | None = None,
                 rtol: Override = None, atol: Override = None) -> None:
        merged = {dtype: dict(kinds) for dtype, kinds in DEFAULTS.items()}
        for dtype, kinds in (table or {}).items():
            merged.setdefault(dtype, {}).update(kinds)
        for name, value in (("rtol", rtol), ("atol", atol)):
            values = value.items() if isinstance(value, Mapping) else [("", value)]
            for kind, number in values:
                if isinstance(value, Mapping) and kind not in KINDS:
                    raise UsageError(f"{name} for {kind!r} is not allowed; the tensor kinds are {', '.join(KINDS)}")
                if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))
                                           or not 0 <= number < math.inf):
                    raise UsageError(f"--{name} {number!r} is not allowed; it must be a finite number >= 0")
        self.table = merged
        self.rtol, self.atol = rtol, atol

    def for_tensor(self, dtype: str, name: str) -> Tolerance:
        return self.for_kind(dtype, tensor_kind(name))

    def for_kind(self, dtype: str, kind: str) -> Tolerance:
        """The tolerance of every tensor of ``kind`` in a target computing in ``dtype``, overrides applied."""
        base = self.table[dtype][kind]
        return Tolerance(_override(self.rtol, kind, base.rtol), _override(self.atol, kind, base.atol))

    def rows(self) -> tuple[tuple[str, str, float, float], ...]:
        """The whole table as it judges, overrides applied: ``(dtype, kind, rtol, atol)`` per
        dtype and kind. A run spec records it, since a ratio means something only beside it
        (``sweep --baseline`` refuses a baseline judged under another table)."""
        return tuple((dtype, kind, tolerance.rtol, tolerance.atol) for dtype in self.table for kind in KINDS
                     for tolerance in [self.for_kind(dtype, kind)])

    @classmethod
    def from_profile(cls, section: Mapping[str, object], rtol: float | None = None,
                     atol: float | None = None) -> "Tolerances":
        """Read a ``[tolerances.<dtype>.<kind>]`` TOML section: ``{rtol = .., atol = ..}``."""
        table: dict[str, dict[str, Tolerance]] = {}
        for dtype, kinds in section.items():
            if dtype not in DEFAULTS or not isinstance(kinds, Mapping):
                raise UsageError(f"tolerances.{dtype} is not allowed; use tolerances.<dtype>.<kind> with dtype in "
                                 f"{', '.join(DEFAULTS)} and kind in {', '.join(KINDS)}")
            for kind, values in kinds.items():
                if kind not in KINDS or not isinstance(values, Mapping) or set(values) - {"rtol", "atol"}:
                    raise UsageError(f"tolerances.{dtype}.{kind} is not allowed; kinds are {', '.join(KINDS)}, "
                                     f"each a table with rtol and atol")
                base = DEFAULTS[dtype][kind]
                for name, value in values.items():
                    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                        raise UsageError(f"tolerances.{dtype}.{kind}.{name} = {value!r} is not allowed; "
                                         f"it must be a finite number >= 0")
                table.setdefault(dtype, {})[kind] = Tolerance(float(values.get("rtol", base.rtol)),
                                                              float(values.get("atol", base.atol)))
        return cls(table, rtol=rtol, atol=atol)
