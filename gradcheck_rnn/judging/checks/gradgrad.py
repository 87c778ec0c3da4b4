"""``gradgrad``: a target's second order (its optional ``hvp(case, tangents)``, docs/contracts.md):
Hessian-vector products of the loss sum(y·dy) + sum(hy·dhy) + sum(cy·dcy) against the float64
references.

Along the ``jvp`` check's two directions u₀, u₁ (:func:`gradcheck_rnn.judging.context.tangent_directions`)
the target's H·u — for every requested name, the derivative of that gradient along u — is compared
element by element with both references' (the loop reference by double backward, the JAX
program's ``jax.jvp`` of its ``jax.vjp``; they must agree first, else ``reference-disagreement``)
under that gradient's tolerance (:mod:`.directions`). Two more rows:

* ``direction``: H·u₁ − H·u₀ against the reference's where the reference's change exceeds the two
  runs' bounds: a double backward that silently returns zeros, or one that ignores its direction,
  fails here with a sentence that says so (only a refusal is a skip, pytorch/rl #4154);
* ``symmetry``: u₁ᵀ(H·u₀) = u₀ᵀ(H·u₁), the Hessian's symmetry in the target's own two products,
  within Σ|u₁|·bound(H·u₀) + Σ|u₀|·bound(H·u₁).

Below float64 every tolerance has :data:`~.directions.PRODUCT_ROOM` times the first order's room
(:class:`~.directions.ProductTolerances`): a correct float32 double backward (torch.nn's LSTM, 4
layers, long memory) reached 1.85 times the first-order tolerance on 2 of 1,000 nightly cases.

A family that says its gradients are sensitive to rounding (``Family.rounding_sensitive``: gdn,
deltaproduct, kda, rwkv7) is judged here in float64 only: below it the first-order checks re-judge a
failing tensor with the rounding probe, which has no second-order form yet, and a correct float32
double backward (fla-naive's gdn, one layer, a key near 0) reached 1.03 times the product room
where the float64 loop's own double backward run in float32 reached 0.84 (docs/findings/soak.md).

A target without ``hvp``, or whose ``supports_hvp(case)`` declines (fused-cpu: its backward is
written by hand and is not itself differentiable), makes the row a ``skip`` with its reason.
"""

from __future__ import annotations

import numpy as np

from ...model.compare import TensorError, term_bound
from ...model.tolerances import Tolerances
from .base import Check, Labels, ReferenceDisagreement, Skip
from .directions import ProductTolerances, bilinear_row, compare_directions, direction_row

WHAT = "the Hessian-vector product"
def check_gradgrad(context, call, tolerances: Tolerances) -> list[TensorError]:
    tolerances = ProductTolerances(tolerances)
    offered = call.offers("hvp")
    if offered is not True:
        raise Skip(str(offered))
    config = context.case.config
    if config.family.rounding_sensitive and config.dtype != "f64":
        raise Skip(f"{config.mode}'s second order is judged in float64 only: {config.family.rounding_sensitive}, "
                   "and no rounding allowance of Hessian-vector products exists yet")
    names = context.gradient_names()
    if not names:
        raise Skip("no gradient is requested")
    truth = context.hvp
    if truth.disagreement is not None:
        raise ReferenceDisagreement([truth.disagreement])
    actual = [call.product("hvp", u) for u in truth.directions]
    rows = [direction_row(context, truth.expected, actual, names, tolerances, "Hessian-vector products"),
            symmetry_row(context, actual, tolerances)]
    return [row for row in rows if row is not None] + compare_directions(context, truth.expected, actual, names,
                                                                         tolerances, WHAT)


def symmetry_row(context, actual: list[dict[str, np.ndarray]], tolerances: Tolerances) -> TensorError:
    """u₁ᵀ(H·u₀) against u₀ᵀ(H·u₁), both from the target's own products."""
    dtype = context.case.config.dtype
    u0, u1 = context.hvp.directions

    def along(u: dict[str, np.ndarray], product: dict[str, np.ndarray]) -> tuple[float, float]:
        value = sum(float(np.sum(v * product[n])) for n, v in u.items())
        slack = sum(float(np.sum(np.abs(v) * term_bound(tolerances.for_tensor(dtype, n), [product[n]])))
                    for n, v in u.items())
        return value, slack

    (first, slack0), (second, slack1) = along(u1, actual[0]), along(u0, actual[1])
    return bilinear_row("symmetry", first, second, slack0 + slack1,
                        "the target's second order is not symmetric: u1ᵀ(H·u0) against u0ᵀ(H·u1)")


CHECK = Check("gradgrad", check_gradgrad, order=120,
              labels=Labels("target", "reference (symmetry: u0ᵀ(H·u1), the target's)",
                            "Hessian-vector product (direction: its change from u0 to u1; symmetry: u1ᵀ(H·u0))"))
