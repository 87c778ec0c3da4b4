"""``jvp``: a target's forward mode (its optional ``jvp(case, tangents)``, docs/contracts.md) against
the float64 references, and against its own reverse mode.

Two tangent directions u₀, u₁ over the requested inputs are drawn per case
(:func:`gradcheck_rnn.judging.context.tangent_directions`, salt 47). For each, the target's output
tangents J·u (y, hy, cy) are compared element by element with both references' (the loop
reference in torch's forward-mode AD, the JAX program's ``jax.jvp``; they must agree first, else
the row is ``reference-disagreement``), under the output tolerances of the case dtype. Two more rows:

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

from ..compare import TensorError, compare_tensor, term_bound
from ..tolerances import Tolerances
from ...rows.statuses import worst_tensor
from .base import Check, ReferenceDisagreement, Skip


def check_jvp(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    offered = call.supports_jvp()
    if offered is not True:
        raise Skip(str(offered))
    truth = context.jvp
    if truth.disagreement is not None:
        raise ReferenceDisagreement([truth.disagreement])
    names = context.output_names()
    dtype = case.config.dtype
    actual = [call.jvp(u) for u in truth.directions]
    rows = []
    for k, (got, expected) in enumerate(zip(actual, truth.expected)):
        for name in names:
            candidates = []
            for ref_name, ref in expected.items():
                error = compare_tensor(name, got[name], ref[name], tolerances.for_tensor(dtype, name), case.config)
                error.name, error.reference = f"{name}.u{k}", ref_name
                if error.message:
                    error.message = f"{name}.u{k}: the output tangent along u{k}" + error.message[len(name):]
                candidates.append(error)
            rows.append(worst_tensor([e for e in candidates if not e.passed] or candidates))
    extra = [direction_row(context, actual, tolerances)]
    if not case.config.family.reexpresses(case.config):
        extra.append(dot_row(context, actual[0], call.base(), tolerances))
    return [row for row in extra if row is not None] + rows


def direction_row(context, actual: list[dict[str, np.ndarray]], tolerances: Tolerances) -> TensorError | None:
    """The target's change J·u₁ − J·u₀ against the loop reference's, on the elements where the
    reference's change exceeds the two runs' bounds (None: no element where it must move)."""
    case = context.case
    worst: tuple[float, str, tuple, float, float] | None = None
    moved_any, decisive_any = False, False
    for name in context.output_names():
        tol = tolerances.for_tensor(case.config.dtype, name)
        ref0, ref1 = (e["loop"][name] for e in context.jvp.expected)
        ref_change, slack = ref1 - ref0, term_bound(tol, [ref0, ref1])
        decisive = np.abs(ref_change) > slack
        if not decisive.any():
            continue
        decisive_any = True
        change = actual[1][name] - actual[0][name]
        moved_any |= bool((np.abs(change[decisive]) > 0).any())
        with np.errstate(all="ignore"):
            ratios = np.where(decisive, np.abs(change - ref_change) / slack, 0.0)
        ratios = np.nan_to_num(ratios, nan=np.inf)
        index = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
        if worst is None or ratios[index] > worst[0]:
            worst = float(ratios[index]), name, index, float(change[index]), float(ref_change[index])
    if not decisive_any:
        return None
    ratio, name, index, a, b = worst
    # no rtol/atol of its own: its bound is the sum of the two runs' (term_bound)
    error = TensorError("direction", "pass" if ratio <= 1 else "fail", abs(a - b), abs(a - b) / abs(b) if b else np.inf,
                        ratio, {"tensor": name, "index": [int(i) for i in index]}, a, b, reference="loop")
    if ratio > 1:
        what = ("returns the same output tangents for two different directions (zeros, or values that ignore "
                "the direction)" if not moved_any else "does not move with the direction as the reference does")
        error.message = (f"direction: the target's forward mode {what}: {name}{list(map(int, index))} changes by "
                         f"a={a:.3g} from u0 to u1 where the float64 reference changes by b={b:.3g}")
    return error


def dot_row(context, tangents: dict[str, np.ndarray], grads: dict[str, np.ndarray],
            tolerances: Tolerances) -> TensorError:
    """vᵀ(J·u₀) of the target's forward mode against (Jᵀ·v)ᵀu₀ of its reverse mode (its base run)."""
    case = context.case
    dtype, u = case.config.dtype, context.jvp.directions[0]
    heads = {"y": case.dy, "hy": case.dhy, "cy": case.dcy}
    forward = sum(float(np.sum(heads[n] * tangents[n])) for n in context.output_names())
    reverse = sum(float(np.sum(grads[n] * v)) for n, v in u.items())
    # each element of a correct target is within its tolerance of the truth, and the truth's two
    # sides are equal: so are the target's, within the sums of those bounds
    slack = sum(float(np.sum(np.abs(heads[n]) * term_bound(tolerances.for_tensor(dtype, n), [tangents[n]])))
                for n in context.output_names())
    slack += sum(float(np.sum(np.abs(v) * term_bound(tolerances.for_tensor(dtype, n), [grads[n]]))) for n, v in u.items())
    diff = abs(forward - reverse)
    ratio = diff / slack if slack > 0 else (0.0 if diff == 0 else np.inf)
    error = TensorError("dot", "pass" if ratio <= 1 else "fail", diff, diff / abs(reverse) if reverse else np.inf,
                        ratio, {}, forward, reverse, reference="target's own reverse mode")
    if ratio > 1:
        error.message = (f"dot: the target's forward and reverse modes disagree: vᵀ(J·u0) = {forward:.9g} from its "
                         f"jvp, (Jᵀ·v)ᵀu0 = {reverse:.9g} from its gradients (error {ratio:.3g} × the bound "
                         f"{slack:.3g} their tolerances allow)")
    return error


CHECK = Check("jvp", check_jvp)
