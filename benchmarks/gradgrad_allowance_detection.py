"""Does the second-order rounding allowance hide a wrong double backward? (issue 47)

Usage::

    python benchmarks/gradgrad_allowance_detection.py [--cases 40] [--seed 201]

On the float32 cases of the matrix profile narrowed to the rounding-sensitive families (gdn,
deltaproduct, kda, rwkv7: the sweep's ``--mode ... --dtype f32`` draw), it judges ``gradgrad`` for
two targets whose Hessian-vector products are the loop reference's double backward computed in
float32:

* ``correct``: as it is (a correct float32 double backward);
* ``beta-second-order-dropped``: with the write strength β = σ(·) differentiated once only, so σ''
  never enters H·u (the ``hvp-gate-second-order-dropped`` mutant's bug, in these families' gate);

and prints, for each, on how many cases the check fails with the allowance (as the tool judges) and
without it (the fixed product room alone). An allowance that hides nothing fails the mutant on as
many cases with it as without it; one that is needed fails the correct target only without it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn.families.ops import torch_ops  # noqa: E402
from gradcheck_rnn.judging.checks import gradgrad  # noqa: E402
from gradcheck_rnn.judging.context import CaseContext  # noqa: E402
from gradcheck_rnn.judging.judge import judge  # noqa: E402
from gradcheck_rnn.model.narrowing import Narrowing  # noqa: E402
from gradcheck_rnn.model.profiles import draw_cases, load_profile  # noqa: E402
from gradcheck_rnn.references import run_reference  # noqa: E402
from gradcheck_rnn.references.loop import run_loop_hvp  # noqa: E402
from gradcheck_rnn.targets.mutants import _FirstOrderSigmoid  # noqa: E402

FAMILIES = ["gdn", "deltaproduct", "kda", "rwkv7"]


class Float32DoubleBackward:
    """A target whose H·u is the loop's double backward in float32 (with ``ops``, a mutant's)."""

    def __init__(self, ops=None) -> None:
        self.ops = ops

    def run(self, case):
        return run_reference("loop", case)

    def hvp(self, case, tangents):
        return run_loop_hvp(case, tangents, ops=self.ops, dtype=torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--seed", type=int, default=201)
    args = parser.parse_args()
    profile = Narrowing.build(modes=FAMILIES, dtypes=["f32"]).apply(load_profile("matrix"))
    targets = {"correct": Float32DoubleBackward(),
               "beta-second-order-dropped": Float32DoubleBackward(
                   SimpleNamespace(**{**vars(torch_ops()), "sigmoid": _FirstOrderSigmoid.apply}))}
    with_allowance = gradgrad.with_rounding_allowance
    failed = {(name, allowed): 0 for name in targets for allowed in (True, False)}
    judged = 0
    for case in draw_cases(profile, sweep_seed=args.seed, count=args.cases):
        context = CaseContext(case)
        for allowed in (True, False):
            gradgrad.with_rounding_allowance = with_allowance if allowed else (lambda c, a, n, t, rows: rows)
            for (name, target), (row,) in zip(targets.items(), (judge(context, [t], checks=["gradgrad"])
                                                                for t in targets.values())):
                failed[name, allowed] += row.status == "fail"
                judged += allowed and name == "correct" and row.status in ("pass", "fail")
    gradgrad.with_rounding_allowance = with_allowance
    print(f"{args.cases} cases (seed {args.seed}), {judged} judged")
    for name in targets:
        print(f"{name}: fails {failed[name, True]} with the allowance, {failed[name, False]} without it")


if __name__ == "__main__":
    main()
