"""The ``torch-compiled`` target: each family's step compiled by ``torch.compile`` (Inductor on CPU).

The same masked forward as ``torch-scan`` (:func:`.torch_scan.masked_forward`: one layer and
direction at a time, a step past a sequence's length keeps its states and writes 0 to y), with
the loop over time in plain Python and each step one call of the family's masked step compiled
by Inductor, ``fullgraph=True`` (a graph break is an error, never a silent fall back to eager).
Gradients are torch's autograd through the compiled steps, so Inductor's generated forward and
backward kernels are what is judged, step by step.

Compile time is capped by compiling the step, not the unrolled loop: the compiled code depends
on the config and the batch, not on T, so one compile serves every length, every check that
only pads or permutes, and every layer past the first (a direction shares its twin's shapes).
Dynamo keeps one compiled entry per shape; the recompile limit is lifted for these calls (as
torch's own ``scan`` lifts it), so a long sweep never falls back to eager. What it costs per case
is in benchmarks/RESULTS.md.

Forward mode and second order are torch's own through the compiled steps (``torch.func.jvp``,
double backward); where torch.compile refuses either, the target declines with torch's sentence
(:func:`compiled_refusal`, asked once per process of a one-line function).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Mapping

import torch

from ..model.case import Case, RNNConfig
from .torch_scan import StepLoopTarget, Tensor, torch_sentence

_COMPILED: dict[tuple[Callable, RNNConfig], Callable] = {}


def _compiled_step(step: functools.partial) -> Callable:
    """A masked step with its config bound (``partial(masked_step, cfg)``) compiled by Inductor,
    kept for the process: one per step function and config up to T and B, which no step reads
    (dynamo guards the shapes, so a new batch size compiles again)."""
    key = step.func, dataclasses.replace(step.args[0], max_len=1, batch_size=1)
    compiled = _COMPILED.get(key)
    if compiled is None:
        cfg = step.args[0]
        for option in cfg.family.options:  # read once here: a first read takes cached_property's
            cfg.option(option.name)        # RLock, a context manager dynamo cannot enter
        compiled = _COMPILED[key] = torch.compile(step, fullgraph=True, dynamic=False)
    return compiled


def compiled_loop(step: functools.partial, unit: Mapping[str, Tensor], xs: Tensor, masks: Tensor, h: Tensor,
                  c: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """One layer and direction: a Python loop over time of the compiled masked step."""
    compiled = _compiled_step(step)
    ys: list[Tensor | None] = [None] * xs.shape[0]
    with torch._dynamo.utils.disable_cache_limit():
        for t in reversed(range(xs.shape[0])) if reverse else range(xs.shape[0]):
            ys[t], h, c = compiled(unit, xs[t], masks[t], h, c)
    return torch.stack(ys), h, c


@functools.lru_cache(maxsize=None)
def compiled_refusal(kind: str) -> str | None:
    """Why torch.compile cannot run here ("run": no working C compiler, Inductor missing), or
    refuses forward-mode AD ("jvp") or double backward ("hvp") through a compiled function: torch's
    first line, or None when it computes it."""
    def f(w: Tensor) -> Tensor:
        return torch.tanh(w * w)

    w = torch.ones(2, dtype=torch.float64, requires_grad=True)
    try:
        compiled = torch.compile(f, fullgraph=True, dynamic=False)
        if kind == "run":
            torch.autograd.grad(compiled(w).sum(), [w])
        elif kind == "jvp":
            torch.func.jvp(compiled, (w.detach(),), (torch.ones_like(w),))
        else:
            [g] = torch.autograd.grad(compiled(w).sum(), [w], create_graph=True)
            torch.autograd.grad(g.sum(), [w])
    except Exception as exc:  # noqa: BLE001 - whatever torch raises is its refusal, quoted
        return torch_sentence(exc)
    return None


class TorchCompiledTarget(StepLoopTarget):
    """Each family's step compiled by torch.compile (Inductor), a Python loop over time, autograd through it."""

    name = "torch-compiled"
    time_loop = staticmethod(compiled_loop)

    def supports(self, config: RNNConfig) -> bool | str:
        reason = super().supports(config)  # first: the probe compiles for seconds
        if reason is True and compiled_refusal("run") is not None:
            return f"torch.compile (Inductor) does not run here: {compiled_refusal('run')}"
        return reason

    def supports_jvp(self, case: Case) -> bool | str:
        refusal = compiled_refusal("jvp")
        return True if refusal is None else f"torch {torch.__version__} refuses forward-mode AD through torch.compile: {refusal}"

    def supports_hvp(self, case: Case) -> bool | str:
        refusal = compiled_refusal("hvp")
        return True if refusal is None else f"torch {torch.__version__} refuses double backward through torch.compile: {refusal}"
