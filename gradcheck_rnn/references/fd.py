"""The finite-difference witness: ground truth that uses no autodiff at all (the ``fd`` check).

Both references differentiate by autodiff (torch autograd, ``jax.vjp``), and autodiff has shipped
wrong reverse-mode gradients (jax #753, #5900). This check differences the float64 ``loop``
forward (:func:`~gradcheck_rnn.references.loop.loop_loss`, the scalar
L = sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)) along ``DIRECTIONS`` random unit directions u over the
requested inputs and parameters, and compares the central difference

    fd(u) = (L(θ + εu) − L(θ − εu)) / 2ε

with the directional derivative uᵀ∇L that each reference's gradients give, and — for float64
targets — that the target's gradients give. A reference that disagrees with the witness makes
the row ``reference-disagreement`` (never a target failure); a float64 target that disagrees by
more than the tolerance below plus what its own tolerance allows along u (each element of its g
within atol + rtol·|g|, so uᵀg within Σ|u|·(atol + rtol·|g|): the precision the reference check
accepts) fails; targets computing in lower precision are skipped after the references have been
witnessed (their own error is far above what a difference quotient resolves).

Error measure: e(u) = |fd(u) − uᵀg| / (‖g‖ + 1), with ‖g‖ the 2-norm of the loop reference's
requested gradient (u is a unit vector, so |uᵀg| ≤ ‖g‖; the +1 keeps cases whose loss hardly
depends on anything — all sequences empty, every state omitted — from dividing by ~0).
A direction fails when e(u) > ``TOLERANCE``.

Step size and tolerance
-----------------------
``python -m gradcheck_rnn.references.fd 300`` prints the distribution of e(u) for the correct loop
reference per step size (the figures: benchmarks/RESULTS.md, "The fd witness's step and
tolerance"). Truncation error (∝ ε²) dominates above 1e-5 and rounding error (∝ 1/ε) below it, so
``STEP = 1e-5`` sits at the floor; ``TOLERANCE = 1e-8`` is some hundreds of times the worst e
measured there, while a gradient scaled by 1.001 errs by 40 to 10⁴ times it (tests/test_fd.py).
A relu kink (a pre-activation within ε of 0) can still make a difference
quotient wrong for a correct gradient, so a suspicious direction (e > tolerance / 10) is
re-differenced with ε/10: when the two quotients disagree with each other by more than the
tolerance, L is not smooth there and that direction is not judged; otherwise it is judged against
their extrapolation (:func:`extrapolated`), whose ε² truncation term cancels: a loss that curves
sharply (a gated delta rule key whose norm is near the L2 norm's floor) made fd(ε)'s truncation
alone reach the tolerance for correct gradients (docs/findings/soak.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.case import Case, with_changes
from ..model.compare import TensorError, to_float64
from ..model.names import INPUTS
from ..model.streams import case_rng, claim

DIRECTIONS = 3
STEP = 1e-5
TOLERANCE = 1e-8

_INPUTS = INPUTS


@dataclass
class Witness:
    """The finite-difference witness of one case: directions, quotients and the gradient scale.

    ``fd[k]`` is None where the loss is not smooth along direction k (the quotients at ε and ε/10
    disagree): that direction is judged by nobody."""

    directions: list[dict[str, np.ndarray]]
    fd: list[float | None]
    scale: float


WITNESS_SALT = claim(4, "the fd witness's directions")


def _rng(case: Case) -> np.random.Generator:
    """The witness's private generator for ``case``."""
    return case_rng(case.seed, WITNESS_SALT)


def requested_arrays(case: Case) -> dict[str, np.ndarray]:
    """The master values of every requested gradient's input, by gradient name."""
    arrays = {}
    for name in sorted(case.wants):
        arrays[name] = getattr(case, name) if name in _INPUTS else case.params[name]
    return arrays


def random_directions(case: Case, count: int = DIRECTIONS) -> list[dict[str, np.ndarray]]:
    """``count`` standard-normal directions over the requested inputs, each scaled to unit 2-norm."""
    rng = _rng(case)
    arrays = requested_arrays(case)
    out = []
    for _ in range(count):
        u = {name: rng.standard_normal(a.shape) for name, a in arrays.items()}
        norm = np.sqrt(sum(float(np.sum(v * v)) for v in u.values()))
        out.append({name: v / norm for name, v in u.items()})
    return out


def shifted(case: Case, u: dict[str, np.ndarray], step: float) -> Case:
    """``case`` with every requested input moved by ``step·u`` (float64: no rounding to the dtype)."""
    changes = {name: getattr(case, name) + step * v for name, v in u.items() if name in _INPUTS}
    params = {k: (v + step * u[k] if k in u else v) for k, v in case.params.items()}
    return with_changes(case, params=params, **changes)


def central_difference(case: Case, u: dict[str, np.ndarray], step: float = STEP,
                       base_cy: np.ndarray | None = None) -> float:
    """(L(θ + εu) − L(θ − εu)) / 2ε of the float64 loop forward; ``base_cy`` as in
    :func:`~gradcheck_rnn.references.loop.loop_loss` (a convention that re-expresses cy)."""
    from .loop import loop_loss

    return (loop_loss(shifted(case, u, step), base_cy) - loop_loss(shifted(case, u, -step), base_cy)) / (2 * step)


def directional(grads: dict[str, object], u: dict[str, np.ndarray]) -> float:
    """uᵀg over the names of u; a missing gradient gives NaN (never a pass)."""
    total = 0.0
    for name, v in u.items():
        g = grads.get(name)
        if g is None:
            return float("nan")
        total += float(np.sum(to_float64(g) * v))
    return total


def error(value: float, witness: Witness, k: int) -> float:
    """e(u_k) of the module docstring; NaN or Inf in ``value`` give inf."""
    fd = witness.fd[k]
    assert fd is not None
    e = abs(value - fd) / (witness.scale + 1.0)
    return e if np.isfinite(e) else float("inf")


def build_witness(case: Case, loop_grads: dict[str, object]) -> Witness:
    """Difference the loop forward along each direction; a direction whose quotients at ε and ε/10
    disagree (a relu kink within reach) is left unjudged."""
    from .loop import loop_cell_state

    directions = random_directions(case)
    scale = float(np.sqrt(sum(float(np.sum(to_float64(loop_grads[n]) ** 2)) for n in case.wants)))
    witness = Witness(directions, [], scale)
    # sLSTM's -mconst: the gradients are those of the loss with every step's m held at its value here
    base_cy = loop_cell_state(case) if case.config.family.reexpresses(case.config) else None
    for u in directions:
        witness.fd.append(central_difference(case, u, base_cy=base_cy))
    for k, u in enumerate(directions):
        if error(directional(loop_grads, u), witness, k) > TOLERANCE / 10:
            # suspicious: is the loss smooth here? re-difference with a tenth of the step
            finer = central_difference(case, u, STEP / 10, base_cy)
            coarse = witness.fd[k]
            assert coarse is not None
            smooth = abs(finer - coarse) / (scale + 1.0) <= TOLERANCE
            witness.fd[k] = extrapolated(coarse, finer) if smooth else None
    return witness


def extrapolated(coarse: float, finer: float) -> float:
    """The derivative from the quotients at ε and ε/10 with their ε² truncation term cancelled
    (Richardson): (100·fd(ε/10) − fd(ε)) / 99. Where the loss curves sharply (an L2 norm of a key
    near 0) the truncation of fd(ε) alone reaches the tolerance for a correct gradient."""
    return (100.0 * finer - coarse) / 99.0


def reference_rows(witness: Witness, reference_grads: dict[str, dict[str, object]]) -> list[TensorError]:
    """One row per reference × judged direction: each reference's uᵀg against the witness."""
    return [row(f"{name}.u{k}", directional(grads, u), witness, k)
            for name, grads in reference_grads.items()
            for k, u in enumerate(witness.directions) if witness.fd[k] is not None]


def row(label: str, value: float, witness: Witness, k: int, slack: float = 0.0) -> TensorError:
    """One judged direction as a tensor row: a = uᵀg, b = the finite difference. ``slack`` is how
    far uᵀg may move with g's own precision (a target's tolerance; 0 for the references): it is
    added to the allowed |a − b|, TOLERANCE·(‖g‖ + 1)."""
    fd = witness.fd[k]
    e = error(value, witness, k)
    allowed = TOLERANCE + slack / (witness.scale + 1.0)
    row = TensorError(f"fd:{label}", "pass" if e <= allowed else "fail", abs(value - fd),
                      abs(value - fd) / abs(fd) if fd else float("inf"), e / allowed, {"direction": k},
                      value, fd, rtol=TOLERANCE, atol=TOLERANCE, reference="fd")
    if row.status == "fail":
        widened = f" + the target's own tolerance along u, {allowed - TOLERANCE:.3g}" if slack else ""
        row.message = (f"{label}: uᵀ∇L = {value:.9g} but the central difference of the float64 loop forward "
                       f"is {fd:.9g} (error {e:.3g} of the gradient norm {witness.scale:.3g}, tolerance "
                       f"{TOLERANCE:g}{widened})")
    return row


def _measure(cases_per_profile: int = 100) -> None:  # pragma: no cover - prints the docstring's table
    import dataclasses
    import sys

    from ..model.case import make_case
    from ..model.profiles import draw_case, load_profile
    from .loop import run_loop_reference

    if len(sys.argv) > 1:
        cases_per_profile = int(sys.argv[1])
    steps = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
    errors: dict[float, list[float]] = {s: [] for s in steps}
    for name in ("ci", "soak"):
        profile = load_profile(name)
        for i in range(cases_per_profile):
            drawn = draw_case(profile, 0, i)  # made float64, every gradient requested
            case = make_case(dataclasses.replace(drawn.config, dtype="f64"), drawn.seq_lengths, drawn.seed,
                             heads=drawn.heads, initial_state=drawn.initial_state)
            grads = run_loop_reference(case).grads
            scale = float(np.sqrt(sum(float(np.sum(grads[n] ** 2)) for n in case.wants)))
            for u in random_directions(case):
                g = directional(grads, u)
                for step in steps:
                    errors[step].append(abs(central_difference(case, u, step) - g) / (scale + 1.0))
    for step in steps:
        e = np.array(errors[step])
        print(f"step {step:.0e}: {e.size} directions, median {np.median(e):.2g}, "
              f"99th pct {np.percentile(e, 99):.2g}, max {e.max():.2g}")


if __name__ == "__main__":  # pragma: no cover
    _measure()
