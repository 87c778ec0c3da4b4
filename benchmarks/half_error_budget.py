"""Error budget of fused-cpu in f16 / bf16: what each stage rounds, against float64.

Usage::

    python benchmarks/half_error_budget.py [--cases 200] [--seed 7] [--kernel fused-cpu|per-op] [ID ...]

Each stage of the kernel runs as usual in the half dtype, and *also* in float64 on the very
values the half kernel stored before it (a shadow run of the same hook on float64 copies). The
stage's own error is then |stored − exact| in half ulps of the exact value: a stage that rounds
only what it stores, once, after float32 arithmetic (cuDNN's half math: half storage, float32
accumulation) stays at <= 0.5 ulp (plus the float32 sums' own ~n·2⁻²⁴, visible only where a sum
cancels). Stages: input projection (X·W_ihᵀ + b), recurrent GEMM (+ h·W_hhᵀ), cell forward, cell
backward, hand-off (dL/dh_prev += dG·W_hh + direct), layer input gradient (dG·W_ih), weight
GEMMs (dGᵀ·X, dGᵀ·H, column sums).

It also checks the drift module's rounding model (:mod:`gradcheck_rnn.references.drift`): for
every rnn_relu pre-activation the kernel computed, |pre_kernel − pre_float64| / sigma, where sigma
is the model's standard deviation of a correct kernel's error there. The largest ratio seen,
against ``SIGMAS``, is the margin of the kink detection.

``--kernel per-op`` measures ``mutant:half-rounds-per-op`` (the kernel before issue 21: every op rounds).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn.model.case import Case  # noqa: E402
from gradcheck_rnn.kernels.algorithm import FusedKernel  # noqa: E402
from gradcheck_rnn.kernels.fused_cpu import FusedCPUKernel, FusedCPUTarget  # noqa: E402
from gradcheck_rnn.references import drift  # noqa: E402

FIELDS = ("gates", "h_prev", "c_prev", "h", "c", "aux", "dgates", "dh", "dc", "scratch", "dh_direct", "dc_prev")
MANTISSA = {torch.float16: 10, torch.bfloat16: 7}
MIN_EXP = {torch.float16: -14, torch.bfloat16: -126}


def ulps(stored: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype) -> float:
    """max |stored − exact| in units of the half dtype's spacing at the exact value."""
    if stored is None or exact is None or stored.numel() == 0:
        return 0.0
    s, e = stored.double(), exact.double()
    exponent = torch.floor(torch.log2(e.abs().clamp_min(2.0 ** MIN_EXP[dtype])))
    spacing = torch.pow(2.0, exponent - MANTISSA[dtype])
    return float(((s - e).abs() / spacing).max())


def wide(step, **extra):
    """A float64 copy of a step's tensors (and a float64 copy of its unit's weights)."""
    values = {n: None if getattr(step, n) is None else getattr(step, n).double().clone() for n in FIELDS}
    return dataclasses.replace(step, **values, **extra)


def wide_unit(unit):
    u = copy.copy(unit)
    for name in ("w_ih", "w_hh", "w_hr", "b_ih", "b_hh", "x", "gates", "h", "c", "aux", "hraw", "dgates", "dh", "dc"):
        value = getattr(unit, name, None)
        if isinstance(value, torch.Tensor):
            setattr(u, name, value.double().clone())
    u.__dict__.pop("w_hh_t", None)
    return u


class Shadow:
    """Mixin: runs every stage in the half dtype and again in float64 on the stored inputs."""

    exact = FusedCPUKernel()  # the same cell code in float64 (float32_cell passes f64 through)

    def __init__(self) -> None:
        self.stats: dict[str, float] = defaultdict(float)
        self.pre: dict = {}

    def note(self, stage: str, value: float) -> None:
        self.stats[stage] = max(self.stats[stage], value)

    def make_unit(self, spec, packing, layer, d, top, params, x, h, h0, c0):
        unit = super().make_unit(spec, packing, layer, d, top, params, x, h, h0, c0)
        # the case's own biases (not the unit's: a kernel may have pre-summed them in half)
        name = ("fwd", "bwd")[d]
        b_ih, b_hh = (params.get(f"l{layer}.{name}.{k}") for k in ("b_ih", "b_hh"))
        b_ih = unit.b_ih.double() * 0 if b_ih is None else b_ih.double()
        b_hh = b_ih * 0 if b_hh is None else b_hh.double()
        bias = b_ih + (b_hh if spec.fold_hidden_bias else 0)
        exact = torch.addmm(bias, unit.x.double(), unit.w_ih.double().t())
        self.note("input projection", ulps(unit.gates, exact, unit.gates.dtype))
        self.packing = packing
        return unit

    def recurrent_projection(self, step):
        unit = step.unit
        if unit.spec.fold_hidden_bias:
            before = step.gates.double().clone()
            super().recurrent_projection(step)
            exact = before + step.h_prev.double() @ unit.w_hh.double().t()
            self.note("recurrent GEMM", ulps(step.gates, exact, step.gates.dtype))
            if unit.spec.cell == "relu":
                slots = self.packing.order[:step.rows.size].tolist()
                for row, b in enumerate(slots):
                    self.pre[(unit.layer, int(unit.reverse), b, step.rows.t)] = step.gates[row].double().numpy().copy()
        else:
            super().recurrent_projection(step)
            exact = unit.b_hh.double() + step.h_prev.double() @ unit.w_hh.double().t()
            self.note("recurrent GEMM", ulps(step.aux, exact, step.aux.dtype))


def shadow_cell(name: str, outputs: tuple[str, ...]):
    def run(self, step):
        shadow = wide(step)
        getattr(Shadow.exact, name)(shadow)
        getattr(super(type(self), self), name)(step)
        stage = "cell backward" if name.endswith("backward") else "cell forward"
        for field in outputs:
            stored = getattr(step, field)
            if stored is not None and getattr(shadow, field) is not None:
                self.note(stage, ulps(stored.to(step.gates.dtype), getattr(shadow, field), step.gates.dtype))
    return run


def shadow_handoff(self, step, segments):
    unit = step.unit
    u64 = wide_unit(unit)
    s64 = wide(step, unit=u64)
    FusedKernel.handoff(Shadow.exact, s64, segments)
    super(type(self), self).handoff(step, segments)
    for start, stop in segments:
        self.note("hand-off dG·W_hh", ulps(unit.dh[start:stop], u64.dh[start:stop], unit.dh.dtype))
        if unit.dc is not None:
            self.note("hand-off dG·W_hh", ulps(unit.dc[start:stop], u64.dc[start:stop], unit.dc.dtype))


def shadow_input_grad(self, units, out):
    u64 = [wide_unit(u) for u in units]
    exact = out.double().clone()
    FusedKernel.input_grad(Shadow.exact, u64, exact)
    super(type(self), self).input_grad(units, out)
    self.note("layer input gradient", ulps(out, exact, out.dtype))


def shadow_weight_grads(self, unit, packing, grads):
    u64 = wide_unit(unit)
    exact = {k: v.double().clone() for k, v in grads.items()}
    FusedKernel.weight_grads(Shadow.exact, u64, packing, exact)
    super(type(self), self).weight_grads(unit, packing, grads)
    for k, v in grads.items():
        self.note("weight GEMMs", ulps(v, exact[k], v.dtype))


def shadow_kernel(base: type) -> FusedCPUKernel:
    cells = {f"{m}_{p}": shadow_cell(f"{m}_{p}", ("gates", "h", "c", "aux", "dgates", "dc", "dh_direct", "dc_prev"))
             for m in ("relu", "tanh", "lstm", "gru") for p in ("forward", "backward")}
    cls = type(f"Shadow{base.__name__}", (Shadow, base),
               {**cells, "handoff": shadow_handoff, "input_grad": shadow_input_grad,
                "weight_grads": shadow_weight_grads})
    return cls()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*")
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kernel", choices=("fused-cpu", "per-op"), default="fused-cpu")
    args = parser.parse_args()
    base = FusedCPUKernel
    if args.kernel == "per-op":
        from gradcheck_rnn.targets.kernel_bugs import HalfRoundsPerOp, crossed
        base = crossed(HalfRoundsPerOp, FusedCPUKernel)
    ids = list(args.ids)
    if not ids:
        ids = _draw_ids(args.cases, args.seed)
    table: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    worst_sigma, samples, worst_id = 0.0, 0, ""
    for cid in ids:
        case = Case.from_id(cid)
        kernel = shadow_kernel(base)
        FusedCPUTarget(kernel).run(case)
        for stage, value in kernel.stats.items():
            key = (case.config.dtype, case.config.mode)
            table[key][stage] = max(table[key][stage], value)
        if case.config.mode == "rnn_relu":
            record: dict = {}
            drift._relu_pass(case, bounds=True, record=record)
            for key, (pre, sigma) in record.items():
                got = kernel.pre.get(key)
                if got is None:
                    continue
                ratio = float(np.max(np.abs(got - pre) / sigma))
                samples += pre.size
                if ratio > worst_sigma:
                    worst_sigma, worst_id = ratio, cid
    stages = ("input projection", "recurrent GEMM", "cell forward", "cell backward", "hand-off dG·W_hh",
              "layer input gradient", "weight GEMMs")
    print(f"kernel {args.kernel}: max error per stage in half ulps of the exact value ({len(ids)} cases)")
    print(f"{'dtype':5} {'mode':9} " + " ".join(f"{s[:12]:>12}" for s in stages))
    for (dtype, mode), stats in sorted(table.items()):
        print(f"{dtype:5} {mode:9} " + " ".join(f"{stats.get(s, 0.0):12.3f}" for s in stages))
    print(f"rnn_relu pre-activations: {samples} values, max |pre_kernel - pre_f64| / sigma = {worst_sigma:.3g} "
          f"({worst_id}); kinks are |pre| <= {drift.SIGMAS:g} sigma")


def _draw_ids(count: int, seed: int) -> list[str]:
    """Case ids of the half-soak profile (larger than the calibration shapes), f16 and bf16."""
    from gradcheck_rnn.model.profiles import draw_case, load_profile
    profile = load_profile("half-soak")
    return [draw_case(profile, seed, i).id for i in range(count)]


if __name__ == "__main__":
    main()
