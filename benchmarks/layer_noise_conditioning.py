"""Is a target's failing float32 element its own inaccuracy, or an element float32 cannot hold? (issue 47)

Usage::

    python benchmarks/layer_noise_conditioning.py -t mlstm-chunkwise [--draws 8] ID [--roundoffs 1 8]

For one case id below float64 it prints, for the target's worst element of the first order (its
gradients against the float64 loop reference, under the case's tolerances) and of the second order
(its Hessian-vector products along the ``gradgrad`` check's directions, under the product room):

1. the target's error there, in units of that element's room (atol + rtol·|b|);
2. how far the float64 loop reference's own value of that element moves when every layer's output
   but the last is rounded to the case dtype (the storage rounding every implementation of the
   dtype does between layers), and when it is off by Gaussian noise of R unit roundoffs of |v|
   (the largest change over ``--draws`` draws), in the same units;
3. for the second order, the loop's own double backward computed in the case dtype.

An element that moves by about the target's error under a few roundoffs of noise is ill-conditioned
at that dtype: a correct implementation whose layer outputs carry a few roundoffs fails it, so the
failure says nothing about the target. One that barely moves while the target misses it points at
the target. docs/findings/soak.md ("The mlstm-chunkwise float32 row") reads its output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn.judging.checks.directions import ProductTolerances  # noqa: E402
from gradcheck_rnn.judging.context import CaseContext  # noqa: E402
from gradcheck_rnn.judging.judge import TargetCall  # noqa: E402
from gradcheck_rnn.model.tolerances import Tolerances  # noqa: E402
from gradcheck_rnn.model.case import Case, as_mapping  # noqa: E402
from gradcheck_rnn.references.drift import TORCH_DTYPES, UNIT_ROUNDOFF  # noqa: E402
from gradcheck_rnn.references.loop import run_loop_hvp, run_loop_reference  # noqa: E402
from gradcheck_rnn.targets import resolve_target  # noqa: E402


def worst_element(got: dict, truth: dict, tolerances: Tolerances, dtype: str) -> tuple[str, tuple, float, float]:
    """(tensor, index, error in rooms, room) of the target's largest error over ``truth``'s tensors."""
    worst = None
    for name, b in truth.items():
        tol = tolerances.for_tensor(dtype, name)
        room = tol.atol + tol.rtol * np.abs(b)
        ratio = np.abs(np.asarray(got[name], dtype=np.float64) - b) / room
        index = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        if worst is None or ratio[index] > worst[2]:
            worst = name, index, float(ratio[index]), float(room[index])
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case_id", metavar="ID")
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--roundoffs", type=float, nargs="+", default=[1.0, 8.0])
    parser.add_argument("--draws", type=int, default=8)
    args = parser.parse_args()
    case = Case.from_id(args.case_id)
    dtype, u = case.config.dtype, UNIT_ROUNDOFF[case.config.dtype]
    context, rng = CaseContext(case), np.random.default_rng(0)
    call = TargetCall(resolve_target(args.target), context)

    def stored(layer: int, b: int, out: torch.Tensor) -> torch.Tensor:
        return out + (out.detach().to(TORCH_DTYPES[dtype]).double() - out.detach())

    def noisy(roundoffs: float):
        def noise(layer: int, b: int, out: torch.Tensor) -> torch.Tensor:
            return out + roundoffs * u * out.detach().abs() * torch.from_numpy(rng.standard_normal(tuple(out.shape)))
        return noise

    def report(order: str, name: str, index: tuple, ratio: float, room: float, truth: float, run) -> None:
        print(f"{order}: {args.target}'s worst element {name}{list(map(int, index))} (b = {truth:.6g}): {ratio:.3g} rooms")
        moved = abs(run(stored)[name][index] - truth) / room
        print(f"  the float64 loop with layer outputs stored in {dtype}: moves {moved:.3g} rooms")
        for roundoffs in args.roundoffs:
            moved = max(abs(run(noisy(roundoffs))[name][index] - truth) / room for _ in range(args.draws))
            print(f"  ... with layer outputs off by {roundoffs:g} roundoffs of |v| (max of {args.draws}): {moved:.3g} rooms")

    loop = {n: v for n, v in context.expected["loop"].items() if n in context.gradient_names()}
    name, index, ratio, room = worst_element(call.base(), loop, Tolerances(), dtype)
    report("first order", name, index, ratio, room, loop[name][index],
           lambda noise: as_mapping(run_loop_reference(case, noise)))
    products = ProductTolerances(Tolerances())
    truth = context.hvp
    per_direction = [worst_element(call.product("hvp", v), e["loop"], products, dtype) + (k,)
                     for k, (v, e) in enumerate(zip(truth.directions, truth.expected))]
    name, index, ratio, room, k = max(per_direction, key=lambda w: w[2])
    f64, v = truth.expected[k]["loop"], truth.directions[k]
    report(f"second order along u{k}", name, index, ratio, room, f64[name][index],
           lambda noise: run_loop_hvp(case, v, layer_noise=noise).grads)
    in_dtype = run_loop_hvp(case, v, dtype=TORCH_DTYPES[dtype]).grads[name][index]
    print(f"  the loop's double backward computed in {dtype}: {abs(in_dtype - f64[name][index]) / room:.3g} rooms")


if __name__ == "__main__":
    main()
