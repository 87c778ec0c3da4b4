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

A family whose gradients are sensitive to rounding (``Family.rounding_sensitive``: gdn,
deltaproduct, kda, rwkv7: a key near 0 under the L2 norm; mlstm: the memory read's derivative in
the query cancels under long memory) gets below float64 what its first order gets, the rounding
probe's allowance (:func:`gradcheck_rnn.references.drift.hvp_probe_allowance`, per direction: the
largest change of the float64 loop's own H·u over runs with noisy layer outputs and one run in the
case dtype), asked for only when a row failed without it: a failing tensor row
is re-judged as the reference check's (``SAFETY``, ``1 + rtol``: :func:`~gradcheck_rnn.references.drift.rejudge_with_drift`),
and a failing ``direction`` or ``symmetry`` row with each product's bound widened by the same
allowance. A correct float32 double backward (fla-naive's gdn, one layer, a key near 0) reached
1.03 times the product room without it (docs/findings/soak.md).

A target without ``hvp``, or whose ``supports_hvp(case)`` declines (fused-cpu: its backward is
written by hand and is not itself differentiable), makes the row a ``skip`` with its reason.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...model.compare import TensorError, term_bound
from ...model.tolerances import Tolerances
from .base import Arrays, Check, Labels, ReferenceDisagreement, Skip
from .directions import ProductTolerances, bilinear_row, compare_directions, direction_row

WHAT = "the Hessian-vector product"


def check_gradgrad(context, call, tolerances: Tolerances) -> list[TensorError]:
    tolerances = ProductTolerances(tolerances)
    offered = call.offers("hvp")
    if offered is not True:
        raise Skip(str(offered))
    names = context.gradient_names()
    if not names:
        raise Skip("no gradient is requested")
    truth = context.hvp
    if truth.disagreement is not None:
        raise ReferenceDisagreement([truth.disagreement])
    actual = [call.product("hvp", u) for u in truth.directions]
    rows = [direction_row(context, truth.expected, actual, names, tolerances, "Hessian-vector products"),
            symmetry_row(context, actual, tolerances)]
    rows = [row for row in rows if row is not None] + compare_directions(context, truth.expected, actual, names,
                                                                         tolerances, WHAT)
    config = context.case.config
    if config.family.rounding_sensitive and config.dtype != "f64" and any(not row.passed for row in rows):
        rows = with_rounding_allowance(context, actual, names, tolerances, rows)
    return rows


def symmetry_row(context, actual: list[Arrays], tolerances: Tolerances,
                 extra: list[Arrays] | None = None) -> TensorError:
    """u₁ᵀ(H·u₀) against u₀ᵀ(H·u₁), both from the target's own products (``extra``: per direction,
    by name, a rounding allowance added to each product's bound)."""
    dtype = context.case.config.dtype
    u0, u1 = context.hvp.directions

    def along(u: Arrays, product: Arrays, allowance: Arrays) -> tuple[float, float]:
        value = sum(float(np.sum(v * product[n])) for n, v in u.items())
        slack = sum(float(np.sum(np.abs(v) * (term_bound(tolerances.for_tensor(dtype, n), [product[n]])
                                              + allowance.get(n, 0.0))))
                    for n, v in u.items())
        return value, slack

    extra = extra or [{}, {}]
    (first, slack0), (second, slack1) = along(u1, actual[0], extra[0]), along(u0, actual[1], extra[1])
    return bilinear_row("symmetry", first, second, slack0 + slack1,
                        "the target's second order is not symmetric: u1ᵀ(H·u0) against u0ᵀ(H·u1)")


def with_rounding_allowance(context, actual: list[Arrays], names: list[str], tolerances: Tolerances,
                            rows: list[TensorError]) -> list[TensorError]:
    """The failing rows re-judged with the rounding probe's second-order allowance (see the module
    docstring); the passing ones as they are."""
    from ...references.drift import rejudge_with_drift, widened

    case, truth = context.case, context.hvp
    allowances = context.hvp_drift
    # what each element's bound gains, as rejudge_with_drift widens it: SAFETY·(1 + rtol)·allowance
    extra = [{n: widened(a, tolerances.for_tensor(case.config.dtype, n).rtol)
              for n in names if (a := allowance.for_tensor(n)) is not None} for allowance in allowances]
    out = []
    for row in rows:
        if row.passed:
            out.append(row)
        elif row.name in ("direction", "symmetry"):
            again = (direction_row(context, truth.expected, actual, names, tolerances, "Hessian-vector products", extra)
                     if row.name == "direction" else symmetry_row(context, actual, tolerances, extra))
            if again is None:  # no element where the product must move beyond the widened bounds
                continue
            verdict = "within" if again.passed else "outside"
            again.drift = max((float(a.max()) for e in extra for a in e.values()), default=0.0)
            again.message = (f"{row.name}: {verdict} its bound + the rounding allowance of each product "
                             f"({allowances[0].describe()}), ratio {again.ratio:.3g}; the bound alone: {row.message}")
            out.append(again)
        else:
            name, k = row.name.rsplit(".u", 1)
            k = int(k)
            # judged under the tensor's own name (its tolerance and location), then named as the row
            plain = replace(row, name=name)
            expected = {ref: {name: value[name]} for ref, value in truth.expected[k].items()}
            (again,) = rejudge_with_drift(case, {name: actual[k][name]}, expected, tolerances, [plain],
                                          lambda k=k: allowances[k])
            again.name, again.message = row.name, f"{row.name}: {WHAT} along u{k}" + again.message[len(name):]
            out.append(again)
    return out


CHECK = Check("gradgrad", check_gradgrad, order=120,
              labels=Labels("target", "reference (symmetry: u0ᵀ(H·u1), the target's)",
                            "Hessian-vector product (direction: its change from u0 to u1; symmetry: u1ᵀ(H·u0))"))
