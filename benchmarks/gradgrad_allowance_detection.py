"""Does the second-order rounding allowance hide a wrong double backward? (issue 47)

Usage::

    python benchmarks/gradgrad_allowance_detection.py [--cases 40] [--seed 201] [--mlstm]

On the float32 cases of the matrix profile narrowed to the rounding-sensitive families (gdn,
deltaproduct, kda, rwkv7: the sweep's ``--mode ... --dtype f32`` draw), it judges ``gradgrad`` for
two targets whose Hessian-vector products are the loop reference's double backward computed in
float32:

* ``correct``: as it is (a correct float32 double backward);
* ``beta-second-order-dropped``: with the write strength β = σ(·) differentiated once only, so σ''
  never enters H·u (the ``hvp-gate-second-order-dropped`` mutant's bug, in these families' gate);
  with ``--mlstm``, on mlstm's float32 cases, ``forget-second-order-dropped``: the forget gate's
  log σ(·) differentiated once only (its second derivative −σ(1 − σ) never enters H·u);

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
from gradcheck_rnn.targets.kernel_bugs import _FirstOrderSigmoid  # noqa: E402

FAMILIES = ["gdn", "deltaproduct", "kda", "rwkv7"]


class _FirstOrderLogSigmoid(torch.autograd.Function):
    """log σ whose backward is not itself differentiated: its derivative σ(−a) is taken as a constant."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return torch.nn.functional.logsigmoid(a)

    @staticmethod
    def backward(ctx, grad):
        return grad * torch.sigmoid(-ctx.saved_tensors[0].detach())


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
    parser.add_argument("--mlstm", action="store_true", help="mlstm's cases, its forget gate's log σ once")
    args = parser.parse_args()
    families, (mutant, op, first_order) = (
        (["mlstm"], ("forget-second-order-dropped", "log_sigmoid", _FirstOrderLogSigmoid)) if args.mlstm else
        (FAMILIES, ("beta-second-order-dropped", "sigmoid", _FirstOrderSigmoid)))
    profile = Narrowing.build(modes=families, dtypes=["f32"]).apply(load_profile("matrix"))
    targets = {"correct": Float32DoubleBackward(),
               mutant: Float32DoubleBackward(SimpleNamespace(**{**vars(torch_ops()), op: first_order.apply}))}
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
