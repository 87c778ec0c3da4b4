"""The ``torch-scan`` target: each family's step run through torch's ``scan`` higher-order op.

gradcheck-rnn judges torch's own machinery for recurrences here, not torch.nn's cells: every
family's :meth:`~gradcheck_rnn.families.Family.step` (written once over the ops namespace, the
one both references run) becomes the combine function of ``torch._higher_order_ops.scan``, one
scan per layer and direction over the padded batch, in the case's dtype, and the gradients come
from torch's autograd through the scan. Variable lengths are masks, as the JAX reference and
docs/contracts.md's padding semantics have them: a step past a sequence's length keeps its
states and writes 0 to y. The reverse direction is ``scan(..., reverse=True)`` over the same
masks, so each sequence starts from its own last step with its initial state. Layers are
unrolled in Python (layer 0 and deeper layers differ in input width).

The parameters are closed over by the combine function, the form users write and the one
pytorch #184528 got wrong (gradients of closed-over parameters silently missed the part through
a carry whose initial value does not require grad: here every ``-z`` case, or a case not
requesting h0); torch 2.13 gets it right (docs/torch-2.13/scan.md scripts the check).
:class:`TorchScanExplicitTarget` passes them as scanned inputs instead
(``gradcheck_rnn.targets.torch_scan:TorchScanExplicitTarget``), so the two forms can be judged side by side.

:func:`masked_forward` is shared with ``torch-compiled`` (:mod:`.torch_compiled`), which runs the
same masked step in a plain Python loop over time through ``torch.compile``.

Forward mode and second order (the ``jvp`` and ``gradgrad`` checks) are torch's own through the
same forward: ``torch.func.jvp`` and double backward (``create_graph=True``), as a user would
call them. torch 2.13 refuses the first through ``scan``, and the target declines with torch's
sentence (:func:`scan_jvp_refusal`, asked once per process of a one-step scan). The second it
runs without a word and gets wrong (docs/torch-2.13/scan.md): that is not declined, it is what
the ``gradgrad`` check is for, and it fails there.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import numpy as np
import torch

from ..families.ops import torch_ops
from ..model.case import TORCH_DTYPE_NAMES, Case, Outputs, RNNConfig
from ..model.layout import directions, param_key

Tensor = torch.Tensor
# One layer and direction over time: (step(unit, x_t, m_t, h, c) -> (y_t, h', c'): a masked step
# with its config bound, the unit's parameters by kind, xs (T, B, I), masks (T, B, 1), h0, c0 or
# None, reverse) -> (ys (T, B, S), h_T, c_T or None)
TimeLoop = Callable[..., tuple[Tensor, Tensor, Tensor | None]]
# Each target here runs its forward in these dtypes only: the tolerances below float32 were never
# calibrated for a step written over the ops namespace (torch-native's f16 was, per target)
DTYPES = ("f64", "f32")
# made once: building the namespace inside a traced step would break dynamo's graph
_OPS = torch_ops()


def masked_step(config: RNNConfig, unit: Mapping[str, Tensor], x: Tensor, m: Tensor, h: Tensor,
                c: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """One step of the family on the batch's rows, held where ``m`` is False: y is 0 there and the
    states keep their values (the padding semantics of docs/contracts.md)."""
    y, h_new, c_new = config.family.step(_OPS, unit, x, h, c, config)
    return (torch.where(m, y, torch.zeros_like(y)), torch.where(m, h_new, h),
            None if c is None else torch.where(m, c_new, c))


def masked_forward(case: Case, x: Tensor, h0: Tensor | None, c0: Tensor | None, params: Mapping[str, Tensor],
                   time_loop: TimeLoop, step: Callable = masked_step) -> tuple[Tensor, Tensor, Tensor | None]:
    """y (T, B, D·S), hy (L·D, B, h_size), cy (L·D, B, c_size) or None of ``case`` over its padded
    batch, each layer and direction one ``time_loop`` of ``step`` (:func:`masked_step`'s signature);
    ``h0`` None: zero initial states (and zero cell states) that require no gradient."""
    cfg = case.config
    T, B = cfg.max_len, cfg.batch_size
    masks = (torch.arange(T)[:, None] < torch.from_numpy(case.seq_lengths)[None, :])[..., None]
    finals_h, finals_c = [], []
    inp = x
    for layer in range(cfg.num_layers):
        outputs = []
        for d, direction in enumerate(directions(cfg)):
            state = layer * cfg.num_directions + d
            h = x.new_zeros(B, cfg.h_size) if h0 is None else h0[state]
            c = None if not cfg.has_cell_state else (x.new_zeros(B, cfg.c_size) if c0 is None else c0[state])
            unit = {k: params[param_key(layer, direction, k)] for k in cfg.family.unit_shapes(cfg, layer)}
            ys, h, c = time_loop(functools.partial(step, cfg), unit, inp, masks, h, c, direction == "bwd")
            outputs.append(ys)
            finals_h.append(h)
            if c is not None:
                finals_c.append(c)
        inp = torch.cat(outputs, dim=-1)
    return inp, torch.stack(finals_h), torch.stack(finals_c) if finals_c else None


def _scan() -> Callable:
    """torch's ``scan``, compiled for each shape it meets: after a second shape dynamo would trace
    symbolic sizes, which torch 2.13's scan cannot partition ("Invalid HopPartitionedGraph ... must be
    of type SymInt with basic symbols"), so automatic dynamic shapes are off for its calls."""
    from torch._higher_order_ops.scan import scan

    def static_scan(*args: Any, **kwargs: Any) -> Any:
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
            return scan(*args, **kwargs)

    return static_scan


def scan_closed(step: Callable, unit: Mapping[str, Tensor], xs: Tensor, masks: Tensor, h: Tensor,
                c: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """One layer and direction as one ``scan``, the parameters closed over by its combine function."""
    def combine(carry: tuple, inputs: tuple) -> tuple:
        x_t, m_t = inputs
        y, h_new, c_new = step(unit, x_t, m_t, *carry)
        return (h_new,) if c_new is None else (h_new, c_new), y

    carry, ys = _scan()(combine, (h,) if c is None else (h, c), (xs, masks), reverse=reverse)
    return ys, carry[0], carry[1] if c is not None else None


def scan_explicit(step: Callable, unit: Mapping[str, Tensor], xs: Tensor, masks: Tensor, h: Tensor,
                  c: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """One layer and direction as one ``scan``, the parameters scanned inputs (each expanded over
    time, so autograd sums their per-step gradients): nothing closed over."""
    kinds = list(unit)
    per_step = [unit[k].expand(xs.shape[0], *unit[k].shape) for k in kinds]

    def combine(carry: tuple, inputs: tuple) -> tuple:
        x_t, m_t, *values = inputs
        y, h_new, c_new = step(dict(zip(kinds, values)), x_t, m_t, *carry)
        return (h_new,) if c_new is None else (h_new, c_new), y

    carry, ys = _scan()(combine, (h,) if c is None else (h, c), (xs, masks, *per_step), reverse=reverse)
    return ys, carry[0], carry[1] if c is not None else None


def torch_sentence(exc: BaseException) -> str:
    """What torch raised, in one line: its type and the first line that says why (dynamo's
    "This higher order operator doesn't work unless it is captured completely" preamble skipped)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    why = next((line for line in lines if not line.startswith("This higher order operator")), lines[0] if lines else "")
    return f"{type(exc).__name__}: {why}"


@functools.lru_cache(maxsize=None)
def scan_jvp_refusal() -> str | None:
    """torch's sentence refusing ``torch.func.jvp`` through a one-step ``scan``, or None when this
    torch computes it (docs/torch-2.13/scan.md)."""
    def run(weight: Tensor) -> Tensor:
        def combine(h: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
            h = torch.tanh(x + h @ weight)
            return h, h.clone()

        return _scan()(combine, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 1, 2, dtype=torch.float64))[1]

    w = torch.full((2, 2), 0.3, dtype=torch.float64)
    try:
        torch.func.jvp(run, (w,), (torch.ones_like(w),))
    except Exception as exc:  # noqa: BLE001 - whatever torch raises is its refusal, quoted
        return torch_sentence(exc)
    return None


def scan_unavailable() -> str | None:
    """Why this torch has no ``scan`` higher-order op, or None."""
    try:
        _scan()
    except ImportError as exc:
        return f"this torch ({torch.__version__}) has no torch._higher_order_ops.scan ({exc})"
    return None


class StepLoopTarget:
    """A target that runs each family's masked step over time through ``time_loop`` in the case's
    dtype, with torch's autograd for the gradients, forward mode and second order (subclasses name
    the loop and what they decline)."""

    name = "step-loop"
    time_loop: TimeLoop
    step = staticmethod(masked_step)  # a subclass may wrap it (tests/test_torch_scan.py breaks it so)

    def supports(self, config: RNNConfig) -> bool | str:
        if config.dtype not in DTYPES:
            return f"{self.name} is judged in {', '.join(DTYPES)} only, not {config.dtype}"
        return True

    def _leaves(self, case: Case, requires_grad: bool = True) -> dict[str, Tensor]:
        """x, h0, c0 (where the case has them) and every parameter as tensors of the case dtype,
        requiring grad exactly where ``case.wants`` names them."""
        dtype = getattr(torch, TORCH_DTYPE_NAMES[case.config.dtype])
        arrays = {"x": case.x, "h0": case.h0, "c0": case.c0 if case.h0 is not None else None, **case.params}
        return {name: torch.tensor(a, dtype=dtype).requires_grad_(requires_grad and name in case.wants)
                for name, a in arrays.items() if a is not None}

    def forward(self, case: Case, leaves: Mapping[str, Tensor]) -> tuple[Tensor, Tensor, Tensor | None]:
        """y, hy, cy of ``case`` from its leaves (:meth:`_leaves`)."""
        return masked_forward(case, leaves["x"], leaves.get("h0"), leaves.get("c0"), leaves, type(self).time_loop,
                              type(self).step)

    def _loss(self, case: Case, leaves: Mapping[str, Tensor]) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
        y, hy, cy = self.forward(case, leaves)
        loss = (y * torch.from_numpy(case.dy).to(y.dtype)).sum() + (hy * torch.from_numpy(case.dhy).to(y.dtype)).sum()
        if cy is not None:
            loss = loss + (cy * torch.from_numpy(case.dcy).to(y.dtype)).sum()
        return y, hy, cy, loss

    def run(self, case: Case) -> Outputs:
        leaves = self._leaves(case)
        y, hy, cy, loss = self._loss(case, leaves)
        wanted = {name: leaves[name] for name in case.wants}
        grads = torch.autograd.grad(loss, list(wanted.values()), allow_unused=True) if loss.requires_grad \
            else [None] * len(wanted)
        return Outputs(y=y.detach(), hy=hy.detach(), cy=None if cy is None else cy.detach(),
                       grads={name: torch.zeros_like(leaf) if g is None else g
                              for (name, leaf), g in zip(wanted.items(), grads)})

    def jvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        """torch.func.jvp of the forward along ``tangents`` (y, hy, cy's tangents)."""
        primals = self._leaves(case, requires_grad=False)
        directions_ = {name: torch.as_tensor(np.asarray(tangents[name]), dtype=value.dtype) if name in tangents
                       else torch.zeros_like(value) for name, value in primals.items()}
        _, (ty, thy, tcy) = torch.func.jvp(lambda values: self.forward(case, values), (primals,), (directions_,))
        return Outputs(y=ty, hy=thy, cy=tcy)

    def hvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        """Double backward through the forward: the derivative of each requested gradient along ``tangents``."""
        leaves = self._leaves(case)
        loss = self._loss(case, leaves)[3]
        wanted = {name: leaves[name] for name in sorted(case.wants)}
        grads = torch.autograd.grad(loss, list(wanted.values()), create_graph=True, allow_unused=True)
        along = sum(((g * torch.as_tensor(np.asarray(tangents[n]), dtype=g.dtype)).sum()
                     for n, g in zip(wanted, grads) if g is not None and n in tangents), torch.zeros(()))
        products = torch.autograd.grad(along, list(wanted.values()), allow_unused=True) if along.requires_grad \
            else [None] * len(wanted)
        return Outputs(y=None, hy=None, grads={n: torch.zeros_like(leaf) if p is None else p.detach()
                                               for (n, leaf), p in zip(wanted.items(), products)})


class TorchScanTarget(StepLoopTarget):
    """Each family's step through torch's ``scan`` (parameters closed over), autograd through it."""

    name = "torch-scan"
    time_loop = staticmethod(scan_closed)

    def supports(self, config: RNNConfig) -> bool | str:
        return scan_unavailable() or super().supports(config)

    def supports_jvp(self, case: Case) -> bool | str:
        refusal = scan_jvp_refusal()
        return True if refusal is None else f"torch {torch.__version__} refuses forward-mode AD through scan: {refusal}"


class TorchScanExplicitTarget(TorchScanTarget):
    """:class:`TorchScanTarget` with the parameters passed to ``scan`` as scanned inputs, none closed over."""

    name = "torch-scan-explicit"
    time_loop = staticmethod(scan_explicit)
