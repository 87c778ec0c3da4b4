"""gradcheck-rnn against torch.autograd.gradcheck, per family, side by side in one run.

    .venv/bin/python benchmarks/peer_gradcheck.py                       # 20 cases per family
    .venv/bin/python benchmarks/peer_gradcheck.py --cases 1000          # issue 42's goal
    .venv/bin/python benchmarks/peer_gradcheck.py --families gru,gdn --cases 5
    .venv/bin/python benchmarks/peer_gradcheck.py --fast-mode         # gradcheck's fast mode
    .venv/bin/python benchmarks/peer_gradcheck.py --cases 1000 --torch-every 20   # torch on a sample

What a user runs instead of gradcheck-rnn is ``torch.autograd.gradcheck`` on their kernel. Per
family (the cuDNN cells lstm, gru, rnn_tanh, rnn_relu; s6, slstm; mlstm, gla, gdn), both judge the
same kernels (fused-cpu) on the same cases:

- gradcheck-rnn: ``gr.sweep("fused-cpu", ...)`` of N cases of the profile that draws the family
  (ci, families or matrix), narrowed to it, with every check of the ci profile, in this process
  (``in_process=True``: one process, as gradcheck runs); its references' JAX programs for the
  family are compiled by a warm-up sweep of other cases first, as in a warm run.
- torch.autograd.gradcheck: on each of those cases in float64 (an f32 case's kernel run in
  float64, as gradcheck requires), over the inputs and parameters the case requests, with its
  defaults (slow mode: a central difference per input element, a backward per output element;
  ``--fast-mode`` for its fast mode).
  The kernel is wrapped as a ``torch.autograd.Function`` (:class:`KernelCall`): forward runs
  the kernel on the case with the inputs replaced and nothing requested, backward runs it with the
  incoming gradients as head gradients. The family kernels have no forward-only entry, so there
  each of gradcheck's forward evaluations also runs the kernel's data backward (the cuDNN cells' does
  less of it: nothing requested skips the weight and layer-0 input GEMMs): gradcheck's column is an
  upper bound for those families, by less than the backward's share of a run.

``--torch-every K`` runs gradcheck on every K-th of the N cases only (a systematic sample: the cases
are drawn at random, so it is as good as a random one) and gives torch's side for all N as the
sample's mean times N, with the 95 % interval of that estimate (mean ± 1.96 standard errors); the
ratio's columns then use the estimate, and the row adds the ratio at the interval's lower end (the
least torch's side can be, to 95 %): the figure to compare with a goal. gradcheck-rnn always judges all N cases.

The table: family, cases, wall seconds of each side, and torch / gradcheck-rnn (above 1:
gradcheck-rnn is faster); the same ratio of this process's CPU seconds (less moved by other
processes on a shared machine; XLA's compile threads count in it); the verdicts of both sides. Measured figures go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gradcheck_rnn as gr  # noqa: E402
from gradcheck_rnn import Case  # noqa: E402
from gradcheck_rnn.judging.checks import enabled  # noqa: E402
from gradcheck_rnn.model.profiles import load_profile  # noqa: E402
from gradcheck_rnn.runtime import limit_torch_threads  # noqa: E402
from gradcheck_rnn.targets import resolve_target  # noqa: E402

# family -> the profile that draws it
PROFILES = {"lstm": "ci", "gru": "ci", "rnn_tanh": "ci", "rnn_relu": "ci", "s6": "families", "slstm": "families",
            "mlstm": "matrix", "gla": "matrix", "gdn": "matrix"}
SEED, WARMUP_SEED = 42, 7


class KernelCall(torch.autograd.Function):
    """``apply(case, target, names, *tensors) -> (y, hy[, cy])``: the target run on ``case`` with
    the inputs ``names`` (x, h0, c0 or parameter keys) replaced by ``tensors``, differentiable in them."""

    @staticmethod
    def forward(ctx: Any, case: Case, target: Any, names: tuple[str, ...], *tensors: torch.Tensor) -> Any:
        ctx.case, ctx.target, ctx.names = with_inputs(case, names, tensors), target, names
        call = dataclasses.replace(ctx.case)
        call.wants = frozenset()  # the cheapest call of a kernel: no gradient requested (not a group: set after)
        out = target.run(call)
        return tuple(torch.as_tensor(v, dtype=torch.float64) for v in (out.y, out.hy, out.cy) if v is not None)

    @staticmethod
    def backward(ctx: Any, *heads: torch.Tensor | None) -> Any:
        case = ctx.case
        shapes = [case.dy.shape, case.dhy.shape] + ([case.dcy.shape] if case.dcy is not None else [])
        dy, dhy, *dcy = [np.zeros(shape) if head is None else head.detach().numpy() for head, shape in zip(heads, shapes)]
        out = ctx.target.run(dataclasses.replace(case, dy=dy, dhy=dhy, dcy=dcy[0] if dcy else None))
        return (None, None, None, *(torch.as_tensor(out.grads[name], dtype=torch.float64) for name in ctx.names))


def with_inputs(case: Case, names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> Case:
    """A copy of ``case`` whose inputs ``names`` are ``tensors`` (as float64 numpy arrays)."""
    values = {name: tensor.detach().numpy().copy() for name, tensor in zip(names, tensors)}
    params = {k: values.get(k, v) for k, v in case.params.items()}
    return dataclasses.replace(case, params=params, **{k: values[k] for k in ("x", "h0", "c0") if k in values})


def torch_gradcheck(case: Case, target: Any, fast_mode: bool = False) -> bool:
    """torch.autograd.gradcheck of ``target`` on ``case`` in float64, over what the case requests."""
    case = dataclasses.replace(case, config=dataclasses.replace(case.config, dtype="f64"))
    names = tuple(n for n in ("x", "h0", "c0") if n in case.wants and getattr(case, n) is not None)
    names += tuple(k for k in case.params if k in case.wants)
    values = {**case.params, **{n: getattr(case, n) for n in ("x", "h0", "c0")}}
    inputs = tuple(torch.tensor(values[n], dtype=torch.float64, requires_grad=True) for n in names)
    return torch.autograd.gradcheck(lambda *t: KernelCall.apply(case, target, names, *t), inputs,
                                     raise_exception=False, fast_mode=fast_mode)


def family_row(family: str, cases: int, checks: list[str], target: Any, fast_mode: bool,
               every: int = 1) -> dict[str, Any]:
    """Both sides on ``cases`` cases of ``family`` (torch on every ``every``-th): seconds and verdicts."""
    profile = PROFILES[family]
    gr.sweep("fused-cpu", cases=2, seed=WARMUP_SEED, config=profile, modes=[family], checks=checks, in_process=True)
    start, cpu = time.perf_counter(), time.process_time()
    run = gr.sweep("fused-cpu", cases=cases, seed=SEED, config=profile, modes=[family], checks=checks,
                   in_process=True)
    ours, ours_cpu = time.perf_counter() - start, time.process_time() - cpu
    ids = list(dict.fromkeys(row.case_id for row in run.results))
    sample = ids[::every]
    walls, cpus, passed = [], [], 0
    for case_id in sample:
        start, cpu = time.perf_counter(), time.process_time()
        passed += torch_gradcheck(Case.from_id(case_id), target, fast_mode)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    theirs, theirs_low = scaled(walls, len(ids))
    theirs_cpu, theirs_cpu_low = scaled(cpus, len(ids))
    return {"family": family, "cases": len(ids), "sampled": len(sample), "ours": ours, "theirs": theirs,
            "theirs_low": theirs_low, "ours_cpu": ours_cpu, "theirs_cpu": theirs_cpu,
            "theirs_cpu_low": theirs_cpu_low, "verdict": run.reason,
            "gradcheck": f"{passed}/{len(sample)} passed"}


def scaled(seconds: list[float], total: int) -> tuple[float, float]:
    """The seconds of ``total`` cases estimated from a sample's: (mean × total, the 95 % interval's
    lower end); exact (both the sum) when the sample is every case."""
    if len(seconds) == total:
        return sum(seconds), sum(seconds)
    mean = float(np.mean(seconds))
    error = float(np.std(seconds, ddof=1) / np.sqrt(len(seconds))) if len(seconds) > 1 else mean
    return mean * total, max(mean - 1.96 * error, 0.0) * total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20, help="cases per family (default 20; the issue's goal: 1000)")
    parser.add_argument("--families", default=",".join(PROFILES),
                        help=f"comma-separated, from {', '.join(PROFILES)} (default: all)")
    parser.add_argument("--fast-mode", action="store_true",
                        help="torch.autograd.gradcheck's fast_mode (one random projection instead of the full Jacobian)")
    parser.add_argument("--torch-every", type=int, default=1, metavar="K",
                        help="run torch's gradcheck on every K-th case only and estimate its time for all (default 1)")
    args = parser.parse_args()
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in PROFILES]
    if args.torch_every < 1:
        parser.error(f"--torch-every {args.torch_every} is not allowed; give 1 or more")
    if unknown or args.cases < 1:
        parser.error(f"unknown families {', '.join(unknown)}; choose from {', '.join(PROFILES)}" if unknown
                     else f"--cases {args.cases} is not allowed; give 1 or more")
    limit_torch_threads()
    profile = load_profile("ci")
    checks = enabled(profile.checks, profile.source)
    target = resolve_target("fused-cpu")
    print(f"fused-cpu, {args.cases} cases per family (seed {SEED}); gradcheck-rnn: the ci checks "
          f"({', '.join(checks)}), in one process; torch.autograd.gradcheck: float64, "
          f"{'fast_mode' if args.fast_mode else 'default (slow) mode'}")
    if args.torch_every > 1:
        print(f"torch.autograd.gradcheck on one case in {args.torch_every}; its seconds for all cases "
              "estimated from that sample ('at 95 % low': the ratio at the interval's lower end)")
    print(f"{'family':<10} {'cases':>5} {'gradcheck-rnn s':>16} {'torch gradcheck s':>18} {'ratio':>7} "
          f"{'ratio (CPU s)':>22}  verdicts")
    for family in families:
        row = family_row(family, args.cases, checks, target, args.fast_mode, args.torch_every)
        low = (f"; sampled {row['sampled']}, at 95 % low {row['theirs_low'] / row['ours']:.1f}x "
               f"({row['theirs_cpu_low'] / row['ours_cpu']:.1f}x CPU)"
               if row["sampled"] < row["cases"] else "")
        print(f"{row['family']:<10} {row['cases']:>5} {row['ours']:>16.2f} {row['theirs']:>18.2f} "
              f"{row['theirs'] / row['ours']:>6.1f}x "
              f"{row['theirs_cpu'] / row['ours_cpu']:>6.1f}x ({row['ours_cpu']:.2f}/{row['theirs_cpu']:.2f})  "
              f"gradcheck-rnn: {row['verdict']}; torch: {row['gradcheck']}{low}",
              flush=True)


if __name__ == "__main__":
    main()
