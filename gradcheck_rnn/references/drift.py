"""Drift allowance: how far a *correct* kernel of the case's dtype may land from the float64
reference where the problem itself is ill-conditioned at that precision.

Why (issue 21, docs/half-precision.md)
-------------------------------------
A relu unit whose float64 pre-activation lies within the dtype's rounding of 0 may sit on either
side of 0 in a correct kernel, and every gradient that flows through it then changes by its
full size: ``rnn_relu-L3-bi-I7-H10-T3-B4-len3.2.3.3-f16-s1756970816`` has a layer-1
pre-activation of 1.2e-4 whose terms are ~0.4 (f16's rounding there is 1.2e-4), and a correct
f16 kernel's ``l1.bwd.w_ih`` differs from the reference by 0.13. No fixed tolerance separates
that from a bug without letting real bugs through.

Design — one for every dtype
----------------------------
1. *Where can a correct kernel go either way?* A float64 forward pass carries, next to every
   pre-activation, the standard deviation sigma of the error a correct kernel of this dtype has
   there (a rounding model: each stored value v — the input projection, the recurrent
   projection, their sum — is off by up to u·|v|, taken as its standard deviation; the stored
   inputs' own variance is carried through the squared weights, so sigma grows with depth and
   time as the drift of a real kernel does) plus the float32 (float64) accumulation's worst case
   ``n·u_acc·Σ|terms|``. ``u`` is the unit roundoff of the dtype (f16 2⁻¹¹, bf16 2⁻⁸, f32 2⁻²⁴,
   f64 2⁻⁵³). A *kink* is a relu unit at a step with ``|pre| ≤ SIGMAS·sigma``: the only places
   where a rounding-level change of the forward changes a derivative by O(1). fused-cpu's
   measured pre-activation errors stay below 4.7 sigma (``benchmarks/half_error_budget.py
   --cases 200``: 39,234 rnn_relu pre-activations of half-soak cases), so ``SIGMAS`` = 10 leaves
   a margin of 2.1. tanh and σ are smooth, so tanh RNNs, LSTMs and GRUs
   have no kinks and get no allowance (their drift is rounding-level and the fixed tolerances
   hold it, docs/half-precision.md).
2. *How far can the gradients move?* The float64 reference is run again with kinks pinned to
   the other side of 0 (a straight-through pin: the pre-activation's value is mirrored across 0,
   its gradient still flows through the weights and inputs): once with every kink flipped, and
   once per kink (up to :data:`MAX_SINGLE_RUNS` runs: beyond that, the 15 kinks closest to 0 in
   units of their bound alone and the rest in one run). The allowance of each element is ``max(|g_all − g|, Σ_k |g_k − g|)``: it
   covers a kernel that flips any one kink, all of them, and (to first order) any subset.
3. *Judge:* an element passes when ``|a − b| ≤ atol + rtol·|b| + SAFETY·(1 + rtol)·allowance``:
   a kernel that flips a kink follows the flipped trajectory ``b + Δ`` within its own
   ``atol + rtol·|b + Δ|`` (hence ``1 + rtol``), and :data:`SAFETY` = 2 covers what the first
   order misses. The allowance is
   computed only for a case whose fixed-tolerance comparison failed (a passing comparison costs
   nothing), only for tensors that failed, and recorded in the tensor's message and ``drift``
   field. It is local: elements that no kink reaches get 0, so a wrong gradient elsewhere still
   fails, and it is never granted when this module's own float64 pass disagrees with the
   ``loop`` reference, nor to a non-finite value.

Rounding probe — a smooth problem that is ill-conditioned
---------------------------------------------------------
A family without kinks can still be ill-conditioned at a precision: the gated delta rule's L2
norm of a key near 0 has slope 1/|k|, so a rounding-level change of the layer below moves the
gradients up to ~1000 times as much, and long memory through three layers adds to it; a 2,000-case
gdn soak failed 3 correct float32 cases that a probe with measured float32 errors fails 8 % to 76 %
of the time (docs/findings/soak.md). Such a family says why (``Family.rounding_sensitive``), and
below float64 its allowance is the rounding probe's (:func:`probe_allowance`): the float64 loop
reference run :data:`PROBE_RUNS` times with every layer's output but the last off by Gaussian
noise at the dtype's rounding, the allowance of each element the largest change. It is judged as
above (``SAFETY``, ``1 + rtol``), only for failing tensors. Where the problem is well conditioned
the change is itself at rounding level, so a wrong gradient still fails: on 300 float32 gdn cases
every gdn mutant was flagged on exactly as many cases with the probe as without it.

Its second-order form (:func:`hvp_probe_allowance`, the ``gradgrad`` check's): per element of a
Hessian-vector product, the largest change of the float64 loop's own H·u along the same direction
over the same noisy runs and over one run in the case dtype. The noisy runs carry rounding across
layers; they cannot reach the rounding inside a layer, which a key near 0 amplifies too. On a
one-layer gdn case the noisy runs move nothing, and the float32 run moves the failing element by
0.84 of the product room. On a three-layer case the noisy runs move most elements 2-4 times as far as
the float32 run. Both are taken, and the result is judged as above, for failing rows only
(docs/findings/soak.md).

The runs are float64 torch autograd one sequence at a time (like the ``loop`` reference). They
take the family's pre-activations (:meth:`gradcheck_rnn.families.cudnn.CudnnFamily.pre_activations`,
what its step sums) but apply the relu themselves, so the pins are exact: a pin replaces the
pre-activation between the two, and the rounding model carries a variance beside it, which no
step returns (what a run costs: benchmarks/RESULTS.md, "Costs the code is built around").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch

from ..model.case import Case, as_mapping
from ..families.ops import torch_ops
from ..model.layout import directions, param_key
from ..model.streams import case_rng, claim
from ..model.statuses import worst_tensor

Tensor = torch.Tensor

# Unit roundoff of the stored values, and of the accumulation the sums run in (float32 for the
# half dtypes: cuDNN's half math and torch's CPU GEMMs; the dtype itself otherwise).
UNIT_ROUNDOFF = {"f64": 2.0**-53, "f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
ACCUMULATION_ROUNDOFF = {"f64": 2.0**-53, "f32": 2.0**-24, "f16": 2.0**-24, "bf16": 2.0**-24}
# Below the smallest subnormal a positive pre-activation is stored as 0 (relu' = 0).
SMALLEST = {"f64": 5e-324, "f32": 2.0**-149, "f16": 2.0**-24, "bf16": 2.0**-133}
# How many standard deviations of a correct kernel's rounding error make a unit "near" 0. The
# rounding model's sigma is checked against fused-cpu's measured pre-activation errors in
# benchmarks/half_error_budget.py (docs/half-precision.md): SIGMAS is set there.
SIGMAS = 10.0
# Factor on the allowance: the flips' first-order sum misses how kinks interact, and the 2000-case
# half soak saw widened ratios up to 0.98 without it (docs/half-precision.md); 2 halves that.
SAFETY = 2.0
# Reference runs with one kink (or one group of kinks) flipped, besides the run with all flipped.
MAX_SINGLE_RUNS = 16
# The rounding probe: this many float64 loop runs, each with every layer's output but the last off by
# Gaussian noise of PROBE_ROUNDOFFS unit roundoffs of (|v| + the layer output's RMS) per element,
# what a correct kernel of the dtype stores there (fused-cpu's gdn layer outputs were off by 2.3e-8
# to 2.4e-7 RMS in float32, about 1-4 float32 roundoffs of values of order 1: docs/findings/soak.md).
PROBE_RUNS = 8
PROBE_ROUNDOFFS = 2.0
# the probe's noise (salt 5 before issue 43, which was also the segments check's cut points)
PROBE_SALT = claim(7, "the drift probe's rounding noise")
# The torch dtype the second-order probe computes the loop reference's H·u in, per case dtype.
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Kink:
    """A relu unit at one step of one sequence whose pre-activation lies within the error bound
    a correct kernel of the dtype can have there."""

    layer: int
    direction: int
    b: int
    t: int
    unit: int
    pre: float
    bound: float


@dataclass
class DriftAllowance:
    """The per-element allowance of one case (tensor name -> array shaped like the tensor);
    tensors that no kink reaches are absent (allowance 0)."""

    dtype: str
    kinks: list[Kink] = field(default_factory=list)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    runs: int = 0
    usable: bool = True  # False when this module's float64 pass disagrees with the loop reference
    reason: str = ""
    probed: str = ""  # the family's rounding_sensitive reason, for an allowance of the rounding probe
    runs_how: str = "float64 runs"  # what the runs counted in ``runs`` were, for the message

    def for_tensor(self, name: str) -> np.ndarray | None:
        """The allowance of one tensor, or None when no kink reaches it (or none may be granted)."""
        if not self.usable:
            return None
        value = self.tensors.get(name)
        if value is None or not np.any(value > 0):
            return None
        return value

    def describe(self) -> str:
        """E.g. ``3 relu kinks within f16 rounding of 0 (closest: l1 bwd b=2 t=1 unit 6, pre=1.2e-04, bound 3.1e-04)``."""
        if self.probed:
            return f"rounding probe at {self.dtype} rounding: {self.probed}"
        if not self.kinks:
            return f"no relu unit within {self.dtype} rounding of 0"
        k = min(self.kinks, key=lambda k: abs(k.pre) / k.bound if k.bound else math.inf)
        return (f"{len(self.kinks)} relu kink(s) within {self.dtype} rounding of 0 (closest: l{k.layer} "
                f"{('fwd', 'bwd')[k.direction]} b={k.b} t={k.t} unit {k.unit}, pre={k.pre:.2g}, bound {k.bound:.2g})")


def _tensor(a: np.ndarray | None, requires_grad: bool = False) -> Tensor | None:
    return None if a is None else torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad)


def _relu_pass(case: Case, pins: Mapping[tuple[int, int, int, int], tuple[Tensor, Tensor]] | None = None,
               bounds: bool = False, record: dict | None = None) -> tuple[dict[str, np.ndarray], list[Kink]]:
    """One float64 rnn_relu pass, one sequence at a time, with the loss's gradients.

    ``pins`` maps (layer, direction, b, t) to (unit indices, pinned pre-activation values): the
    forward uses those values there, the backward flows through them as through the original
    pre-activation (a straight-through pin), so a pinned unit's relu mask is the pin's side of 0.
    With ``bounds``, the pass also carries the first-order error bound of a correct kernel of the
    case's dtype and returns the kinks (|pre| <= bound); it then computes no gradient, and
    ``record`` (a dict) receives (pre, sigma) per (layer, direction, b, t) for the error budget.
    """
    cfg, pins = case.config, pins or {}
    u, u_acc, smallest = UNIT_ROUNDOFF[cfg.dtype], ACCUMULATION_ROUNDOFF[cfg.dtype], SMALLEST[cfg.dtype]
    grad = not bounds
    ops = torch_ops()
    x, h0 = _tensor(case.x, grad), _tensor(case.h0, grad)
    params = {k: _tensor(v, grad) for k, v in case.params.items()}
    H, D, T, B = cfg.hidden_size, cfg.num_directions, cfg.max_len, cfg.batch_size
    kinks: list[Kink] = []
    zeros = torch.zeros(H, dtype=torch.float64)
    loss = torch.zeros((), dtype=torch.float64)
    y_rows: list[Tensor] = []
    hy: list[list[Tensor]] = [[zeros] * B for _ in range(cfg.num_layers * D)]
    with torch.set_grad_enabled(grad):
        for b in range(B):
            length = int(case.seq_lengths[b])
            layer_input = x[:length, b]
            var_input = torch.zeros_like(layer_input)  # the case's inputs are exact in its dtype
            for layer in range(cfg.num_layers):
                outputs, variances = [], []
                for d, direction in enumerate(directions(cfg)):
                    state = layer * D + d
                    h = zeros if h0 is None else h0[state, b]
                    var_h = zeros
                    unit = {k: params[param_key(layer, direction, k)] for k in cfg.family.unit_shapes(cfg, layer)}
                    w_ih, w_hh = unit["w_ih"], unit["w_hh"]
                    steps = range(length) if direction == "fwd" else range(length - 1, -1, -1)
                    hs: list[Tensor | None] = [None] * length
                    vs: list[Tensor | None] = [None] * length
                    for t in steps:
                        # the family's own pre-activations (its step is relu of their sum)
                        proj_i, proj_h = cfg.family.pre_activations(ops, unit, layer_input[t], h)
                        pre = proj_i + proj_h
                        if bounds:
                            # rounding-error variance of what a correct kernel stores: the input
                            # projection, the recurrent projection and their sum (each ~u·|value|),
                            # plus the stored inputs' own variance carried through the weights
                            terms = w_ih.abs() @ layer_input[t].abs() + w_hh.abs() @ h.abs()
                            n = w_ih.shape[1] + w_hh.shape[1] + 2
                            var = (u * u * (proj_i ** 2 + proj_h ** 2 + pre ** 2) + (w_ih ** 2) @ var_input[t]
                                   + (w_hh ** 2) @ var_h)
                            bound = SIGMAS * var.sqrt() + n * u_acc * terms + smallest
                            if record is not None:
                                record[(layer, d, b, t)] = (pre.numpy().copy(), var.sqrt().numpy().copy())
                            near = (pre.abs() <= bound).nonzero().flatten().tolist()
                            kinks.extend(Kink(layer, d, b, t, j, float(pre[j]), float(bound[j])) for j in near)
                            # a unit that may be active carries its variance on; a surely dead one is exact 0
                            var_h = torch.where(pre > -bound, var, torch.zeros_like(var))
                            vs[t] = var_h
                        pin = pins.get((layer, d, b, t))
                        if pin is not None:
                            offset = torch.zeros(H, dtype=torch.float64)
                            offset[pin[0]] = pin[1] - pre.detach()[pin[0]]
                            pre = pre + offset  # a constant: the gradient still flows through pre
                        h = torch.relu(pre)
                        hs[t] = h
                    outputs.append(torch.stack(hs) if length else zeros.new_zeros(0, H))
                    variances.append(torch.stack(vs) if length and bounds else zeros.new_zeros(length, H))
                    hy[state][b] = h
                layer_input = torch.cat(outputs, dim=-1)
                var_input = torch.cat(variances, dim=-1)
            y_rows.append(layer_input)
            if length:
                loss = loss + (layer_input * torch.from_numpy(case.dy[:length, b])).sum()
        hy_all = torch.stack([torch.stack(row) for row in hy])
        loss = loss + (hy_all * torch.from_numpy(case.dhy)).sum()
    y = np.zeros((T, B, D * H))
    for b, rows in enumerate(y_rows):
        y[:rows.shape[0], b] = rows.detach().numpy()
    result = {"y": y, "hy": hy_all.detach().numpy()}
    if bounds:
        return result, kinks
    leaves = {"x": x, **params}
    if h0 is not None:
        leaves["h0"] = h0
    grads = (torch.autograd.grad(loss, list(leaves.values()), allow_unused=True) if loss.requires_grad
             else [None] * len(leaves))
    for (name, leaf), g in zip(leaves.items(), grads):
        result[name] = np.zeros(tuple(leaf.shape)) if g is None else g.numpy()
    return result, kinks


def find_kinks(case: Case) -> list[Kink]:
    """Every relu unit and step where a correct kernel of the case's dtype may be on either side of 0."""
    if not case.config.family.kinked:
        return []
    return _relu_pass(case, bounds=True)[1]


def _flip(kinks: Iterable[Kink]) -> dict[tuple[int, int, int, int], tuple[Tensor, Tensor]]:
    """Pins that put each kink on the other side of 0: pre mirrored across 0 (an exact 0 becomes
    the smallest positive float64, relu'(0) being 0 in the reference)."""
    grouped: dict[tuple[int, int, int, int], list[tuple[int, float]]] = {}
    for k in kinks:
        value = -k.pre if k.pre != 0 else 5e-324
        grouped.setdefault((k.layer, k.direction, k.b, k.t), []).append((k.unit, value))
    return {key: (torch.tensor([j for j, _ in items]), torch.tensor([v for _, v in items], dtype=torch.float64))
            for key, items in grouped.items()}


def needs_allowance(case: Case) -> bool:
    """Whether a failing comparison of this case is re-judged with an allowance: a mode with relu
    kinks, or a family that says why its gradients are sensitive to rounding, below float64."""
    return case.config.family.kinked or (bool(case.config.family.rounding_sensitive)
                                                 and case.config.dtype != "f64")


def rounding_noise(case: Case) -> Callable[[int, int, Tensor], Tensor]:
    """The rounding probe's noise (a ``layer_noise`` of :mod:`gradcheck_rnn.references.loop`): each
    layer output off by Gaussian noise of :data:`PROBE_ROUNDOFFS` unit roundoffs of the case dtype
    times (|v| + the output's RMS) per element, from one generator seeded by the case (each call
    draws afresh, so successive runs carry different noise)."""
    u = UNIT_ROUNDOFF[case.config.dtype]
    rng = case_rng(case.seed, PROBE_SALT)

    def noise(layer: int, b: int, out: Tensor) -> Tensor:
        scale = out.detach().abs() + out.detach().pow(2).mean().sqrt()
        return out + PROBE_ROUNDOFFS * u * scale * torch.from_numpy(rng.standard_normal(tuple(out.shape)))

    return noise


def _largest_change(moved: dict[str, np.ndarray], run: Mapping[str, Any], base: Mapping[str, Any]) -> None:
    """``moved[name]`` becomes the element-wise max of itself and |run − base|."""
    for name in moved:
        moved[name] = np.maximum(moved[name], np.abs(np.asarray(run[name], dtype=np.float64) - base[name]))


def _finite(moved: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A non-finite change grants nothing (the comparison fails a non-finite value on its own)."""
    return {name: np.nan_to_num(value, nan=0.0, posinf=0.0) for name, value in moved.items()}


def probe_allowance(case: Case, loop: Mapping[str, Any] | None = None) -> DriftAllowance:
    """The rounding probe: per element, the largest change of every output and gradient of the
    float64 loop reference over :data:`PROBE_RUNS` runs whose layer outputs carry rounding-level
    noise (:func:`rounding_noise`). A smooth but ill-conditioned problem (a gated delta rule key near
    0) moves there as a correct kernel of the dtype does; a well-conditioned one does not, so the
    allowance stays at rounding level wherever the problem is not ill-conditioned. ``loop``: the
    loop reference's tensors when the caller has them (the per-case context), else it is run."""
    from .loop import run_loop_reference

    noise = rounding_noise(case)
    base = as_mapping(run_loop_reference(case)) if loop is None else loop
    moved = {name: np.zeros_like(value) for name, value in base.items()}
    for _ in range(PROBE_RUNS):
        _largest_change(moved, as_mapping(run_loop_reference(case, noise)), base)
    return DriftAllowance(case.config.dtype, runs=PROBE_RUNS + (loop is None), probed=case.config.family.rounding_sensitive,
                          tensors=_finite(moved))


def hvp_probe_allowance(case: Case, tangents: Mapping[str, np.ndarray], loop_hvp: Mapping[str, np.ndarray]) -> DriftAllowance:
    """The rounding probe's second-order form: per element of each Hessian-vector product along
    ``tangents``, the largest change of the float64 loop reference's own H·u (``loop_hvp``, by
    gradient name) over (1) :data:`PROBE_RUNS` runs with the probe's noisy layer outputs (what
    rounding in one layer moves in the layers after it; a one-layer case has none, so they are not
    run) and (2) one run computed in the case dtype, which carries the rounding inside each layer
    (a key near 0 under the L2 norm amplifies it within the layer: a one-layer gdn's float32 double
    backward moved 0.84 of the product room where the noisy runs move nothing; docs/findings/soak.md).
    Judged as the first order's (:func:`rejudge_with_drift`)."""
    from .loop import run_loop_hvp

    cfg = case.config
    moved = {name: np.zeros_like(value) for name, value in loop_hvp.items()}
    noisy = PROBE_RUNS if cfg.num_layers > 1 else 0
    noise = rounding_noise(case)
    for _ in range(noisy):
        _largest_change(moved, run_loop_hvp(case, tangents, layer_noise=noise).grads, loop_hvp)
    _largest_change(moved, run_loop_hvp(case, tangents, dtype=TORCH_DTYPES[cfg.dtype]).grads, loop_hvp)
    return DriftAllowance(cfg.dtype, runs=noisy + 1, probed=cfg.family.rounding_sensitive, tensors=_finite(moved),
                          runs_how=f"loop runs of H·u ({noisy} float64 with noisy layer outputs, 1 in {cfg.dtype})")


def drift_allowance(case: Case, names: Iterable[str] | None = None,
                    loop: Mapping[str, Any] | None = None) -> DriftAllowance:
    """The allowance of every tensor of ``case`` (see the module docstring): empty when the case
    has no kink, which is every case of a mode without one; the rounding probe's
    (:func:`probe_allowance`, from ``loop`` when given) for a family sensitive to rounding, below
    float64."""
    if not case.config.family.kinked:
        return probe_allowance(case, loop) if needs_allowance(case) else DriftAllowance(case.config.dtype)
    allowance = DriftAllowance(case.config.dtype, find_kinks(case))
    if not allowance.kinks:
        return allowance
    base, _ = _relu_pass(case)
    wanted = list(base) if names is None else [n for n in names if n in base]
    kinks = allowance.kinks
    # the kinks a kernel is likeliest to flip (closest to 0 in units of their bound) each alone;
    # the rest, if any, together: a group's effects may cancel inside it, singles' never do
    ranked = sorted(kinks, key=lambda k: abs(k.pre) / k.bound)
    if len(ranked) <= MAX_SINGLE_RUNS:
        groups = [[k] for k in ranked]
    else:
        groups = [[k] for k in ranked[:MAX_SINGLE_RUNS - 1]] + [ranked[MAX_SINGLE_RUNS - 1:]]
    variants = [kinks] + (groups if len(kinks) > 1 else [])
    every = {name: np.zeros_like(base[name]) for name in wanted}  # |g_all − g|
    singles = {name: np.zeros_like(base[name]) for name in wanted}  # Σ_k |g_k − g|
    for i, variant in enumerate(variants):
        flipped, _ = _relu_pass(case, _flip(variant))
        for name in wanted:
            (every if i == 0 else singles)[name] += np.abs(flipped[name] - base[name])
    total = {name: np.maximum(every[name], singles[name]) for name in wanted}
    allowance.runs = 1 + len(variants)
    allowance.tensors = {name: np.nan_to_num(value, nan=0.0, posinf=0.0) for name, value in total.items()}
    allowance.base = base  # type: ignore[attr-defined]  # for the agreement check below
    return allowance


def checked_allowance(case: Case, loop: Mapping[str, Any] | None = None) -> DriftAllowance:
    """:func:`drift_allowance` of ``case``; with the ``loop`` reference's outputs, an allowance
    whose own float64 pass disagrees with it is marked unusable. The per-case context
    (:class:`gradcheck_rnn.judging.context.CaseContext`) computes it once for every target of a case."""
    from ..model.compare import compare_tensor
    from ..model.tolerances import REFERENCE_AGREEMENT

    drift = drift_allowance(case, loop=loop)
    if drift.kinks and loop is not None:
        for name in drift.tensors:
            if name in loop and loop[name] is not None and not compare_tensor(
                    name, drift.base[name], loop[name], REFERENCE_AGREEMENT, case.config).passed:  # type: ignore[attr-defined]
                drift.usable, drift.reason = False, f"the drift pass disagrees with the loop reference on {name}"
                break
    return drift


def widened(allowance: np.ndarray, rtol: float) -> np.ndarray:
    """What a kernel that flips kinks may add to the bound: it follows the flipped trajectory
    b' = b + Δ up to its own atol + rtol·|b'|, and rtol·|b'| <= rtol·|b| + rtol·|Δ| (hence
    1 + rtol); SAFETY for what first order misses."""
    return allowance * (SAFETY * (1.0 + rtol))


def rejudge_with_drift(case: Case, actual: Mapping[str, Any], expected: Mapping[str, Mapping[str, Any]],
                       tolerances: Any, errors: list[Any], allowance: Callable[[], DriftAllowance]) -> list[Any]:
    """Re-judge the tensors that failed the fixed tolerance with the drift allowance added.

    The one call site is the reference comparison (``compare_outputs``): it passes the target's
    outputs and each reference's (name -> array mappings; ``expected`` keyed by reference name),
    the tolerances, its per-tensor errors and how to get the case's allowance (computed on first
    call); what comes back replaces them. Nothing runs unless a tensor failed with a value and the
    case needs an allowance (:func:`needs_allowance`), so a passing comparison costs nothing; a
    non-finite value still fails (its error is infinite).
    """
    from ..model.compare import compare_tensor

    failing = [i for i, e in enumerate(errors) if e.status == "fail" and actual.get(e.name) is not None]
    if not failing or not needs_allowance(case):
        return errors
    drift = allowance()
    errors = list(errors)
    for i in failing:
        name = errors[i].name
        extra = drift.for_tensor(name)
        if extra is None:
            errors[i].message += f" (no drift allowance: {drift.reason or drift.describe()})"
            continue
        tol = tolerances.for_tensor(case.config.dtype, name)
        extra = widened(extra, tol.rtol)
        candidates = []
        for ref_name, ref in expected.items():
            error = compare_tensor(name, actual.get(name), ref[name], tol, case.config, allowance=extra)
            error.reference = ref_name
            candidates.append(error)
        worst = worst_tensor([e for e in candidates if not e.passed] or candidates)
        verdict = "within" if worst.passed else "outside"
        worst.message = (f"{name}: {verdict} tolerance + drift allowance (max {worst.drift:.3g}; "
                         f"{drift.describe()}; {drift.runs} {drift.runs_how}), ratio {worst.ratio:.3g}; "
                         f"fixed tolerance alone: {errors[i].message}")
        errors[i] = worst
    return errors
