"""``fd``: the finite-difference witness (:mod:`gradcheck_rnn.references.fd`) judges the references
and, for float64 targets, the target's directional derivatives uᵀ∇L.

A reference that disagrees with the witness makes the row ``reference-disagreement``; a float64
target is allowed the witness's tolerance plus its own tolerance along u
(:func:`tolerance_along`); lower precision targets are skipped after the references were
witnessed (their own error is far above what a difference quotient resolves).
"""

from __future__ import annotations

import numpy as np

from ...model.case import Case
from ...model.compare import TensorError, term_bound
from ...references import REFERENCE_NAMES, fd
from ...model.tolerances import Tolerances
from .base import Check, Labels, ReferenceDisagreement, Skip


def witnessed(context) -> tuple[fd.Witness, list[TensorError]]:
    """The finite-difference witness and its verdict on each reference (one row per direction)."""
    grads = {ref: {n: context.expected[ref][n] for n in context.case.wants} for ref in REFERENCE_NAMES}
    witness = fd.build_witness(context.case, grads["loop"])
    return witness, fd.reference_rows(witness, grads)


def check_fd(context, call, tolerances: Tolerances) -> list[TensorError]:
    witness, rows = context.truth(CHECK)
    bad = [row for row in rows if not row.passed]
    if bad:
        raise ReferenceDisagreement(bad)
    if all(value is None for value in witness.fd):
        raise Skip("the loss is not smooth along any of the directions (a relu kink within the step)")
    if context.case.config.dtype != "f64":
        raise Skip(f"the fd witness judges float64 targets only; the references agree with it on this "
                   f"{context.case.config.dtype} case")
    grads = call.base()
    return [fd.row(f"target.u{k}", fd.directional(grads, u), witness, k,
                   tolerance_along(u, grads, context.case, tolerances))
            for k, u in enumerate(witness.directions) if witness.fd[k] is not None]


def tolerance_along(u: dict[str, np.ndarray], grads: dict[str, np.ndarray], case: Case,
                    tolerances: Tolerances) -> float:
    """Σ |u|·(atol + rtol·|g|): how far uᵀg may be off when each element of g is within its
    tensor's tolerance, so that a precision the reference check accepts never fails here."""
    return sum(float(np.sum(np.abs(v) * term_bound(tolerances.for_tensor(case.config.dtype, name), [grads[name]])))
               for name, v in u.items())


# draws nothing of its own: the witness's directions have their own salt (references/fd.py)
CHECK = Check("fd", check_fd, order=100, labels=Labels("uᵀ∇L", "finite difference", "directional derivative"),
              truth=witnessed)
