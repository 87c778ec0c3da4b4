"""What the two product checks share (``jvp``: J·u, ``gradgrad``: H·u): a target's products along
the case's two directions u₀, u₁ against the float64 references', and the ``direction`` row that
proves they move with the direction as the reference's do (a silent zero, or a product that ignores
its direction, fails there with a sentence that says so)."""

from __future__ import annotations

import numpy as np

from ...model.compare import TensorError, compare_tensor, term_bound
from ...model.tolerances import Tolerance, Tolerances
from ...model.statuses import worst_tensor
from .base import Arrays


# Below float64, the jvp and gradgrad checks' room is this many times the first order's: a product
# along a direction over every requested input and parameter sums each one's rounded contribution
# (a tangent reaches 15 where an output is ~1), and a Hessian-vector product sums the first order's
# rounded terms once more. Correct kernels reached 1.7 (mlstm_kernels' chunkwise jvp, float32
# long-memory mLSTM) and 1.85 (torch.nn's float32 double backward, 4-layer long-memory LSTMs)
# times the first-order tolerance (docs/findings/soak.md); 8 leaves a margin of 4.3.
PRODUCT_ROOM = 8.0


class ProductTolerances(Tolerances):
    """The run's tolerances with :data:`PRODUCT_ROOM` times the room below float64 (float64 as is)."""

    def __init__(self, first_order: Tolerances) -> None:
        super().__init__(first_order.table, first_order.rtol, first_order.atol)

    def for_kind(self, dtype: str, kind: str) -> Tolerance:
        tolerance = super().for_kind(dtype, kind)
        room = 1.0 if dtype == "f64" else PRODUCT_ROOM
        return Tolerance(tolerance.rtol * room, tolerance.atol * room)


def compare_directions(context, expected: list[dict[str, Arrays]], actual: list[Arrays], names: list[str],
                       tolerances: Tolerances, what: str) -> list[TensorError]:
    """One row per direction k and tensor: ``<tensor>.u<k>``, the target's against each reference
    (the worse comparison kept), under the tensor's own tolerance; ``what`` names the product in
    the messages ("the output tangent", "the Hessian-vector product")."""
    case, rows = context.case, []
    for k, (got, per_ref) in enumerate(zip(actual, expected)):
        for name in names:
            candidates = []
            for ref_name, ref in per_ref.items():
                error = compare_tensor(name, got[name], ref[name], tolerances.for_tensor(case.config.dtype, name),
                                       case.config)
                error.name, error.reference = f"{name}.u{k}", ref_name
                if error.message:
                    error.message = f"{name}.u{k}: {what} along u{k}" + error.message[len(name):]
                candidates.append(error)
            rows.append(worst_tensor([e for e in candidates if not e.passed] or candidates))
    return rows


def direction_row(context, expected: list[dict[str, Arrays]], actual: list[Arrays], names: list[str],
                  tolerances: Tolerances, what: str, extra: list[Arrays] | None = None) -> TensorError | None:
    """The target's change from u₀ to u₁ against the loop reference's, on the elements where the
    reference's change exceeds the two runs' bounds (None: no element where it must move); ``extra``
    (per direction, by name; absent: 0) widens each run's bound by a rounding allowance."""
    case = context.case
    worst: tuple[float, str, tuple, float, float] | None = None
    moved_any = False
    for name in names:
        tol = tolerances.for_tensor(case.config.dtype, name)
        ref0, ref1 = (e["loop"][name] for e in expected)
        ref_change, slack = ref1 - ref0, term_bound(tol, [ref0, ref1])
        if extra is not None:
            slack = slack + sum(e.get(name, 0.0) for e in extra)
        decisive = np.abs(ref_change) > slack
        if not decisive.any():
            continue
        change = actual[1][name] - actual[0][name]
        moved_any |= bool((np.abs(change[decisive]) > 0).any())
        with np.errstate(all="ignore"):
            ratios = np.nan_to_num(np.where(decisive, np.abs(change - ref_change) / slack, 0.0), nan=np.inf)
        index = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
        if worst is None or ratios[index] > worst[0]:
            worst = float(ratios[index]), name, index, float(change[index]), float(ref_change[index])
    if worst is None:
        return None
    ratio, name, index, a, b = worst
    # no rtol/atol of its own: its bound is the sum of the two runs' (term_bound)
    error = TensorError("direction", "pass" if ratio <= 1 else "fail", abs(a - b), abs(a - b) / abs(b) if b else np.inf,
                        ratio, {"tensor": name, "index": [int(i) for i in index]}, a, b, reference="loop")
    if ratio > 1:
        how = (f"returns the same {what} for two different directions (zeros, or values that ignore the direction)"
               if not moved_any else f"does not move {what} with the direction as the reference does")
        error.message = (f"direction: the target {how}: {name}{list(map(int, index))} changes by a={a:.3g} from u0 "
                         f"to u1 where the float64 reference changes by b={b:.3g}")
    return error


def bilinear_row(name: str, got: float, expected: float, slack: float, message: str) -> TensorError:
    """A row judging one scalar identity of the target's own results (``dot``, ``symmetry``):
    |got − expected| within ``slack``, what the elements' tolerances allow it."""
    diff = abs(got - expected)
    ratio = diff / slack if slack > 0 else (0.0 if diff == 0 else np.inf)
    error = TensorError(name, "pass" if ratio <= 1 else "fail", diff, diff / abs(expected) if expected else np.inf,
                        ratio, {}, got, expected, reference="the target's own results")
    if ratio > 1:
        error.message = (f"{name}: {message}: {got:.9g} against {expected:.9g} (error {ratio:.3g} × the bound "
                         f"{slack:.3g} their tolerances allow)")
    return error
