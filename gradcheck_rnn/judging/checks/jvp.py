"""``jvp``: a target's forward mode (its optional ``jvp(case, tangents)``, docs/contracts.md) against
the float64 references, and against its own reverse mode.

Two tangent directions u₀, u₁ over the requested inputs are drawn per case
(:func:`gradcheck_rnn.judging.context.tangent_directions`, salt 47). For each, the target's output
tangents J·u (y, hy, cy) are compared element by element with both references' (the loop
reference in torch's forward-mode AD, the JAX program's ``jax.jvp``; they must agree first, else
the row is ``reference-disagreement``), under the output tolerances of the case dtype
(:mod:`.directions`). Two more rows:

* ``direction``: J·u₁ − J·u₀ of the target against the reference's, where the reference's change
  is larger than the two runs' bounds: a forward mode that returns zeros, or tangents that do not
  depend on the direction, fails here with a sentence that says so (a refusal is a skip; a silent
  zero is a failure);
* ``dot``: vᵀ(J·u₀) = (Jᵀ·v)ᵀu₀ with v the case's head gradients (dy, dhy, dcy) and Jᵀ·v the
  target's own gradients from its base run, within Σ|v|·bound(J·u₀) + Σ|u₀|·bound(Jᵀv): a target
  whose forward and reverse modes disagree is caught even where one of them happens to agree
  with a reference. Left out where the family's gradient convention differentiates the cell
  state in another form than it returns (``Family.reexpresses``).

A target without ``jvp``, or whose ``supports_jvp(case)`` declines, makes the row a ``skip`` with
its reason.
"""

from __future__ import annotations

import numpy as np

from ...model.compare import TensorError, term_bound
from ...model.tolerances import Tolerances
from .base import Check, Labels, ReferenceDisagreement, Skip
from .directions import ProductTolerances, bilinear_row, compare_directions, direction_row

WHAT = "the output tangent"


def check_jvp(context, call, tolerances: Tolerances) -> list[TensorError]:
    tolerances = ProductTolerances(tolerances)  # below float64: more room (directions.PRODUCT_ROOM)
    offered = call.offers("jvp")
    if offered is not True:
        raise Skip(str(offered))
    truth = context.jvp
    if truth.disagreement is not None:
        raise ReferenceDisagreement([truth.disagreement])
    names = context.output_names()
    actual = [call.product("jvp", u) for u in truth.directions]
    rows = [direction_row(context, truth.expected, actual, names, tolerances, "output tangents")]
    if not context.case.config.family.reexpresses(context.case.config):
        rows.append(dot_row(context, actual[0], call.base(), tolerances))
    return [row for row in rows if row is not None] + compare_directions(context, truth.expected, actual, names,
                                                                         tolerances, WHAT)


def dot_row(context, tangents: dict[str, np.ndarray], grads: dict[str, np.ndarray],
            tolerances: Tolerances) -> TensorError:
    """vᵀ(J·u₀) of the target's forward mode against (Jᵀ·v)ᵀu₀ of its reverse mode (its base run)."""
    case = context.case
    dtype, u = case.config.dtype, context.jvp.directions[0]
    heads = {"y": case.dy, "hy": case.dhy, "cy": case.dcy}
    outputs = context.output_names()
    forward = sum(float(np.sum(heads[n] * tangents[n])) for n in outputs)
    reverse = sum(float(np.sum(grads[n] * v)) for n, v in u.items())
    # each element of a correct target is within its tolerance of the truth, and the truth's two
    # sides are equal: so are the target's, within the sums of those bounds
    slack = sum(float(np.sum(np.abs(heads[n]) * term_bound(tolerances.for_tensor(dtype, n), [tangents[n]])))
                for n in outputs)
    slack += sum(float(np.sum(np.abs(v) * term_bound(tolerances.for_tensor(dtype, n), [grads[n]]))) for n, v in u.items())
    return bilinear_row("dot", forward, reverse, slack, "the target's forward and reverse modes disagree: vᵀ(J·u0) "
                        "from its jvp against (Jᵀ·v)ᵀu0 from its gradients")


CHECK = Check("jvp", check_jvp, order=110,
              labels=Labels("target", "reference (dot: (Jᵀv)ᵀu0 from the target's gradients)",
                            "output tangent (direction: its change from u0 to u1; dot: vᵀ(J·u0))"))
