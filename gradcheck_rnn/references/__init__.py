"""The float64 ground truth: two independent references and a finite-difference witness.

* ``loop`` (:mod:`.loop`): one sample at a time, each sequence cut to its own length, the
  family's step function (:meth:`gradcheck_rnn.families.Family.step`) on torch tensors, torch
  autograd — never padded, so it cannot share a padding bug;
* ``jax`` (the program the family names, :attr:`~gradcheck_rnn.families.Family.jax_program`: the generic step
  program of :mod:`.jax_family`, or the bucketed program of the cuDNN cells, :mod:`.jax_cudnn`):
  the padded batch with length masks, ``lax.scan`` + ``jax.vjp``;
* ``fd`` (:mod:`.fd`): central differences of the loop forward, no autodiff at all.

For the ``jvp`` check both give output tangents too (:func:`run_reference_jvp`): the loop through
torch's forward-mode AD, the jax program through ``jax.jvp``.

The engine asks for them through :class:`gradcheck_rnn.judging.context.CaseContext`, which computes
each once per case.
"""

from __future__ import annotations

from importlib import import_module
from typing import Mapping

import numpy as np

from ..model.case import Case, Outputs

REFERENCE_NAMES = ("loop", "jax")
# The JAX programs a family can name (Family.jax_program): module and function of each
JAX_PROGRAMS = {"step": ("jax_family", "run_jax_family_reference"), "bucketed": ("jax_cudnn", "run_jax_reference")}
# ... and the forward-mode program of each (the ``jvp`` check)
JAX_JVP_PROGRAMS = {"step": ("jax_family", "run_jax_family_jvp"), "bucketed": ("jax_cudnn", "run_jax_jvp")}
# ... and its second-order program (the ``gradgrad`` check)
JAX_HVP_PROGRAMS = {"step": ("jax_family", "run_jax_family_hvp"), "bucketed": ("jax_cudnn", "run_jax_hvp")}


def run_reference(name: str, case: Case) -> Outputs:
    """Run one float64 reference (``loop`` or ``jax``) on a case."""
    if name == "loop":
        from .loop import run_loop_reference

        return run_loop_reference(case)
    module, function = JAX_PROGRAMS[case.config.family.jax_program]
    return getattr(import_module(f"{__name__}.{module}"), function)(case)


def run_reference_jvp(name: str, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
    """One float64 reference's output tangents (y, hy, cy) of ``case`` along ``tangents`` (by
    gradient name; a name left out has a zero tangent)."""
    if name == "loop":
        from .loop import run_loop_jvp

        return run_loop_jvp(case, tangents)
    module, function = JAX_JVP_PROGRAMS[case.config.family.jax_program]
    return getattr(import_module(f"{__name__}.{module}"), function)(case, tangents)


def run_reference_hvp(name: str, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
    """One float64 reference's Hessian-vector product of the loss along ``tangents``: ``grads``
    holds every requested gradient's derivative along them (y and hy are None)."""
    if name == "loop":
        from .loop import run_loop_hvp

        return run_loop_hvp(case, tangents)
    module, function = JAX_HVP_PROGRAMS[case.config.family.jax_program]
    out = getattr(import_module(f"{__name__}.{module}"), function)(case, tangents)
    return Outputs(y=None, hy=None, grads={k: v for k, v in out.grads.items() if k in case.wants})
