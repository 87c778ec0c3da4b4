"""The per-case context: the float64 truth of one case, computed once for every check and target.

A sweep judges several targets with several checks on each case. Everything that depends only
on the case — both references and whether they agree, the ``jvp`` and ``gradgrad`` checks'
products, and the truth a check's record names (``Check.truth``: the ``future`` check's pair of
references, the ``fd`` check's witness) — is computed here on first use and shared by every
check of every target of that case, and so are the drift allowances (relu kinks, the rounding probe
of first and second order: :mod:`gradcheck_rnn.references.drift`), asked for only when a comparison
fails without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import references
from ..model.case import Case, as_mapping, gradient_names, round_to_dtype
from ..model.streams import case_rng, claim
from ..model.compare import TensorError, compare_tensor, to_float64
from ..model.names import CELL_STATE, OUTPUTS
from ..references import REFERENCE_NAMES
from ..model.tolerances import REFERENCE_AGREEMENT

if TYPE_CHECKING:
    from ..references.drift import DriftAllowance
    from .checks.base import Check

Arrays = dict[str, np.ndarray]


# The jvp and gradgrad checks' directions (the same two: gradgrad's symmetry row pairs them)
JVP_SALT = claim(47, "the jvp and gradgrad checks' directions")
JVP_DIRECTIONS = 2


def tangent_directions(case: Case, count: int = JVP_DIRECTIONS) -> list[Arrays]:
    """``count`` standard-normal tangents over the requested inputs (x, h0, c0, parameters: the
    names in ``case.wants``), rounded to the case dtype so a target computing in it receives them
    exactly; drawn from ``SeedSequence([case.seed, JVP_SALT])``."""
    from ..references.fd import requested_arrays

    rng = case_rng(case.seed, JVP_SALT)
    arrays = requested_arrays(case)
    return [{name: round_to_dtype(rng.standard_normal(a.shape), case.config.dtype) for name, a in arrays.items()}
            for _ in range(count)]


@dataclass
class ProductTruth:
    """The float64 truth of the ``jvp`` or ``gradgrad`` check: its directions, each reference's
    products along each (``expected[k][ref][tensor]``: output tangents, or Hessian-vector
    products), and the first tensor on which the references disagree (or None)."""

    directions: list[Arrays]
    expected: list[dict[str, Arrays]]
    disagreement: TensorError | None


def _agreement(name: str, jax: Any, loop: np.ndarray, config: Any) -> TensorError:
    """The two references' values of one tensor compared (tight float64 tolerance). A non-finite
    value of either fails (the comparison fails JAX's, and a finite one of JAX's where the loop
    reference's is not): no target is then judged against a value that bounds nothing."""
    return compare_tensor(name, jax, loop, REFERENCE_AGREEMENT, config)


class CaseContext:
    """The truth of one case, each part computed on first use (see the module docstring)."""

    def configured(self, case: Case) -> "CaseContext":
        """This truth for ``case``, the same case under a kernel configuration (``-kc.<name>.<value>``),
        which no reference reads: its checks run ``case`` and share what this context computed."""
        return ConfiguredContext(self, case)

    def __init__(self, case: Case) -> None:
        self.case = case
        self._truths: dict[str, Any] = {}

    def truth(self, check: "Check") -> Any:
        """The float64 truth ``check`` names (``Check.truth``), computed on first use."""
        if check.name not in self._truths:
            self._truths[check.name] = check.truth(self)
        return self._truths[check.name]

    def tensor_names(self) -> list[str]:
        """y, hy, cy (LSTM), then every gradient the case requests, in report order."""
        return self.output_names() + self.gradient_names()

    @cached_property
    def expected(self) -> dict[str, Arrays]:
        """Each reference's compared tensors as float64 arrays: ``expected[ref][tensor]``."""
        names = self.tensor_names()
        expected = {}
        for ref in REFERENCE_NAMES:
            named = as_mapping(references.run_reference(ref, self.case))
            expected[ref] = {n: to_float64(named[n]) for n in names if named.get(n) is not None}
        return expected

    @cached_property
    def disagreement(self) -> TensorError | None:
        """The first tensor on which the two references disagree (:func:`_agreement`), or None."""
        loop, jax = (self.expected[n] for n in REFERENCE_NAMES)
        for name in self.tensor_names():
            error = _agreement(name, jax.get(name), loop[name], self.case.config)
            if not error.passed:
                error.reference = "jax vs loop"
                return error
        return None

    def output_names(self) -> list[str]:
        """y, hy and cy (a family with a cell state): the tensors a forward-mode product returns."""
        return [name for name in OUTPUTS if self.case.config.has_cell_state or name not in CELL_STATE]

    def gradient_names(self) -> list[str]:
        """Every gradient the case requests, in report order."""
        return [g for g in gradient_names(self.case.config, self.case.initial_state) if g in self.case.wants]

    @cached_property
    def jvp(self) -> ProductTruth:
        """Both references' output tangents along the case's directions, and whether they agree."""
        return self._products(references.run_reference_jvp, self.output_names(), "output tangents")

    @cached_property
    def hvp(self) -> ProductTruth:
        """Both references' Hessian-vector products along the case's directions, and whether they agree."""
        return self._products(references.run_reference_hvp, self.gradient_names(), "Hessian-vector products")

    @cached_property
    def hvp_drift(self) -> list["DriftAllowance"]:
        """Per direction, the rounding probe's allowance of the loop reference's Hessian-vector
        products (:func:`gradcheck_rnn.references.drift.hvp_probe_allowance`): asked for only by a
        failing ``gradgrad`` row of a rounding-sensitive family below float64."""
        from ..references.drift import hvp_probe_allowance

        return [hvp_probe_allowance(self.case, u, per_ref["loop"])
                for u, per_ref in zip(self.hvp.directions, self.hvp.expected)]

    def _products(self, run, names: list[str], what: str) -> ProductTruth:
        directions = tangent_directions(self.case)
        expected, disagreement = [], None
        for u in directions:
            per_ref = {}
            for ref in REFERENCE_NAMES:
                named = as_mapping(run(ref, self.case, u))
                per_ref[ref] = {n: to_float64(named[n]) for n in names}
            expected.append(per_ref)
            for name in names:
                error = _agreement(name, per_ref["jax"][name], per_ref["loop"][name], self.case.config)
                if disagreement is None and not error.passed:
                    error.reference, error.message = "jax vs loop", f"{what}: {error.message}"
                    disagreement = error
        return ProductTruth(directions, expected, disagreement)

    @cached_property
    def drift(self) -> "DriftAllowance":
        """The drift allowance of the case (relu units within the dtype's rounding of 0)."""
        from ..references.drift import checked_allowance

        return checked_allowance(self.case, self.expected["loop"])


class ConfiguredContext(CaseContext):
    """A context's truth under another case object with the same data (:meth:`CaseContext.configured`):
    ``case`` is its own, every part of the truth the base context's, computed there once."""

    def __init__(self, base: CaseContext, case: Case) -> None:
        super().__init__(case)
        self.base = base

    def __getattribute__(self, name: str):
        if name in _TRUTH:
            return getattr(object.__getattribute__(self, "base"), name)
        return object.__getattribute__(self, name)


# the parts of a context computed from its case's data: a ConfiguredContext reads them from its base
_TRUTH = frozenset(["truth", *(name for name, value in vars(CaseContext).items() if isinstance(value, cached_property))])
